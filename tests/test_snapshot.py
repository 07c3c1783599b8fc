"""CUDA memory snapshots (torch.cuda.memory._dump_snapshot pickles): the restricted
unpickler (attack tests), the replay to the peak, categories and source lines, and the
CLI (`tracelens report snapshot.pickle`, and a snapshot beside a trace)."""

from __future__ import annotations

import json
import os
import pickle
import shutil
from pathlib import Path
from typing import Any

import pytest
from support.cli import cli as run
from support.cli import one_error_line_problem

from tracelens.assemble_snapshot import category_of, summarize_snapshot
from tracelens.errors import TraceInputError
from tracelens.model.snapshot import (
    Frame,
    SnapshotRefused,
    TraceEntry,
    decode_snapshot,
    load_snapshot,
    snapshot_from_dict,
)

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data" / "inputs"
MiB = 1 << 20


def _f(file: str, line: int, name: str) -> dict[str, Any]:
    return {"filename": file, "line": line, "name": name}


class _Builder:
    """A snapshot in torch's own structure: device_traces entries oldest first, the
    segments and blocks at snapshot time."""

    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []
        self.t = 1_000_000.0

    def add(self, action: str, addr: int, size: int, frames: list[dict[str, Any]] | None = None) -> None:
        self.t += 10
        self.entries.append(
            {"action": action, "addr": addr, "size": size, "stream": 0, "frames": frames or [], "time_us": self.t}
        )

    def free(self, addr: int, size: int, frames: list[dict[str, Any]] | None = None) -> None:
        self.add("free_requested", addr, size, frames)
        self.add("free_completed", addr, size, frames)

    def dump(self, path: Path, live: dict[int, int], reserved: int) -> Path:
        blocks = [
            {"address": a, "size": s, "requested_size": s, "state": "active_allocated", "frames": []}
            for a, s in sorted(live.items())
        ]
        seg = {"device": 0, "address": 0, "total_size": reserved, "stream": 0, "segment_type": "large",
               "segment_pool_id": (0, 0), "allocated_size": sum(live.values()), "active_size": sum(live.values()),
               "blocks": blocks}  # fmt: skip
        path.write_bytes(pickle.dumps({"segments": [seg], "device_traces": [self.entries]}))
        return path


USER = _f("/home/u/train.py", 40, "train_step")
FWD = [_f("/opt/venv/lib/python3.12/site-packages/torch/nn/functional.py", 2000, "linear"),
       _f("/home/u/model.py", 12, "forward"), USER]  # fmt: skip
BUILD = [_f("/opt/venv/lib/python3.12/site-packages/torch/nn/modules/module.py", 1340, "_apply"),
         _f("/home/u/train.py", 10, "main")]  # fmt: skip
OPT = [_f("/opt/venv/lib/python3.12/site-packages/torch/optim/adamw.py", 160, "_init_group"), USER]
ZERO = [_f("/opt/venv/lib/python3.12/site-packages/torch/optim/optimizer.py", 990, "zero_grad"), USER]


def _training(tmp_path: Path) -> Path:
    """Weights built, forward activations, backward grads (no Python frames: autograd's
    thread), optimizer state, zero_grad: the peak is in backward, before activations go."""
    b = _Builder()
    b.add("segment_alloc", 0, 64 * MiB)
    b.add("alloc", 0, 8 * MiB, BUILD)  # weights
    b.add("alloc", 8 * MiB, 20 * MiB, FWD)  # activations saved for backward
    b.add("alloc", 28 * MiB, 8 * MiB)  # gradients (autograd thread: no frames)
    b.add("alloc", 36 * MiB, 4 * MiB)  # a backward temporary
    b.free(36 * MiB, 4 * MiB)
    b.free(8 * MiB, 20 * MiB)  # activations freed by backward
    b.add("alloc", 8 * MiB, 16 * MiB, OPT)  # AdamW state
    b.free(28 * MiB, 8 * MiB, ZERO)  # zero_grad(set_to_none=True)
    return b.dump(tmp_path / "train.snapshot.pickle", {0: 8 * MiB, 8 * MiB: 16 * MiB}, 64 * MiB)


