"""What torch.profiler itself costs a rank, from what it recorded: the job report says
when ranks record so differently that the profiler slows one more than the others, which
moves who is late and by how much.

The profiler adds host time on the thread that records each event: a Python frame under
`with_stack` (the tracer's call and return hooks) and a torch op (RecordFunction's
start and end). Measured by bench/profiler_overhead.py (the same loop with and without
the profiler, the extra time over the events recorded):

- the 2-core development machine under load (torch 2.13 CPU): 1.97 µs per Python frame,
  5.6 µs per torch op (with_stack), 8.7 µs (without, a noisier run);

A rank busy in pure Python under `with_stack` records one frame per call it makes: rank 1
of workloads/ranks/ddp_cpu.py (20 ms of a Python loop per step) recorded 13,500 frames per
step against 500 on rank 0. When the extra work is a time-bounded loop the profiler makes
it do less, not take longer; when it is a fixed amount of work (a tokenizer over a batch)
it takes longer by about frames x cost. The estimate is therefore an upper bound, said as
such.
"""

from __future__ import annotations

#: Host µs per recorded event (see above).
US_PER_PYTHON_FRAME = 1.97
US_PER_OP = 5.6
#: The profiler's extra time on the straggler is said when it reaches this share of the
#: straggler's cost (smaller differences do not move who is late or the cost much).
MOVES_SHARE = 0.1


def per_step_us(events_per_step: dict[str, float]) -> float:
    """The profiler's host time per step on a rank that recorded these events per step."""
    return events_per_step.get("python", 0.0) * US_PER_PYTHON_FRAME + events_per_step.get("ops", 0.0) * US_PER_OP
