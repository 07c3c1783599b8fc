"""The one loader on every trace vintage we have: 17 public traces (2021-2026, V100 to
B200, MI250, MI300X) and the H200 captures in sample_traces/."""

from __future__ import annotations

import copy
import gzip
import json
import os
from pathlib import Path

import numpy as np
import pytest
from support.corpus import REAL_TRACES, SAMPLE_TRACES, model_of, needs_real, real, sample
from support.synthetic import tiny_trace

from tracelens.derive.steps import find_step_marks
from tracelens.domain import MAX_TRACE_NAME_CHARS
from tracelens.errors import TraceInputError
from tracelens.model import Kind, load_trace
from tracelens.model.loader import read as loader_read

# ProfilerStep# counts on the CPU side, from shared/real_traces/SOURCES.md.
EXPECTED_STEPS = {
    "worker0.pt.trace.json.gz": 6,
    "worker0.1623143089861.pt.trace.json.gz": 6,
    "worker0.1623212756351.pt.trace.json.gz": 6,
    "control.json.gz": 6,
    "df_index_resolver.json.gz": 5,
    "sampled_rank-0.json.gz": 2,
    "sampled_rank-1.json.gz": 2,
    "rank0.json.gz": 5,
    "resnet_kineto.json.gz": 0,
    "benchmark_result_2869224_1695835535_trace.json.gz": 0,
    "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz": 5,
    "nccl_data.json.gz": 3,
    "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz": 1,
    "google_owlv2-large-patch14-ensemble__1016001.json.gz": 1,
    "eager_trace.json.gz": 0,
    "mi250_minitoy_train_ROCm6_2_kineto.json.gz": 2,
    "resnet_act_checkpoint.json.gz": 3,
}
# Kernel counts (cat kernel/Kernel), from SOURCES.md.
EXPECTED_KERNELS = {
    "worker0.pt.trace.json.gz": 9564,
    "control.json.gz": 8568,
    "df_index_resolver.json.gz": 19370,
    "google_owlv2-large-patch14-ensemble__1016001.json.gz": 4330,
    "eager_trace.json.gz": 768,
    "resnet_act_checkpoint.json.gz": 2995,
    "mi250_minitoy_train_ROCm6_2_kineto.json.gz": 14,
}


@pytest.mark.slow
@needs_real
@pytest.mark.parametrize("path", REAL_TRACES, ids=lambda p: p.name)
def test_every_real_trace_loads(path: Path) -> None:
    m = model_of(path)
    assert len(m.host) > 0 and len(m.gpu) > 0
    assert (m.host["dur"] >= 0).all() and (m.gpu["dur"] >= 0).all()
    # Times are relative to the first event: small, non-negative.
    assert m.host["ts"].min() >= 0 and m.gpu["ts"].min() >= 0
    assert m.span_us > 0
    assert len(m.steps) == EXPECTED_STEPS[path.name]
    if path.name in EXPECTED_KERNELS:
        assert len(m.kernels()) == EXPECTED_KERNELS[path.name]
    # Most kernels are linked to the runtime/driver call that launched them.
    launched = (m.kernels()["launch"] >= 0).mean()
    assert launched > 0.6, launched
    # Parents enclose their children (the nesting sweep is right).
    h = m.host
    p = h["parent"].to_numpy()
    has = p >= 0
    assert (h["ts"].to_numpy()[has] >= h["ts"].to_numpy()[p[has]] - 1e-6).all()


@pytest.mark.slow
@pytest.mark.parametrize("path", SAMPLE_TRACES, ids=lambda p: p.name)
def test_every_sample_trace_loads(path: Path) -> None:
    m = model_of(path)
    assert m.meta.vendor == "nvidia"
    dev = m.meta.primary_device
    assert dev is not None and dev.name == "NVIDIA H200" and dev.num_sms == 132
    assert dev.compute_capability == (9, 0)
    if path.name.startswith("plain_"):  # whole-run captures of plain scripts: one step, the whole run
        assert len(m.steps) == 1
    elif path.name == "dyn_recompile.pt.trace.json.gz":  # cut to two recompiling steps (300 KB)
        assert len(m.steps) == 2
    elif path.name == "verdict_graph_capture.pt.trace.json.gz":  # captures only, no step
        assert not len(m.steps) and find_step_marks(m) is None
    elif path.name.startswith("verdict_"):
        # the step-rule traces mark steps the user's way (record_function, Lightning,
        # Trainer, Optimizer.step, one engine step or compiled call), not with
        # ProfilerStep: derive/steps finds them
        marks = find_step_marks(m)
        assert not len(m.steps) and marks is not None and len(marks.table) >= 1, path.name
    elif path.name not in ("matmul_sweep.pt.trace.json.gz", "roofline_cases.pt.trace.json.gz"):  # no steps
        assert len(m.steps) >= 3
    assert m.meta.base_time_ns is not None