def test_replay_finds_the_peak_and_what_held_it(tmp_path: Path) -> None:
    s = summarize_snapshot(load_snapshot(_training(tmp_path)))
    assert s.recorded and s.history_complete
    assert s.peak_allocated == 40 * MiB  # weights 8 + activations 20 + grads 8 + temporary 4
    assert s.peak_reserved == 64 * MiB and s.fragmentation_at_peak == 24 * MiB
    assert s.end_allocated == 24 * MiB
    cats = {c.category: c.bytes for c in s.categories}
    assert cats == {"activations": 20 * MiB, "parameters": 8 * MiB, "gradients": 8 * MiB, "temporary": 4 * MiB,
                    "cached_free": 24 * MiB}  # fmt: skip
    assert abs(sum(c.share for c in s.categories) - 1) < 1e-9
    top = s.sites[0]
    assert top.source is not None and (top.source.file, top.source.line) == ("/home/u/model.py", 12)
    assert s.largest[0].bytes == 20 * MiB and s.largest[0].frames[0].file == "/home/u/model.py"
    assert any("expandable_segments" in a for a in s.advice)  # 24 of 64 MiB cached: over a quarter
    assert s.timeline is not None and max(s.timeline.allocated) == 40 * MiB


def test_optimizer_state_and_kv_cache_categories() -> None:
    kv = (Frame("/x/site-packages/transformers/cache_utils.py", 90, "update"), Frame("/home/u/gen.py", 3, "main"))
    assert category_of(None, kv, (0, 0), None, False) == "kv_cache"
    state = (Frame("/x/site-packages/torch/optim/adamw.py", 160, "_init_group"),)
    assert category_of(None, state, (0, 0), None, False) == "optimizer_state"
    foreach_tmp = (Frame("/x/site-packages/torch/optim/adamw.py", 500, "_multi_tensor_adamw"),)
    freed = TraceEntry("free_requested", 0, MiB, 0, (), None, (0, 0))  # freed within the step: short-lived
    assert category_of(None, foreach_tmp, (0, 0), freed, False) == "temporary"
    assert category_of(None, (), (1, 2), None, False) == "cuda_graph_pool"


def test_history_that_starts_late_is_said(tmp_path: Path) -> None:
    b = _Builder()
    b.add("alloc", 4 * MiB, 2 * MiB, FWD)
    b.free(0, 4 * MiB)  # allocated before recording began
    s = summarize_snapshot(load_snapshot(b.dump(tmp_path / "late.pickle", {4 * MiB: 2 * MiB}, 8 * MiB)))
    assert not s.history_complete
    assert s.peak_allocated == 6 * MiB
    assert any("before the recorded history begins" in n for n in s.notes)


def test_snapshot_without_history_is_the_state_at_its_time(tmp_path: Path) -> None:
    path = _Builder().dump(tmp_path / "state.pickle", {0: 3 * MiB}, 4 * MiB)
    data = pickle.loads(path.read_bytes())
    data["device_traces"] = [[]]
    path.write_bytes(pickle.dumps(data))
    s = summarize_snapshot(load_snapshot(path))
    assert not s.recorded and s.peak_allocated == 3 * MiB and s.timeline is None
    assert any("no allocation history" in n for n in s.notes)


class _RunsCode:
    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, ("touch /tmp/tracelens-pwned",))


class _Cls:
    pass


@pytest.mark.parametrize(
    "payload",
    [
        {"segments": [_RunsCode()]},
        {"segments": [], "device_traces": [[{"action": "alloc", "frames": [_Cls()]}]]},
        {"segments": [], "x": Path("/etc")},
        {"segments": [], "f": print},
    ],
    ids=["reduce-os-system", "class-instance", "pathlib", "builtin-function"],
)
def test_a_pickle_naming_anything_is_refused(payload: dict[str, Any], tmp_path: Path) -> None:
    data = pickle.dumps(payload, protocol=4)
    with pytest.raises(SnapshotRefused, match="names"):
        decode_snapshot(data)
    # Protocol 0 (text) pickles spell globals differently (GLOBAL opcode): refused alike.
    with pytest.raises(SnapshotRefused):
        decode_snapshot(pickle.dumps(payload, protocol=0))
    assert not Path("/tmp/tracelens-pwned").exists()


