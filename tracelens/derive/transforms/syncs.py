"""Remove host syncs (x[mask], .item(), .tolist(), a tensor `if`, torch.cuda.synchronize()).

Model: each listed blocking call stops waiting for the GPU (its wait edges go), so the
host goes on launching while the GPU still runs the work before it, and the GPU no longer
drains at every sync. What replaces the sync differs by construct:

- a scalar read or a copy for the host (`.item()`, `.tolist()`, `.cpu()`; "item",
  "device_to_host_copy", "branch"): the value is kept on the device and read once after
  the loop, so NOMINAL also removes the read's op (its host time) and its small
  device-to-host copy; LOW keeps the op's host time (a `.detach()` and an append cost as
  much), HIGH is NOMINAL;
- a data-dependent shape (`x[mask]` -> `torch.where`/mask multiply; "data_dependent_shape")
  or anything else: NOMINAL removes the wait and keeps the op's host time (the
  replacement op dispatches as much), and the ops that consumed the compacted tensor run
  on every element instead (their kernels scaled by the input's size over the compacted
  one; the caller finds them: tracelens/predict.py); LOW also adds one kernel of the
  window's median kernel time at the sync (the mask itself); HIGH removes the op's host
  time and its copy and keeps the consumers' kernels as they were;
- an explicit synchronize: every variant removes only the wait (the call is nothing else).

Checked against the H200 pairs in workloads/diff_pairs.py: `sync` (host_sync_mask's step
vs host_sync_static's: predicted 2.14 ms, measured 2.55 ms; the rewrite also computes a
where, a count and a lerp over all 64M elements, +360 µs a step the model cannot know)
and `item` (a training step logging loss.item() vs keeping the losses on the device);
bench/diff_pairs_check.py prints predicted vs measured.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tracelens.derive.graph import DependencyGraph
from tracelens.derive.replay import Edit
from tracelens.derive.transforms import Variant, cut_waits, remove_gpu_nodes, remove_host_time

#: Constructs whose value is only read on the host: the fix keeps it on the device.
READ_CONSTRUCTS = frozenset({"item", "device_to_host_copy", "branch"})
#: Constructs that are nothing but the wait (torch.cuda.synchronize(), a stream or event
#: synchronize): removed, only the wait goes.
WAIT_ONLY_CONSTRUCTS = frozenset({"explicit_synchronize"})


def apply(
    g: DependencyGraph,
    edit: Edit,
    variant: Variant,
    sync_rows: Sequence[int],
    constructs: Sequence[str],
    op_intervals: np.ndarray,
    copy_rows: Sequence[np.ndarray],
) -> None:
    """`sync_rows`: the blocking calls (model.host rows); per call its construct id, the
    (start, end) of the op that made it (model times), and the model.gpu rows of the
    device-to-host copies that op launched."""
    assert edit.dur is not None
    nodes = g.node_of_host_rows(np.asarray(sync_rows, dtype=np.int64))
    keep = nodes >= 0
    cut_waits(g, edit, nodes[keep])
    reads = np.array([c in READ_CONSTRUCTS for c in constructs], dtype=bool)
    drop_op = reads if variant != Variant.LOW else np.zeros(len(reads), bool)
    if variant == Variant.HIGH:
        # An explicit synchronize is its own op: its measured time is the wait that
        # cut_waits already removed, not host work to drop.
        drop_op = np.array([c not in WAIT_ONLY_CONSTRUCTS for c in constructs], dtype=bool)
    iv = np.asarray(op_intervals, dtype=np.float64).reshape(-1, 2)
    if drop_op.any() and len(iv):
        inside = remove_host_time(g, edit, iv[drop_op[: len(iv)]])
        edit.dur[inside] = 0.0
        for i in np.flatnonzero(drop_op).tolist():
            if i < len(copy_rows):
                remove_gpu_nodes(g, edit, g.node_of_gpu_rows(copy_rows[i]))
    if variant == Variant.LOW:
        # The masked computation that replaces a data-dependent op runs on every element:
        # one more kernel of the window's median kernel time, where the copy was.
        gpu_dur = g.end[g.kind == 1] - g.ts[g.kind == 1]
        median = float(np.median(gpu_dur)) if len(gpu_dur) else 0.0
        for i in np.flatnonzero(~reads).tolist():
            if i < len(copy_rows):
                cn = g.node_of_gpu_rows(copy_rows[i])
                cn = cn[cn >= 0]
                if len(cn):
                    edit.dur[cn[0]] += median
