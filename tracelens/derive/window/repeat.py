"""The repetition search over a sequence of name codes (derive/window/__init__.py gives
the rules): candidate periods from the autocorrelation, the longest stretch that matches
itself one period later, and the anchors that cut it into iterations. Arrays in, token
indices out: detect.py codes the trace and turns the indices into iterations."""

from __future__ import annotations

import numpy as np

#: At least this many repetitions make a loop.
MIN_ITERATIONS = 2
#: A last iteration shorter than this share of the median one is cut off by the end of
#: the trace: not a whole iteration.
LAST_ITERATION_MIN_SHARE = 0.8
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
#: Iteration boundaries may move back this many tokens from the anchor to where the loop
#: turns over (most idle time before the same token in every iteration).
PHASE_REFINE_TOKENS = 8
#: An anchor "opens the stretch" when its first occurrence is this close to its start.
PHASE_SLACK_SHARE = 0.02


PHASE_SLACK_TOKENS = 2


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
