"""The words of the power_throttle finding."""

from __future__ import annotations

from collections.abc import Iterable

from tracelens.analyzers.base import Found
from tracelens.analyzers.power_throttle import CAPPED_ALL_SHARE, KernelClock, ThrottleFacts
from tracelens.domain import PerUnit, pct, per_unit
from tracelens.explain.base import Words
from tracelens.report.findings import Finding

LABELS = {
    "sm_clock_busy_mhz": "time-weighted SM clock while busy (MHz)",
    "max_sm_clock_mhz": "max SM clock (MHz)",
    "clock_ratio": "clock ratio",
    "reduced_clock_us": "busy time at reduced clock",
    "limited_share": "busy time with a limiting reason",
    "reasons": "throttle reasons (share of busy time)",
    "power_busy_w": "mean power while busy (W)",
    "power_limit_w": "enforced power limit (W)",
    "temp_max_c": "max temperature (C)",
    "nvml_samples": "NVML samples",
}


#: NVML's throttle reasons (model/schema.py's ids) in words (issue 27: "(sw_power_cap)").
REASON_WORDS = {
    "sw_power_cap": "power cap",
    "hw_slowdown": "hardware slowdown",
    "sync_boost": "sync boost",
    "sw_thermal_slowdown": "thermal slowdown",
    "hw_thermal_slowdown": "hardware thermal slowdown",
    "hw_power_brake_slowdown": "power brake",
}


def reason_words(reasons: Iterable[str]) -> str:
    """Throttle reason ids as a reader names them, comma-joined."""
    return ", ".join(REASON_WORDS.get(r, r.replace("_", " ")) for r in reasons)


def kernel_text(k: KernelClock) -> str:
    return f"{k.kernel} at {k.clock_mhz:.0f} MHz on average" if k.clock_mhz is not None else k.kernel


def _advice(f: ThrottleFacts) -> str:
    parts = []
    if "sw_power_cap" in f.limiting or "hw_power_brake_slowdown" in f.limiting:
        known = f.power_peak_w == f.power_peak_w and f.power_busy_w == f.power_busy_w  # neither NaN
        parts.append(
            f"The GPU is power-limited: NVML reports the power cap for {pct(f.limited_share)} of the busy time, so "
            f"the regulator lowers the clock to hold the draw at the {f.power_limit_w:.0f} W limit"
            + (
                f" (power samples reach {f.power_peak_w:.0f} W; their mean while busy, {f.power_busy_w:.0f} W, is "
                "lower "
                + ("as it also counts stretches without the cap and " if f.limited_share < CAPPED_ALL_SHARE else "as ")
                + "NVML's reading lags the load)"
                if known
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
    if any(n in f.limiting for n in ("sw_thermal_slowdown", "hw_thermal_slowdown")):
        parts.append(
            f"The GPU is thermally limited (up to {f.temp_max_c:.0f} °C): check cooling and airflow; a hot GPU also "
            "leaks more power, which lowers the clock it can sustain."
        )
    if "hw_slowdown" in f.limiting and not parts:
        parts.append(
            "Hardware slowdown (HW_SLOWDOWN) is asserted by the board (power brake, overheating or power "
            "supply): check the system's power delivery and cooling; it is not caused by the program."
        )
    if not parts:
        parts.append("Clocks ran below maximum; NVML reported no limiting reason for it.")
    return " ".join(parts)


def words(found: Found[ThrottleFacts, KernelClock], share: float, unit: PerUnit) -> Words:
    f = found.facts
    ratio = f.clock_mhz / f.max_clock_mhz
    return Words(
        title=(
            f"Clocks throttled while busy: SM clock averaged {f.clock_mhz:.0f} of {f.max_clock_mhz:.0f} MHz "
            f"({pct(ratio)}) during GPU work ({reason_words(f.limiting) or 'reason not reported'}); "
            f"up to {per_unit(found.time_us, unit)} lost"
        ),
        advice=_advice(f),
        gain_note=(
            "busy time x (1 - clock / max clock): exact for compute-bound kernels, an upper bound for "
            "memory-bound ones (their time follows the memory clock); reachable only as far as the power "
            "limit allows"
        ),
        labels=LABELS,
        places=[kernel_text(p.facts) for p in found.places],
        texts={"reasons": ", ".join(f"{reason_words([n])} {pct(s)}" for n, s in f.reasons) or "no reason reported"},
    )


def machine_gain_note(time_us: float, unit: PerUnit) -> str:
    """Why a machine condition offers no gain (issue 24/27: power_gemm's headline said nothing
    to fix while its card printed "expected gain: 2.06 s")."""
    return (
        "none: the clocks are capped by the machine (its power limit, cooling or supply), not by the "
        f"program's code, so no change to the program is offered as a gain; the {per_unit(time_us, unit)} stay "
        "this finding's time in the ledger"
    )


def machine_headline(f: Finding) -> str:
    """The headline when the clocks' cap is the only large finding: a power or thermal cap
    is the machine's condition, not the program's, so nothing is offered as a gain."""
    ev = {m.id: m.value for m in f.evidence if m.id}
    limit, clock, peak = ev.get("power_limit_w"), ev.get("sm_clock_busy_mhz"), ev.get("max_sm_clock_mhz")
    reasons = str(ev.get("reasons", ""))
    cap = (
        f"clocks capped by power at {float(limit):.0f} W"
        if "power" in reasons and isinstance(limit, int | float)
        else "clocks capped by temperature"
        if "thermal" in reasons
        else "clocks below their maximum"
    )
    clocks = (
        f" (SM clock {float(clock):.0f} of {float(peak):.0f} MHz while busy; {reasons} of the busy time)"
        if isinstance(clock, int | float) and isinstance(peak, int | float)
        else ""
    )
    return (
        f"Nothing in the program to fix; {cap}{clocks}: the machine's condition, not the program's, which "
        "explains the clocks (question 6)."
    )
