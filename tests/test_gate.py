"""The CI gate (`tracelens diff --fail-if-slower`, `--fail-if CAUSE`, issue 32) and the
like-for-like checks under it (tracelens/derive/compare.py, issue 29), on real pairs."""

from __future__ import annotations

import dataclasses
import gzip
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import model_of, sample
from support.corpus import diff_of

from tracelens.derive.compare import different_programs, program_signature, signature_overlap
from tracelens.diff import build_diff
from tracelens.errors import UsageError
from tracelens.gate import evaluate, parse_causes, parse_threshold
from tracelens.model import load_trace


def diff_cli(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tracelens", "diff", *map(str, args), "--out-dir", str(cwd / "out")],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=600,
    )


def test_thresholds_parse() -> None:
    assert parse_threshold("5%").share == pytest.approx(0.05)
    assert parse_threshold("0.05").share == pytest.approx(0.05)
    assert parse_threshold("2ms").us == pytest.approx(2000.0)
    assert parse_threshold("300us").us == pytest.approx(300.0)
    for bad in ("5", "fast", "-3%", "2 hours"):
        with pytest.raises(UsageError):
            parse_threshold(bad)
    assert parse_causes(["host_sync", "memory_bound"]) == ["host_sync", "gpu_busy_memory"]
    with pytest.raises(UsageError, match="not a ledger cause"):
        parse_causes(["hostsync"])


def test_gate_fails_on_a_real_slowdown_and_passes_the_fix() -> None:
    """host_bound_pinned -> host_bound_pageable is the fix undone: 2.3 -> 13.0 ms a step,
    far beyond the noise; the other way round passes."""
    worse = diff_of(sample("host_bound_pinned"), sample("host_bound_pageable"))
    got = evaluate(worse, parse_threshold("5%"), ["host_bound"])
    assert got.failed and got.reason.startswith("gate failed: ")
    assert "slower" in got.reason and "host_bound" in got.reason and "\n" not in got.reason
    better = diff_of(sample("host_bound_pageable"), sample("host_bound_pinned"))
    ok = evaluate(better, parse_threshold("5%"), ["host_bound"])
    assert not ok.failed and ok.reason.startswith("gate passed: ")


def test_gate_on_a_cause_alone() -> None:
    """host_sync_static -> host_sync_mask brings the syncs back: --fail-if host_sync
    fails; the mask -> static fix removes them and passes on that cause."""
    back = diff_of(sample("host_sync_static"), sample("host_sync_mask"))
    got = evaluate(back, None, ["host_sync"])
    assert got.failed and "host_sync" in got.reason
    fixed = diff_of(sample("host_sync_mask"), sample("host_sync_static"))
    assert not evaluate(fixed, None, ["host_sync"]).failed


def test_a_change_within_the_noise_band_never_fails() -> None:
    """The rule itself: a 20% slowdown inside a ±30% noise band passes; the same change
    with a ±5% band fails."""
    d = diff_of(sample("train_step"), sample("train_step"))
    assert not evaluate(d, parse_threshold("5%"), []).failed  # the same trace: no change
    step = d.verdict.before_step_us
    noisy = dataclasses.replace(d, verdict=dataclasses.replace(d.verdict, change_us=0.2 * step, noise_us=0.3 * step))
    got = evaluate(noisy, parse_threshold("5%"), [])
    assert not got.failed and "noise" in got.reason
    quiet = dataclasses.replace(noisy, verdict=dataclasses.replace(noisy.verdict, noise_us=0.05 * step))
    assert evaluate(quiet, parse_threshold("5%"), []).failed


def test_different_programs_are_not_like_for_like() -> None:
    """Issue 29's pair: gemm_bf16 against train_step was "Slower by 12.1 ms (109%)"."""
    d = diff_of(sample("gemm_bf16"), sample("train_step"))
    assert not d.comparable and "different programs" in d.not_comparable[0]
    assert d.verdict.text.startswith("Not like for like") and "Slower" not in d.verdict.text
    assert not d.verdict.primary_gone
    with pytest.raises(UsageError, match="cannot judge"):
        evaluate(d, parse_threshold("5%"), [])


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ("diff_compile_before", "diff_compile_after"),  # eager vs compiled: no kernel or op in common
        ("diff_graph_before", "diff_graph_after"),
        ("host_bound_pageable", "host_bound_pinned"),
        ("dyn_recompile", "dyn_recompile_fixed"),
    ],
)
def test_fixes_of_one_program_stay_comparable(before: str, after: str) -> None:
    ov = signature_overlap(program_signature(model_of(sample(before))), program_signature(model_of(sample(after))))
    assert not different_programs(ov), ov


