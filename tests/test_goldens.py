"""Golden outputs: the JSON and Markdown reports of a few sample traces, pinned.

Any change to a verdict, a number or a sentence of these reports shows up here as a
reviewed diff of files under tests/goldens/. After an intended change, rewrite them with

    python -m pytest tests/test_goldens.py --update-goldens

(or TRACELENS_UPDATE_GOLDENS=1) and commit the new files with the change that caused them.

The traces were chosen to cover the diagnostic order: host syncs beside memory-bound
elementwise work (the README sample), a training step with matmuls and attention
(roofline, kernels), a torch.compile recompile loop (shape dynamism and compilation), a
gloo job's rank waiting in its all-reduce (communication), and a power-capped matmul loop
(clocks), plus the job report of a folder of rank traces.
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import Any

import pytest
from support.corpus import REPO, SAMPLES, job_of, report_of, sample

from tracelens.render import render_json, render_markdown
from tracelens.render.job import render_job_json, render_job_markdown

GOLDENS = Path(__file__).parent / "goldens"

#: Sample reports pinned by name.
GOLDEN_TRACES = ("host_sync_mask", "train_step", "dyn_recompile", "plain_gloo_wait", "power_gemm")
#: Job reports pinned by folder.
GOLDEN_JOBS = ("ranks_host_slow",)

#: Fields that describe this run rather than the trace: wall-clock seconds, the date, and
#: the path the trace was given by (which depends on the working directory).
RUN_FIELDS = frozenset({"load_seconds", "analysis_seconds", "generated_at", "map_seconds", "path"})
#: Floats are compared to this relative tolerance: the same code on another numpy may sum
#: in another order and differ in the last bits, which is no change of the report.
REL_TOL = 1e-6

_RUN_TEXT = (
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\+00:00|Z)?"), "<generated_at>"),
    (re.compile(r"\b\d+(?:\.\d+)? s to (?:load|read|analyse|analyze)\b"), "<seconds> s to \\g<0>"),
)


def _updating(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-goldens")) or os.environ.get("TRACELENS_UPDATE_GOLDENS") == "1"


#: Lists longer than this (a ledger per step over 991 steps) keep their head, tail and
#: length only, so a golden stays a file a reviewer can read.
LONG_LIST = 40


#: The checkout's own path, as an absolute file path in a report starts (a job's
#: `ranks[].file`): written `<repo>/...` so the goldens hold in every checkout.
_REPO_PREFIX = str(REPO) + os.sep


def _strip(value: Any) -> Any:
    if isinstance(value, str) and value.startswith(_REPO_PREFIX):
        return "<repo>/" + value[len(_REPO_PREFIX) :]
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k not in RUN_FIELDS}
    if isinstance(value, list):
        items = [_strip(v) for v in value]
        if len(items) > LONG_LIST:
            return {"len": len(items), "head": items[:20], "tail": items[-5:]}
        return items
    return value


def _normal_text(text: str) -> str:
    for pattern, repl in _RUN_TEXT:
        text = pattern.sub(repl, text)
    return text


def _diffs(a: Any, b: Any, path: str = "$") -> list[str]:
    numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (a, b))
    if not numbers and type(a) is not type(b):
        return [f"{path}: {a!r:.80} != {b!r:.80}"]
    if isinstance(a, dict):
        out: list[str] = []
        for key in sorted(set(a) | set(b)):
            if key not in a or key not in b:
                out.append(f"{path}.{key}: only in {'new' if key in b else 'golden'}")
            else:
                out.extend(_diffs(a[key], b[key], f"{path}.{key}"))
        return out
    if isinstance(a, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} items != {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in _diffs(x, y, f"{path}[{i}]")]
    if isinstance(a, float) or isinstance(b, float):
        return [] if math.isclose(a, b, rel_tol=REL_TOL, abs_tol=1e-9) else [f"{path}: {a!r} != {b!r}"]
    return [] if a == b else [f"{path}: {a!r:.80} != {b!r:.80}"]


def _check(request: pytest.FixtureRequest, name: str, json_text: str, md_text: str) -> None:
    got_json = _strip(json.loads(json_text))
    got_md = _normal_text(md_text)
    json_path = GOLDENS / f"{name}.json"
    md_path = GOLDENS / f"{name}.md"
    if _updating(request):
        GOLDENS.mkdir(exist_ok=True)
        json_path.write_text(json.dumps(got_json, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
        md_path.write_text(got_md)
        return
    assert json_path.exists() and md_path.exists(), f"no golden for {name}: run with --update-goldens"
    diffs = _diffs(json.loads(json_path.read_text()), got_json)
    assert not diffs, f"{name}.json differs from its golden ({len(diffs)} paths):\n" + "\n".join(diffs[:40])
    want_md = md_path.read_text()
    if got_md != want_md:
        import difflib

        delta = "".join(
            list(difflib.unified_diff(want_md.splitlines(True), got_md.splitlines(True), "golden", "new"))[:80]
        )
        pytest.fail(f"{name}.md differs from its golden:\n{delta}")


@pytest.mark.parametrize("name", GOLDEN_TRACES)
def test_report_golden(request: pytest.FixtureRequest, name: str) -> None:
    report = report_of(sample(name))
    _check(request, name, render_json(report), render_markdown(report))


@pytest.mark.parametrize("name", GOLDEN_JOBS)
def test_job_golden(request: pytest.FixtureRequest, name: str) -> None:
    job = job_of(SAMPLES / name)
    _check(request, name, render_job_json(job), render_job_markdown(job))


def test_golden_compare_catches_a_change() -> None:
    """Positive control: the comparison does see a changed number, key or list."""
    base = {"a": 1.0, "b": [1, 2], "c": "x"}
    assert not _diffs(base, {"a": 1.0 + 1e-9, "b": [1, 2], "c": "x"})
    assert _diffs(base, {"a": 1.01, "b": [1, 2], "c": "x"})
    assert _diffs(base, {"a": 1.0, "b": [1, 2, 3], "c": "x"})
    assert _diffs(base, {"a": 1.0, "b": [1, 2], "c": "y"})
    assert _diffs(base, {"a": 1.0, "b": [1, 2]})
