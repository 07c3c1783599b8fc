"""Which part of a run `tracelens capture` records: the recording window.

A whole run is the wrong thing to record: model building, the first compile and the
first iterations dominate it and make traces of gigabytes (issue 12: 2.2 GB for three
`generate` calls). The default skips a warm-up and records a bounded steady state:

- steps are `tracelens.capture.step()` calls, else `optimizer.step()` calls, else the
  ends of the outermost `nn.Module` calls (one per forward: a token in `generate`, a batch
  in an inference loop); the first kind seen wins over the later ones;
- with steps, record steps WARMUP_STEPS .. WARMUP_STEPS + STEPS - 1 (the step before the
  first mark is step 0), stopping early after DURATION_S seconds;
- with no step mark after WARMUP_S seconds, record DURATION_S seconds from then; a step
  mark that comes later restarts the warm-up by steps (the time recording is kept only if
  nothing better comes). A script that has imported a framework whose work comes in
  module calls (Lightning, transformers, accelerate, timm ...) waits FRAMEWORK_WARMUP_S
  for its first one instead: its set-up is long and Python-heavy, and recording it by time
  with Python stacks is what made those captures slow;
- until the warm-up is over the start of the run is recorded provisionally (bounded the
  same way), so a script that ends during its warm-up still leaves a trace.

The window only decides; `Recorder` in runner.py starts and stops torch.profiler. This
module imports no torch so the policy is testable on its own.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum

#: Steps skipped by default: the first compile, cuDNN/cuBLAS autotuning and allocator
#: growth happen in the first one to three steps; five leaves a margin for a recompile.
WARMUP_STEPS = 5
#: Steps recorded by default: enough for step-to-step variation and the steady-state
#: window, small enough that a stack-heavy step (~20k events for a Llama decode token)
#: stays in the hundreds of thousands of events.
STEPS = 20
#: Longest recording by default, whatever the steps: bounds traces of slow steps.
DURATION_S = 10.0
#: Without step marks, warm-up by time: CUDA context creation, library loading and a
#: small model's building take a few seconds.
WARMUP_S = 5.0
#: Without step marks, warm-up by time for a script that imported one of FRAMEWORKS.
#: Their set-up before the first module call (imports, building or loading the model,
#: Lightning's fit set-up, tokenising) outlasts WARMUP_S, and a time recording started in
#: it (with Python stacks) recorded the set-up instead of the steps and slowed it: on the
#: H200 a sentence-transformers encode run was killed at 70 s (its steps take ~1 s) and a
#: Lightning fit reached step 5 at 41 s; on the CPU the encode run's set-up recording
#: was a 44 MB export. Their steps come later from the same module calls and optimizer
#: steps; the time recording stays the fallback for a set-up longer than this.
FRAMEWORK_WARMUP_S = 60.0
#: Top-level packages whose programs do their work in nn.Module calls or optimizer steps.
FRAMEWORKS = (
    "lightning", "pytorch_lightning", "transformers", "accelerate", "sentence_transformers", "timm",
    "torch_geometric", "diffusers", "torchvision.models",
)  # fmt: skip
#: Longest provisional recording of the run's start (kept only if the script ends
#: during its warm-up). Short: the start is model building and compiling, whose Python
#: under with_stack is millions of events (a CPU torch.compile run reached 6.6 GB RSS
#: in its first minute); tests/data/cpu_train.py's 5 steps fit in it.
PROVISIONAL_S = 3.0
#: Most timed events kept in the written trace by default (~320 bytes each in Kineto's
#: JSON, so ~330 MB uncompressed; the report loads that in seconds).
MAX_EVENTS = 1_000_000
#: A steps recording whose time cap passes before the script marks one step inside it
#: waits for that mark, up to this many times the cap: a recording with no whole step
#: has nothing to report (on the H200 box at load 39-51, 15 of 914 scenario runs wrote a
#: trace without a torch op when the cap ended the recording before its first step).
FIRST_STEP_GRACE = 3.0

STEP_SOURCES = ("forward", "optimizer", "explicit")  # low to high precedence


def loaded_framework(modules: Iterable[str]) -> str | None:
    """The first of FRAMEWORKS among the imported module names (sys.modules), or None."""
    names = set(modules)
    return next((f for f in FRAMEWORKS if f in names), None)


class Mode(Enum):
    DEFAULT = "default"  # warm-up, then a bounded steady state
    STEPS = "steps"  # --steps N-M
    TIME = "time"  # --window START:END
    ALL = "all"  # --all: the whole run


class Phase(Enum):
    PROVISIONAL = "provisional"  # recording the start, to be replaced
    WAITING = "waiting"  # warming up, not recording
    RECORDING = "recording"
    DONE = "done"


class Action(Enum):
    NONE = "none"
    START = "start"  # start a recording (dropping the provisional one if it still runs)
    STOP = "stop"  # stop the recording; its trace replaces the one kept so far
    STEP = "step"  # mark a step inside the recording (ProfilerStep#N)
    SET_ASIDE = "set_aside"  # stop the provisional recording, keep it unexported


@dataclass
class Limits:
    mode: Mode = Mode.DEFAULT
    warmup_steps: int = WARMUP_STEPS
    steps: int | None = STEPS
    duration_s: float | None = DURATION_S
    warmup_s: float = WARMUP_S
    framework_warmup_s: float = FRAMEWORK_WARMUP_S
    max_events: int | None = MAX_EVENTS
    #: --window START:END, seconds after the script starts
    window_s: tuple[float, float] | None = None

    def describe(self) -> str:
        """The limits in words, for the line printed before the script runs."""
        dur = f"{self.duration_s:g} s" if self.duration_s is not None else "no time limit"
        ev = f"{self.max_events:,} events" if self.max_events is not None else "no event limit"
        if self.mode is Mode.ALL:
            return f"recording the whole run ({ev})"
        if self.mode is Mode.TIME and self.window_s is not None:
            return f"recording from {self.window_s[0]:g} s to {self.window_s[1]:g} s ({ev})"
        last = self.warmup_steps + self.steps - 1 if self.steps is not None else None
        span = f"steps {self.warmup_steps}-{last}" if last is not None else f"from step {self.warmup_steps}"
        if self.mode is Mode.STEPS:
            return f"recording {span} ({dur}, {ev})"
        return (
            f"recording {span} after a warm-up, or {dur} from {self.warmup_s:g} s if the script marks no steps "
            f"({self.framework_warmup_s:g} s with a framework such as Lightning or transformers) "
            f"(at most {dur}, {ev}; change with --steps, --window, --duration, --max-events, --all)"
        )


@dataclass
class Recording:
    """One recording's bounds, for the messages and the trace's metadata."""

    kind: str  # "steps", "time", "start" (provisional), "all"
    t_start: float
    first_step: int
    t_end: float | None = None
    last_step: int | None = None
    reason: str = ""  # why it ended


class Window:
    """The recording state machine. Every method returns what the recorder must do;
    `now` is seconds since the script started."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.phase = Phase.WAITING
        self.steps = 0  # step marks counted (of the winning source)
        self.source: str | None = None
        self.current: Recording | None = None
        self.kept: Recording | None = None  # the recording whose trace is kept so far
        self.time_mode = False  # the current/kept recording was started by time
        self.provisional: Recording | None = None  # the start of the run, set aside
        #: An outermost module call has begun: step marks are coming, so no time-based
        #: recording (a first forward that compiles or autotunes can take a minute).
        self.step_begun = False
        #: Time recordings replaced by a later steps recording (the trace's metadata lists
        #: them: what the capture spent recording set-up).
        self.superseded: list[Recording] = []
        #: The first of FRAMEWORKS the script imported (the runner says), or None.
        self.framework: str | None = None

    # -- events -------------------------------------------------------------------------
    def begin(self) -> Action:
        mode = self.limits.mode
        if mode is Mode.ALL:
            return self._start("all", 0.0)
        if mode is Mode.DEFAULT:
            self.phase = Phase.PROVISIONAL
            self.current = Recording("start", 0.0, 0)
            return Action.START
        if mode is Mode.STEPS and self.limits.warmup_steps <= 0:
            return self._start("steps", 0.0)
        return Action.NONE

    def accept(self, source: str) -> bool:
        """Whether a step mark from `source` counts (a higher-precedence source, once
        seen, wins over the lower ones)."""
        if self.source is None or STEP_SOURCES.index(source) > STEP_SOURCES.index(self.source):
            if self.source is not None and self.phase in (Phase.PROVISIONAL, Phase.WAITING):
                # The count is of the winning source: the first optimizer.step() after a
                # forward mark is step 1, not 2 (only while warming up; a recording's
                # numbering is left alone).
                self.steps = 0
            self.source = source
            return True
        return source == self.source

    def step(self, now: float) -> Action:
        """A step mark (already accepted)."""
        self.steps += 1
        lim = self.limits
        if self.phase is Phase.RECORDING and self.current is not None:
            if self.time_mode and lim.mode is Mode.DEFAULT:
                # Step marks after a time-started recording: the script has steps after
                # all (e.g. a model that took long to build). Warm up by steps again.
                self.kept = self._end(now, "superseded by step marks")
                self.superseded.append(self.kept)
                self.phase, self.time_mode = Phase.WAITING, False
                self.steps = 1
                return Action.STOP
            recorded = self.steps - self.current.first_step
            if (
                lim.mode is not Mode.TIME
                and lim.mode is not Mode.ALL
                and lim.steps is not None
                and recorded >= lim.steps
            ):
                return self._stop(now, f"{lim.steps} steps")
            if self._over_duration(now):
                return self._stop(now, f"{lim.duration_s:g} s")
            return Action.STEP
        warming = self.phase in (Phase.PROVISIONAL, Phase.WAITING) and lim.mode in (Mode.DEFAULT, Mode.STEPS)
        if warming and self.steps >= lim.warmup_steps:
            return self._start("steps", now)
        if self.phase is Phase.PROVISIONAL:
            return Action.STEP
        return Action.NONE

    def tick(self, now: float) -> Action:
        """A timer tick: time-based starts and stops."""
        lim = self.limits
        if self.phase is Phase.PROVISIONAL:
            if self._time_start_allowed() and now >= self._time_start_s():
                return self._start("time", now)
            if now >= self._provisional_end():
                self.provisional = self._end(now, f"{self._provisional_end():g} s (start of the run)")
                self.phase = Phase.WAITING
                return Action.SET_ASIDE
            return Action.NONE
        if self.phase is Phase.WAITING:
            if lim.mode is Mode.TIME and lim.window_s is not None and now >= lim.window_s[0]:
                return self._start("time", now)
            if self._time_start_allowed() and self.kept is None and now >= self._time_start_s():
                return self._start("time", now)
            return Action.NONE
        if self.phase is Phase.RECORDING and self.current is not None:
            if lim.mode is Mode.TIME and lim.window_s is not None and now >= lim.window_s[1]:
                return self._stop(now, f"window end {lim.window_s[1]:g} s")
            if lim.mode is not Mode.ALL and self._over_duration(now):
                if self.time_mode and lim.mode is Mode.DEFAULT:
                    # Kept, but step marks that come later still get their recording.
                    self.kept = self._end(now, f"{lim.duration_s:g} s")
                    self.phase = Phase.WAITING
                    return Action.STOP
                return self._stop(now, f"{lim.duration_s:g} s")
        return Action.NONE

    def finish(self, now: float, reason: str) -> Action:
        """The script ended (normally or not)."""
        if self.phase in (Phase.RECORDING, Phase.PROVISIONAL) and self.current is not None:
            self.kept = self._end(now, reason)
            self.phase = Phase.DONE
            return Action.STOP
        self.phase = Phase.DONE
        return Action.NONE

    def started(self, now: float) -> None:
        """The recorder is running: the recording's clock (and its time cap) starts now,
        not when it was asked for. Starting torch.profiler took 7-52 s of wall time on a
        loaded machine (Kineto's set-up, an export of the set-aside start), which used up
        the 10 s cap before the script's next step."""
        if self.current is not None:
            self.current.t_start = now

    def start_failed(self) -> None:
        """The recorder could not start: wait (a time window's start is retried at the
        next tick)."""
        self.phase = Phase.WAITING
        self.current = None

    def next_deadline(self) -> float | None:
        """When the next tick is due (seconds since start), or None."""
        lim = self.limits
        if self.phase is Phase.PROVISIONAL:
            times = [self._time_start_s()] if self._time_start_allowed() else []
            return min([*times, self._provisional_end()])
        if self.phase is Phase.WAITING:
            if lim.mode is Mode.TIME and lim.window_s is not None:
                return lim.window_s[0]
            if self._time_start_allowed() and self.kept is None:
                return self._time_start_s()
            return None
        if self.phase is Phase.RECORDING and self.current is not None:
            if lim.mode is Mode.TIME and lim.window_s is not None:
                return lim.window_s[1]
            if lim.mode is not Mode.ALL and lim.duration_s is not None:
                grace = FIRST_STEP_GRACE if self._awaits_first_step() else 1.0
                return self.current.t_start + lim.duration_s * grace
        return None

    def drop_provisional(self) -> bool:
        """A torch.compile starts during the provisional recording: stop it unkept (the
        compiler's Python would fill it). True when there was one to drop."""
        if self.phase is not Phase.PROVISIONAL:
            return False
        self.phase, self.current = Phase.WAITING, None
        return True

    # -- helpers ------------------------------------------------------------------------
    def _time_start_allowed(self) -> bool:
        return self.limits.mode is Mode.DEFAULT and self.steps == 0 and not self.step_begun

    def _time_start_s(self) -> float:
        lim = self.limits
        return max(lim.warmup_s, lim.framework_warmup_s) if self.framework is not None else lim.warmup_s

    def _provisional_end(self) -> float:
        d = self.limits.duration_s
        return min(PROVISIONAL_S, d) if d is not None else PROVISIONAL_S

    def _over_duration(self, now: float) -> bool:
        d = self.limits.duration_s
        if d is None or self.current is None:
            return False
        grace = FIRST_STEP_GRACE if self._awaits_first_step() else 1.0
        return now - self.current.t_start >= d * grace

    def _awaits_first_step(self) -> bool:
        """A steps recording that holds no step mark yet."""
        cur = self.current
        return cur is not None and cur.kind == "steps" and self.steps == cur.first_step

    def _start(self, kind: str, now: float) -> Action:
        if self.phase is Phase.PROVISIONAL and self.current is not None:
            # Kept aside until the new recording holds a whole step (runner.py).
            self.provisional = self._end(now, "the warm-up ended")
        self.phase = Phase.RECORDING
        self.time_mode = kind == "time"
        self.current = Recording(kind, now, self.steps)
        return Action.START

    def _end(self, now: float, reason: str) -> Recording:
        assert self.current is not None
        rec = self.current
        rec.t_end, rec.reason = now, reason
        rec.last_step = self.steps
        self.current = None
        return rec

    def _stop(self, now: float, reason: str) -> Action:
        self.kept = self._end(now, reason)
        self.phase = Phase.DONE
        return Action.STOP