def test_an_after_trace_without_gpu_events_is_not_a_speedup(tmp_path: Path) -> None:
    """Issue 29: the after-trace lost its GPU events and was "Faster by 3.6 ms per step
    (93%) ... the primary bottleneck is gone"."""
    data = json.loads(gzip.decompress(sample("host_sync_mask").read_bytes()))
    gpu = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation"}
    data["traceEvents"] = [e for e in data["traceEvents"] if str(e.get("cat", "")).lower() not in gpu]
    cpu_only = tmp_path / "cpu_only.json"
    cpu_only.write_text(json.dumps(data))
    d = build_diff(model_of(sample("host_sync_mask")), load_trace(cpu_only))
    assert not d.comparable and "the after trace has no GPU activity" in d.not_comparable[0]
    assert "Faster" not in d.verdict.text and "gone" not in d.verdict.text
    # The CLI's gate refuses it with one line and exit 2, writing nothing.
    res = diff_cli(sample("host_sync_mask"), cpu_only, "--fail-if-slower", "5%", cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tracelens: error: the gate cannot judge"), lines
    assert not (tmp_path / "out").exists()


def test_cli_gate_exit_codes(tmp_path: Path) -> None:
    slower = diff_cli(sample("host_bound_pinned"), sample("host_bound_pageable"), "-q", "--fail-if-slower", "5%",
                      cwd=tmp_path)  # fmt: skip
    assert slower.returncode == 1, slower.stderr
    assert slower.stderr.count("\n") == 1 and slower.stderr.startswith("tracelens: gate failed: ")
    faster = diff_cli(sample("host_bound_pageable"), sample("host_bound_pinned"), "-q", "--fail-if-slower", "5%",
                      "--fail-if", "host_bound", cwd=tmp_path)  # fmt: skip
    assert faster.returncode == 0 and faster.stderr == "", faster.stderr
    bad = diff_cli(sample("host_bound_pageable"), sample("host_bound_pinned"), "--fail-if", "nope", cwd=tmp_path)
    assert bad.returncode == 2 and "not a ledger cause" in bad.stderr


def _edited(name: str, tmp_path: Path, tag: str, edit: Any) -> Path:
    """A copy of a real trace with one thing about its run changed."""
    data = json.loads(gzip.decompress(sample(name).read_bytes()))
    edit(data)
    out = tmp_path / f"{name}_{tag}.json"
    out.write_text(json.dumps(data))
    return out


def test_the_gate_refuses_other_gpus_and_other_capture_options(tmp_path: Path) -> None:
    """The same program on another GPU model, or captured without Python stacks: `diff`
    reports it with a note, the gate refuses it (exit 2, one line): the step time would
    judge the runner or with_stack's host overhead, not the change."""

    def other_gpu(d: dict[str, Any]) -> None:
        for p in d["deviceProperties"]:
            p["name"] = "NVIDIA A100-SXM4-80GB"

    def no_stacks(d: dict[str, Any]) -> None:
        d["traceEvents"] = [e for e in d["traceEvents"] if e.get("cat") != "python_function"]

    before = sample("host_sync_mask")
    for tag, edit, said in (
        ("a100", other_gpu, "different GPUs (NVIDIA H200 before, NVIDIA A100-SXM4-80GB after)"),
        ("nostack", no_stacks, "different profiler options (with_stack on before, off after"),
    ):
        after = _edited("host_sync_mask", tmp_path, tag, edit)
        d = build_diff(model_of(before), load_trace(after))
        assert d.comparable  # the diff itself stands, with a note
        with pytest.raises(UsageError, match=re.escape(said)):
            evaluate(d, parse_threshold("5%"), [])
        if tag != "a100":
            # Both refusals are evaluate()'s one UsageError (its setup differences), which
            # the CLI turns into one line the same way: one run of the command shows it
            # (each run is a diff of two traces in a fresh process, 2.5 s on 2 cores).
            continue
        (tmp_path / tag).mkdir()
        res = diff_cli(before, after, "--fail-if-slower", "5%", cwd=tmp_path / tag)
        assert res.returncode == 2, res.stderr
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("tracelens: error: the gate cannot judge"), lines
        assert said in lines[0] and not (tmp_path / tag / "out").exists()
    # Without a gate the diff is written as ever, the GPU change noted.
    (tmp_path / "plain").mkdir()
    plain = diff_cli(before, tmp_path / "host_sync_mask_a100.json", "-q", cwd=tmp_path / "plain")
    assert plain.returncode == 0, plain.stderr
    md = next((tmp_path / "plain" / "out").glob("*.md")).read_text()
    assert "Different GPUs" in md
