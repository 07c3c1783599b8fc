"""Whether two traces compare like for like (for `tracelens diff` and its CI gate).

A diff of two traces of one program before and after a change says what the change
did. A diff of anything else says nothing true: an after-trace without GPU events is
"93% faster, the primary bottleneck is gone", two different programs are "109% slower"
(issue 29). So before the verdict, the two traces are checked:

- blocking (the verdict says the traces do not compare, and the gate refuses to judge):
  GPU activity on one side only; different programs (their kernels, top-level ops and
  Python source files barely overlap: `signature_overlap`);
- noted (the comparison stands, with the caveat said up front): different GPUs, torch
  versions or capture options, different step structure (steps on one side only, steps
  of very different length or op count).

The program signature is the trace's own: kernel names by GPU time, top-level op names by
count, and the user's Python files (not library code) from the stacks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from tracelens.model.schema import Kind
from tracelens.model.sources import is_machinery, parse_frame
from tracelens.model.trace import TraceModel

#: Two traces are different programs when both their kernel overlap and their op-shape
#: overlap are below this, and their source functions do not say otherwise. Measured by
#: bench/like_for_like.py on 13 before/after pairs of one program (the lowest: the
#: eager vs torch.compile pair, 0.00 and 0.00, tied only by its functions, 0.67; every
#: other pair has one overlap of 0.24 or more) and 21 pairs of different programs (15
#: below it on both, among them the issue's gemm_bf16 vs train_step at 0.05 and 0.00; the
#: other six are programs of one kind: two ResNet-50 runs 0.34, two training loops 0.40).
PROGRAM_OVERLAP_MIN = 0.2
#: Source functions shared at least this much (Jaccard) make two traces one program
#: even when their kernels and ops differ (eager vs compiled: 0.67 with the stdlib's
#: frames, 0.58 since frames of stdlib packages such as json/encoder.py are not the
#: program's, model/sources.is_machinery). Different programs share helper modules: at
#: most 0.33 on bench/like_for_like.py's 21 pairs (0.50 before the stdlib rule).
SAME_FUNCTIONS_MIN = 0.55
#: Below this on both overlaps (and not one program by its functions), the comparison
#: stands with a caveat.
LITTLE_IN_COMMON = 0.3
#: Steps whose median op count differs by more than this factor are structured
#: differently.
STEP_OPS_RATIO = 5.0
#: Distinct source functions and top-level op rows read per trace at most.
MAX_FUNCTIONS = 2000
MAX_OP_ROWS = 20_000
_UNSTABLE_NUMBERS = re.compile(r"\d+")


@dataclass(frozen=True)
class ProgramSignature:
    kernels: dict[str, float]  # kernel/copy name -> total GPU µs
    op_shapes: dict[str, float]  # "top-level op name|input dims" -> count
    functions: frozenset[tuple[str, str]]  # the user's Python (file base name, function)
    gpu_us: float  # all GPU activity, µs


def program_signature(model: TraceModel) -> ProgramSignature:
    act = model.gpu_activity()
    kernels: dict[str, float] = {}
    if not act.empty:
        g = act.groupby("name", observed=True)["dur"].sum()
        kernels = {str(k): float(v) for k, v in g.items() if v > 0}
    op_shapes: dict[str, float] = {}
    functions: set[tuple[str, str]] = set()
    host = model.host
    if len(host):
        kind = host["kind"].to_numpy()
        idx = np.arange(len(host))
        top = np.flatnonzero((kind == Kind.CPU_OP) & (host["op_root"].to_numpy() == idx))
        names = model.arrays.name
        for r in top[:MAX_OP_ROWS].tolist():
            key = f"{names(r)}|{model.op_shapes(r).get('Input Dims', '')}"
            op_shapes[key] = op_shapes.get(key, 0.0) + 1.0
        py = kind == Kind.PYTHON
        if py.any():
            for name in host["name"][py].unique():
                frame = parse_frame(str(name))
                if frame is not None and not is_machinery(frame.file):
                    functions.add((frame.file.replace("\\", "/").rsplit("/", 1)[-1], frame.function))
                    if len(functions) >= MAX_FUNCTIONS:
                        break
    return ProgramSignature(kernels, op_shapes, frozenset(functions), float(sum(kernels.values())))


def weighted_overlap(a: dict[str, float], b: dict[str, float]) -> float:
    """The smaller of the two sides' shares of weight in names both have (1: the same
    names, 0: nothing in common; a loop of one matmul against a training step that also
    has that matmul is small: the step's share is). Names are also matched with their
    numbers taken out (a matmul kernel's tile sizes, a compiled graph's index)."""
    ta, tb = sum(a.values()), sum(b.values())
    if ta <= 0 or tb <= 0:
        return 0.0

    def strip(d: dict[str, float]) -> dict[str, float]:
        out: dict[str, float] = {}
        for k, v in d.items():
            key = _UNSTABLE_NUMBERS.sub("#", k)
            out[key] = out.get(key, 0.0) + v
        return out

    exact = min(sum(v for k, v in a.items() if k in b) / ta, sum(v for k, v in b.items() if k in a) / tb)
    sa, sb = strip(a), strip(b)
    loose = min(sum(v for k, v in sa.items() if k in sb) / ta, sum(v for k, v in sb.items() if k in sa) / tb)
    return max(exact, loose)


def signature_overlap(a: ProgramSignature, b: ProgramSignature) -> tuple[float, float, float | None]:
    """(kernel-time overlap, op-shape overlap, source-function overlap or None when a
    side has no Python stacks), each in [0, 1]."""
    funcs = len(a.functions & b.functions) / len(a.functions | b.functions) if a.functions and b.functions else None
    return (weighted_overlap(a.kernels, b.kernels), weighted_overlap(a.op_shapes, b.op_shapes), funcs)


def different_programs(overlap: tuple[float, float, float | None]) -> bool:
    k, o, f = overlap
    return k < PROGRAM_OVERLAP_MIN and o < PROGRAM_OVERLAP_MIN and (f is None or f < SAME_FUNCTIONS_MIN)


def little_in_common(overlap: tuple[float, float, float | None]) -> bool:
    k, o, f = overlap
    return k < LITTLE_IN_COMMON and o < LITTLE_IN_COMMON and (f is None or f < SAME_FUNCTIONS_MIN)


Side = Literal["before", "after"]
#: Overlaps of two programs: (kernel GPU time, top-level ops with shapes, source
#: functions or None when neither has stacks), each a share in [0, 1].
Overlap = tuple[float, float, float | None]


@dataclass(frozen=True)
class GpuOnOneSide:
    """One trace has GPU activity (`gpu_us` of it) and the other, `without`, none."""

    without: Side
    gpu_us: float


@dataclass(frozen=True)
class DifferentPrograms:
    """The two traces' programs barely overlap (blocking)."""

    overlap: Overlap


