"""Detected iterations, for a trace without step marks: the loop found in the device's
sequence of kernels, copies, memsets and blocking syncs (or the busiest thread's
top-level ops), by autocorrelation and anchors, or between long idle gaps (the package
docstring gives the rules).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracelens.derive.window.repeat import (
    LONGER_PERIOD_MIN_GAIN,
    MIN_ITERATIONS,
    _anchor_bounds,
    _close_last,
    _find_repetition,
    _longest_true_run,
)
from tracelens.derive.window.spans import (
    InnerBody,
    Iterations,
    IterationsChosen,
    StepSpan,
    TokenKind,
    Window,
    _trace_start,
)
from tracelens.derive.window.startup import _make
from tracelens.derive.window.steps import _split_warmup
from tracelens.domain import PROFILER_FRAMES, SYNC_APIS
from tracelens.model.schema import Kind
from tracelens.model.trace import TraceModel

#: Detected iterations left after excluding a warm-up: the repetition itself showed the
#: steady state, so one clean iteration beats a window that is 99% warm-up (HTA's AlexNet
#: benchmark: a 12.8 s warm-up forward and one 27 ms measured forward).
MIN_DETECTED_KEPT = 1


#: A last detected iteration longer than this many median iterations holds what came
#: after the loop (teardown): it is cut there, or at the end of its GPU work if later.
LAST_ITERATION_MAX_SHARE = 1.5


#: Loops delimited by idle time (a sync or a data wait at each step's end): the long
#: gaps are those above the sharpest break (at least GAP_BREAK_MIN_RATIO) in the sorted
#: gap lengths, and longer than GAP_TOKEN_MIN_US (launch latency alone is 5-20 µs).
GAP_BREAK_MIN_RATIO = 3.0


GAP_TOKEN_MIN_US = 20.0


#: Gaps shorter than this are clock noise when taking ratios.
GAP_FLOOR_US = 1.0


#: An idle-delimited loop has at least this many tokens per iteration on average (fewer
#: is a host-bound stream of single kernels, not a loop).
MIN_TOKENS_PER_GAP_LOOP = 2


#: ... and at least this many iterations: two pieces are as likely two phases of a run
#: (power_gemm: random inputs, then zeros) as two steps.
MIN_GAP_LOOP_ITERATIONS = 3


#: Its pieces are regular when their token counts are within this share of the median.
GAP_LOOP_COUNT_TOLERANCE = 0.25


#: It wins over the names' period when its iterations are at least this many periods
#: long (the names repeat inside it) and it covers this share of the names' stretch.
LONGER_LOOP_FACTOR = 1.8


GAP_LOOP_MIN_COVER = 0.5


#: Both searches found the same loop when their periods agree within this share.
SAME_LOOP_TOLERANCE = 0.2


#: ... and then it wins only when it covers this much more (the anchors are phase-aligned).
GAP_LOOP_MORE_COVER = 1.25


#: The first detected iteration opens at most this many times the median host lead
#: (opening to first launch) of the others before its first launch.
FIRST_LEAD_FACTOR = 1.25


#: Breaks in the sorted gap lengths tried (the sharpest first).
GAP_BREAK_CANDIDATES = 8


def detect_iterations(model: TraceModel, device: int | None) -> Iterations | None:
    """Iterations of the loop that issued the device's work (or the host's top-level ops),
    or None when nothing repeats; ProfilerStep marks are not looked at."""
    seq = _token_sequence(model, device)
    if seq is None:
        return None
    codes, last_end, idle_before = seq.codes, seq.work_end, seq.idle
    n = len(codes)
    by_names: list[int] = []
    period = 0
    found = _find_repetition(codes)
    if found is not None:
        period, lo, hi = found
        lo = max(lo, seq.first_launched)
        if hi - lo >= MIN_ITERATIONS * period:
            bounds = _anchor_bounds(codes, idle_before + seq.host_gap, period, lo, hi, seq.first_launched)
            by_names = _launched(bounds, seq)
    by_gaps = _launched(_gap_bounds(idle_before), seq)
    by_gap_loop = False
    bounds = by_names
    if by_gaps:
        seg = float(np.median(np.diff(by_gaps)))
        covered = by_gaps[-1] - by_gaps[0]
        names_cover = by_names[-1] - by_names[0] if by_names else 0
        # The loop delimited by idle time (a sync or data wait every step) is the outer
        # loop when it is longer than the names' period: the names then repeat inside it
        # (the same few kernels every step). When both find the same loop, the one that
        # covers more of the trace wins.
        outer = seg >= LONGER_LOOP_FACTOR * period and covered >= GAP_LOOP_MIN_COVER * names_cover
        same = abs(seg - period) <= SAME_LOOP_TOLERANCE * max(period, 1) and covered > GAP_LOOP_MORE_COVER * names_cover
        if not by_names or outer or same:
            bounds, period, by_gap_loop = by_gaps, round(seg), True
    inner: InnerBody | None = None
    if bounds is by_names and found is not None:
        stepped = _outer_period(model, seq, period, found[1], found[2])
        if stepped is not None:
            k = round((stepped[1] - stepped[0]) / max(period, 1))
            body = seq.codes[stepped[0] : stepped[0] + period]
            kernels = int((body < seq.sync_from).sum()) if seq.sync_from >= 0 else period
            inner = InnerBody(k, kernels, False, turns_at_gap=True)
            bounds, period = stepped, stepped[1] - stepped[0]
    if len(bounds) < MIN_ITERATIONS + 1:
        return None
    first_ts = _openings(model, seq, np.asarray(bounds[:-1]))
    spans = []
    for i in range(len(bounds) - 1):
        a, b = bounds[i], bounds[i + 1]
        start = float(first_ts[i])
        end = float(first_ts[i + 1]) if i + 2 < len(bounds) else float(np.max(last_end[a:b]))
        spans.append(StepSpan(i, start, max(end, start)))
    inner = inner or _inner_body(seq, bounds)
    return Iterations(tuple(spans), period, n, bounds[-1] - bounds[0], seq.what, by_gap_loop, inner)


#: The outer step (issue 24 §1): an outer period of k inner periods must repeat at least
#: this many times ...
OUTER_MIN_ITERATIONS = 3


#: ... its boundary (the same token every k inner periods) must follow at least this much
#: idle time (GPU idle plus the host's gap between launches: the loop's own Python
#: between steps) in every outer iteration ...
OUTER_MIN_GAP_US = 20.0


#: ... and at least this many times the typical (median) gap before any other token of
#: the outer period. Measured on the sample traces: 1.64-181 where a step holds its
#: layers or rounds (diff_align_*, diff_kv_before, diff_sdpa_*, diff_graph_after, gemm_bf16),
#: at most 1.01 where the inner period already is the step (diff_loader_*, dyn_graph_break,
#: capture_train_loader, verdict_trainer).
OUTER_MIN_RATIO = 1.5


#: ... and it is not the profiler's own: torch.profiler grows its event buffers in blocks,
#: which stalls the host every power-of-two number of launches (plain_tiny_loop: 85-93 µs
#: outside any op every 512 kernels, its 60 iterations being 200 kernels each).
PROFILER_BLOCK_MIN_TOKENS = 256


def _outer_period(model: TraceModel, seq: _Tokens, p: int, lo: int, hi: int) -> list[int] | None:
    """Bounds of the outermost loop whose iterations are k >= 2 inner periods p, when every
    such iteration turns over at the same token after a gap that sets it apart (the
    user's step of 8 decode layers, or 50 rounds of tiny ops) and, where the trace has
    Python frames, a call starts there that starts at no other place of the iteration
    (the step's function, its record_function); None when no multiple does."""
    gaps = seq.idle + seq.host_gap
    lo = max(lo, seq.first_launched)
    n = hi - lo
    found: list[tuple[float, int, int]] = []  # (ratio, outer period, phase)
    for k in range(2, n // (OUTER_MIN_ITERATIONS * max(p, 1)) + 1):
        size = k * p
        if size >= PROFILER_BLOCK_MIN_TOKENS and size & (size - 1) == 0:
            continue
        reps = n // size
        m = gaps[lo : lo + reps * size].reshape(reps, size)
        weakest = m.min(axis=0)
        typical = np.median(m, axis=0)
        top = np.sort(typical)
        others = np.where(typical >= top[-1], top[-2], top[-1])
        ratio = weakest / np.maximum(others, GAP_FLOOR_US)
        c = int(np.argmax(ratio))
        if weakest[c] >= OUTER_MIN_GAP_US and ratio[c] >= OUTER_MIN_RATIO:
            found.append((float(ratio[c]), size, c))
    frames = _frame_starts(model)
    for _, size, c in sorted(found, reverse=True):
        starts = list(range(lo + c, hi, size))
        if frames is not None and not _distinct_call(seq, frames, starts, p):
            continue
        bounds = _close_last(starts, len(seq.codes), hi)
        if len(bounds) >= OUTER_MIN_ITERATIONS + 1:
            return bounds
    return None


#: A call "starts at no other place" when it starts before at most this share of the
#: iteration's other tokens of the same inner phase.
DISTINCT_CALL_MAX_SHARE = 0.1


def _frame_starts(model: TraceModel) -> tuple[np.ndarray, np.ndarray] | None:
    """(start times, name codes) of the trace's Python frames, sorted; None without any."""
    host = model.host
    py = np.flatnonzero(host["kind"].to_numpy() == Kind.PYTHON)
    if not len(py):
        return None
    ts = host["ts"].to_numpy(dtype=np.float64)[py]
    codes = host["name"].cat.codes.to_numpy()[py]
    o = np.argsort(ts, kind="stable")
    return ts[o], codes[o]


def _distinct_call(seq: _Tokens, frames: tuple[np.ndarray, np.ndarray], starts: list[int], p: int) -> bool:
    """Whether a Python call starts between the launch before each outer boundary and the
    boundary's own launch, every time, and at (almost) no other token of the same inner
    phase: the loop really turns over there (the profiler's periodic stall does not)."""
    f_ts, f_codes = frames
    n = len(seq.codes)

    def called(i: int) -> set[int]:
        if i <= 0 or i >= n:
            return set()
        a, z = seq.launch_ts[i - 1], seq.launch_ts[i]
        s, e = np.searchsorted(f_ts, a, side="right"), np.searchsorted(f_ts, z, side="right")
        return set(f_codes[s:e].tolist())

    at = [called(i) for i in starts if 0 < i < n]
    if not at:
        return False
    common = set.intersection(*at)
    if not common:
        return False
    size = starts[1] - starts[0] if len(starts) > 1 else p
    others = [called(i + j * p) for i in starts for j in range(1, size // max(p, 1))]
    if not others:
        return True
    return any(sum(c in o for o in others) <= DISTINCT_CALL_MAX_SHARE * len(others) for c in common)


#: An iteration "holds a repeating body" when the body's repeats cover this share of it.
INNER_MIN_COVER = 0.8


def _inner_body(seq: _Tokens, bounds: list[int]) -> InnerBody | None:
    """What the outermost period holds when its own tokens repeat (a generate call of 24
    decode passes, each ending in a host sync); None when nothing repeats."""
    lengths = np.diff(bounds)
    i = int(np.argsort(lengths)[len(lengths) // 2])
    body = seq.codes[bounds[i] : bounds[i + 1]]
    found = _find_repetition(body) if len(body) >= 2 * MIN_ITERATIONS else None
    if found is None or found[2] - found[1] < INNER_MIN_COVER * len(body):
        return None
    period, lo, hi = found
    repeats = round((hi - lo) / period)
    kernels = int((body[lo : lo + period] < seq.sync_from).sum()) if seq.sync_from >= 0 else period
    ends_in_sync = seq.sync_from >= 0 and bool((body[lo : lo + period] >= seq.sync_from).any())
    return InnerBody(repeats, kernels, ends_in_sync)


def _launched(bounds: list[int], seq: _Tokens) -> list[int]:
    """Bounds without iterations that start before the trace's first launch."""
    kept = [b for b in bounds if b >= seq.first_launched]
    return kept if len(kept) >= MIN_ITERATIONS + 1 else []


@dataclass(frozen=True)
class _Tokens:
    codes: np.ndarray  # name code per token, in GPU (or host) order
    ts: np.ndarray  # when the token starts (GPU, or host for ops)
    launch: np.ndarray  # host row that launched it (-1: none)
    launch_ts: np.ndarray  # host start of that call
    prev_launch: np.ndarray  # latest launch of the tokens before it
    work_end: np.ndarray  # end of the token's GPU work and of its launch call
    idle: np.ndarray  # GPU idle time just before the token
    host_gap: np.ndarray  # host time between this token's launch and the previous one's
    first_launched: int  # first token whose launch the trace holds
    what: TokenKind
    sync_from: int = -1  # codes from here on are host syncs (-1: none)


def _token_sequence(model: TraceModel, device: int | None) -> _Tokens | None:
    """The device's activity in GPU order, else the busiest thread's top-level ops."""
    act = model.gpu_activity()
    if device is not None and len(act):
        act = act[act["device"] == device]
    host = model.host
    h_ts = host["ts"].to_numpy(dtype=np.float64)
    h_end = host["end"].to_numpy(dtype=np.float64)
    if len(act) >= MIN_ITERATIONS and len(host):
        act = act.sort_values("ts", kind="stable")
        codes = act["name"].cat.codes.to_numpy().astype(np.int64)
        ts = act["ts"].to_numpy(dtype=np.float64)
        end = act["end"].to_numpy(dtype=np.float64)
        launch = act["launch"].to_numpy()
        has = launch >= 0
        li = np.clip(launch, 0, None)
        # Kernels with no launch in the trace: launched at its start as far as it tells.
        launch_ts = np.where(has, h_ts[li], _trace_start(model))
        syncs = _sync_rows(model)
        if len(syncs):
            # sync tokens: coded after every name, placed at the sync's return, launched
            # "by" themselves (so an iteration cut there starts at the sync's call)
            s_codes = len(act["name"].cat.categories) + host["name"].cat.codes.to_numpy()[syncs].astype(np.int64)
            codes = np.concatenate([codes, s_codes])
            ts = np.concatenate([ts, h_end[syncs]])
            end = np.concatenate([end, h_end[syncs]])
            launch = np.concatenate([launch, syncs])
            has = np.concatenate([has, np.ones(len(syncs), dtype=bool)])
            li = np.clip(launch, 0, None)
            launch_ts = np.concatenate([launch_ts, h_ts[syncs]])
            o = np.argsort(ts, kind="stable")
            codes, ts, end, launch, li, launch_ts = (x[o] for x in (codes, ts, end, launch, li, launch_ts))
            has = has[o]
        prev_launch = np.concatenate([[-np.inf], np.maximum.accumulate(launch_ts)[:-1]])
        work_end = np.maximum(end, np.where(has, h_end[li], end))
        run_end = np.maximum.accumulate(end)
        idle = np.concatenate([[0.0], np.clip(ts[1:] - run_end[:-1], 0, None)])
        host_gap = np.concatenate([[0.0], np.clip(launch_ts[1:] - prev_launch[1:], 0, None)])
        # Kernels queued before the trace began (a GPU-bound loop runs far behind its
        # host: 968 of resnet_act_checkpoint's) belong to iterations the trace does not
        # hold: they help find the period, but no iteration starts among them.
        first = int(np.argmax(has)) if has.any() else 0
        n_names = len(act["name"].cat.categories)
        return _Tokens(
            codes, ts, launch, launch_ts, prev_launch, work_end, idle, host_gap, first, "kernels_and_syncs", n_names
        )
    ops = _top_level_ops(model)
    if len(ops) < MIN_ITERATIONS:
        return None
    codes = ops["name"].cat.codes.to_numpy().astype(np.int64)
    ts = ops["ts"].to_numpy(dtype=np.float64)
    end = ops["end"].to_numpy(dtype=np.float64)
    run_end = np.maximum.accumulate(end)
    idle = np.concatenate([[0.0], np.clip(ts[1:] - run_end[:-1], 0, None)])
    none = np.full(len(ts), -1)
    prev = np.concatenate([[-np.inf], ts[:-1]])
    return _Tokens(codes, ts, none, ts, prev, end, idle, np.zeros(len(ts)), 0, "top_level_ops")


def _openings(model: TraceModel, seq: _Tokens, idx: np.ndarray) -> np.ndarray:
    """Host start of iterations opening at tokens `idx` (increasing). An iteration cannot
    open after its first kernel started, and openings keep the tokens' order (a launch
    the trace links wrongly must not send one back)."""
    if seq.what == "top_level_ops":
        return seq.ts[idx].astype(np.float64)
    launch, launch_ts, prev = seq.launch[idx], seq.launch_ts[idx], seq.prev_launch[idx].copy()
    raw = _iteration_openings(model, launch, launch_ts, prev)
    if len(idx) > MIN_ITERATIONS and not np.isfinite(prev[0]):
        # The first iteration has no kernel before it to bound its opening: give it the
        # host lead the other iterations have before their first launch (a DataLoader's
        # batch, the loop body's Python), FIRST_LEAD_FACTOR times over at most.
        lead = float(np.median(launch_ts[1:] - raw[1:]))
        if lead > 0:
            prev[0] = launch_ts[0] - FIRST_LEAD_FACTOR * lead
            raw[0] = _iteration_openings(model, launch[:1], launch_ts[:1], prev[:1])[0]
    out: np.ndarray = np.maximum.accumulate(np.minimum(raw, seq.ts[idx]))
    return out


def _iteration_openings(
    model: TraceModel, launch: np.ndarray, launch_ts: np.ndarray, prev_launch: np.ndarray
) -> np.ndarray:
    """Host time at which an iteration opening at each token starts: the first top-level
    host range or Python frame of the launching thread that began after the previous
    token's launch (the loop body's Python, a DataLoader's __next__, the forward's first
    op; a conv whose cuDNN search runs seconds before its kernel), never before that
    previous launch, so iterations stay in order."""
    host = model.host
    out = launch_ts.copy()
    kind = host["kind"].to_numpy()
    idx = np.arange(len(host))
    top = ((host["range_root"].to_numpy() == idx) & ((kind == Kind.CPU_OP) | (kind == Kind.USER_ANNOTATION))) | (
        kind == Kind.PYTHON
    )
    if not top.any():
        return out
    thread = host["pid"].to_numpy().astype(np.int64) * 1_000_003 + host["tid"].to_numpy().astype(np.int64)
    t_ts = host["ts"].to_numpy(dtype=np.float64)
    has = np.flatnonzero(launch >= 0)
    if not len(has):
        return out
    # rows sorted by (thread, ts) so that one searchsorted finds each token's candidate
    top_rows = np.flatnonzero(top)
    order = np.lexsort((t_ts[top_rows], thread[top_rows]))
    top_rows = top_rows[order]
    key_thread = thread[top_rows]
    key_ts = t_ts[top_rows]
    tok_thread = thread[launch[has]]
    lo_ts = prev_launch[has]
    # first top-level row on the same thread with ts > previous launch
    left = np.searchsorted(key_thread, tok_thread, side="left")
    right = np.searchsorted(key_thread, tok_thread, side="right")
    key_end = host["end"].to_numpy(dtype=np.float64)[top_rows]
    cats = host["name"].cat.categories
    prof_cat = np.fromiter((str(c).startswith(PROFILER_FRAMES) for c in cats), dtype=bool, count=len(cats))
    codes = host["name"].cat.codes.to_numpy()[top_rows]
    key_prof = (codes >= 0) & prof_cat[np.clip(codes, 0, None)] if len(cats) else np.zeros(len(top_rows), bool)
    cand = np.full(len(has), np.inf)
    for j in range(len(has)):
        a, b = int(left[j]), int(right[j])
        if a == b or not np.isfinite(lo_ts[j]):
            continue
        k = a + int(np.searchsorted(key_ts[a:b], lo_ts[j], side="right"))
        # torch.profiler's own step() closes the previous iteration: open after it
        # (at least one row on: a zero-length frame ends where it starts, and searching
        # for its end found it again, forever: issue 29's hang on zero durations).
        while k < b and key_prof[k]:
            k = max(k + 1, a + int(np.searchsorted(key_ts[a:b], key_end[k], side="left")))
        if k < b:
            cand[j] = key_ts[k]
    ok = cand <= launch_ts[has]
    out[has[ok]] = cand[ok]
    return out


def _sync_rows(model: TraceModel) -> np.ndarray:
    """Host rows of blocking runtime/driver calls, by position."""
    host = model.host
    kind = host["kind"].to_numpy()
    call = (kind == Kind.RUNTIME) | (kind == Kind.DRIVER)
    cats = host["name"].cat.categories
    is_sync = np.fromiter((str(c) in SYNC_APIS for c in cats), dtype=bool, count=len(cats))
    codes = host["name"].cat.codes.to_numpy()
    ok = call & (codes >= 0) & is_sync[np.clip(codes, 0, None)] if len(cats) else np.zeros(len(host), bool)
    return np.flatnonzero(ok)


def _top_level_ops(model: TraceModel) -> pd.DataFrame:
    """Outermost CPU ops of the busiest thread, in time order."""
    host = model.host
    if host.empty:
        return host
    idx = np.arange(len(host))
    top = host[(host["kind"].to_numpy() == Kind.CPU_OP) & (host["op_root"].to_numpy() == idx)]
    if top.empty:
        return top
    key = top["pid"].astype(np.int64) * 1_000_003 + top["tid"].astype(np.int64)
    busiest = key.value_counts().index[0]
    return top[key == busiest].sort_values("ts", kind="stable")


def _gap_bounds(idle: np.ndarray) -> list[int]:
    """Iteration starts (plus the end) where the loop is delimited by long GPU idle gaps,
    [] when there is no such loop. Each sharp break in the sorted gap lengths is a
    candidate threshold; the pieces between the gaps above it must be regular (similar
    token counts); the threshold whose regular run covers the most tokens wins, the
    finer one on a tie (a phase change is a break too, but its pieces hold many steps)."""
    n = len(idle)
    gaps = idle[1:]
    kmax = min(len(gaps), n // MIN_TOKENS_PER_GAP_LOOP)
    if kmax < MIN_ITERATIONS:
        return []
    top = np.sort(gaps)[::-1][: kmax + 1]
    ratio = top[:-1] / np.maximum(top[1:], GAP_FLOOR_US)
    ratio[top[:-1] < GAP_TOKEN_MIN_US] = 0.0
    best: tuple[int, int, list[int]] | None = None
    for k in np.argsort(-ratio, kind="stable")[:GAP_BREAK_CANDIDATES]:
        if ratio[k] < GAP_BREAK_MIN_RATIO:
            break
        starts = np.unique(np.concatenate([[0], np.flatnonzero(idle >= top[k]), [n]]))
        counts = np.diff(starts)
        med = float(np.median(counts))
        regular = np.abs(counts - med) <= GAP_LOOP_COUNT_TOLERANCE * med
        if regular.sum() < MIN_ITERATIONS:
            continue
        lo, hi = _longest_true_run(regular)
        if hi - lo < MIN_GAP_LOOP_ITERATIONS:
            continue
        bounds = [int(x) for x in starts[lo : hi + 1]]
        cover = bounds[-1] - bounds[0]
        if (
            best is None
            or cover > best[0] * (1 + LONGER_PERIOD_MIN_GAIN)
            or (cover >= best[0] * (1 - LONGER_PERIOD_MIN_GAIN) and len(bounds) > best[1])
        ):
            best = (cover, len(bounds), bounds)
    return best[2] if best is not None else []


def _cap_last(model: TraceModel, spans: tuple[StepSpan, ...]) -> tuple[StepSpan, ...]:
    """The last detected iteration runs to wherever the next token would have been: after
    the loop that is teardown (destroy_process_group, joining workers, writing results),
    not an iteration. Cut it at LAST_ITERATION_MAX_SHARE of the median iteration, or at
    the end of the GPU work it holds if that is later."""
    if len(spans) < 3:
        return spans
    last = spans[-1]
    med = float(np.median([s.end_us - s.start_us for s in spans[:-1]]))
    limit = last.start_us + LAST_ITERATION_MAX_SHARE * med
    if last.end_us <= limit:
        return spans
    act = model.gpu_activity()
    inside = act[(act["ts"] >= last.start_us) & (act["ts"] < last.end_us)]
    gpu_end = float(inside["end"].max()) if len(inside) else last.start_us
    end = min(last.end_us, max(limit, gpu_end))
    return (*spans[:-1], StepSpan(last.index, last.start_us, end, last.warmup))


def _window_from_iterations(model: TraceModel, t0: float, found: Iterations) -> Window:
    kept, excluded, warmup = _split_warmup(model, _cap_last(model, found.spans), MIN_DETECTED_KEPT)
    start, end = kept[0].start_us, kept[-1].end_us
    why = IterationsChosen(
        len(found.spans),
        found.tokens_kind,
        found.by_gaps,
        found.period_tokens,
        found.stretch_tokens,
        found.tokens,
        found.inner,
        warmup,
    )
    return _make(model, t0, start, end, "detected", kept, excluded, why)
