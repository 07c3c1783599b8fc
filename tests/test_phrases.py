"""Issue 27: every output a reader sees (terminal summary, Markdown, HTML text, the JSON's
prose fields) of every sample trace, every public trace, the sample jobs and the sample
diffs, read for the phrases the issue found wrong. One list of banned patterns, each with
the issue's example beside it; a positive control plants each example and checks it is
caught in every kind of output."""

from __future__ import annotations

import dataclasses
import html
import json
import re
from pathlib import Path

import pytest
from support.corpus import REAL_TRACES, SAMPLE_TRACES, SAMPLES, job_of, model_of, report_of, sample, trace_id

from tracelens.render import render_html, render_json, render_markdown, render_terminal
from tracelens.report import Report


@dataclasses.dataclass(frozen=True)
class Banned:
    pattern: str
    #: What the issue saw (the positive control plants it and expects a hit).
    example: str
    #: Which outputs it applies to: the JSON keeps category ids, so they are banned in prose only.
    outputs: frozenset[str] = frozenset({"terminal", "markdown", "html", "json"})
    #: A pattern that must match the same output too (two units in one report).
    also: str = ""

    @property
    def rx(self) -> re.Pattern[str]:
        return re.compile(self.pattern)


PROSE = frozenset({"terminal", "markdown", "html"})
CATEGORY_IDS = (
    "memory_bound|host_sync|host_bound|launch_overhead|compute_bound|queued_idle|shape_dynamism|power_throttle"
    "|misaligned_matmul|wave_quantization|eager_attention"
)

BANNED: tuple[Banned, ...] = (
    # Numbers and units
    # One unit per report: a report in steps says nothing per iteration or per window.
    Banned(
        r"\d (µs|ms|s) per (iteration|window|call)\b",
        "52.3 ms (3.1 ms per step) ... 3.0 ms per iteration",
        also=r"\d (µs|ms|s) per step\b",
    ),
    Banned(r"\bper window\b", "3.0 ms per window"),
    Banned(r"\bprofiled time\b", "12% of the profiled time"),
    Banned(r"\(0% of the", "(0% of the window)"),
    Banned(r"\b0\.0 per step\b", "keep happening (0.0 per step)"),
    Banned(r"\b100%[^.\n]*; the rest is reported", "cover 100% of kernel time; the rest is reported as unknown"),
    # A stdlib frame is not the program's source.
    Banned(r"(?<![\w/])json/encoder\.py", "Python code in encode() (json/encoder.py:183)"),
    # Diff
    Banned(r"new op 0/0", "new op 0/0"),
    # Words: ids and jargon in prose
    Banned(
        rf"(?<![\w.#-])`?({CATEGORY_IDS}|gpu_busy_\w+|idle_other)`?(?![\w./-])",
        "Primary bottleneck: `memory_bound`",
        PROSE,
    ),
    Banned(r"\b[Uu]nmodell?ed\b", "memory 26% · unmodelled 18%"),
    Banned(r"\bbusy unknown\b", "busy unknown 18%"),
    Banned(r"(?<![\w/])n/m(?![\w/])", "3. Memory-bandwidth bound?  n/m"),
    Banned(r"\bsw_power_cap\b", "clocks held down (sw_power_cap)"),
    Banned(r"kernels without a model", "busy: kernels without a model"),
    # Stale or internal text
    Banned(r"not built yet", "(the roofline split is not built yet)"),
    Banned(r"line of its def", "main(), line of its def"),
    Banned(r"hip_version\s*(\n|·|\||$)", "hip_version \n"),
    Banned(r"cuda_(driver|runtime)_version\W{0,3}\d{4,}", "cuda_driver_version 13000"),
    Banned(r"unknown GPU \(no deviceProperties", "unknown GPU (no deviceProperties in the trace) (NVIDIA)"),
    Banned(r"\bDask\b|read in [\d.]+ s by", "read in 1.2 s by Dask's synchronous scheduler", frozenset({"terminal"})),
    # Markdown: a bullet glued to the fix text
    Banned(r"[.)]\)?\.- [a-z]", "...enable_timing=True)).- sync calls: 161", frozenset({"markdown"})),
)


# --- the outputs, as text a reader sees ----------------------------------------------------

#: JSON keys whose strings are trace text (names), not our prose.
NAME_KEYS = frozenset({"name", "top_kernel", "kernels", "op", "ops", "file", "path", "file_name", "function", "code"})