@pytest.mark.slow
@needs_real
def test_2021_vintage_string_tids_and_lowercase_keys() -> None:
    m = model_of(real("worker0.pt.trace.json.gz"))
    assert "2021" in m.meta.vintage
    # GPU rows were tid "stream 7": parsed to stream 7; external ids came from "external id".
    assert set(m.gpu["stream"].unique()) == {7}
    assert (m.gpu["external_id"] >= 0).mean() > 0.9
    # ProfilerStep# under cat Operator is an annotation, not an op.
    steps = m.host[m.host["name"].astype(str).str.startswith("ProfilerStep#")]
    assert (steps["kind"] == Kind.USER_ANNOTATION).all()
    assert any("no deviceProperties" in n for n in m.meta.notes)


@pytest.mark.slow
@needs_real
def test_2021_call_stack_strings_give_sources() -> None:
    from tracelens.model.sources import user_source

    m = model_of(real("worker0.1623143089861.pt.trace.json.gz"))
    ops = m.host[(m.host["kind"] == Kind.CPU_OP) & m.host["call_stack"].notna()]
    src = user_source(m, int(ops.index[0]))
    assert src is not None and src.file.endswith(".py") and src.line is not None


@pytest.mark.slow
@needs_real
def test_amd_traces() -> None:
    m = model_of(real("resnet_act_checkpoint.json.gz"))
    assert m.meta.vendor == "amd"
    assert m.meta.primary_device is not None and "MI300X" in m.meta.primary_device.name
    assert m.meta.rank == 0 and m.meta.world_size == 8
    names = m.host[m.host["kind"] == Kind.RUNTIME]["name"].astype(str)
    assert names.str.startswith("hip").mean() > 0.9
    mi250 = model_of(real("mi250_minitoy_train_ROCm6_2_kineto.json.gz"))
    assert mi250.meta.vendor == "amd"


@pytest.mark.slow
@needs_real
def test_base_time_and_ns_display_unit() -> None:
    new = model_of(real("google_owlv2-large-patch14-ensemble__1016001.json.gz"))
    assert new.meta.base_time_ns == 1751410836000000000
    # Absolute time of the first event is July 2025 (epoch µs).
    assert 1.75e15 < new.meta.origin_us < 1.76e15
    ns = model_of(real("rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"))
    assert ns.meta.metadata.get("displayTimeUnit") == "ns"
    assert 1.71e15 < ns.meta.origin_us < 1.72e15  # April 2024, µs despite "ns"
    assert 0 < ns.span_us < 10e6


@pytest.mark.slow
@needs_real
def test_python_function_tree_and_cuda_graph_launches() -> None:
    m = model_of(real("google_owlv2-large-patch14-ensemble__1016001.json.gz"))
    py = m.host[m.host["kind"] == Kind.PYTHON]
    assert len(py) == 65313
    # Runtime calls sit under Python frames.
    rt = m.host[m.host["kind"] == Kind.RUNTIME]
    assert (rt["py_frame"] >= 0).mean() > 0.9
    # rank0.json: one cudaGraphLaunch feeds many kernels (flows are not 1:1).
    g = model_of(real("rank0.json.gz"))
    per_launch = g.gpu[g.gpu["launch"] >= 0].groupby("launch").size()
    assert per_launch.max() > 1


