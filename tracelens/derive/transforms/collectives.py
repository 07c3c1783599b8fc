"""Overlap collectives with compute: DDP's gradient buckets all-reduce during the backward,
FSDP prefetches its all-gathers, collectives issued with async_op=True are waited on only
where their result is needed.

Model: each collective kernel's exposed part (the time no other GPU work of its device
overlaps) shrinks by the share the step's free compute can hide: per step, the hidden time
is at most the compute kernels' time that overlaps no collective (what there is to hide
them under), so `share` = sum over steps of min(exposed, free compute) / exposed, worked
out by the caller. NOMINAL and HIGH hide that share; LOW half of it (buckets that are
ready only late in the backward). What already overlaps stays; the dependencies stay, so
the replay says what the hidden time buys the step: nothing where the next work waits for
the host's launches rather than for the collective.

Checked against HTA's control.json (A100, 8 ranks, all_to_all and all_reduce on their own
stream): 86.6 ms of exposed collective kernels; with every exposed part hidden the replay
shortens the window by 1.4 ms of 153.0 (two steps), as the backward thread's launches set
the pace; and against AMD's resnet_act_checkpoint (MI300X, all_reduce exposed after the
backward). No before/after pair measures it yet.
"""

from __future__ import annotations

import numpy as np

from tracelens.derive.graph import DependencyGraph
from tracelens.derive.replay import Edit
from tracelens.derive.transforms import Variant


def hide(
    g: DependencyGraph, edit: Edit, variant: Variant, nodes: np.ndarray, exposed: np.ndarray, share: float
) -> None:
    """`nodes`: the collective kernels' graph nodes; `exposed`: each one's exposed µs."""
    del g
    assert edit.dur is not None
    h = share * (0.5 if variant == Variant.LOW else 1.0)
    edit.dur[nodes] = np.maximum(edit.dur[nodes] - h * np.asarray(exposed, dtype=np.float64), 0.0)
