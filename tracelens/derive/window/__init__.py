"""The steady-state window: which part of a trace to analyse, and what came before it.

Rules, in order:

1. `user_window` (seconds from the trace's start, `--window 30:40`) or `user_steps`
   (`--steps 3-5`, inclusive, by ProfilerStep number, or by detected iteration index when
   the trace has no step marks) override everything: source "user".
2. With ProfilerStep marks the window is the steps: from the first kept step's host start
   to the end of the last step's host or GPU work. The first step is a warm-up, excluded
   and reported apart, when it is much slower than the median of the others
   (>= WARMUP_MIN_RATIO and by more than WARMUP_MIN_EXCESS_US) AND has cold-start work
   inside (CUDA context creation, lazy module loading, cudaMalloc, compilation, autotuning,
   or an op whose first call is FIRST_CALL_RATIO times slower than its later calls) worth
   at least COLD_START_MIN_SHARE of the excess; only when MIN_STEPS_KEPT steps remain.
   Source "steps". When the steps hold none of the GPU's activity, neither running nor
   launched inside them (steps cut apart from the GPU work; or no launch links to place
   them), the GPU's first to last activity is analysed instead (source "whole", the
   reason says why).
3. Without step marks the iterations come from the trace itself. The device's kernels,
   copies and memsets in GPU order, plus the blocking syncs where they return, are coded
   by name (the busiest thread's top-level ops when there is no GPU activity). The
   autocorrelation of the codes (FFT over random sign projections, O(n log n)) proposes
   candidate periods; for each, the longest stretch where the sequence matches itself one
   period later (a token may be FUZZY_SHIFT off, for one-off kernels) is measured
   exactly. The longest stretch wins; among about equally long ones, the most matches
   (exact ones counting double). Inside the stretch an anchor (a
   name, or a pair of names, occurring once per period at regular spacing, followed
   beyond the stretch while it keeps its spacing) cuts the iterations: the anchor giving
   the most whole iterations, then the one that opens the stretch, then the one after
   the most idle time. A loop delimited by long idle gaps instead (the sharpest break in
   the sorted gap lengths, regular pieces) wins when its iterations hold several
   periods (the same few kernels every step, a sleep or data wait between steps). An
   iteration starts at the first host work of its loop body (the first op or Python
   frame after the previous kernel's launch, not torch.profiler's own step()). The same
   warm-up rule as for steps then applies (keeping MIN_DETECTED_KEPT). Source "detected".
4. When nothing repeats: the device's first to last activity, or the host span when
   there is no GPU activity. Source "whole".

Everything from the trace's first event to the window's start is start-up, split into
`StartupPart`s by what the host was doing (CUDA context creation, lazy loading,
allocation, compile, autotune, data creation, model building, other); where the kinds
overlap (a cudaMalloc inside a compiled region) the more specific kind takes the time,
so the parts add up to `startup_us`.

The modules: spans.py (what a window is), steps.py (ProfilerStep marks and the warm-up
rule), detect.py (iterations found in the trace), startup.py (what came before the
window), find.py (the rules above, in order). Why a window was chosen is a typed fact
(`Window.why`, a `WindowChoice`); tracelens/explain/window.py words it.
"""

from tracelens.derive.window.detect import detect_iterations
from tracelens.derive.window.find import find_window
from tracelens.derive.window.spans import (
    InnerBody,
    Iterations,
    IterationsChosen,
    StartupPart,
    StepsChosen,
    StepSpan,
    UserSteps,
    UserWindow,
    WarmupLeftOut,
    WholeSpan,
    Window,
    WindowChoice,
    WindowError,
)
from tracelens.derive.window.startup import STARTUP_KINDS

__all__: list[str] = [
    "STARTUP_KINDS",
    "InnerBody",
    "Iterations",
    "IterationsChosen",
    "StartupPart",
    "StepSpan",
    "StepsChosen",
    "UserSteps",
    "UserWindow",
    "WarmupLeftOut",
    "WholeSpan",
    "Window",
    "WindowChoice",
    "WindowError",
    "detect_iterations",
    "find_window",
]
