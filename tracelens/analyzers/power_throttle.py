"""power_throttle: the GPU ran its kernels below its maximum clock.

Under question 6 (raw compute). When a matmul-heavy program draws the power limit, the
voltage regulator lowers the clock to stay under it; how hard depends on the data
(bit flips cost switching power: random bf16 matrices throttle more than zeros). Needs
the NVML samples `tracelens capture` stores in the trace as counter events.

Cost model: the time the busy periods would have saved at the maximum SM clock,
busy_time x (1 - clock / max_clock). That is exact for compute-bound kernels and an
upper bound for memory-bound ones (their time follows the memory clock); the roofline
analyzer that would separate them is not built yet, so the finding says so.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracelens.analyzers.base import Category, Finding, Metric, Site, severity_for
from tracelens.derive.clocks import Series, nvml_gpu_meta
from tracelens.derive.context import AnalysisContext
from tracelens.domain import fmt_us
from tracelens.model.schema import NVML_REASON_BITS as REASON_BITS
from tracelens.model.schema import Kind
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


def analyze(ctx: AnalysisContext) -> list[Finding]:
    dev = ctx.ledger.primary
    if dev is None:
        return []
    model = ctx.model
    tracks = ctx.clock_tracks
    sm = tracks.get("SM clock (MHz)")
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

    reasons = tracks.get("clocks event reasons")
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

    power = tracks.get("power (W)")
    limit = tracks.get("power limit (W)")
    power_limit = float(gpu_meta.get("power_limit_w") or (np.nanmax(limit.values) if limit else np.nan))
    power_busy = float("nan")
    if power is not None and len(power.ts):
        pw = power.step_weights(busy, dev.window_end)
        power_busy = float((power.values * pw).sum() / pw.sum()) if pw.sum() > 0 else float("nan")
    power_peak = float(np.nanmax(power.values)) if power is not None and len(power.ts) else float("nan")
    temp = tracks.get("temperature (C)")
    temp_max = float(np.nanmax(temp.values)) if temp is not None else float("nan")

    throttled = ratio < FULL_CLOCK_RATIO and (limited_share >= MIN_LIMITED_SHARE or not reason_share)
    if not throttled:
        return []
    sites = _kernel_sites(model, dev.device, sm, max_clock, dev.window_start, dev.window_end)
    share = ctx.share(lost)
    top_reasons = sorted(reason_share.items(), key=lambda kv: -kv[1])
    limiting = [n for n, _ in top_reasons if n in {REASON_BITS[b] for b in REASON_BITS if b & LIMITING_REASONS}]
    why = ", ".join(f"{n} {s:.0%}" for n, s in top_reasons if n != "gpu_idle") or "no reason reported"
    title = (
        f"Clocks throttled while busy: SM clock averaged {clock_busy:.0f} of {max_clock:.0f} MHz "
        f"({ratio:.0%}) during GPU work ({', '.join(limiting) or 'reason not reported'}); "
        f"up to {fmt_us(lost)} lost"
    )
    advice_parts = []
    if "sw_power_cap" in limiting or "hw_power_brake_slowdown" in limiting:
        advice_parts.append(
            f"The GPU is power-limited: NVML reports the power cap for {limited_share:.0%} of the busy time, so the "
            f"regulator lowers the clock to hold the draw at the {power_limit:.0f} W limit"
            + (
                f" (power samples reach {power_peak:.0f} W; their mean while busy, {power_busy:.0f} W, is lower "
                + ("as it also counts stretches without the cap and " if limited_share < CAPPED_ALL_SHARE else "as ")
                + "NVML's reading lags the load)"
                if power_peak == power_peak and power_busy == power_busy
                else ""
            )
            + ". Power scales with clock x transistor flips per clock, "
            "so the same math costs more power on random data than on zeros or repetitive data. What helps: "
            "less data movement and fewer bit flips per result (lower precision such as fp8/bf16 where "
            "accuracy allows, fused kernels that avoid extra passes), and not comparing against datasheet "
            "peaks: sustained matmul throughput is set by the power limit, not the boost clock. Check that "
            "the enforced limit (nvidia-smi -q -d POWER) is the board default; do not raise it past the "
            "vendor's spec."
        )
    if any(n in limiting for n in ("sw_thermal_slowdown", "hw_thermal_slowdown")):
        advice_parts.append(
            f"The GPU is thermally limited (up to {temp_max:.0f} °C): check cooling and airflow; a hot GPU also "
            "leaks more power, which lowers the clock it can sustain."
        )
    if "hw_slowdown" in limiting and not advice_parts:
        advice_parts.append(
            "Hardware slowdown (HW_SLOWDOWN) is asserted by the board (power brake, overheating or power "
            "supply): check the system's power delivery and cooling; it is not caused by the program."
        )
    if not advice_parts:
        advice_parts.append("Clocks ran below maximum; NVML reported no limiting reason for it.")
    return [
        Finding(
            category=Category.POWER_THROTTLE,
            severity=severity_for(share),
            title=title,
            time_us=lost,
            share=share,
            advice=" ".join(advice_parts),
            expected_gain_us=lost,
            gain_note=(
                "busy time x (1 - clock / max clock): exact for compute-bound kernels, an upper bound for "
                "memory-bound ones (the roofline split is not built yet); reachable only as far as the power "
                "limit allows"
            ),
            evidence=(
                Metric("time-weighted SM clock while busy (MHz)", clock_busy, "number"),
                Metric("max SM clock (MHz)", max_clock, "number"),
                Metric("clock ratio", ratio, "share"),
                Metric("busy time at reduced clock", float(w[slow].sum()), "us"),
                Metric("busy time with a limiting reason", limited_share, "share"),
                Metric("throttle reasons (share of busy time)", why),
                Metric("mean power while busy (W)", power_busy, "number"),
                Metric("enforced power limit (W)", power_limit, "number"),
                Metric("max temperature (C)", temp_max, "number"),
                Metric("NVML samples", _sample_count(model, len(sm.ts)), "count"),
            ),
            sites=sites,
            device=dev.device,
            tags=tuple(limiting),
        )
    ]


def _kernel_sites(
    model: TraceModel, device: int, sm: Series, max_clock: float, w0: float, w1: float
) -> tuple[Site, ...]:
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
        Site(
            description=f"{name} at {row['clk_w'] / row['dur']:.0f} MHz on average" if row["dur"] else str(name),
            count=int(row["count"]),
            time_us=float(row["lost"]),
            host_us=0.0,
            kernels=(str(name),),
        )
        for name, row in g.iterrows()
        if row["lost"] > 0
    )
