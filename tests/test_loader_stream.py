"""The streaming loader (issue 13): the same model as the whole-buffer read, whatever the
chunk size, on real traces; odd files handed to the whole-buffer path; truncation and the
Python-frame cap reported."""

from __future__ import annotations

import gzip
import json
import os
import sys
import threading
from functools import cache
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from support.corpus import real, sample

import tracelens.model.loader.stream as stream_mod
from tracelens.errors import TraceInputError
from tracelens.model import Kind, TraceModel, load_trace
from tracelens.model.loader import collect, load, read
from tracelens.model.loader import decode as decode_mod
from tracelens.model.loader import split as split_mod
from tracelens.model.loader.read import _printable

# Internals are patched in the module that looks them up: `collect` reads the batches,
# `load` chooses the route, `split` forks and merges.


def _whole(path: Path) -> TraceModel:
    """The whole-buffer model: the reference every streamed load is compared with, read
    once per file (a test's patches of the stream and the split do not reach this path;
    train_step's was read 5 times, host_sync_mask's 4)."""
    st = path.stat()
    return _whole_of(path, st.st_size, st.st_mtime_ns)


@cache
def _whole_of(path: Path, size: int, mtime_ns: int) -> TraceModel:
    return load._load_whole(path, _printable(path), load._Progress(None))


def _streamed(path: Path) -> TraceModel:
    """Load through the stream, failing if it handed the file to the whole-buffer path."""
    return load._load_streaming(path, _printable(path), load._Progress(None))


def _same(a: TraceModel, b: TraceModel) -> None:
    for table in ("host", "gpu", "steps", "memory", "counters"):
        x, y = getattr(a, table), getattr(b, table)
        if table == "host":
            assert [a.op_shapes(i) for i in range(len(x))] == [b.op_shapes(i) for i in range(len(y))]
            x, y = x.drop(columns="shapes"), y.drop(columns="shapes")
        pd.testing.assert_frame_equal(x, y, check_exact=True)
    assert a.meta == b.meta
    assert a.thread_names == b.thread_names
    assert a.comm_args == b.comm_args  # the collectives' records, kept by the loader


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    # A few KB per piece: hundreds of cuts per trace, so pieces end inside strings,
    # escapes, numbers and nested args.
    monkeypatch.setattr(stream_mod, "CHUNK_BYTES", 3001)
    monkeypatch.setattr(stream_mod, "READ_BYTES", 1777)


@pytest.mark.slow
@pytest.mark.parametrize(
    "path",
    [
        pytest.param(lambda: sample("train_step"), id="train_step (python_function tree, shapes)"),
        pytest.param(lambda: real("worker0.pt.trace.json.gz"), id="2021 (Call stack strings, string tids)"),
        pytest.param(lambda: real("mi250_minitoy_train_ROCm6_2_kineto.json.gz"), id="AMD"),
        pytest.param(lambda: sample("power_gemm"), id="counter events"),
    ],
)
def test_small_chunks_give_the_whole_buffer_model(path: Any, small_chunks: None) -> None:
    p = path()
    _same(_streamed(p), _whole(p))


def test_plain_json_and_gzip_give_the_same_model(tmp_path: Path, small_chunks: None) -> None:
    src = sample("host_sync_mask")
    plain = tmp_path / "t.json"
    plain.write_bytes(gzip.decompress(src.read_bytes()))
    a, b = _streamed(plain), _streamed(src)
    assert a.meta.json_bytes == b.meta.json_bytes == plain.stat().st_size
    assert a.meta.file_bytes == plain.stat().st_size and b.meta.file_bytes == src.stat().st_size
    pd.testing.assert_frame_equal(a.host.drop(columns="shapes"), b.host.drop(columns="shapes"))
    pd.testing.assert_frame_equal(a.gpu, b.gpu)


