"""power_throttle: the GPU ran its kernels below its maximum clock.

Under question 6 (raw compute). When a matmul-heavy program draws the power limit, the
voltage regulator lowers the clock to stay under it; how hard depends on the data
(bit flips cost switching power: random bf16 matrices throttle more than zeros). Needs
the NVML samples `tracelens capture` stores in the trace as counter events.

Cost model: the time the busy periods would have saved at the maximum SM clock,
busy_time x (1 - clock / max_clock). That is exact for compute-bound kernels and an
upper bound for memory-bound ones (their time follows the memory clock).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracelens.analyzers.base import Category, Fact, Found, Place
from tracelens.derive.clocks import Series, nvml_gpu_meta
from tracelens.derive.context import AnalysisContext
from tracelens.model.schema import NVML_REASON_BITS as REASON_BITS
from tracelens.model.schema import NVML_TRACK_TITLE, Kind
from tracelens.model.trace import TraceModel

#: Reasons that mean "slowed to protect power or temperature" (not idle, not a user's
#: application-clock setting).
LIMITING_REASONS = 0x4 | 0x8 | 0x20 | 0x40 | 0x80


#: A clock within this fraction of the maximum counts as full speed (boost steps are
#: 15 MHz; sensors and sampling jitter by a bin or two).
FULL_CLOCK_RATIO = 0.97


#: Ignore throttling active for less than this share of the busy time.
MIN_LIMITED_SHARE = 0.05


MAX_SITES = 6


#: Above this share of busy time under the power cap, the cap is "all the time" and the
#: mean power is not diluted by uncapped stretches.
CAPPED_ALL_SHARE = 0.95


def _sample_count(model: TraceModel, fallback: int) -> int:
    meta = model.meta.metadata.get("tracelens")
    nvml = meta.get("nvml") if isinstance(meta, dict) else None
    samples = nvml.get("samples") if isinstance(nvml, dict) else None
    return int(samples) if isinstance(samples, int) else fallback


def reason_names(mask: int) -> list[str]:
    return [name for bit, name in REASON_BITS.items() if mask & bit]


@dataclass(frozen=True)
class ThrottleFacts:
    clock_mhz: float  # time-weighted SM clock while busy
    max_clock_mhz: float
    limiting: tuple[str, ...]  # limiting reasons (NVML's names), the most frequent first
    limited_share: float  # of the busy time with a limiting reason
    power_limit_w: float  # NaN where unknown, as the power and temperature readings
    power_peak_w: float
    power_busy_w: float
    temp_max_c: float
    reasons: tuple[tuple[str, float], ...] = ()  # (NVML reason, share of busy time) but gpu_idle, most first


@dataclass(frozen=True)
class KernelClock:
    kernel: str
    clock_mhz: float | None  # its time-weighted clock (None: it took no time)


def analyze(ctx: AnalysisContext) -> list[Found[ThrottleFacts, KernelClock]]:
    dev = ctx.ledger.primary
    if dev is None:
        return []
    model = ctx.model
    tracks = ctx.clock_tracks
    sm = tracks.get(NVML_TRACK_TITLE["sm_mhz"])
    if sm is None or len(sm.ts) < 2:
        return []
    gpu_meta = nvml_gpu_meta(model, dev.device)
    max_clock = float(gpu_meta.get("max_sm_mhz") or np.nanmax(sm.values))
    busy = dev.busy_intervals
    w = sm.step_weights(busy, dev.window_end)
    busy_total = float(w.sum())
    if busy_total <= 0 or max_clock <= 0:
        return []
    clock_busy = float((sm.values * w).sum() / busy_total)
    ratio = clock_busy / max_clock
    slow = sm.values < FULL_CLOCK_RATIO * max_clock
    lost = float((w * np.clip(1.0 - sm.values / max_clock, 0, None)).sum())

    reasons = tracks.get(NVML_TRACK_TITLE["reasons"])
    reason_share: dict[str, float] = {}
    limited_share = 0.0
    if reasons is not None and len(reasons.ts):
        # Each track holds its value until its next sample (repeats are not written), so
        # each is weighted over its own hold intervals.
        rw = reasons.step_weights(busy, dev.window_end)
        rmask = reasons.values.astype(np.int64)
        rtotal = float(rw.sum()) or 1.0
        for bit, name in REASON_BITS.items():
            share = float(rw[(rmask & bit) != 0].sum() / rtotal)
            if share > 0:
                reason_share[name] = share
        limited_share = float(rw[(rmask & LIMITING_REASONS) != 0].sum() / rtotal)

    power = tracks.get(NVML_TRACK_TITLE["power_w"])
    limit = tracks.get(NVML_TRACK_TITLE["power_limit_w"])
    power_limit = float(gpu_meta.get("power_limit_w") or (np.nanmax(limit.values) if limit else np.nan))
    power_busy = float("nan")
    if power is not None and len(power.ts):
        pw = power.step_weights(busy, dev.window_end)
        power_busy = float((power.values * pw).sum() / pw.sum()) if pw.sum() > 0 else float("nan")
    power_peak = float(np.nanmax(power.values)) if power is not None and len(power.ts) else float("nan")
    temp = tracks.get(NVML_TRACK_TITLE["temp_c"])
    temp_max = float(np.nanmax(temp.values)) if temp is not None else float("nan")

    throttled = ratio < FULL_CLOCK_RATIO and (limited_share >= MIN_LIMITED_SHARE or not reason_share)
    if not throttled:
        return []
    places = _kernel_places(model, dev.device, sm, max_clock, dev.window_start, dev.window_end)
    top_reasons = sorted(reason_share.items(), key=lambda kv: -kv[1])
    limiting = [n for n, _ in top_reasons if n in {REASON_BITS[b] for b in REASON_BITS if b & LIMITING_REASONS}]
    facts = ThrottleFacts(
        clock_mhz=clock_busy,
        max_clock_mhz=max_clock,
        limiting=tuple(limiting),
        limited_share=limited_share,
        power_limit_w=power_limit,
        power_peak_w=power_peak,
        power_busy_w=power_busy,
        temp_max_c=temp_max,
        reasons=tuple((n, s) for n, s in top_reasons if n != "gpu_idle"),
    )
    return [
        Found(
            category=Category.POWER_THROTTLE,
            time_us=lost,
            expected_gain_us=lost,
            facts=facts,
            evidence=(
                Fact("sm_clock_busy_mhz", clock_busy, "number"),
                Fact("max_sm_clock_mhz", max_clock, "number"),
                Fact("clock_ratio", ratio, "share"),
                Fact("reduced_clock_us", float(w[slow].sum()), "us"),
                Fact("limited_share", limited_share, "share"),
                Fact("reasons", ""),  # text: explain/ writes it from facts.reasons
                Fact("power_busy_w", power_busy, "number"),
                Fact("power_limit_w", power_limit, "number"),
                Fact("temp_max_c", temp_max, "number"),
                Fact("nvml_samples", _sample_count(model, len(sm.ts)), "count"),
            ),
            places=places,
            device=dev.device,
            tags=tuple(limiting),
        )
    ]


def _kernel_places(
    model: TraceModel, device: int, sm: Series, max_clock: float, w0: float, w1: float
) -> tuple[Place[KernelClock], ...]:
    gpu = model.gpu
    k = gpu[(gpu["kind"] == Kind.KERNEL) & (gpu["device"] == device) & (gpu["end"] > w0) & (gpu["ts"] < w1)]
    if k.empty:
        return ()
    mid = (k["ts"].to_numpy() + k["end"].to_numpy()) / 2
    clk = sm.at(mid)
    dur = k["dur"].to_numpy()
    frame = pd.DataFrame(
        {
            "name": k["name"].astype(str).to_numpy(),
            "dur": dur,
            "lost": dur * np.clip(1 - clk / max_clock, 0, None),
            "clk_w": clk * dur,
        }
    )
    g = frame.groupby("name").agg(
        count=("dur", "size"), dur=("dur", "sum"), lost=("lost", "sum"), clk_w=("clk_w", "sum")
    )
    g = g.sort_values("lost", ascending=False).head(MAX_SITES)
    return tuple(
        Place(
            count=int(row["count"]),
            time_us=float(row["lost"]),
            facts=KernelClock(str(name), float(row["clk_w"] / row["dur"]) if row["dur"] else None),
            host_us=0.0,
            kernels=(str(name),),
        )
        for name, row in g.iterrows()
        if row["lost"] > 0
    )
