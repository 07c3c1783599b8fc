"""The loader's nesting in numpy (`_enclosing`, `_depths`) against the stack sweep it
replaced (issue 30: the sweep was the load's slowest Python loop on stack-heavy traces):
the same parent and depth for every host row of real traces, and of small traces made
for the cases a sweep has to get right (ties, equal ends, the slack, zero-length rows,
long sibling runs, deep chains, several threads)."""

from __future__ import annotations

import os
import random
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from support.corpus import REAL_TRACES, SAMPLE_TRACES, model_of, trace_id

from tracelens.model import load_trace
from tracelens.model.loader.columns import _NO_ROW
from tracelens.model.loader.nest import _NEST_SLACK_US, _depths, _nest, _sweep_order

#: The real H200 captures of bench/RESULTS.md's bench corpus, where a machine has them.
BENCH_DATA = Path(os.environ.get("TRACELENS_BENCH_DATA", "/work/bench_data"))
BENCH_TRACES = sorted(BENCH_DATA.glob("*.json.gz")) if BENCH_DATA.is_dir() else []


def _stack_sweep(host: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Parent and depth of every row as the loader's stack sweep found them before issue
    30: per thread in start order (longer first on ties), pop the open rows the row does
    not fit in (it starts at or after their end, or outlives them by more than the
    slack), and the top left is its parent."""
    n = len(host)
    parent = np.full(n, _NO_ROW, dtype=np.int64)
    depth = np.zeros(n, dtype=np.int64)
    tid_key = host["pid"].to_numpy() * 1_000_003 + host["tid"].to_numpy()
    ts, end, dur = host["ts"].to_numpy(), host["end"].to_numpy(), host["dur"].to_numpy()
    order = np.lexsort((-dur, ts, tid_key))
    stack: list[int] = []
    thread = None
    for i in order.tolist():
        if tid_key[i] != thread:
            thread, stack = tid_key[i], []
        while stack and not (ts[i] < end[stack[-1]] and end[i] - _NEST_SLACK_US <= end[stack[-1]]):
            stack.pop()
        parent[i] = stack[-1] if stack else _NO_ROW
        depth[i] = len(stack)
        stack.append(i)
    return parent, depth


def _frame(rows: list[tuple[int, float, float]]) -> pd.DataFrame:
    """A host frame of (tid, ts, dur) rows, all ops on one process."""
    tid, ts, dur = (np.array(c) for c in zip(*rows, strict=True))
    return pd.DataFrame(
        {
            "pid": np.ones(len(rows), dtype=np.int64),
            "tid": tid.astype(np.int64),
            "ts": ts.astype(float),
            "dur": dur.astype(float),
            "end": (ts + dur).astype(float),
            "kind": np.zeros(len(rows), dtype=np.int64),
            "name": pd.Categorical(["aten::add"] * len(rows)),
        }
    )


def _same_as_sweep(host: pd.DataFrame, parent: np.ndarray) -> None:
    want_parent, want_depth = _stack_sweep(host)
    assert np.array_equal(parent, want_parent)
    assert np.array_equal(_depths(parent), want_depth)


def test_edge_cases_nest_as_the_stack_sweep() -> None:
    rows = [
        (1, 0.0, 100.0),  # a root
        (1, 0.0, 100.0),  # the same span: inside the first (longer first, then row order)
        (1, 0.0, 50.0),  # starts with them, shorter: inside both
        (1, 50.0, 0.0),  # zero length where the next starts: inside it (longer first)
        (1, 50.0, 50.5),  # starts where row 2 ends: not inside it; outlives row 1 by < slack
        (1, 60.0, 40.8),  # outlives row 4 by less than the slack: inside it
        (1, 70.0, 35.0),  # outlives every open row by more than the slack: a root
        (1, 100.0, 5.0),  # starts where rows 0-1 end: inside row 6
        (2, 10.0, 80.0),  # another thread: its own forest
        (2, 20.0, 10.0),
        (2, 30.0, 10.0),  # starts where its sibling ends
    ]
    host = _frame(rows)
    parent = _nest(host)["parent"]
    _same_as_sweep(host, parent)
    assert parent.tolist() == [-1, 0, 1, 4, 1, 4, -1, 6, -1, 8, 8]


def test_random_forests_nest_as_the_stack_sweep() -> None:
    """Random forests on a 1 µs grid (ties and equal ends everywhere), long sibling runs
    (thousands of launches under one op) and a deep chain (a recursive Python stack)."""
    rng = random.Random(30)
    rows: list[tuple[int, float, float]] = []
    for tid in range(6):
        t = 0.0
        for _ in range(400):
            ts = t + rng.choice([0, 0, 1, 2])
            dur = float(rng.choice([0, 1, 2, 3, 5, 8, 20, 100]))
            rows.append((tid, ts, dur))
            for _ in range(rng.choice([0, 0, 1, 3, 10])):
                rows.append((tid, ts + rng.randint(0, int(dur)), float(rng.randint(0, int(dur) + 2))))
            t = ts + rng.choice([0, dur, dur + 1])
    rows += [(7, float(i), 1.0) for i in range(3000)]  # 3000 siblings under one op
    rows.append((7, 0.0, 3000.0))
    rows += [(8, float(i), 2000.0 - 2 * i) for i in range(1000)]  # a chain 1000 deep
    host = _frame(rows)
    parent = _nest(host)["parent"]
    _same_as_sweep(host, parent)
    assert int(_depths(parent).max()) == 999


def test_sweep_order_is_lexsort() -> None:
    """Thread, start, longer first, then row order, on rows almost in start order (as
    traces come) with runs of equal starts, equal durations and interleaved threads."""
    rng = np.random.default_rng(30)
    n = 20_000
    ts = np.sort(rng.integers(0, 3000, n)).astype(float)
    ts[rng.integers(0, n, 200)] = rng.integers(0, 3000, 200)  # a few out of order
    dur = rng.choice([0.0, 1.0, 2.0, 5.0], n)
    tid_key = rng.choice([7, 3, 1_000_003 * 2 + 5], n)
    got = _sweep_order(tid_key, ts, dur)
    assert np.array_equal(got, np.lexsort((-dur, ts, tid_key)))
    assert (np.diff(ts[got]) == 0).sum() > n // 2  # ties were there to break


@pytest.mark.parametrize(
    "path",
    [p for p in SAMPLE_TRACES if p.name.startswith(("dyn_kv_cat", "capture_mask_sum", "train_step."))],
    ids=trace_id,
)
def test_sample_traces_nest_as_the_stack_sweep(path: Path) -> None:
    host = model_of(path).host
    assert (host["parent"] >= 0).sum() > len(host) // 2  # not vacuous: mostly nested rows
    _same_as_sweep(host, host["parent"].to_numpy())


@pytest.mark.slow
@pytest.mark.parametrize("path", SAMPLE_TRACES + REAL_TRACES, ids=trace_id)
def test_every_trace_nests_as_the_stack_sweep(path: Path) -> None:
    host = model_of(path).host
    _same_as_sweep(host, host["parent"].to_numpy())


@pytest.mark.slow
@pytest.mark.skipif(not BENCH_TRACES, reason=f"bench corpus not found at {BENCH_DATA}")
@pytest.mark.parametrize("path", BENCH_TRACES, ids=trace_id)
def test_bench_corpus_nests_as_the_stack_sweep(path: Path) -> None:
    host = load_trace(path).host  # not cached: these models are hundreds of MB each
    _same_as_sweep(host, host["parent"].to_numpy())
