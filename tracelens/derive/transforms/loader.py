"""DataLoader workers: build the batches in num_workers processes instead of on the
training thread.

Model: the training thread's time inside the DataLoader's `__next__` (collate and the
dataset's `__getitem__` calls) leaves the critical path; what stays is receiving a
finished batch from a worker: IPC_BASE_US plus IPC_US_PER_MB of the batch (unpickling the
tensors' shared-memory handles, under the profiler), and the batch's host-to-device
copies run SHM_COPY_SLOWDOWN times longer, from the worker's shared-memory pages. The
workers together make a batch every T_load / W (T_load: the loading time per step
measured on the training thread, W the workers), so the step cannot be shorter than that:
the window's floor is steps x T_load / W. NOMINAL takes W = 4 (the advice's example and
workloads/diff_pairs.py), LOW W = 2 and 1.5x the receiving cost, HIGH W = 8 and half of it.

Measured on the H200 (torch 2.11, the `loader` pair of workloads/diff_pairs.py: 32 x
3x160x160 fp32 batches, 9.8 MB, a conv net training step; num_workers 0 -> 4): the
training thread's `__next__` went from 11.7 ms to 1.81 ms a step (the receiving cost) and
the batch's pageable copy from 1.04 to 1.93 ms of GPU time, and its cudaMemcpyAsync call
(the host staging the batch from the worker's pages) from 1.19 to 2.19 ms a step (1.85x):
the call is as much slower as its copy (SHM_COPY_SLOWDOWN, fitted on `loader`; loader_u,
not fitted: 1.47 -> 2.36 ms, 1.61x).
"""

from __future__ import annotations

import numpy as np

from tracelens.derive.graph import DependencyGraph
from tracelens.derive.replay import Edit
from tracelens.derive.transforms import Variant, launch_nodes_of, remove_host_time

#: Receiving one batch from a worker on the training thread, under the profiler (H200:
#: 1.81 ms for a 9.8 MB batch; the fixed part is a guess at a small batch's cost).
IPC_BASE_US = 100.0
IPC_US_PER_MB = 175.0
#: The batch's host-to-device copy from a worker's shared memory over the same copy from
#: the training thread's own pages (H200: 1.93 / 1.04 ms).
SHM_COPY_SLOWDOWN = 1.86
WORKERS = {"low": 2, "nominal": 4, "high": 8}


def apply(
    g: DependencyGraph,
    edit: Edit,
    variant: Variant,
    load_intervals: np.ndarray,
    batch_bytes: float,
    copy_rows: np.ndarray,
) -> float:
    """`load_intervals`: (start, end) of each `__next__` on the training thread in the
    window; `batch_bytes`: a batch's size (its host-to-device copies); `copy_rows`: those
    copies (model.gpu rows). Returns the throughput floor applied (µs for the window)."""
    assert edit.dur is not None
    iv = np.asarray(load_intervals, dtype=np.float64).reshape(-1, 2)
    if not len(iv):
        return 0.0
    workers = WORKERS[variant.value]
    scale = {Variant.LOW: 1.5, Variant.HIGH: 0.5}.get(variant, 1.0)
    ipc = scale * (IPC_BASE_US + IPC_US_PER_MB * batch_bytes / 1e6)
    load = iv[:, 1] - iv[:, 0]
    keep = np.minimum(load, ipc)
    remove_host_time(g, edit, np.column_stack([iv[:, 0] + keep, iv[:, 1]]))
    nodes = g.node_of_gpu_rows(np.asarray(copy_rows, dtype=np.int64))
    nodes = nodes[nodes >= 0]
    slower = 1.0 + (SHM_COPY_SLOWDOWN - 1.0) * scale
    edit.dur[nodes] = edit.dur[nodes] * slower
    # A pageable copy's call stages the batch on the host, from the same pages: as much slower.
    calls = np.unique(launch_nodes_of(g, nodes))
    calls = calls[calls >= 0]
    edit.dur[calls] = edit.dur[calls] * slower
    floor = float(load.sum()) / workers
    edit.min_span_us = max(edit.min_span_us, floor)
    return floor


#: The share of a wait in a worker-fed `__next__` that stands for receiving a ready batch:
#: the window's calls at or below this percentile of their durations did not wait
#: (PARAM's resnet_kineto: 28 calls, the 8 shortest 82-139 µs, the median 110 ms).
READY_PERCENTILE = 10


def keep_up(
    g: DependencyGraph,
    edit: Edit,
    variant: Variant,
    wait_intervals: np.ndarray,
    receive_us: float,
    span_us: float,
) -> float:
    """The input pipeline keeps up: DataLoader workers that already exist (a
    `_MultiProcessingDataLoaderIter`) but do not make batches as fast as the step uses
    them get more workers, warm ones (persistent_workers, prefetch_factor), pinned output.

    Model: each `__next__` on the training thread keeps only the time to receive a ready
    batch (`receive_us`: what the window's calls that found one ready took, see
    READY_PERCENTILE, and never more than IPC_BASE_US + IPC_US_PER_MB of the batch: the
    caller's); the wait beyond it leaves the critical path. NOMINAL and HIGH: the
    workers keep up (HIGH with the fastest call's receiving cost, the caller's choice);
    LOW: the workers are only doubled, so they make a batch every half of the measured
    step, which bounds the window at half its measured span (the loop waited on them in
    every step, so the measured step was their period).

    Checked against the H200 `workers` pair of workloads/diff_pairs.py (num_workers=1 ->
    6, persistent, prefetch 4; 9.8 MB batches): every one of the 6 profiled calls waited
    (7.75-10.6 ms), so the receiving cost is the IPC model's 1.82 ms (the after-trace's
    calls took 1.43-2.51 ms): predicted -7.28 ms a step, measured -7.60 ms, the step
    16.10 ms predicted, 15.79 ms measured (2% high). The rule that caps the receiving cost
    by the IPC model was set after seeing that pair; and PARAM's resnet_kineto (RTX 2080
    Ti, 29 steps, 6.27 s of __next__ in the window, 4.72 s of GPU idle under it; the 8
    shortest calls 82-139 µs).
    Returns the wait removed (µs over the window)."""
    iv = np.asarray(wait_intervals, dtype=np.float64).reshape(-1, 2)
    if not len(iv):
        return 0.0
    load = iv[:, 1] - iv[:, 0]
    keep = np.minimum(load, max(receive_us, 0.0))
    remove_host_time(g, edit, np.column_stack([iv[:, 0] + keep, iv[:, 1]]))
    if variant == Variant.LOW:
        edit.min_span_us = max(edit.min_span_us, 0.5 * span_us)
    return float((load - keep).sum())
