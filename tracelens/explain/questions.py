"""The six questions' answers, written from what ranking.py has settled: which case the
question is in (a finding at the bar, a little time, not measurable and why), and what
parts of it this trace cannot answer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tracelens.domain import PerUnit, pct, per_unit

#: A unit of the window whole: an answer built without the report's says totals.
WINDOW = PerUnit()

#: Why a question cannot be answered at all: no GPU kernels, or no runtime calls on the host.
Missing = Literal["", "no_gpu", "no_runtime"]
#: The case a question's answer is in (ranking.questions decides it; the status follows).
AnswerCase = Literal["not_built", "missing", "yes", "minor", "peaks_unknown", "low_coverage", "no_cost", "nothing"]


@dataclass(frozen=True)
class RoofCover:
    """What the roofline covers of the kernel time (for the compute and memory questions)."""

    peaks_known: bool
    measured: bool  # hardware counters measured some kernels
    measured_share: float  # hardware counters' share of kernel time (0 when none measured)
    coverage: float  # counters and models together
    modelled: bool  # some kernel time was put to the models at all
    gpu_named: bool = True  # the trace names its GPU model (deviceProperties)


@dataclass(frozen=True)
class Unmeasured:
    """The parts of a question this trace cannot answer (compute and memory only)."""

    roof: RoofCover | None = None
    no_clock_samples: bool = False
    no_shapes: bool = False


@dataclass(frozen=True)
class AnswerFacts:
    case: AnswerCase
    not_built: str = ""  # the question's own words while no analyzer covers it
    built: bool = True
    missing: Missing = ""
    time_us: float = 0.0  # a window total, said in `unit`
    share: float = 0.0
    unit: PerUnit = WINDOW
    title: str = ""  # the finding the answer names (the largest, or the first without cost)
    coverage: float = 0.0  # the models' share, for low_coverage
    unmeasured: Unmeasured = Unmeasured()


def _missing_text(missing: Missing) -> str:
    if missing == "no_gpu":
        return (
            "the trace has no GPU kernels (a CPU-only run, or a capture without ProfilerActivity.CUDA in its "
            "activities)"
        )
    return (
        "the trace has no CUDA/HIP runtime calls on the host, so launches and syncs cannot be seen: "
        "capture with ProfilerActivity.CPU as well as CUDA"
    )


def _rest(coverage: float) -> str:
    """The clause for the kernel time no model covers, only where some is left: "cover
    100% ...; the rest is reported as unknown" contradicted itself (issue 27)."""
    return "; the rest is reported as not classified" if f"{coverage:.0%}" != "100%" else ""


def unmeasured_text(u: Unmeasured) -> str:
    """Parts of a question this trace cannot answer, and the capture option that would."""
    out = ""
    roof = u.roof
    if roof is not None:
        if not roof.peaks_known and not roof.gpu_named:
            out += (
                " Roofline: the trace does not name its GPU model (no deviceProperties), so its peaks are unknown "
                "(set TRACELENS_PEAKS to give them)."
            )
        elif not roof.peaks_known:
            out += " Roofline: this GPU is not in the peak table (set TRACELENS_PEAKS to give its peaks)."
        elif roof.measured:
            out += (
                f" Roofline: hardware counters cover {roof.measured_share:.0%} of kernel time and models "
                f"{roof.coverage - roof.measured_share:.0%} (communication excluded){_rest(roof.coverage)}."
            )
        elif roof.modelled:
            out += (
                f" Roofline models cover {roof.coverage:.0%} of kernel time (communication excluded)"
                f"{_rest(roof.coverage)}."
            )
    if u.no_clock_samples:
        out += (
            " Power throttling: not measurable from this trace (no GPU clock/power samples); `tracelens capture` "
            "records NVML clocks, power and throttle reasons beside the profiler."
        )
    if u.no_shapes:
        out += " Matmul shapes: not measurable (no Input Dims); capture with record_shapes=True."
    return out


def answer_text(a: AnswerFacts) -> str:
    """One question's answer."""
    partly = f" {a.not_built}" if a.built and a.not_built else ""
    partly += unmeasured_text(a.unmeasured)
    if a.case == "not_built":
        return a.not_built
    if a.case == "missing":
        return f"Not measurable from this trace: {_missing_text(a.missing)}.{partly}"
    if a.case == "yes":
        return f"Yes: {per_unit(a.time_us, a.unit)} ({a.share:.0%} of the analysed time). {a.title}.{partly}"
    if a.case == "minor":
        return f"A little: {per_unit(a.time_us, a.unit)} ({pct(a.share)} of the analysed time), below the bar.{partly}"
    if a.case == "peaks_unknown":
        # No roof to judge the kernels against: that is no evidence of a no.
        return f"Unknown: this GPU's peaks are not known, so no kernel could be judged against a roof.{partly}"
    if a.case == "low_coverage":
        return (
            f"Not measurable from this trace: no finding, but with the models covering {pct(a.coverage)} of kernel "
            f"time that is no evidence of a no.{partly}"
        )
    if a.case == "no_cost":
        # A finding with no cost still says what it saw (a graph break whose wait is the
        # host_sync finding's time, a trace that already replays CUDA graphs).
        return f"No cost measured here: {a.title}.{partly}"
    return f"No: nothing measurable in this trace.{partly}"