@pytest.mark.slow
def test_attack_pickle_on_the_cli_exits_2_with_one_line(tmp_path: Path) -> None:
    evil = tmp_path / "evil.pickle"
    evil.write_bytes(pickle.dumps({"segments": [_RunsCode()]}))
    out = run("report", evil, "--out-dir", tmp_path / "r")
    assert out.returncode == 2, out.stderr
    assert one_error_line_problem(out.stderr) is None and "names posix.system" in out.stderr
    assert "Traceback" not in out.stderr and not (tmp_path / "r").exists()
    assert not Path("/tmp/tracelens-pwned").exists()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "empty"),
        (b"not a pickle", "not a pickle"),
        (pickle.dumps([1, 2]), "not a CUDA memory snapshot"),
        (pickle.dumps({"segments": []})[:-3], "not a readable pickle"),
    ],
    ids=["empty", "text", "list", "truncated"],
)
def test_bad_snapshots_are_one_line_errors(content: bytes, message: str, tmp_path: Path) -> None:
    with pytest.raises(TraceInputError, match=message):
        decode_snapshot(content)
    p = tmp_path / "bad.pickle"
    p.write_bytes(content)
    out = run("report", p, "-q")
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr


@pytest.mark.slow
def test_cli_report_on_a_snapshot(tmp_path: Path) -> None:
    snap = _training(tmp_path)
    before = snap.read_bytes()
    out = run("report", snap, "--out-dir", tmp_path / "r")
    assert out.returncode == 0, out.stderr
    assert "peak 41.9 MB allocated" in out.stdout and "activations" in out.stdout
    assert snap.read_bytes() == before  # inputs are only read
    got = json.loads((tmp_path / "r" / "train.snapshot.json").read_text())
    assert got["snapshot"]["peak_allocated"] == 40 * MiB
    html = (tmp_path / "r" / "train.snapshot.html").read_text()
    md = (tmp_path / "r" / "train.snapshot.md").read_text()
    assert "/home/u/model.py:12" in html and "<script" not in html
    assert "/home/u/model.py:12" in md


@pytest.mark.slow
def test_frames_are_escaped_everywhere(tmp_path: Path) -> None:
    b = _Builder()
    b.add("alloc", 0, MiB, [_f("/home/u/<img src=x onerror=alert(1)>|`*.py", 1, "<b>f</b>")])
    snap = b.dump(tmp_path / "x.pickle", {0: MiB}, 2 * MiB)
    out = run("report", snap, "--out-dir", tmp_path / "r", "-q")
    assert out.returncode == 0, out.stderr
    html = (tmp_path / "r" / "x.html").read_text()
    md = (tmp_path / "r" / "x.md").read_text()
    assert "<img src=x" not in html and "&lt;img src=x" in html
    assert "<img" not in md and "<b>f</b>" not in md


@pytest.mark.slow
def test_snapshot_beside_a_trace_joins_its_report(tmp_path: Path) -> None:
    trace = tmp_path / "run.pt.trace.json.gz"
    shutil.copy(REPO / "sample_traces" / "light_idle.pt.trace.json.gz", trace)
    shutil.copy(_training(tmp_path), tmp_path / "run.pt.trace.snapshot.pickle")
    out = run("report", trace, "--out-dir", tmp_path / "r")
    assert out.returncode == 0, out.stderr
    rep = json.loads((tmp_path / "r" / "run.pt.trace.json").read_text())
    assert rep["snapshot"]["peak_allocated"] == 40 * MiB
    assert "Memory snapshot" in (tmp_path / "r" / "run.pt.trace.md").read_text()
    assert "Memory: peak" in out.stdout
    # A refused snapshot beside a trace never fails the trace's report: it is a note.
    (tmp_path / "run.pt.trace.snapshot.pickle").write_bytes(pickle.dumps({"segments": [_RunsCode()]}))
    out = run("report", trace, "--json", tmp_path / "r2.json", "-q")
    assert out.returncode == 0, out.stderr
    rep = json.loads((tmp_path / "r2.json").read_text())
    assert rep["snapshot"] is None and any("not read" in n for n in rep["summary"]["notes"])