def test_sample_trace_links_kernels_to_ops() -> None:
    m = model_of(sample("train_step"))
    k = m.kernels()
    linked = k[k["launch"] >= 0]
    ops = m.host["op"].to_numpy()[linked["launch"].to_numpy()]
    assert (ops >= 0).mean() > 0.95
    # cuBLAS launches through the driver API (cuLaunchKernelEx) are linked too.
    launchers = m.host["kind"].to_numpy()[linked["launch"].to_numpy()]
    assert (launchers == Kind.DRIVER).any()
    assert np.isfinite(m.steps["gpu_ts"]).all()


# --------------------------------------------------------------------------------------
# Odd input (issue 14): repaired or skipped and noted, or refused with TraceInputError.
# Each builds on support.synthetic.tiny_trace(): 2 steps, each one aten::mm ->
# cuLaunchKernelEx -> kernel.
# --------------------------------------------------------------------------------------


def _write(tmp_path: Path, data: bytes | dict[str, object], name: str = "t.json") -> Path:
    p = tmp_path / name
    p.write_bytes(json.dumps(data).encode("utf-8", "surrogatepass") if isinstance(data, dict) else data)
    return p


def _kernel(d: dict[str, object]) -> dict[str, object]:
    return next(e for e in d["traceEvents"] if e.get("cat") == "kernel")  # type: ignore[attr-defined, no-any-return]


def test_tiny_trace_is_a_clean_baseline(tmp_path: Path) -> None:
    m = load_trace(_write(tmp_path, tiny_trace()))
    assert len(m.kernels()) == 2 and len(m.steps) == 2 and m.meta.notes == ()


def test_exact_duplicate_events_count_once(tmp_path: Path) -> None:
    d = tiny_trace()
    d["traceEvents"] += [copy.deepcopy(_kernel(d)) for _ in range(2000)]  # type: ignore[operator]
    m = load_trace(_write(tmp_path, d))
    assert len(m.kernels()) == 2
    assert any("2000 exact repeats" in n for n in m.meta.notes)


def test_negative_step_is_not_a_window(tmp_path: Path) -> None:
    d = tiny_trace()
    d["traceEvents"][2]["dur"] = -40_000.0  # type: ignore[index]  # ProfilerStep#1
    m = load_trace(_write(tmp_path, d))
    assert m.steps["step"].tolist() == [2]
    assert any("ProfilerStep ranges with no positive duration" in n for n in m.meta.notes)


def test_huge_ints_in_args_and_memory_events(tmp_path: Path) -> None:
    d = tiny_trace()
    _kernel(d)["args"]["device"] = 2**70  # type: ignore[index]
    d["traceEvents"].append(  # type: ignore[attr-defined]
        {"ph": "i", "name": "[memory]", "pid": 7, "tid": 7, "ts": 1100, "args": {"Bytes": 2**63 + 5, "Device Id": 0}}
    )
    m = load_trace(_write(tmp_path, d))
    assert m.gpu["device"].tolist().count(0) == 2  # fell back to the row's pid (0)
    assert m.memory["bytes"].isna().all() and len(m.memory) == 1


def test_absurd_device_properties_are_dropped(tmp_path: Path) -> None:
    d = tiny_trace()
    props = d["deviceProperties"][0]  # type: ignore[index]
    props["numSms"] = 10**30
    props["sharedMemPerMultiprocessor"] = -1
    props["regsPerMultiprocessor"] = "@@"
    raw = json.dumps(d).replace('"@@"', "1" + "0" * 400).encode()
    dev = load_trace(_write(tmp_path, raw)).meta.primary_device
    assert dev is not None and dev.num_sms is None
    assert {"numSms", "sharedMemPerMultiprocessor", "regsPerMultiprocessor"}.isdisjoint(dev.properties)
    assert dev.properties["maxThreadsPerMultiprocessor"] == 2048


def test_matmul_waves_survive_absurd_slots() -> None:
    from tracelens.derive.matmuls import waves_of

    waves, fill, eff = waves_of(10, 10**400)
    assert waves >= 0 and 0 <= fill <= 1 and 0 <= eff <= 1


def test_long_names_are_cut(tmp_path: Path) -> None:
    d = tiny_trace()
    _kernel(d)["name"] = "void k<" + "x" * 70_000 + ">()"
    m = load_trace(_write(tmp_path, d))
    names = m.kernels()["name"].astype(str)
    assert names.str.len().max() <= MAX_TRACE_NAME_CHARS
    long = names.iloc[0]
    assert long.startswith("void k<") and long.endswith(">()") and "…" in long
    assert any("names longer than" in n for n in m.meta.notes)


