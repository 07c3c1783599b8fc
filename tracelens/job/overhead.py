"""What torch.profiler itself costs a rank, from what it recorded: the job report says
when ranks record so differently that the profiler slows one more than the others, which
moves who is late and by how much.

The profiler adds host time on the thread that records each event: a Python frame under
`with_stack` (the tracer's call and return hooks) and a torch op (RecordFunction's
start and end). Measured by bench/profiler_overhead.py (the same loop with and without
the profiler, the extra time over the events recorded):

- the H200 machine's host (16 cores, idle; torch 2.11): 0.46 µs per Python frame, 1.3-1.5
  µs per torch op;
- the 2-core development machine under load (torch 2.13 CPU): 1.97 µs per Python frame,
  5.6 µs per torch op.

A rank busy in pure Python under `with_stack` records one frame per call it makes: rank 1
of workloads/ranks/plain_gloo.py (25 ms of a Python loop per step) recorded 46,000 frames
per step more than rank 0 on the H200. When that extra work is a fixed amount (a
tokenizer over a batch) the profiler lengthens it by about frames x cost; when it is a
loop that runs for a set time it does less, not longer: there with_stack moved the
straggler's measured cost by 1 ms (26.6 ms per step with stacks, 25.6 without). The
estimate is therefore an upper bound, said as such, with the way to measure it
(--no-stack).
"""

from __future__ import annotations

#: Host µs per recorded event (see above).
US_PER_PYTHON_FRAME = 0.46
US_PER_OP = 1.5
#: The profiler's extra time on the straggler is said when it reaches this share of the
#: straggler's cost (smaller differences do not move who is late or the cost much).
MOVES_SHARE = 0.1


def per_step_us(events_per_step: dict[str, float]) -> float:
    """The profiler's host time per step on a rank that recorded these events per step."""
    return events_per_step.get("python", 0.0) * US_PER_PYTHON_FRAME + events_per_step.get("ops", 0.0) * US_PER_OP