def test_snapshot_from_dict_tolerates_old_formats() -> None:
    """Before torch 2.1 a block's frames sat under history[0] and frees were `free`."""
    old = {"segments": [{"device": 0, "address": 0, "total_size": 2 * MiB, "blocks": [
        {"address": 0, "size": MiB, "state": "active_allocated",
         "history": [{"addr": 0, "frames": [_f("/home/u/a.py", 1, "f")], "real_size": MiB}]}]}],
        "device_traces": [[{"action": "alloc", "addr": MiB, "size": MiB, "frames": []},
                           {"action": "free", "addr": MiB, "size": MiB}]]}  # fmt: skip
    snap = snapshot_from_dict(old)
    assert snap.segments[0].blocks[0].frames[0].filename == "/home/u/a.py"
    assert snap.traces[0][1].action == "free_completed"
    s = summarize_snapshot(snap)
    assert s.peak_allocated == 2 * MiB and s.end_allocated == MiB


# -- the H200 snapshots (tests/data/inputs/memory, README there) ---------------------------
MEM = DATA / "memory"


@pytest.mark.slow
def test_h200_training_step_snapshot() -> None:
    """A 2-layer transformer (d 1024, batch 8x512, bf16 autocast, AdamW), 4 steps, the
    history recorded from before the model was built."""
    s = summarize_snapshot(load_snapshot(MEM / "mem_train.pt.trace.snapshot.pickle.gz"))
    assert s.recorded and s.history_complete and s.entries == 2641
    # torch.cuda.max_memory_allocated() / max_memory_reserved() printed by the run:
    # 3,421,850,112 and 3,755,999,232 bytes.
    assert s.peak_allocated == pytest.approx(3_421_850_112, rel=0.005)
    assert s.max_reserved == 3_755_999_232
    cats = {c.category: c.bytes for c in s.categories}
    # 90.8M fp32 parameters (32000x1024 embedding and head, two blocks): 363 MB
    assert cats["parameters"] == pytest.approx(4 * (2 * 32000 * 1024 + 32000 + 2 * 12_596_224), rel=0.01)
    # AdamW's exp_avg and exp_avg_sq: two fp32 copies of the parameters
    assert cats["optimizer_state"] == pytest.approx(2 * cats["parameters"], rel=0.01)
    # the peak is in backward: the fp32 logits' gradient buffers (524 MB each, allocated
    # on autograd's thread with no Python frame) are temporaries, the forward's saved
    # tensors activations
    assert cats["temporary"] > 1e9 and cats["activations"] > 5e8
    assert s.largest[0].bytes == 8 * 512 * 32000 * 4
    assert s.peak_phase.endswith("step")  # the main thread's line at the peak (loss.backward())


@pytest.mark.slow
def test_h200_generate_snapshot_with_a_truncated_history() -> None:
    """A HF Llama (8 layers, hidden 1024, random weights) generating 64 tokens for 4
    prompts; 40,000 history entries, the oldest dropped by the ring buffer."""
    s = summarize_snapshot(load_snapshot(MEM / "mem_generate.snapshot.pickle.gz"))
    assert s.entries == 40000 and not s.history_complete
    assert any("before the recorded history begins" in n for n in s.notes)
    assert s.max_reserved == 585_105_408  # torch's max_memory_reserved
    # max_memory_allocated was 437,249,024: reached in the part the ring buffer dropped,
    # so the recorded peak is at most that
    assert 0.97 * 437_249_024 < s.peak_allocated <= 437_249_024
    cats = {c.category: c.bytes for c in s.categories}
    assert cats["parameters"] > 0.6 * s.peak_reserved  # bf16 weights, built before the kept history
    kv = [x for x in s.sites if x.category == "kv_cache"]
    assert kv and all(x.library is not None and x.library.file == "transformers/cache_utils.py" for x in kv)


@pytest.mark.slow
def test_h200_snapshot_beside_its_trace(tmp_path: Path) -> None:
    trace = tmp_path / "mem_train.pt.trace.json.gz"
    shutil.copy(MEM / "mem_train.pt.trace.json.gz", trace)
    shutil.copy(MEM / "mem_train.pt.trace.snapshot.pickle.gz", tmp_path)
    out = run("report", trace, "--json", tmp_path / "r.json", "-q")
    assert out.returncode == 0, out.stderr
    rep = json.loads((tmp_path / "r.json").read_text())
    assert rep["snapshot"]["peak_allocated"] == pytest.approx(3_421_850_112, rel=0.005)
    # the trace's own [memory] events (profile_memory) see the same peak reserved
    assert rep["memory"]["peak_reserved"] == pytest.approx(rep["snapshot"]["max_reserved"], rel=0.01)