def test_lone_surrogates_and_bad_utf8_are_repaired(tmp_path: Path) -> None:
    d = tiny_trace()
    d["traceEvents"][3]["name"] = "aten::mm\ud800"  # type: ignore[index]
    m = load_trace(_write(tmp_path, d))
    assert "aten::mm\ufffd" in set(m.host["name"].astype(str))
    assert any("surrogate" in n for n in m.meta.notes)
    raw = json.dumps(tiny_trace()).encode().replace(b'"aten::mm"', b'"aten::mm\xff"', 1)
    m = load_trace(_write(tmp_path, raw))
    assert "aten::mm\ufffd" in set(m.host["name"].astype(str))
    assert any("not UTF-8" in n for n in m.meta.notes)


def test_unreadable_events_are_skipped_and_counted(tmp_path: Path) -> None:
    d = tiny_trace()
    d["traceEvents"][4]["ph"] = None  # type: ignore[index]  # the first cuLaunchKernelEx
    d["traceEvents"] += [5, "x", [], None]  # type: ignore[operator]
    raw = json.dumps(d).encode().replace(b'"ts": 1040.0', b'"ts": 1e400', 1)  # the first kernel
    m = load_trace(_write(tmp_path, raw))
    assert len(m.kernels()) == 1
    assert any("6 entries of traceEvents were not readable events" in n for n in m.meta.notes)


def test_gzip_with_bom_padding_and_members(tmp_path: Path) -> None:
    raw = json.dumps(tiny_trace()).encode()
    for name, data, note in (
        ("bom.json.gz", gzip.compress(b"\xef\xbb\xbf" + raw), None),
        ("nl.json.gz", gzip.compress(raw) + b"\n", "padding after the gzip stream"),
        ("two.json.gz", gzip.compress(raw[:100]) + gzip.compress(raw[100:]), None),
    ):
        m = load_trace(_write(tmp_path, data, name))
        assert len(m.kernels()) == 2, name
        assert note is None or any(note in n for n in m.meta.notes), m.meta.notes
    with pytest.raises(TraceInputError, match="unexpected bytes after the gzip stream"):
        load_trace(_write(tmp_path, gzip.compress(raw) + b"garbage", "junk.json.gz"))


def test_gzip_bomb_is_refused_early(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The budget comes from this machine's free memory (model/budget.py); lowered so the
    # test stays small: 20 MB of JSON on a machine that allows 10 MB. A newline after the
    # gzip stream hides the size field (padding or ISIZE cannot be told apart), so the
    # budget alone must stop the inflate.
    monkeypatch.setattr(loader_read, "json_budget", lambda cap: 10_000_000)
    raw = json.dumps(tiny_trace()).encode()
    bomb = gzip.compress(raw[:-1] + b" " * 20_000_000 + raw[-1:], 9) + b"\n"
    with pytest.raises(TraceInputError, match="decompression bomb"):
        load_trace(_write(tmp_path, bomb, "bomb.json.gz"))


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b'{"traceEvents": [], "zz": ' + b"[" * 1000 + b"]" * 1000 + b"}", "nested too deeply"),
        (b'{"traceEvents": [{"ph": "X", "args": {"x": ' + b"[" * 5000 + b"]" * 5000 + b"}}]}", "nested too deeply"),
        # A value of an unexpected type sends the decode down the tolerant path; the
        # truncation after it must still be a clear error.
        (json.dumps({"traceEvents": [{"ph": "X", "ts": "abc"}, {"ph": "X"}]}).encode()[:-10], "truncated"),
    ],
)
def test_malformed_json_is_a_clear_error(tmp_path: Path, raw: bytes, message: str) -> None:
    with pytest.raises(TraceInputError, match=message):
        load_trace(_write(tmp_path, raw))


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_non_regular_files_are_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)  # no writer: open() would wait forever
    with pytest.raises(TraceInputError, match="not a regular file"):
        load_trace(fifo)
    for dev in ("/dev/zero", "/dev/urandom"):  # would never end
        if Path(dev).exists():
            with pytest.raises(TraceInputError, match="not a regular file"):
                load_trace(dev)
