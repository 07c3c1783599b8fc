"""The report as a user and a machine see it: the JSON contract, the diagnostic order and
primary bottleneck, untrusted text escaped, the HTML offline."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from support.corpus import REAL_TRACES, needs_real, real, report_of, sample
from support.synthetic import TraceBuilder, host_event, kernel_event

from tracelens.assemble import build_report
from tracelens.model import load_trace
from tracelens.render import render_html, render_json, render_markdown, render_terminal
from tracelens.render.markdown import md

CATEGORY_IDS = {
    "host_sync",
    "host_bound",
    "launch_overhead",
    "memory_bound",
    "shape_dynamism",
    "compilation",
    "allocation",
    "compute_bound",
    "misaligned_matmul",
    "wave_quantization",
    "power_throttle",
}


def test_json_contract() -> None:
    data = json.loads(render_json(report_of(sample("host_sync_mask"))))
    assert data["summary"]["primary"] in CATEGORY_IDS
    assert data["findings"]
    for f in data["findings"]:
        for key in ("category", "severity", "title", "time_us", "share", "advice", "evidence", "sources"):
            assert key in f, key
        assert f["category"] in CATEGORY_IDS
        assert f["severity"] in ("high", "medium", "low", "info")
        assert 0 <= f["share"] <= 1 and f["time_us"] >= 0
        for s in f["sources"]:
            assert set(s) >= {"file", "line", "function"}
    assert data["kernels"]
    for k in data["kernels"]:
        assert set(k) >= {"name", "count", "total_us", "bound"}
        assert k["bound"] in ("memory", "compute", "latency", "unknown")
    assert [q["number"] for q in data["questions"]] == [1, 2, 3, 4, 5, 6]


def test_diagnostic_order_and_primary() -> None:
    rep = report_of(sample("host_sync_mask"))
    order = [f.category.value for f in rep.findings]
    # host waits (1) before launch overhead (2)
    assert order.index("host_sync") < order.index("launch_overhead")
    # The largest recoverable time is the fusible elementwise chains, not the syncs.
    assert rep.summary.primary == "memory_bound"
    statuses = {q.id: q.status for q in rep.questions}
    assert statuses["host_waits"] == "yes"
    assert statuses["shape_dynamism"] in ("no", "minor")  # a static-shape eager loop
    assert "not_built" not in statuses.values()
    assert statuses["allocation"] in ("no", "minor")
    assert statuses["memory"] == "yes"  # its elementwise kernels on 64M floats are bandwidth-bound
    # No NVML samples in this trace: throttling is not measurable, and the answer says how to measure it.
    compute = next(q for q in rep.questions if q.id == "compute")
    assert compute.status == "no" and "Power throttling: not measurable" in compute.answer
    assert "tracelens capture" in compute.answer
    # A GPU-bound GEMM loop: no host-side problem; compute-bound at its roof.
    gemm = report_of(sample("gemm_bf16"))
    assert {q.id: q.status for q in gemm.questions}["host_waits"] in ("no", "minor")
    assert {q.id: q.status for q in gemm.questions}["compute"] == "yes"
    # At the measured ceiling nothing gains 3% of the window: no headline bottleneck.
    assert gemm.summary.primary is None and "no finding would gain" in gemm.summary.headline


@pytest.mark.slow
@needs_real
def test_primary_on_public_traces() -> None:
    assert report_of(real("worker0.1623143089861.pt.trace.json.gz")).summary.primary == "host_bound"
    assert report_of(real("google_owlv2-large-patch14-ensemble__1016001.json.gz")).summary.primary == "host_bound"


def _evil_trace(tmp_path: Path) -> Path:
    """A small synthetic trace whose names try to inject HTML and Markdown."""
    evil_kernel = "<script>alert(1)</script>| ![x](http://evil.example/x.png) **bold** `tick`"
    evil_op = "aten::<img src=x onerror=alert(2)>"
    tr = TraceBuilder()
    tr.add(
        host_event("user_annotation", "ProfilerStep#1", 0, 1000),
        host_event("cpu_op", evil_op, 10, 50, {"External id": 1}),
        host_event("python_function", "/home/u/<b>x</b>.py(3): f|g", 5, 900, {"Python id": 1}),
    )
    for i in range(30):
        tr.add(
            host_event("cuda_runtime", "cudaLaunchKernel", 12 + i * 30, 5, {"correlation": 100 + i, "External id": 1}),
            kernel_event(evil_kernel, 20 + i * 30, 2, 100 + i),
        )
    tr.add(host_event("cuda_runtime", "cudaStreamSynchronize", 920, 40, {"correlation": 999}))
    return tr.write(tmp_path / "evil.json.gz")


def test_untrusted_text_is_escaped(tmp_path: Path) -> None:
    rep = build_report(load_trace(_evil_trace(tmp_path)))
    # Positive control: the hostile names reach the report's data as they are, so their
    # absence from the pages below is the renderers' escaping.
    assert any("<script>alert(1)</script>" in k.name for k in rep.kernels)
    assert any(o.name.startswith("aten::<img src=x") for o in rep.ops)
    html = render_html(rep)
    assert "<script>alert" not in html and "&lt;script&gt;" in html
    assert "<img src=x" not in html
    assert "<b>x</b>" not in html
    mdtext = render_markdown(rep)
    assert "<script>" not in mdtext and "![x](" not in mdtext
    assert "http://evil" not in mdtext
    # Table rows keep their column count: the | in the name is escaped.
    for line in mdtext.splitlines():
        if line.startswith("| ") and "script" in line:
            assert line.count(" | ") == line.replace("\\|", "").count(" | ")


def test_md_escape() -> None:
    assert md("a|b") == "a\\|b"
    assert md("<x>") == "&lt;x&gt;"
    assert md("[l](u)") == "\\[l\\](u)"
    assert "http://" not in md("see http://x.example") and "www." not in md("www.x.example")


def test_html_is_offline_and_self_contained() -> None:
    html = render_html(report_of(sample("train_step")))
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    assert "@import" not in html and "url(" not in html
    assert "<svg" in html and "<style>" in html
    assert "Content-Security-Policy" in html


@pytest.mark.slow
@needs_real
@pytest.mark.parametrize("path", REAL_TRACES, ids=lambda p: p.name)
def test_all_renderers_on_real_traces(path: Path) -> None:
    rep = report_of(path)
    assert "<html" in render_html(rep)
    assert "tracelens" in render_markdown(rep)
    json.loads(render_json(rep))
    assert rep.trace.gpu_name in render_terminal(rep)


@pytest.mark.slow
@needs_real
def test_queued_idle_is_noted_not_blamed_on_the_host() -> None:
    """rank0.json (DLRM, 8 ranks): 61% of the window the GPU idles with work queued behind
    collectives and CUDA graphs; the report says so instead of blaming the host: since the
    queued_idle analyzer that is a finding of its own, the primary, and host_bound keeps
    only the small idle the host did cause."""
    rep = report_of(real("rank0.json.gz"))
    assert rep.summary.primary == "queued_idle"
    by_cat = {str(f.category): f.time_us for f in rep.findings}
    assert by_cat["queued_idle"] > 0.5 * rep.gpu_time.total.window_us
    assert by_cat.get("host_bound", 0.0) < 0.05 * by_cat["queued_idle"]
    assert rep.gpu_time.total.get("idle_other") / rep.gpu_time.total.window_us > 0.5


def test_compiled_templates_come_back_from_the_cache_unchanged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import jinja2

    import tracelens.render.html as html_mod

    rep = report_of(sample("host_sync_mask"))
    monkeypatch.setattr(html_mod, "_bytecode_cache", lambda autoescape: None)
    fresh = (render_html(rep), render_markdown(rep))
    monkeypatch.undo()
    monkeypatch.setattr(html_mod, "TEMPLATE_CACHE_DIR", str(tmp_path))
    compiled: list[str] = []
    compile_ = jinja2.Environment.compile

    def counting(self: jinja2.Environment, source: str, name: str | None = None, *a: object, **k: object) -> object:
        compiled.append(str(name))
        return compile_(self, source, name, *a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(jinja2.Environment, "compile", counting)
    first = (render_html(rep), render_markdown(rep))
    assert "report.html.j2" in compiled and "report.md.j2" in compiled
    assert len(list(tmp_path.glob("__tracelens_*.cache"))) == len(compiled)
    compiled.clear()
    again = (render_html(rep), render_markdown(rep))
    assert compiled == []  # every template came from the cache
    assert fresh == first == again
