"""Issue 18: `tracelens report --perfetto`: the trace with tracelens' tracks spliced in,
checked against the rules Perfetto's JSON importer (and chrome://tracing) applies."""

from __future__ import annotations

import gzip
import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.cli import cli
from support.corpus import REAL_TRACES, context_of, model_of, report_of, sample

from tracelens.analyzers import IDLE_CAUSE_OF
from tracelens.cli.common import _annotated_trace
from tracelens.output import read_trace_bytes
from tracelens.redact import no_redaction
from tracelens.render.perfetto import PID, annotation_events, gaps_of, splice

#: How far the annotation's clock may sit from the trace's (see annotation_events).
SHIFT_SLACK_US = 0.3
PHASES = {"X", "B", "E", "b", "e", "n", "i", "I", "C", "M", "s", "t", "f", "R", "O", "N", "D"}


def check_chrome_trace(doc: Any) -> list[dict[str, Any]]:
    """The Chrome trace format as Perfetto's JSON importer reads it; returns our events."""
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    assert isinstance(events, list)
    ours = [e for e in events if isinstance(e, dict) and e.get("pid") == PID]
    slices: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    open_async: dict[tuple[str, int], list[float]] = defaultdict(list)
    for e in sorted(ours, key=lambda e: (e["ts"], 0 if e["ph"] == "b" else 1)):
        assert e["ph"] in PHASES and isinstance(e["name"], str) and e["name"]
        assert isinstance(e["ts"], (int, float)) and math.isfinite(e["ts"])
        if e["ph"] == "X":
            assert isinstance(e["tid"], int) and isinstance(e["dur"], (int, float)) and e["dur"] >= 0
            # As Perfetto stores them: integer nanoseconds.
            start = round(e["ts"] * 1000)
            slices[(e["pid"], e["tid"])].append((start, start + round(e["dur"] * 1000)))
        elif e["ph"] == "C":
            assert e["args"] and all(isinstance(v, (int, float)) and math.isfinite(v) for v in e["args"].values())
        elif e["ph"] in ("b", "e"):
            assert isinstance(e["cat"], str) and isinstance(e["id"], int)
            stack = open_async[(e["cat"], e["id"])]
            if e["ph"] == "b":
                stack.append(e["ts"])
            else:
                assert stack and stack.pop() <= e["ts"], e  # every end after its begin
        elif e["ph"] == "M":
            assert e["name"] in ("process_name", "thread_name", "process_sort_index")
    assert not any(open_async.values()), "unbalanced async slices"
    # Complete slices nest on their thread: sorted by start, each starts after the
    # previous ends or ends inside it.
    for spans in slices.values():
        stack: list[int] = []
        for begin, end in sorted(spans, key=lambda s: (s[0], -s[1])):
            while stack and stack[-1] <= begin:
                stack.pop()
            assert not stack or end <= stack[-1], (begin, end, stack[-1])
            stack.append(end)
    return ours


@pytest.mark.slow
@pytest.mark.parametrize("name", ["power_gemm", "host_sync_mask", "launch_bound"])
def test_annotated_sample_follows_the_rules(name: str) -> None:
    path = sample(name)
    model = model_of(path)
    ctx = context_of(path)
    rep = report_of(path)  # the session's, built with ctx (support/corpus.py)
    dev = ctx.ledger.primary
    assert dev is not None
    meta = model.meta
    shift = meta.origin_us - (meta.base_time_ns / 1000.0 if meta.base_time_ns else 0.0)
    raw = read_trace_bytes(path)
    doc = json.loads(splice(raw, annotation_events(rep, gaps_of(dev.gaps), shift, IDLE_CAUSE_OF)))
    original = json.loads(raw)
    assert len(doc["traceEvents"]) > len(original["traceEvents"])
    assert {k: v for k, v in doc.items() if k != "traceEvents"} == {
        k: v for k, v in original.items() if k != "traceEvents"
    }
    ours = check_chrome_trace(doc)
    phases = {e["ph"] for e in ours}
    assert {"X", "C", "b", "e", "M"} <= phases  # gaps and steps, counters, findings (async), names
    if name == "power_gemm":
        assert any(e["ph"] == "C" and e["name"] == "SM clock (MHz)" for e in ours)
    # The idle slices sit where the trace's own GPU is idle: no kernel of the device
    # overlaps one of them (same clock as the trace's ts, to the shift's 0.25 µs).
    kernels = [e for e in original["traceEvents"] if e.get("cat") == "kernel" and e.get("ph") == "X"]
    starts = np.array([k["ts"] for k in kernels], dtype=float)
    ends = starts + np.array([k["dur"] for k in kernels], dtype=float)
    gaps = [e for e in ours if e["ph"] == "X" and e["cat"] == "tracelens.idle"]
    assert gaps
    for g in gaps[:500]:
        inside = (starts < g["ts"] + g["dur"] - SHIFT_SLACK_US) & (ends > g["ts"] + SHIFT_SLACK_US)
        assert not inside.any(), g
    # The findings' spans are titled by the findings, in the report's order.
    titles = [e["name"] for e in ours if e["ph"] == "b" and e["name"][:1].isdigit()]
    assert titles and titles[0].startswith("1. [")


def test_splice_keeps_every_other_byte() -> None:
    ev = [{"ph": "i", "pid": PID, "tid": 0, "ts": 1, "name": "x", "s": "g"}]
    plain = b'{"schemaVersion": 1, "traceEvents": [{"ph": "X", "ts": 1, "dur": 2}], "x": 1}'
    out = splice(plain, ev)
    assert json.loads(out)["traceEvents"][0]["name"] == "x" and out.endswith(
        b'{"ph": "X", "ts": 1, "dur": 2}], "x": 1}'
    )
    # The key inside a string (escaped quotes) is not the array; an empty array; a bare list.
    tricky = b'{"note": "see \\"traceEvents\\": [ here", "traceEvents": []}'
    assert json.loads(splice(tricky, ev))["traceEvents"] == ev
    assert json.loads(splice(b'[{"ph": "X", "ts": 0, "dur": 1}]', ev))[0] == ev[0]
    with pytest.raises(ValueError):
        splice(b'{"events": []}', ev)


@pytest.mark.slow
def test_cli_writes_gzip_and_capture_default(tmp_path: Path) -> None:
    out = cli("report", sample("host_sync_mask"), "--perfetto", tmp_path / "t.json.gz", "--json", tmp_path / "r.json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(gzip.decompress((tmp_path / "t.json.gz").read_bytes()))
    check_chrome_trace(doc)
    assert "t.json.gz" in out.stdout
    plain = cli(
        "report", sample("host_sync_mask"), "--perfetto", tmp_path / "t.json", "-q", "--json", tmp_path / "s.json"
    )
    assert plain.returncode == 0 and json.loads((tmp_path / "t.json").read_text())["traceEvents"]


@pytest.mark.slow
@pytest.mark.skipif(not REAL_TRACES, reason="real traces not found")
def test_2021_trace_without_device_properties() -> None:
    """A 2021 trace (cat "Kernel", no deviceProperties) annotates as well: through the
    CLI's own step (test_cli_writes_gzip_and_capture_default runs the command; a process
    of its own here took 4 CPU s for the report the session already has)."""
    trace = next(p for p in REAL_TRACES if p.name == "worker0.pt.trace.json.gz")
    data = _annotated_trace(trace, report_of(trace), context_of(trace), no_redaction, None)
    ours = check_chrome_trace(json.loads(data))
    assert any(e["ph"] == "X" and e.get("cat") == "tracelens.idle" for e in ours)
