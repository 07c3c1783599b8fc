"""`--perfetto`: the trace itself with tracelens' own tracks added, so that opening it in
Perfetto (ui.perfetto.dev) or chrome://tracing shows why the GPU was idle where it was.

The tracks live in one extra process, "tracelens", beside the trace's own:

- "GPU idle: cause" - one slice per idle gap of the analysed window, named by its ledger
  cause (host sync, launch overhead, host-bound, ...), on a thread of its own;
- "steps" - the steps (or detected iterations) of the window, with their busy share;
- one async track per finding, spanning the window, titled by the finding, with the
  gaps of its ledger cause as nested slices where it has one;
- counter tracks: the share of each ledger cause over time (the report's timeline) and,
  when the trace has them, NVML clock, power and temperature.

Perfetto's JSON importer rules kept here (and checked by tests/test_perfetto.py): every
event has `ph`, `pid`, `ts` in µs; complete slices (`X`) have `dur` >= 0, carry `tid`
and nest properly on their thread (the gaps and the steps are each disjoint); async
slices come as `b`/`e` pairs with one `cat` and `id`, each `e` after its `b`; counters
(`C`) carry only numbers in `args`; names of processes and threads are `M` events.

Like the other renderers this sees only finished data (the Report and the ledger's gap
table); splicing the events into the trace's bytes is `splice`, reading and writing the
files is tracelens.output's."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tracelens.render import format as fmt
from tracelens.render.causes import CAUSE_LABELS
from tracelens.report import Report

#: The pid of tracelens' process: far from real pids (Kineto uses the OS pid, GPUs use
#: small device numbers), so it cannot merge with one of the trace's own processes.
PID = 999_999_001
TID_GAPS, TID_STEPS = 1, 2
#: Gaps written per trace (the longest first): a launch-bound trace has 10^5 gaps of a
#: few µs, which would double the file and show as a grey smear anyway.
MAX_GAPS = 20_000
#: Gap slices nested under one finding's span.
MAX_FINDING_GAPS = 2_000


#: One nanosecond in the trace's unit (µs).
NS = 0.001


@dataclass(frozen=True)
class Gap:
    """One idle gap of the ledger (µs on the model's clock) and its cause."""

    start: float
    end: float
    cause: str


def _num(x: float) -> float:
    """A finite number for the JSON (Perfetto rejects NaN and Infinity)."""
    return round(float(x), 3) if math.isfinite(float(x)) else 0.0


def _dur(start: float, end: float) -> float:
    """The duration between two times, a hair short: trace times reach 1.6e15 µs (epoch
    µs in 2021 traces), where a double resolves 0.25 µs, and ~5e12 µs where it resolves
    1 ns, so `ts + dur` of one slice could land past the next slice's `ts`, which
    Perfetto's importer takes for improper nesting."""
    return max(round(end - start, 3) - max(NS, 2 * math.ulp(abs(end))), 0.0)


def annotation_events(
    report: Report, gaps: Sequence[Gap], shift_us: float, finding_causes: Mapping[str, str]
) -> list[dict[str, Any]]:
    """tracelens' events for the trace; `shift_us` turns the model's clock (µs from the
    first event) back into the trace's own `ts` values. The loader keeps the origin as an
    absolute epoch time, so the shift is good to about 0.25 µs (a double near 1.7e15).
    `finding_causes`: the ledger cause whose gaps each finding category explains (the
    analyzers' registry says: tracelens.analyzers.IDLE_CAUSE_OF); the gaps are nested
    under the finding's span."""
    ev: list[dict[str, Any]] = [
        {"ph": "M", "pid": PID, "tid": 0, "ts": 0, "name": "process_name", "args": {"name": "tracelens"}},
        {"ph": "M", "pid": PID, "tid": 0, "ts": 0, "name": "process_sort_index", "args": {"sort_index": -1}},
        {"ph": "M", "pid": PID, "tid": TID_GAPS, "ts": 0, "name": "thread_name", "args": {"name": "GPU idle: cause"}},
        {"ph": "M", "pid": PID, "tid": TID_STEPS, "ts": 0, "name": "thread_name", "args": {"name": "steps"}},
    ]

    def ts(t: float) -> float:
        return _num(t + shift_us)

    kept = sorted(gaps, key=lambda g: g.end - g.start, reverse=True)[:MAX_GAPS]
    for g in sorted(kept, key=lambda g: g.start):
        if g.end <= g.start:
            continue
        ev.append(
            {
                "ph": "X", "pid": PID, "tid": TID_GAPS, "ts": ts(g.start), "dur": _dur(ts(g.start), ts(g.end)),
                "name": CAUSE_LABELS.get(g.cause, g.cause), "cat": "tracelens.idle",
                "args": {"cause": g.cause, "idle": fmt.us(g.end - g.start)},
            }
        )  # fmt: skip
    last_end = -math.inf
    for s in report.gpu_time.steps:
        # Steps follow each other; a step's span may be clipped to the window and end a
        # hair after the next begins: each starts no earlier than the last one ended.
        t0, t1 = max(ts(s.start_us), last_end), ts(s.start_us + s.split.window_us)
        if t1 <= t0:
            continue
        last_end = t1
        busy = s.split.busy_us / s.split.window_us if s.split.window_us else 0.0
        ev.append(
            {
                "ph": "X", "pid": PID, "tid": TID_STEPS, "ts": t0, "dur": _dur(t0, t1),
                "name": f"step #{s.step}", "cat": "tracelens.step",
                "args": {"busy": fmt.pct(busy), **{CAUSE_LABELS.get(e.cause, e.cause): fmt.us(e.time_us)
                                                     for e in s.split.ledger if e.time_us > 0}},
            }
        )  # fmt: skip
    ev += _finding_events(report, gaps, ts, finding_causes)
    ev += _counter_events(report, ts)
    return ev


def _finding_events(
    report: Report, gaps: Sequence[Gap], ts: Any, finding_causes: Mapping[str, str]
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    start, end = report.gpu_time.window_start_us, report.gpu_time.window_end_us
    if end <= start:
        return out
    for i, f in enumerate(report.findings):
        cat = "tracelens.finding"
        name = f"{i + 1}. [{f.severity.value}] {f.category.value}: {fmt.short(f.title, 160)}"
        args = {
            "cost": f"{fmt.us(f.time_us)} ({fmt.pct(f.share)})",
            "expected gain": fmt.us(f.expected_gain_us),
            "what to change": f.advice,
        }
        out.append({"ph": "b", "pid": PID, "tid": 0, "ts": ts(start), "cat": cat, "id": i + 1, "name": name,
                    "args": args})  # fmt: skip
        cause = finding_causes.get(f.category.value)
        if cause is not None:
            mine = [g for g in gaps if g.cause == cause and g.end > g.start]
            mine = sorted(sorted(mine, key=lambda g: g.start - g.end)[:MAX_FINDING_GAPS], key=lambda g: g.start)
            label = CAUSE_LABELS.get(cause, cause)
            for g in mine:
                out.append({"ph": "b", "pid": PID, "tid": 0, "ts": ts(g.start), "cat": cat, "id": i + 1,
                            "name": label})  # fmt: skip
                out.append({"ph": "e", "pid": PID, "tid": 0, "ts": ts(g.end), "cat": cat, "id": i + 1,
                            "name": label})  # fmt: skip
        out.append({"ph": "e", "pid": PID, "tid": 0, "ts": ts(end), "cat": cat, "id": i + 1, "name": name})
    return out


def _counter_events(report: Report, ts: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    tl = report.timeline
    if tl is not None:
        n = len(next(iter(tl.by_cause.values()), ()))
        step = (tl.end_us - tl.start_us) / n if n else 0.0
        causes = [c for c, col in tl.by_cause.items() if any(v > 0 for v in col)]
        for i in range(n):
            out.append(
                {
                    "ph": "C", "pid": PID, "ts": ts(tl.start_us + i * step), "name": "GPU time by cause (%)",
                    "args": {CAUSE_LABELS.get(c, c): _num(100 * float(tl.by_cause[c][i])) for c in causes},
                }
            )  # fmt: skip
    cl = report.clocks
    if cl is not None and cl.sm_mhz:
        n = len(cl.sm_mhz)
        step = (cl.end_us - cl.start_us) / n
        for name, values in (("SM clock (MHz)", cl.sm_mhz), ("power (W)", cl.power_w), ("temperature (°C)", cl.temp_c)):
            for i, v in enumerate(values):
                if v == v:  # NaN: no sample there
                    out.append({"ph": "C", "pid": PID, "ts": ts(cl.start_us + (i + 0.5) * step), "name": name,
                                "args": {"value": _num(v)}})  # fmt: skip
    return out


def gaps_of(frame: Any) -> list[Gap]:
    """The ledger's gap table (start, end, cause) as Gaps."""
    if frame is None or len(frame) == 0:
        return []
    return [
        Gap(float(s), float(e), str(c))
        for s, e, c in zip(frame["start"].to_numpy(), frame["end"].to_numpy(), frame["cause"].to_numpy(), strict=True)
    ]


def splice(trace: bytes, events: Iterable[dict[str, Any]]) -> bytes:
    """The trace's JSON with `events` added at the front of its traceEvents array (or of
    the array itself, for a trace that is a bare list), every other byte unchanged: no
    parse and re-encode of a 50 MB file, no number or string rewritten."""
    body = json.dumps(list(events), ensure_ascii=False, separators=(",", ":"))[1:-1].encode()
    at = trace.index(b"[") + 1 if trace.lstrip().startswith(b"[") else _events_array(trace)
    rest = trace[at:].lstrip()
    joiner = b"" if not body or rest.startswith(b"]") else b","
    return trace[:at] + body + joiner + trace[at:]


def _events_array(trace: bytes) -> int:
    """The offset just after the `[` that opens the top-level "traceEvents" array. The key
    is found as a JSON key: quoted, not escaped (inside a string its quotes would be
    `\\"`), followed by a colon and the bracket."""
    key = b'"traceEvents"'
    pos = 0
    while True:
        pos = trace.find(key, pos)
        if pos < 0:
            raise ValueError("the trace has no traceEvents array")
        if pos == 0 or trace[pos - 1 : pos] != b"\\":
            after = trace[pos + len(key) :].lstrip()
            if after.startswith(b":") and after[1:].lstrip().startswith(b"["):
                return trace.index(b"[", pos + len(key)) + 1
        pos += len(key)
