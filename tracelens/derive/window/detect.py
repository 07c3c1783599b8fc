"""Detected iterations, for a trace without step marks: the loop found in the device's
sequence of kernels, copies, memsets and blocking syncs (or the busiest thread's
top-level ops), by autocorrelation and anchors, or between long idle gaps (the package
docstring gives the rules).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracelens.derive.window.spans import Iterations, StepSpan, Window, _plural, _trace_start
from tracelens.derive.window.startup import _make
from tracelens.derive.window.steps import _split_warmup
from tracelens.domain import PROFILER_FRAMES, SYNC_APIS
from tracelens.model.schema import Kind
from tracelens.model.trace import TraceModel

#: Detected iterations left after excluding a warm-up: the repetition itself showed the
#: steady state, so one clean iteration beats a window that is 99% warm-up (HTA's AlexNet
#: benchmark: a 12.8 s warm-up forward and one 27 ms measured forward).
MIN_DETECTED_KEPT = 1


#: At least this many repetitions make a loop.
MIN_ITERATIONS = 2


#: Random sign projections for the name autocorrelation: the noise on a lag's match
#: count is about sqrt(n / dims), under 1% of n for n >= 1,300 tokens; the candidates
#: it proposes are then counted exactly.
PROJECTION_DIMS = 8


#: Candidate periods measured exactly (the best lags of the approximate score).
CANDIDATE_LAGS = 16


#: A stretch "repeats" where at least this share of its tokens equal the token one
#: period later (averaged over a period): tolerates one-off kernels and a few swaps
#: between streams.
REPEAT_MIN_SHARE = 0.5


#: Tokens a match may be displaced by (one-off kernels, or fewer, in one iteration than
#: in the next).
FUZZY_SHIFT = 2


#: ... but only one shift per this many tokens of period: in a short period, a token a
#: few places away is just another token of the same iteration.
FUZZY_MIN_PERIOD_PER_SHIFT = 10


#: Weight of a match one or two tokens off against an exact one when periods compete.
SHIFTED_MATCH_WEIGHT = 0.5


#: The repeating stretch must cover at least this share of the tokens of the trace
#: (or MIN_ITERATIONS periods, whichever is more) to be the steady state; less is
#: incidental (a sweep that repeats one shape twice).
MIN_STRETCH_SHARE = 0.3


#: Stretches within this share of the longest are about as long (harmonics 2p, 3p cover
#: the same stretch as p): the one with most exact matches wins among them.
LONGER_PERIOD_MIN_GAIN = 0.05


#: Anchor candidates followed beyond the repeating stretch.
ANCHORS_FOLLOWED = 16


#: An anchor's occurrences may be this far (share of the period) from even spacing.
ANCHOR_SPACING_TOLERANCE = 0.5


#: A last iteration shorter than this share of the median one is cut off by the end of
#: the trace: not a whole iteration.
LAST_ITERATION_MIN_SHARE = 0.8


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


#: Iteration boundaries may move back this many tokens from the anchor to where the loop
#: turns over (most idle time before the same token in every iteration).
PHASE_REFINE_TOKENS = 8


#: The first detected iteration opens at most this many times the median host lead
#: (opening to first launch) of the others before its first launch.
FIRST_LEAD_FACTOR = 1.25


#: An anchor "opens the stretch" when its first occurrence is this close to its start.
PHASE_SLACK_SHARE = 0.02


PHASE_SLACK_TOKENS = 2


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
    what = seq.what
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
            bounds, period, what = by_gaps, round(seg), f"{seq.what} between long idle gaps"
    inner = ""
    if bounds is by_names and found is not None:
        stepped = _outer_period(model, seq, period, found[1], found[2])
        if stepped is not None:
            k = round((stepped[1] - stepped[0]) / max(period, 1))
            body = seq.codes[stepped[0] : stepped[0] + period]
            kernels = int((body < seq.sync_from).sum()) if seq.sync_from >= 0 else period
            inner = (
                f"{k} repeats of a body of {_plural(kernels, 'kernel')} ({k} layers or rounds of one step, "
                "which turns over at its longest host gap)"
            )
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
    return Iterations(tuple(spans), period, n, bounds[-1] - bounds[0], what, inner or _inner_body(seq, bounds))


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


def _inner_body(seq: _Tokens, bounds: list[int]) -> str:
    """What the outermost period holds when its own tokens repeat (a generate call of 24
    decode passes, each ending in a host sync), in words; "" when nothing repeats."""
    lengths = np.diff(bounds)
    i = int(np.argsort(lengths)[len(lengths) // 2])
    body = seq.codes[bounds[i] : bounds[i + 1]]
    found = _find_repetition(body) if len(body) >= 2 * MIN_ITERATIONS else None
    if found is None or found[2] - found[1] < INNER_MIN_COVER * len(body):
        return ""
    period, lo, hi = found
    repeats = round((hi - lo) / period)
    kernels = int((body[lo : lo + period] < seq.sync_from).sum()) if seq.sync_from >= 0 else period
    ends_in_sync = seq.sync_from >= 0 and bool((body[lo : lo + period] >= seq.sync_from).any())
    return f"{repeats} repeats of a body of {kernels} kernels" + (
        ", each with a host sync (in a generation loop: one token each)" if ends_in_sync else ""
    )


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
    what: str
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
            codes, ts, launch, launch_ts, prev_launch, work_end, idle, host_gap, first, "kernels and syncs", n_names
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
    return _Tokens(codes, ts, none, ts, prev, end, idle, np.zeros(len(ts)), 0, "top-level ops")


def _openings(model: TraceModel, seq: _Tokens, idx: np.ndarray) -> np.ndarray:
    """Host start of iterations opening at tokens `idx` (increasing). An iteration cannot
    open after its first kernel started, and openings keep the tokens' order (a launch
    the trace links wrongly must not send one back)."""
    if seq.what == "top-level ops":
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


def _find_repetition(codes: np.ndarray) -> tuple[int, int, int] | None:
    """(period, lo, hi): the period whose repeating stretch [lo, hi) of tokens is longest."""
    n = len(codes)
    max_lag = n // MIN_ITERATIONS
    if max_lag < 1:
        return None
    matches = _lag_matches(codes, max_lag)
    share = matches / (n - np.arange(max_lag + 1))
    k = min(CANDIDATE_LAGS, max_lag)
    # the best lags by share (a loop after a long set-up) and by count (a loop whose
    # iterations hold a shorter repetition, layers in a forward)
    lags = {int(x) + 1 for x in np.argsort(-share[1:], kind="stable")[:k]}
    lags |= {int(x) + 1 for x in np.argsort(-matches[1:], kind="stable")[:k]}
    found: list[tuple[int, int, int, float]] = []  # (period, lo, hi, match score)
    for p in sorted(lags):
        lo, hi, fuzzy = _longest_repeat(codes, p)
        if hi - lo < max(MIN_ITERATIONS * p, MIN_STRETCH_SHARE * n):
            continue
        exact = int(np.count_nonzero(codes[lo : hi - p] == codes[lo + p : hi]))
        found.append((p, lo, hi, exact + SHIFTED_MATCH_WEIGHT * (fuzzy - exact)))
    if not found:
        return None
    # The longest stretch. Among stretches about as long, the best matches, exact ones
    # counting more than shifted ones: the fundamental period beats its harmonics (2p
    # overlaps one period less; 3p plus a few one-off kernels matches less exactly) and
    # layers inside a step (their stretch matches less at every step's head and tail),
    # and a lag that matches alternating kernels one token off is not a period.
    longest = max(hi - lo for _, lo, hi, _ in found)
    tied = [f for f in found if f[2] - f[1] >= (1 - LONGER_PERIOD_MIN_GAIN) * longest]
    p, lo, hi, _ = max(tied, key=lambda f: (f[3], -f[0]))
    return p, lo, hi


def _fuzzy_shift(p: int) -> int:
    return min(FUZZY_SHIFT, p // FUZZY_MIN_PERIOD_PER_SHIFT)


def _lag_matches(codes: np.ndarray, max_lag: int) -> np.ndarray:
    """Approximate number of tokens equal to the token `lag` later, for lag 0..max_lag.

    Each code gets a random sign per projection; the autocorrelation of the signs counts
    equal pairs exactly (their product is 1) plus zero-mean noise for unequal ones (about
    sqrt(n / PROJECTION_DIMS)), and costs one FFT per projection instead of one per
    distinct name."""
    n = len(codes)
    rng = np.random.default_rng(0)
    signs = rng.choice(np.array([-1.0, 1.0]), size=(int(codes.max()) + 1, PROJECTION_DIMS))
    z = signs[codes]
    size = 1 << int(np.ceil(np.log2(2 * n)))
    f = np.fft.rfft(z, size, axis=0)
    ac: np.ndarray = np.fft.irfft(f * np.conj(f), size, axis=0)[: max_lag + 1].mean(axis=1)
    return ac


def _longest_repeat(codes: np.ndarray, p: int) -> tuple[int, int, int]:
    """[lo, hi): the longest stretch of tokens whose share of matches one period later,
    averaged over a period, is at least REPEAT_MIN_SHARE. A token matches when it equals
    one of the tokens p-FUZZY_SHIFT .. p+FUZZY_SHIFT later: a one-off kernel in one
    iteration shifts the rest by one, which an exact lag counts as a period of misses.
    Also returns the number of matching tokens inside the stretch."""
    n = len(codes)
    if n - p < p:
        return 0, 0, 0
    match = np.zeros(n - p, dtype=bool)
    shift = _fuzzy_shift(p)
    for d in range(-shift, shift + 1):
        lag = p + d
        if lag <= 0 or lag >= n:
            continue
        hit = codes[: n - lag] == codes[lag:]
        m = min(len(hit), len(match))
        match[:m] |= hit[:m]
    w = p
    csum = np.concatenate([[0.0], np.cumsum(match)])
    share = (csum[w:] - csum[:-w]) / w  # share[i] = mean(match[i:i+w])
    good = share >= REPEAT_MIN_SHARE
    if not good.any():
        return 0, 0, 0
    lo, hi = _longest_true_run(good)
    # The windows [lo, hi) cover match indices lo .. hi-2+w; the stretch runs from the
    # first token that matches to the partner of the last one.
    m_hi = min(hi - 1 + w, len(match))
    hits = np.flatnonzero(match[lo:m_hi])
    if not len(hits):
        return 0, 0, 0
    return lo + int(hits[0]), min(lo + int(hits[-1]) + 1 + p, n), len(hits)


def _longest_true_run(mask: np.ndarray) -> tuple[int, int]:
    """[start, end) of the longest run of True."""
    edges = np.diff(np.concatenate([[0], mask.astype(np.int8), [0]]))
    starts = np.flatnonzero(edges == 1)
    ends = np.flatnonzero(edges == -1)
    i = int(np.argmax(ends - starts))
    return int(starts[i]), int(ends[i])


def _anchor_bounds(codes: np.ndarray, gap_before: np.ndarray, p: int, lo: int, hi: int, floor: int = 0) -> list[int]:
    """Token indices where iterations start, plus the end of the last whole iteration.

    Cut at a name (or pair of names) that occurs once per period, evenly spaced, inside
    the repeating stretch [lo, hi), followed back and forth beyond it while it keeps its
    spacing (a first iteration that differs still starts with the same kernel). Of the
    candidates, the one giving the most whole iterations wins, then the one after the most
    idle time (where a loop turns over: data loading, a sync, the optimizer's Python)."""
    expected = (hi - lo) / p
    slack = PHASE_SLACK_SHARE * p + PHASE_SLACK_TOKENS
    width = int(codes.max()) + 1
    keys = (codes, np.concatenate([codes[:-1] * width + codes[1:], [-1]]))
    best: tuple[int, int, int, float, list[int]] | None = None
    for key in keys:
        cands = _anchor_candidates(key[lo:hi], p, expected)
        # followed beyond the stretch: only the most promising (they are many in a long
        # iteration, and following one costs a pass over the sequence)
        cands.sort(
            key=lambda g: (len(g), int(g[0] <= slack), -int(g[0]), float(gap_before[lo + g].sum())), reverse=True
        )
        for pos in cands[:ANCHORS_FOLLOWED]:
            starts = _extend(key, [lo + int(i) for i in pos], p, floor)
            bounds = _close_last(starts, len(codes), hi)
            whole = len(bounds) - 1
            # A loop's first kernel opens the repeating stretch (the profiler and the
            # script's loop both start at an iteration boundary), so an anchor there
            # beats one after more idle time (a blocking copy in mid-step, rank0.json);
            # among anchors at the start, the earliest (the loop's first kernel).
            at_start = starts[0] <= lo + slack
            score = (whole, int(at_start), -starts[0] if at_start else 0, float(np.median(gap_before[starts])))
            if best is None or score > best[:4]:
                best = (*score, bounds)
    if best is not None:
        return _refine_phase(codes, gap_before, best[4], floor)
    return _close_last(list(range(lo, hi - p + 1, p)), len(codes), hi)


def _refine_phase(codes: np.ndarray, gap_before: np.ndarray, bounds: list[int], floor: int) -> list[int]:
    """Move every boundary back by the same few tokens when the tokens there agree across
    iterations and follow more idle time: the anchor is a name unique per iteration,
    the loop turns over a few tokens earlier (the batch's copies before the first conv)."""
    n = len(codes)
    starts = np.asarray(bounds[:-1])
    # the median: a warm-up iteration's long first call must not move every boundary
    best_d, best_score = 0, float(np.median(gap_before[starts]))
    # Only back: the anchor already opens the repeating stretch, and what follows it
    # (torch.compile's guards before a compiled kernel) can idle longer than the turn.
    for d in range(-PHASE_REFINE_TOKENS, 0):
        moved = starts + d
        if moved[0] < floor or moved[-1] >= n or len(np.unique(codes[moved])) != 1:
            continue
        score = float(np.median(gap_before[moved]))
        if score > best_score:
            best_d, best_score = d, score
    if best_d == 0:
        return bounds
    # moved back, the last iteration keeps its end: the trace's last tokens are its tail,
    # not the head of an iteration that never came
    return [int(x) for x in starts + best_d] + [bounds[-1]]


def _anchor_candidates(key: np.ndarray, p: int, expected: float) -> list[np.ndarray]:
    """Positions of each key that occurs about once per period, evenly spaced."""
    order = np.argsort(key, kind="stable")
    sk = key[order]
    first = np.concatenate([[0], np.flatnonzero(np.diff(sk)) + 1])
    counts = np.diff(np.concatenate([first, [len(sk)]]))
    lo_count, hi_count = max(MIN_ITERATIONS, int(np.floor(expected)) - 1), int(np.ceil(expected)) + 1
    ok = (counts >= lo_count) & (counts <= hi_count) & (sk[first] >= 0)
    out = []
    for a, c in zip(first[ok].tolist(), counts[ok].tolist(), strict=True):
        g = order[a : a + c]  # positions, increasing (stable sort)
        d = np.diff(g)
        if d.min() < (1 - ANCHOR_SPACING_TOLERANCE) * p or d.max() > (1 + ANCHOR_SPACING_TOLERANCE) * p:
            continue
        out.append(g)
    return out


def _extend(key: np.ndarray, starts: list[int], p: int, floor: int) -> list[int]:
    """Follow the anchor beyond the stretch while its occurrences keep the spacing (not
    back before `floor`)."""
    where = np.flatnonzero(key == key[starts[0]])
    where = where[where >= floor]
    spacing = float(np.median(np.diff(starts))) if len(starts) > 1 else float(p)
    lo_d, hi_d = (1 - ANCHOR_SPACING_TOLERANCE) * spacing, (1 + ANCHOR_SPACING_TOLERANCE) * spacing
    out = list(starts)
    while True:
        prev = where[(where < out[0]) & (out[0] - where >= lo_d) & (out[0] - where <= hi_d)]
        if not len(prev):
            break
        out.insert(0, int(prev[np.argmin(np.abs(out[0] - prev - spacing))]))
    while True:
        nxt = where[(where > out[-1]) & (where - out[-1] >= lo_d) & (where - out[-1] <= hi_d)]
        if not len(nxt):
            break
        out.append(int(nxt[np.argmin(np.abs(nxt - out[-1] - spacing))]))
    return out


def _close_last(starts: list[int], n: int, hi: int) -> list[int]:
    """Starts plus the end of the last iteration when it is whole (it reaches at least
    LAST_ITERATION_MIN_SHARE of the median spacing before the sequence ends)."""
    if not starts:
        return []
    spacing = float(np.median(np.diff(starts))) if len(starts) > 1 else float(hi - starts[0])
    end = min(starts[-1] + round(spacing), n)
    if spacing > 0 and end - starts[-1] >= LAST_ITERATION_MIN_SHARE * spacing:
        return [*starts, end]
    return starts


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
    kept, excluded, why = _split_warmup(model, _cap_last(model, found.spans), MIN_DETECTED_KEPT)
    start, end = kept[0].start_us, kept[-1].end_us
    reason = (
        f"no step marks: {_plural(len(found.spans), 'iteration')} of a loop found in the trace's {found.what} "
        f"({found.period_tokens} per iteration, repeating over {found.stretch_tokens} of {found.tokens})"
        + (f"; one iteration holds {found.inner}" if found.inner else "")
        + (f"; iteration 0 left out as warm-up ({why})" if excluded else "")
        + "."
    )
    return _make(model, t0, start, end, "detected", kept, excluded, reason)