@dataclass(frozen=True)
class LittleInCommon:
    """The two traces overlap little, but not so little that they are different programs."""

    overlap: Overlap


@dataclass(frozen=True)
class StepsMarkedOnOneSide:
    """Only `marked` marks its steps (ProfilerStep); the other's steps were detected."""

    marked: Side


@dataclass(frozen=True)
class StepsStructuredDifferently:
    """Median top-level ops per step, before and after, far apart."""

    ops_before: float
    ops_after: float


Blocking = GpuOnOneSide | DifferentPrograms
Caveat = LittleInCommon | StepsMarkedOnOneSide | StepsStructuredDifferently


@dataclass
class Comparability:
    """What keeps two traces from comparing like for like (typed facts; explain/diff.py
    words them)."""

    blocking: list[Blocking] = field(default_factory=list)  # the diff's numbers mean nothing
    caveats: list[Caveat] = field(default_factory=list)  # they stand, with this said
    overlap: Overlap = (0.0, 0.0, None)

    @property
    def comparable(self) -> bool:
        return not self.blocking


def comparability(
    before: TraceModel,
    after: TraceModel,
    steps_before: tuple[int, float, float],
    steps_after: tuple[int, float, float],
    marked_before: bool,
    marked_after: bool,
) -> Comparability:
    """Check two traces before a diff. `steps_*` is (steps in the window, mean step µs,
    median top-level ops per step); `marked_*` whether the trace marks its steps."""
    out = Comparability()
    sb, sa = program_signature(before), program_signature(after)
    if (sb.gpu_us > 0) != (sa.gpu_us > 0):
        out.blocking.append(GpuOnOneSide("after" if sb.gpu_us > 0 else "before", max(sb.gpu_us, sa.gpu_us)))
    ov = signature_overlap(sb, sa)
    out.overlap = ov
    if not out.blocking and different_programs(ov):
        out.blocking.append(DifferentPrograms(ov))
    elif not out.blocking and little_in_common(ov):
        out.caveats.append(LittleInCommon(ov))
    if marked_before != marked_after:
        out.caveats.append(StepsMarkedOnOneSide("before" if marked_before else "after"))
    ops_b, ops_a = steps_before[2], steps_after[2]
    if ops_b > 0 and ops_a > 0 and max(ops_b, ops_a) / min(ops_b, ops_a) > STEP_OPS_RATIO:
        out.caveats.append(StepsStructuredDifferently(ops_b, ops_a))
    return out
