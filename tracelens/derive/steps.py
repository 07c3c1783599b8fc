"""The user's own steps, for traces without `ProfilerStep#N` marks (issue 24 §1).

Many real traces mark their steps another way. In this order, the first that holds
becomes the steps (the loader's ProfilerStep marks come before all of them):

1. Ranges the program recorded on its main thread (the thread that launches most GPU
   work) that repeat: `record_function("step_3")`, `train_step`, `iteration`, PARAM's
   `[param|...|measure|forward]`, vLLM's `execute_context_*`, SGLang's `execute_*`,
   Lightning's profiler ranges (`run_training_batch`), NVTX-style ranges recorded as user
   annotations. Names are compared with their numbers masked (`step_3` ~ `step_#`); the
   outermost repeating group wins (one nested in another's members is a part of a step),
   a known step name before other names, then the group with the fewest members that
   still holds STEP_MIN_LAUNCH_SHARE of the launches (the outer loop, not a layer).
   An engine step name (`execute_*`) is a step even when the trace holds only one.
2. The frameworks' own step functions, seen as Python frames (with_stack):
   Lightning's `run_training_batch`, the transformers Trainer's `training_step`,
   accelerate's `backward`, repeating.
3. One `Optimizer.step#*.step` per training step: a step ends where its optimizer step
   ends (the iteration before the first one is partial and left out).

Members that launched no GPU work, in a trace that has GPU work, are not steps (HTA's
mi250_minitoy ends with an empty 0.05 ms ProfilerStep#2). The result is a step table of
the loader's shape (step, cpu_ts, cpu_end, gpu_ts, gpu_end), and `with_steps` gives the
model those steps, so that the window, the ledger, every analyzer and `tracelens diff`
see one set of steps.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from itertools import pairwise

import numpy as np
import pandas as pd

from tracelens.domain import PROFILER_STEP_PREFIX
from tracelens.model.schema import Kind
from tracelens.model.trace import TraceModel, name_matches

#: An annotation group is the steps only if its members hold at least this share of the
#: main thread's launches inside their span: a repeating `save_checkpoint` or `log`
#: range is no step. (The 16-layer forward annotations of a step hold most of them, so
#: the fewest-members rule then prefers the outer loop.)
STEP_MIN_LAUNCH_SHARE = 0.25
#: At least this many members make a repeating range (one is a region, not a loop).
MIN_REPEATS = 2

#: Range names that say "one step" (lower case, numbers masked as #).
_KNOWN_STEP = re.compile(
    r"^(\[param\|.*\|measure\|.*\]"  # PARAM's measured iterations
    r"|execute_context_#.*|execute_model.*|execute_batch.*|execute_.*"  # vLLM, SGLang engines
    r"|step\[.*\]"  # SGLang scheduler steps
    r"|run_training_batch|.*training_step|.*optimizer_step"  # Lightning, Trainer
    r"|(train|training|eval|val|test|infer|inference|decode|prefill|benchmark|bench)?[ _.-]?"
    r"(step|iter|iteration|batch)[ _#.-]*#?)$"
)
#: Engine step names that are a step even when they occur once (a one-step serving
#: trace, PARAM's one measured iteration).
#: torch.compile's own range around a compiled call: a trace of one call is that one
#: call (its kernels are one iteration even when its layers repeat inside it).
_COMPILED_CALL = re.compile(r"^Torch-Compiled Region")
_ENGINE_STEP = re.compile(
    r"^(execute_context_#.*|execute_model.*|execute_batch.*|step\[.*\]|\[param\|.*\|measure\|.*\])$"
)
#: Ranges torch itself records in every loop: the DataLoader's and the optimizer's
#: (the optimizer's are rule 3), never the user's own marks.
_TORCH_OWN_RANGES = (PROFILER_STEP_PREFIX, "enumerate(DataLoader)", "Optimizer.", "Optimizer#")
#: Python frames of the frameworks' own step functions (`file(LINE): function`).
_FRAMEWORK_FRAMES = (
    # Lightning 2.x: one _TrainingEpochLoop.advance per batch (1.x: run_training_batch)
    ("lightning", re.compile(r"(lightning|pytorch_lightning)/.*training_epoch_loop\.py\(\d+\): advance$")),
    ("lightning", re.compile(r"(lightning|pytorch_lightning)/.*: run_training_batch$")),
    ("transformers Trainer", re.compile(r"transformers/trainer\.py\(\d+\): training_step$")),
    ("accelerate", re.compile(r"accelerate/accelerator\.py\(\d+\): backward$")),
)
_OPTIMIZER_STEP = re.compile(r"^Optimizer\.step#.*\.step$")
_DIGITS = re.compile(r"\d+")


@dataclass(frozen=True)
class StepMarks:
    """Where the steps came from, and the steps (the loader's step-table shape)."""

    kind: str  # "annotation" | "framework" | "optimizer"
    unit: str  # what one of them is called: "step", "call" for a single compiled call, "sweep" for a sweep's calls
    label: str  # what the report calls the marks: "record_function step_#", "Optimizer.step#AdamW.step"
    table: pd.DataFrame  # step, cpu_ts, cpu_end


def find_step_marks(model: TraceModel) -> StepMarks | None:
    """The user's steps of a trace without ProfilerStep marks, or None (see the module)."""
    host = model.host
    if host.empty:
        return None
    thread = _main_thread(model)
    if thread is None:
        return None
    for finder in (_annotation_steps, _framework_steps, _optimizer_steps):
        marks = finder(model, thread)
        if marks is not None and len(marks.table):
            return marks
    return None


def with_steps(model: TraceModel, marks: StepMarks) -> TraceModel:
    """The model with `marks` as its steps: the step table, each host row's and GPU
    row's step, and the step-mark label the window's reason names."""
    table = marks.table.sort_values("cpu_ts", kind="stable").reset_index(drop=True)
    host = model.host
    ts = host["ts"].to_numpy()
    starts = table["cpu_ts"].to_numpy()
    ends = table["cpu_end"].to_numpy()
    idx = np.searchsorted(starts, ts, side="right") - 1
    ok = idx >= 0
    inside = ok.copy()
    inside[ok] = ts[ok] < ends[idx[ok]]
    host_step = np.full(len(host), -1, dtype=np.int64)
    host_step[inside] = table["step"].to_numpy()[idx[inside]]
    launch = model.gpu["launch"].to_numpy()
    gpu_step = np.where(launch >= 0, host_step[np.clip(launch, 0, None)], -1) if len(host) else launch
    host = host.assign(step=host_step)
    gpu = model.gpu.assign(step=gpu_step.astype(np.int64))
    act = gpu[gpu["kind"].isin([int(Kind.KERNEL), int(Kind.MEMCPY), int(Kind.MEMSET)]) & (gpu["step"] >= 0)]
    g = act.groupby("step").agg(gpu_ts=("ts", "min"), gpu_end=("end", "max"))
    steps = table.merge(g, how="left", left_on="step", right_index=True)
    return replace(model, host=host, gpu=gpu, steps=steps, step_marks=marks.label, step_unit=marks.unit)


def drop_empty_steps(steps: pd.DataFrame) -> pd.DataFrame:
    """Steps that launched GPU work, when some did: an empty step is not a step."""
    if steps.empty or "gpu_ts" not in steps:
        return steps
    has = np.isfinite(steps["gpu_ts"].to_numpy(dtype=np.float64))
    if not has.any() or has.all():
        return steps
    return steps[has].reset_index(drop=True)


# --------------------------------------------------------------------------------------
# the finders
# --------------------------------------------------------------------------------------
def _annotation_steps(model: TraceModel, thread: tuple[int, int]) -> StepMarks | None:
    host = model.host
    kind = host["kind"].to_numpy()
    on_thread = _on_thread(model, thread)
    # torch.compile's region is a CPU op in torch 2.11 traces
    compiled = (kind == Kind.CPU_OP) & name_matches(host["name"], lambda n: bool(_COMPILED_CALL.match(n)))
    rows = np.flatnonzero(((kind == Kind.USER_ANNOTATION) | compiled) & on_thread)
    if not len(rows):
        return None
    names = host["name"].astype(str).to_numpy()[rows]
    masked = np.array([_DIGITS.sub("#", n) for n in names], dtype=object)
    ts = host["ts"].to_numpy()[rows]
    end = host["end"].to_numpy()[rows]
    groups: dict[str, np.ndarray] = {}
    for key in dict.fromkeys(masked.tolist()):
        sel = np.flatnonzero(masked == key)
        sel = sel[np.argsort(ts[sel], kind="stable")]
        if str(key).startswith(_TORCH_OWN_RANGES):
            continue
        # a member nested in an earlier one of the same name is part of it (PARAM's
        # measured forward holds its clear_cache and another forward range)
        outer_end = np.maximum.accumulate(end[sel])
        sel = sel[np.concatenate([[True], ts[sel][1:] >= outer_end[:-1] - 1.0])]
        repeats = len(sel) >= MIN_REPEATS and bool((ts[sel][1:] >= end[sel][:-1] - 1.0).all())
        single = len(sel) == 1 and (_ENGINE_STEP.match(str(key).lower()) or _COMPILED_CALL.match(str(key)))
        if repeats or single:
            groups[str(key)] = rows[sel]
    if not groups:
        return None
    # outermost: a group whose members lie inside another group's members is a part
    outer = {k: v for k, v in groups.items() if not any(o != k and _inside(model, v, groups[o]) for o in groups)}
    launches = _launch_ts(model, thread)
    useful = {k: v for k, v in outer.items() if _launch_share(model, v, launches) >= STEP_MIN_LAUNCH_SHARE}
    if not useful:
        return None
    known = [k for k in useful if _KNOWN_STEP.match(k.lower())]
    pick = (
        min(known, key=lambda k: len(useful[k]))
        if known
        else min(useful, key=lambda k: (len(useful[k]), -_covered(model, useful[k])))
    )
    once = len(useful[pick]) < MIN_REPEATS
    if once and not (_ENGINE_STEP.match(pick.lower()) or _COMPILED_CALL.match(pick)):
        return None
    table = _table(model, useful[pick], launches)
    if not len(table):
        return None
    names = model.host["name"].astype(str).to_numpy()[useful[pick]]
    first, last = _cut(names[0]), _cut(names[-1])
    if len(names) == 1:
        label = f"the program's {first!r} range"
    elif first == last:
        label = f"the program's {first!r} ranges"
    else:
        label = f"the program's ranges {first!r} … {last!r}"
    unit = "call" if once and _COMPILED_CALL.match(pick) else "step"
    if not once and _is_sweep(names.tolist()):
        # a sweep (a range per shape, matmul_sweep's 'shape_2047x2047x2047' …): one call
        # each of different work, no step that repeats
        unit, label = "sweep", f"{label}, one call per configuration of a sweep"
    return StepMarks("annotation", unit, label, table)


#: A counter's last changing number goes up by one from a range to the next in at least
#: this share of them (step_0 … step_7, epoch_1_batch_4 …).
COUNTER_MIN_SHARE = 0.8


def _is_sweep(names: list[str]) -> bool:
    """Ranges that share a name but for its numbers, each name once, the numbers no
    counter (step_0, step_1 …): parameters of a sweep ('shape_2048x2048x2047')."""
    if len(set(names)) < len(names) or len(names) < MIN_REPEATS:
        return False
    nums = [tuple(int(x) for x in _DIGITS.findall(n)) for n in names]
    if any(len(t) != len(nums[0]) for t in nums) or not nums[0]:
        return False
    counted = 0
    for a, b in pairwise(nums):
        diff = [i for i in range(len(a)) if a[i] != b[i]]
        counted += int(bool(diff) and b[diff[-1]] - a[diff[-1]] == 1 and b > a)
    return counted < COUNTER_MIN_SHARE * (len(nums) - 1)


def _framework_steps(model: TraceModel, thread: tuple[int, int]) -> StepMarks | None:
    host = model.host
    kind = host["kind"].to_numpy()
    py = np.flatnonzero((kind == Kind.PYTHON) & _on_thread(model, thread))
    if not len(py):
        return None
    names = host["name"].astype(str).to_numpy()[py]
    launches = _launch_ts(model, thread)
    for what, pattern in _FRAMEWORK_FRAMES:
        hit = np.array([bool(pattern.search(n)) for n in names], dtype=bool)
        if hit.sum() < MIN_REPEATS:
            continue
        rows = py[hit]
        rows = rows[np.argsort(host["ts"].to_numpy()[rows], kind="stable")]
        table = _table(model, rows, launches)
        if len(table) >= MIN_REPEATS:
            func = names[hit][0].rsplit(": ", 1)[-1]
            return StepMarks("framework", "step", f"{what}'s {func} calls", table)
    return None


def _optimizer_steps(model: TraceModel, thread: tuple[int, int]) -> StepMarks | None:
    host = model.host
    kind = host["kind"].to_numpy()
    # a CPU op in torch 2.x traces, a user annotation in 2023's (param/resnet_kineto)
    ops = np.flatnonzero(((kind == Kind.CPU_OP) | (kind == Kind.USER_ANNOTATION)) & _on_thread(model, thread))
    if not len(ops):
        return None
    names = host["name"].astype(str).to_numpy()[ops]
    hit = np.array([bool(_OPTIMIZER_STEP.match(n)) for n in names], dtype=bool)
    if hit.sum() < MIN_REPEATS + 1:
        return None
    rows = ops[hit]
    # one optimizer: the most frequent name (a GAN's two optimizers step in turn)
    top = pd.Series(names[hit]).value_counts().index[0]
    rows = rows[names[hit] == top]
    end = np.sort(host["end"].to_numpy()[rows])
    launches = _launch_ts(model, thread)
    out = []
    for i in range(1, len(end)):
        n = int(((launches >= end[i - 1]) & (launches < end[i])).sum()) if len(launches) else 1
        if n or not len(launches):
            out.append((i, float(end[i - 1]), float(end[i])))
    table = pd.DataFrame(out, columns=["step", "cpu_ts", "cpu_end"])
    return StepMarks("optimizer", "step", f"one {top} per step", table) if len(table) >= 1 else None


# --------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------
def _thread_key(model: TraceModel) -> np.ndarray:
    host = model.host
    key: np.ndarray = host["pid"].to_numpy().astype(np.int64) * 1_000_003 + host["tid"].to_numpy().astype(np.int64)
    return key


def _main_thread(model: TraceModel) -> tuple[int, int] | None:
    """The program's main thread: on Linux its tid is its pid (autograd's backward
    thread launches more kernels than it in a training loop, param/resnet_kineto); else
    the thread that launched most GPU work, else the one with the most ops."""
    host = model.host
    ops = host[(host["kind"] == Kind.CPU_OP) | (host["kind"] == Kind.USER_ANNOTATION)]
    main = ops[ops["pid"].to_numpy() == ops["tid"].to_numpy()]
    if len(main):
        return int(main["pid"].iat[0]), int(main["tid"].iat[0])
    launch = model.gpu["launch"].to_numpy() if len(model.gpu) else np.empty(0, dtype=np.int64)
    launch = launch[launch >= 0]
    pid = host["pid"].to_numpy()
    tid = host["tid"].to_numpy()
    if len(launch):
        pairs = pd.Series(list(zip(pid[launch].tolist(), tid[launch].tolist(), strict=True))).value_counts()
        p, t = pairs.index[0]
        return int(p), int(t)
    ops = host[host["kind"] == Kind.CPU_OP]
    if ops.empty:
        return None
    pairs = pd.Series(list(zip(ops["pid"].tolist(), ops["tid"].tolist(), strict=True))).value_counts()
    p, t = pairs.index[0]
    return int(p), int(t)


def _on_thread(model: TraceModel, thread: tuple[int, int]) -> np.ndarray:
    host = model.host
    on: np.ndarray = (host["pid"].to_numpy() == thread[0]) & (host["tid"].to_numpy() == thread[1])
    return on


def _launch_ts(model: TraceModel, thread: tuple[int, int]) -> np.ndarray:
    """Host start times of the calls on `thread` that launched GPU activity, sorted."""
    if model.gpu.empty:
        return np.empty(0)
    gpu = model.gpu
    act = gpu["kind"].isin([int(Kind.KERNEL), int(Kind.MEMCPY), int(Kind.MEMSET)]).to_numpy()
    launch = gpu["launch"].to_numpy()[act]
    launch = np.unique(launch[launch >= 0])
    if not len(launch):
        return np.empty(0)
    # every thread's: the backward thread's launches are the step's too
    out: np.ndarray = np.sort(model.host["ts"].to_numpy()[launch])
    return out


def _launch_share(model: TraceModel, rows: np.ndarray, launches: np.ndarray) -> float:
    """Share of the thread's launches inside [first member, last member] that the members hold."""
    if not len(launches):
        return 1.0
    ts = model.host["ts"].to_numpy()[rows]
    end = model.host["end"].to_numpy()[rows]
    span = int(((launches >= ts.min()) & (launches < end.max())).sum())
    if len(rows) == 1:
        return 1.0 if span else 0.0
    inside = int(sum(((launches >= a) & (launches < b)).sum() for a, b in zip(ts, end, strict=True)))
    return inside / span if span else 0.0


def _inside(model: TraceModel, rows: np.ndarray, outer: np.ndarray) -> bool:
    """Whether most of `rows` lie inside members of `outer`."""
    ts = model.host["ts"].to_numpy()
    end = model.host["end"].to_numpy()
    o_ts, o_end = ts[outer], end[outer]
    order = np.argsort(o_ts)
    o_ts, o_end = o_ts[order], o_end[order]
    k = np.searchsorted(o_ts, ts[rows], side="right") - 1
    ok = k >= 0
    within = np.zeros(len(rows), dtype=bool)
    within[ok] = end[rows][ok] <= o_end[k[ok]] + 1.0
    # the same rows are not inside themselves
    return bool(within.mean() > 0.5) and len(outer) < len(rows)


#: Step-mark names in sentences are cut to this many characters.
_LABEL_CHARS = 60


def _cut(name: str) -> str:
    return name if len(name) <= _LABEL_CHARS else name[: _LABEL_CHARS - 1] + "…"


def _covered(model: TraceModel, rows: np.ndarray) -> float:
    return float((model.host["end"].to_numpy()[rows] - model.host["ts"].to_numpy()[rows]).sum())


def _table(model: TraceModel, rows: np.ndarray, launches: np.ndarray) -> pd.DataFrame:
    """Members as steps numbered by the number in their name (else 0..n-1), members that
    launched nothing left out when the thread launched anything."""
    names = model.host["name"].astype(str).to_numpy()[rows]
    ts = model.host["ts"].to_numpy()[rows]
    end = model.host["end"].to_numpy()[rows]
    nums = [_DIGITS.findall(n) for n in names]
    last = [int(x[-1]) if x and len(x[-1]) < 12 else None for x in nums]
    numbered = all(v is not None for v in last) and len(set(last)) == len(last)
    out = []
    for i in range(len(rows)):
        if len(launches) and not ((launches >= ts[i]) & (launches < end[i])).any():
            continue
        number = last[i]
        out.append((number if numbered and number is not None else i, float(ts[i]), float(end[i])))
    return pd.DataFrame(out, columns=["step", "cpu_ts", "cpu_end"])


__all__ = ["StepMarks", "drop_empty_steps", "find_step_marks", "with_steps"]
