"""Issue 18: statements that were wrong on their face, each checked where it is said."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from markupsafe import escape
from support.cli import cli
from support.corpus import REAL_TRACES, report_of, sample
from support.synthetic import TraceBuilder, host_event, tiny_trace, write_trace

from tracelens.assemble import build_report
from tracelens.model import load_trace
from tracelens.render import render_html, render_markdown, render_terminal
from tracelens.render.format import metric, pct, short_kernel
from tracelens.report import Metric


def test_no_model_no_green_no() -> None:
    """power_gemm was captured with --no-shapes: the models cover 0% of kernel time, so
    question 3 cannot be answered "no" (it was a green "no")."""
    rep = report_of(sample("power_gemm"))
    q3 = next(q for q in rep.questions if q.id == "memory")
    assert q3.status == "not_measurable" and "0%" in q3.answer
    assert not rep.trace.has_shapes
    html = render_html(rep)
    assert "<dt>record_shapes</dt><dd>no</dd>" in html


@pytest.mark.slow
def test_one_step_and_one_vendor() -> None:
    rep = report_of(sample("train_step"))
    html, md, term = render_html(rep), render_markdown(rep), render_terminal(rep)
    for text in (html, md, term):
        assert "NVIDIA H200 · NVIDIA" not in text
    owl = [p for p in REAL_TRACES if p.name.startswith("google_owlv2")]
    if owl:
        one = report_of(owl[0])
        assert one.window.steps == 1
        for text in (render_html(one), render_markdown(one), render_terminal(one)):
            assert not re.search(r"\b1 (steps|detected iterations)\b", text)


def test_numbers_read_at_a_glance() -> None:
    assert metric(Metric("peak FLOP/s", 989e12, "number")) == "989 T"
    assert metric(Metric("bytes per second", 4.3e12, "per_s")) == "4.3 T/s"
    assert metric(Metric("SM clock", 1980.0, "number")) == "1,980"
    # One rule for shares everywhere, so a title's "5%" and a table's share agree.
    assert f"{0.048:.0%}" == pct(0.048) == "5%"
    assert pct(0.0016) == "0.2%" and pct(0.0004) == "<0.1%" and pct(0.0096) == "1%"  # not "1.0%"


def test_short_kernel_names() -> None:
    full = (
        "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
        "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)"
    )
    assert short_kernel(full, 100) == "vectorized_elementwise_kernel<4, FillFunctor<float>, Array<char*, 1>>"
    assert len(short_kernel(full)) <= 60 and short_kernel(full).endswith("…")
    mangled = "_ZN19cutlass_cudnn_train6KernelINS_4conv6kernel23ImplicitGemmConvolutionINS1_11threadblock22Implicit"
    assert short_kernel(mangled).startswith("Kernel<ImplicitGemmConvolution")
    assert short_kernel("triton_poi_fused_gelu_1") == "triton_poi_fused_gelu_1"
    html = render_html(report_of(sample("train_step")))
    # The full name is one tap away, in a <details>.
    assert '<details class="kn"><summary>' in html and '<span class="full">' in html


def test_headline_once() -> None:
    """The headline sentence and the fix appeared three and two times."""
    rep = report_of(sample("host_sync_mask"))
    html = render_html(rep)
    body = html[html.index("<main>") :]
    primary = next(f for f in rep.findings if f.category.value == rep.summary.primary)
    # as the page writes it: the chain's "mul > add" is "mul &gt; add" there
    assert body.count(str(escape(primary.advice.split("\n")[0][:60]))) == 1
    assert body.count(primary.title) <= 2  # the headline and its finding card


@pytest.mark.slow
def test_cpu_only_trace(tmp_path: Path) -> None:
    """No hints to enable CUDA or set TRACELENS_PEAKS, no "no CPU ops" with ops present."""
    tr = TraceBuilder()
    tr.top["schemaVersion"] = 1
    for i in range(50):
        tr.add(
            host_event("cpu_op", "aten::add", 1000 + 10 * i, 5, {"External id": i + 1, "Input Dims": [[4, 4], [4, 4]]})
        )
    trace = tr.write(tmp_path / "cpu.json")
    out = cli("report", trace, "--out-dir", tmp_path / "out", env={"NO_COLOR": "1"})
    assert out.returncode == 0, out.stderr
    texts = [out.stdout] + [p.read_text() for p in (tmp_path / "out").iterdir()]
    for text in texts:
        assert "TRACELENS_PEAKS" not in text and "no CPU ops" not in text and "(UNKNOWN)" not in text
    assert "No GPU kernels in this trace" in (tmp_path / "out" / "cpu.html").read_text()
    # Positive control: a GPU the peak table lacks does get the TRACELENS_PEAKS hint.
    doc = tiny_trace(4)
    doc["deviceProperties"][0]["name"] = "NVIDIA Imaginary G1"
    unknown = build_report(load_trace(write_trace(tmp_path / "unknown_gpu.json", doc)))
    assert any("TRACELENS_PEAKS" in q.answer for q in unknown.questions)
