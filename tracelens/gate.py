"""`tracelens diff --fail-if-slower 5% --fail-if host_sync`: a CI gate on a diff.

The gate fails (exit 1, one line saying why) when the change made the step slower by
more than the threshold AND by more than the step-to-step noise of the two traces
(NOISE_SIGMAS standard errors of the difference of the mean step, diff.py): a change
inside the noise band never fails, however large the threshold is crossed by noise.
`--fail-if CAUSE` does the same for one ledger cause's time per step (its noise from
the steps' own ledgers); without --fail-if-slower a cause fails when it grew by more than
CAUSE_MIN_SHARE of the step beyond its noise. Traces that do not compare like for like
(derive/compare.py) are refused (exit 2): no verdict either way is true of them. So are
traces of different GPU models or captured with different profiler options: `diff` alone
reports them with a note (a user may mean to compare two GPUs), but a gate that passed
or failed a pull request on a runner pool's GPU change, or on with_stack's host overhead,
would judge the machine, not the change.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tracelens.domain import fmt_us
from tracelens.errors import UsageError
from tracelens.report import CAUSES, Cause
from tracelens.report.diff_report import DiffReport

#: Without a threshold, a cause gate fails when the cause grew by more than this share of
#: the before step (and beyond its noise): 1% of a step is below what a user notices but
#: above the float noise of a ledger.
CAUSE_MIN_SHARE = 0.01
#: Finding categories accepted by --fail-if as names of the ledger cause they are.
CAUSE_ALIASES: dict[str, str] = {"memory_bound": "gpu_busy_memory", "compute_bound": "gpu_busy_compute"}
_TIME = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(%|us|µs|ms|s)?\s*$")
_UNIT_US = {"us": 1.0, "µs": 1.0, "ms": 1e3, "s": 1e6}


@dataclass(frozen=True)
class Threshold:
    """How much slower per step is allowed: a share of the before step, or a time."""

    share: float | None = None
    us: float | None = None
    text: str = ""

    def limit_us(self, before_step_us: float) -> float:
        return self.us if self.us is not None else (self.share or 0.0) * before_step_us


def parse_threshold(text: str) -> Threshold:
    """`5%`, `0.05` (a share), `2ms`, `300us`, `0.5s` (per step)."""
    m = _TIME.match(text)
    if m is None:
        raise UsageError(f"--fail-if-slower {text!r}: give a share (5%, 0.05) or a time per step (2ms, 300us)")
    value, unit = float(m.group(1)), m.group(2)
    if unit == "%":
        return Threshold(share=value / 100.0, text=text.strip())
    if unit is None:
        if value >= 1.0:
            raise UsageError(f"--fail-if-slower {text}: a bare number is a share below 1 (0.05); write 5% or 2ms")
        return Threshold(share=value, text=text.strip())
    return Threshold(us=value * _UNIT_US[unit], text=text.strip())


def parse_causes(names: list[str]) -> list[Cause]:
    """Ledger causes for --fail-if (checked before any trace is read)."""
    out: list[Cause] = []
    by_name: dict[str, Cause] = {c: c for c in CAUSES}
    for name in names:
        cause = by_name.get(CAUSE_ALIASES.get(name, name))
        if cause is None:
            known = ", ".join([*CAUSES, *CAUSE_ALIASES])
            raise UsageError(f"--fail-if {name}: not a ledger cause (one of: {known})")
        out.append(cause)
    return out


@dataclass(frozen=True)
class GateResult:
    failed: bool
    reason: str  # one line


def setup_differences(d: DiffReport) -> list[str]:
    """What differs between the two runs' set-ups that a gate must not judge: the GPU model
    and the profiler options that change the step's own time (with_stack's host cost,
    record_shapes')."""
    b, a = d.before.trace, d.after.trace
    out = []
    if b.gpu_name and a.gpu_name and b.gpu_name != a.gpu_name:
        out.append(
            f"they ran on different GPUs ({b.gpu_name} before, {a.gpu_name} after): pin the CI job to one GPU type"
        )
    for label, before, after in (
        ("with_stack", b.has_python_stacks, a.has_python_stacks),
        ("record_shapes", b.has_shapes, a.has_shapes),
    ):
        if before != after:
            out.append(
                f"they were captured with different profiler options ({label} {'on' if before else 'off'} before, "
                f"{'on' if after else 'off'} after; its overhead is in one side's step time only): capture both alike"
            )
    return out


def evaluate(d: DiffReport, slower: Threshold | None, causes: list[Cause]) -> GateResult:
    """Judge the diff; raises UsageError when the traces do not compare."""
    if not d.comparable:
        raise UsageError("the gate cannot judge these traces: not like for like: " + "; ".join(d.not_comparable))
    setup = setup_differences(d)
    if setup:
        raise UsageError("the gate cannot judge these traces: " + "; ".join(setup))
    v = d.verdict
    before = v.before_step_us
    failures: list[str] = []
    passes: list[str] = []
    if slower is not None:
        limit = slower.limit_us(before)
        share = f" ({v.change_us / before:+.1%})" if before > 0 else ""
        what = f"{fmt_us(abs(v.change_us))} per step {'slower' if v.change_us > 0 else 'faster'}{share}"
        steps = f"{fmt_us(before)} -> {fmt_us(v.after_step_us)}"
        noise = f"the noise band ±{fmt_us(v.noise_us)}" if v.noise_us > 0 else "no measurable noise band (one step)"
        if v.change_us > limit and v.change_us > v.noise_us:
            failures.append(f"{what}: {steps}, over --fail-if-slower {slower.text} and {noise}")
        elif v.change_us > limit:
            passes.append(f"{what}, within {noise} (over --fail-if-slower {slower.text} only by noise)")
        else:
            passes.append(f"{what}, within --fail-if-slower {slower.text}")
    by_cause = {c.cause: c for c in d.causes}
    for cause in causes:
        c = by_cause.get(cause)
        if c is None:
            passes.append(f"{cause}: none before or after")
            continue
        limit = slower.limit_us(before) if slower is not None else CAUSE_MIN_SHARE * before
        sign = "+" if c.change_us >= 0 else ""
        grew = f"{cause} {fmt_us(c.before_us)} -> {fmt_us(c.after_us)} per step ({sign}{fmt_us(c.change_us)})"
        if c.change_us > limit and c.change_us > c.noise_us:
            bound = f"--fail-if-slower {slower.text}" if slower is not None else f"{CAUSE_MIN_SHARE:.0%} of the step"
            noise = f"its noise ±{fmt_us(c.noise_us)}" if c.noise_us > 0 else "no measurable noise"
            failures.append(f"{grew}, over {bound} and {noise}")
        else:
            passes.append(grew)
    if failures:
        return GateResult(True, "gate failed: " + "; ".join(failures))
    return GateResult(False, "gate passed: " + ("; ".join(passes) if passes else "nothing to check"))