def test_event_boundaries_inside_strings_are_not_cuts(
    tmp_path: Path, small_chunks: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Names and call stacks holding `},{` and escaped quotes: a cut there would leave an
    # unterminated string, so the stream must try an earlier boundary and still read
    # every event, as the whole-buffer path does.
    d = json.loads(gzip.decompress(sample("elementwise_fp32").read_bytes()))
    tricky = '}, {"ph": "X"}, {\\" },\n  {'
    n = 0
    for e in d["traceEvents"]:
        if e.get("cat") == "cpu_op" and n < 40:
            e["name"] = f"aten::weird{n}{tricky}"
            e.setdefault("args", {})["Call stack"] = tricky * 3
            n += 1
    path = tmp_path / "tricky.json.gz"
    path.write_bytes(gzip.compress(json.dumps(d, indent=1).encode()))
    failed = []
    decode = decode_mod._decode_batch

    def counting(data: bytes) -> Any:
        try:
            return decode(data)
        except Exception:
            failed.append(data)
            raise

    monkeypatch.setattr(collect, "_decode_batch", counting)
    m = _streamed(path)
    assert failed, "no cut fell inside a string: the test does not test the retry"
    _same(m, _whole(path))
    assert sum(tricky in str(c) for c in m.host["name"].cat.categories) == 40


def test_truncated_files_are_clear_errors(tmp_path: Path) -> None:
    raw = gzip.decompress(sample("train_step").read_bytes())
    cut = tmp_path / "cut.json"
    cut.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(TraceInputError, match="JSON is truncated"):
        load_trace(cut)
    gz = gzip.compress(raw)
    cut_gz = tmp_path / "cut.json.gz"
    cut_gz.write_bytes(gz[: len(gz) // 2])
    with pytest.raises(TraceInputError, match="truncated or corrupt gzip file"):
        load_trace(cut_gz)


def test_odd_files_take_the_whole_buffer_path(tmp_path: Path) -> None:
    # An array-format trace and a value of an unexpected type: the stream declines both,
    # and the whole-buffer path reads them.
    d = json.loads(gzip.decompress(sample("gemm_bf16").read_bytes()))
    arr = tmp_path / "array.json"
    arr.write_text(json.dumps(d["traceEvents"]))
    with pytest.raises(stream_mod.Unstreamable):
        _streamed(arr)
    assert len(load_trace(arr).kernels()) == len(_whole(sample("gemm_bf16")).kernels())
    d["traceEvents"][5]["ts"] = "soon"
    odd = tmp_path / "odd.json"
    odd.write_text(json.dumps(d))
    with pytest.raises(stream_mod.Unstreamable):
        _streamed(odd)
    assert any("unexpected types" in n for n in load_trace(odd).meta.notes)


def test_python_frames_past_the_cap_are_dropped_with_a_note(monkeypatch: pytest.MonkeyPatch) -> None:
    path = sample("train_step")
    full = load_trace(path)
    n_py = int((full.host["kind"] == Kind.PYTHON).sum())
    assert n_py > 1000
    monkeypatch.setattr(collect, "MAX_PYTHON_FRAMES", 1000)
    capped = load_trace(path)
    assert int((capped.host["kind"] == Kind.PYTHON).sum()) == 1000
    assert len(capped.host) == len(full.host) - (n_py - 1000)
    assert len(capped.kernels()) == len(full.kernels())
    assert any(f"{n_py - 1000:,} Python frames" in n and "dropped" in n for n in capped.meta.notes)
    assert not any("Python frames" in n for n in full.meta.notes)


def test_a_gzip_file_is_read_as_the_inflater_needs_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A regular gzip file is not held whole: read GZIP_IN_BYTES at a time (a split load's
    # two processes each held all of it). A pipe or other non-file is still read whole.
    monkeypatch.setattr(stream_mod, "GZIP_IN_BYTES", 4096)
    monkeypatch.setattr(stream_mod, "READ_BYTES", 1000)
    asked: list[int] = []
    read_upto = stream_mod.read_upto
    monkeypatch.setattr(stream_mod, "read_upto", lambda fh, n: (asked.append(n), read_upto(fh, n))[1])
    p = sample("train_step")
    assert p.stat().st_size > 50 * 4096  # else one read would hold it all anyway
    _same(_streamed(p), _whole(p))
    assert asked[0] == 1000 and max(asked[1:-1]) <= 2 * 4096 and len(asked) > p.stat().st_size // 8192
    assert asked[-1] == stream_mod._READ_STEP  # the rest after the stream, to the end


def test_gzip_members_padding_and_small_input_blocks(
    tmp_path: Path, small_chunks: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two members split inside an event, then padding; the compressed bytes fed 700 at a
    # time so members and the padding start inside a fed block.
    monkeypatch.setattr(stream_mod, "GZIP_IN_BYTES", 700)
    raw = gzip.decompress(sample("launch_bound").read_bytes())
    cut = len(raw) // 3 + 17
    path = tmp_path / "members.json.gz"
    path.write_bytes(gzip.compress(raw[:cut]) + gzip.compress(raw[cut:]) + b"\n\x00\n")
    m = _streamed(path)
    _same(m, _whole(path))
    assert any("3 bytes of padding after the gzip stream" in n for n in m.meta.notes)
    assert m.meta.json_bytes == len(raw)


# -- the split load (two processes, every other batch each) -----------------------------
@pytest.fixture
def split(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Every load in the test is split; the list records whether each split was merged
    (False: it fell back to the one-process read)."""
    merged: list[bool] = []
    merge = split_mod._merged

    def spy(mine: Any, theirs: Any) -> Any:
        out = merge(mine, theirs)
        merged.append(out is not None and theirs.collector.n_events > 0)
        return out

    monkeypatch.setattr(load, "_split_wanted", lambda path: True)  # the load's choice
    monkeypatch.setattr(split_mod, "_split_wanted", lambda path: True)  # start_split_early's
    monkeypatch.setattr(split_mod, "_merged", spy)
    return merged


@pytest.mark.slow
@pytest.mark.parametrize(
    "path",
    [
        pytest.param(lambda: sample("train_step"), id="train_step (python_function tree, shapes)"),
        pytest.param(lambda: real("worker0.pt.trace.json.gz"), id="2021 (Call stack strings, string tids)"),
        pytest.param(lambda: real("nccl_data.json.gz"), id="NCCL"),
        pytest.param(lambda: sample("power_gemm"), id="counter events"),
    ],
)
def test_a_split_load_gives_the_one_process_model(path: Any, small_chunks: None, split: list[bool]) -> None:
    p = path()
    _same(_streamed(p), _whole(p))
    assert split == [True], "the second process read nothing: the test does not test the split"


def test_a_split_load_that_meets_a_cut_inside_a_string_reads_again(
    tmp_path: Path, small_chunks: None, split: list[bool]
) -> None:
    # A share cannot try an earlier cut; the load must notice and read in one process.
    d = json.loads(gzip.decompress(sample("elementwise_fp32").read_bytes()))
    tricky = '}, {"ph": "X"}, {\\" },\n  {'
    for n, e in enumerate(e for e in d["traceEvents"] if e.get("cat") == "cpu_op"):
        e["name"] = f"aten::weird{n}{tricky}"
    path = tmp_path / "tricky.json.gz"
    path.write_bytes(gzip.compress(json.dumps(d, indent=1).encode()))
    _same(_streamed(path), _whole(path))
    assert split == []  # a share failed to decode: nothing was merged


def test_a_failed_second_process_falls_back(
    small_chunks: None, split: list[bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    read_stream = collect._read_stream

    def failing(path: Any, name: str, notes: list[str], share: Any) -> Any:
        if share is not None and share.part == 1:
            raise MemoryError  # in the child: it sends nothing back
        return read_stream(path, name, notes, share)

    monkeypatch.setattr(split_mod, "_read_stream", failing)  # the child's read, and the parent's share
    monkeypatch.setattr(load, "_read_stream", failing)  # the one-process read
    p = sample("host_sync_mask")
    _same(_streamed(p), _whole(p))
    assert not split  # nothing to merge: the one-process read ran


@pytest.mark.slow
@pytest.mark.parametrize("which", ["train_step", "host_sync_mask"])
def test_an_early_child_is_taken_by_the_load_of_its_file(
    which: str, small_chunks: None, split: list[bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    # `report` forks the child before its own imports, with a larger share (3 of 5).
    shares: list[Any] = []
    merge = split_mod._merged
    monkeypatch.setattr(split_mod, "_merged", lambda a, b: (shares.append(b.share), merge(a, b))[1])
    p = sample(which)
    assert split_mod.start_split_early(p)
    child = split_mod._early
    assert child is not None and child.share == split_mod.EARLY_SHARE != split_mod.LATE_SHARE
    _same(_streamed(p), _whole(p))
    assert shares == [split_mod.EARLY_SHARE] and split_mod._early is None
    with pytest.raises(ChildProcessError):
        os.waitpid(child.pid, os.WNOHANG)  # reaped
    # The same file by another name (as `report ./t.json` is loaded as `t.json`).
    assert split_mod.start_split_early(f"{p.parent}/./{p.name}")
    _same(_streamed(p), _whole(p))
    assert shares == [split_mod.EARLY_SHARE] * 2 and split_mod._early is None


@pytest.mark.slow
def test_an_early_child_of_another_or_changed_file_is_stopped(
    tmp_path: Path, small_chunks: None, split: list[bool]
) -> None:
    a, b = sample("train_step"), sample("host_sync_mask")
    assert split_mod.start_split_early(a)
    first = split_mod._early
    assert first is not None
    _same(_streamed(b), _whole(b))  # b's own (late) child, not a's
    assert split_mod._early is None and split == [True]
    with pytest.raises(ChildProcessError):
        os.waitpid(first.pid, os.WNOHANG)
    copy = tmp_path / "t.json.gz"
    copy.write_bytes(a.read_bytes())
    assert split_mod.start_split_early(copy)
    second = split_mod._early
    assert second is not None
    copy.write_bytes(a.read_bytes() + b"\0")  # the file changed since the child started
    adopted = split_mod._adopt_early(copy)
    assert adopted is None and split_mod._early is None
    with pytest.raises(ChildProcessError):
        os.waitpid(second.pid, os.WNOHANG)
    assert split_mod.start_split_early(a)
    third = split_mod._early
    assert third is not None
    split_mod.discard_early()  # no load took it (an error before the load)
    assert split_mod._early is None
    with pytest.raises(ChildProcessError):
        os.waitpid(third.pid, os.WNOHANG)


def test_shares_cover_every_batch_once() -> None:
    for taken, of in ((1, 2), (3, 5), (2, 7)):
        owners = [stream_mod.Share(0, taken, of).owner(i) for i in range(10 * of)]
        assert sum(owners) == 10 * taken  # part 1 takes `taken` of every `of`
        assert all(sum(owners[i : i + of]) == taken for i in range(0, 10 * of, of))
    assert [stream_mod.Share(1).owner(i) for i in range(4)] == [1, 0, 1, 0]


def test_split_is_only_wanted_for_large_regular_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRACELENS_LOAD_PROCESSES", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setattr(threading, "active_count", lambda: 1)  # earlier tests may leave threads
    small = sample("train_step")
    assert not split_mod._split_wanted(small)
    json_bytes = len(gzip.decompress(small.read_bytes()))
    assert json_bytes > 9 * small.stat().st_size  # else the test tests the floor, not the trailer
    monkeypatch.setattr(split_mod, "SPLIT_MIN_JSON_BYTES", json_bytes)
    assert split_mod._split_wanted(small)  # gzip: its JSON size from the trailer
    monkeypatch.setattr(split_mod, "SPLIT_MIN_JSON_BYTES", json_bytes + 1)
    assert not split_mod._split_wanted(small)
    monkeypatch.setattr(split_mod, "SPLIT_MIN_JSON_BYTES", json_bytes)
    monkeypatch.setenv("TRACELENS_LOAD_PROCESSES", "1")
    assert not split_mod._split_wanted(small)
    monkeypatch.delenv("TRACELENS_LOAD_PROCESSES")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    assert not split_mod._split_wanted(small)
    assert not split_mod._split_wanted(tmp_path)  # a directory: the one-process read words it
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.setattr(threading, "active_count", lambda: 2)
    assert not split_mod._split_wanted(small)  # another thread: no fork


def test_reads_ask_for_what_the_file_holds_not_the_limit(tmp_path: Path) -> None:
    # `fh.read(MAX_JSON_BYTES + 1)` would reserve 4 GiB up front for any file.
    path = tmp_path / "t.json"
    path.write_bytes(b"x" * 1000)
    asked: list[int] = []

    class Recording:
        def __init__(self, fh: Any) -> None:
            self._fh = fh

        def read(self, n: int) -> bytes:
            asked.append(n)
            return bytes(self._fh.read(n))

        def fileno(self) -> int:
            return int(self._fh.fileno())

        def tell(self) -> int:
            return int(self._fh.tell())

    with path.open("rb") as fh:
        fh.read(10)
        data = stream_mod.read_upto(Recording(fh), read.MAX_JSON_BYTES + 1)  # type: ignore[arg-type]
    assert data == b"x" * 990
    assert asked == [991]  # what is left, and one byte to see the file grow