def html_text(page: str) -> str:
    page = re.sub(r"<(script|style)\b.*?</\1>", " ", page, flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", " ", page))


def json_prose(doc: str) -> str:
    """The JSON's sentences: strings of three words or more, outside the name fields."""
    out: list[str] = []

    def walk(x: object, key: str = "") -> None:
        if isinstance(x, dict):
            for k, v in x.items():
                walk(v, k)
        elif isinstance(x, list):
            for v in x:
                walk(v, key)
        elif isinstance(x, str) and x.count(" ") >= 2 and key not in NAME_KEYS:
            out.append(x)

    walk(json.loads(doc))
    return "\n".join(out)


def markdown_text(text: str) -> str:
    """The Markdown as GitHub shows it: `memory\\_bound` reads memory_bound."""
    return html.unescape(re.sub(r"\\([\\`*_{}\[\]()#+\-.!|<>~])", r"\1", text)).replace("\u200b", "")


def report_outputs(rep: Report) -> dict[str, str]:
    return {
        "terminal": render_terminal(rep),
        "markdown": markdown_text(render_markdown(rep)),
        "html": html_text(render_html(rep)),
        "json": json_prose(render_json(rep)),
    }


def hits(outputs: dict[str, str], banned: tuple[Banned, ...] = BANNED) -> list[str]:
    found = []
    for b in banned:
        for kind, text in outputs.items():
            if kind not in b.outputs or (b.also and not re.search(b.also, text)):
                continue
            for m in b.rx.finditer(text):
                around = text[max(0, m.start() - 70) : m.end() + 30].replace("\n", " ")
                found.append(f"{kind}: {b.example!r} -> {around!r}")
    return found


# --- the positive control ------------------------------------------------------------------


def test_each_example_is_caught() -> None:
    """Every pattern catches the issue's own example, planted in each output it covers."""
    for b in BANNED:
        assert b.rx.search(b.example) and (not b.also or re.search(b.also, b.example)), b
    rep = report_of(sample("host_sync_mask"))
    clean = report_outputs(rep)
    assert not hits(clean), hits(clean)
    planted = (
        "Planted: 52.3 ms (3.1 ms per step) ... 3.0 ms per iteration; Primary bottleneck: `memory_bound`; "
        "busy: kernels without a model."
    )
    rep2 = dataclasses.replace(rep, summary=dataclasses.replace(rep.summary, headline=planted))
    found = hits(report_outputs(rep2))
    for kind in ("terminal", "markdown", "html", "json"):
        assert any(h.startswith(f"{kind}: '52.3 ms") for h in found), (kind, found)
        assert any(h.startswith(f"{kind}: 'busy: kernels without") for h in found), (kind, found)
    assert any(h.startswith("markdown: 'Primary bottleneck: `memory_bound`'") for h in found), found


def test_category_ids_stay_in_json_only() -> None:
    """Prose names the problem in words; the JSON keeps the id for programs."""
    rep = report_of(sample("host_sync_mask"))
    assert rep.summary.primary == "memory_bound"
    assert '"primary": "memory_bound"' in render_json(rep)
    assert "Primary bottleneck: Memory-bound kernels" in render_markdown(rep)
    term = render_terminal(rep)
    assert "Primary bottleneck: Memory-bound kernels" in term
    # The primary finding first among the findings, marked.
    findings = term[term.index("Findings:") :].splitlines()
    assert findings[1].lstrip().startswith("* primary [high] Memory-bound kernels:"), findings[:3]


# --- every output of every trace -----------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("path", [*SAMPLE_TRACES, *REAL_TRACES], ids=trace_id)
def test_no_banned_phrase(path: Path) -> None:
    found = hits(report_outputs(report_of(path)))
    assert not found, "\n".join(found[:12])


@pytest.mark.slow
@pytest.mark.parametrize(
    "name", sorted(p.name.split("_before.")[0] for p in SAMPLES.glob("diff_*_before.pt.trace.json.gz"))
)
def test_no_banned_phrase_in_diffs(name: str) -> None:
    from tracelens.diff import build_diff
    from tracelens.render.diff import render_diff_html, render_diff_json, render_diff_markdown, render_diff_terminal

    d = build_diff(
        model_of(SAMPLES / f"{name}_before.pt.trace.json.gz"), model_of(SAMPLES / f"{name}_after.pt.trace.json.gz")
    )
    outputs = {
        "terminal": render_diff_terminal(d),
        "markdown": markdown_text(render_diff_markdown(d)),
        "html": html_text(render_diff_html(d)),
        "json": json_prose(render_diff_json(d)),
    }
    found = hits(outputs)
    assert not found, "\n".join(found[:12])


@pytest.mark.slow
@pytest.mark.parametrize("folder", sorted(p.name for p in SAMPLES.glob("ranks_*") if p.is_dir()))
def test_no_banned_phrase_in_jobs(folder: str) -> None:
    from tracelens.render.job import render_job_html, render_job_json, render_job_markdown, render_job_terminal

    rep = job_of(SAMPLES / folder)
    outputs = {
        "terminal": render_job_terminal(rep, ["out.html"]),
        "markdown": markdown_text(render_job_markdown(rep)),
        "html": html_text(render_job_html(rep)),
        "json": json_prose(render_job_json(rep)),
    }
    found = hits(outputs)
    assert not found, "\n".join(found[:12])
