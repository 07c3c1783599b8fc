"""Pin the host side of host-to-device copies and copy with non_blocking=True.

Model: a copy from pageable memory makes its cudaMemcpyAsync call wait while the driver
stages the data through a bounce buffer, and the copy runs at the pageable rate. Pinned
and asynchronous, the call returns after ASYNC_COPY_CALL_US and the copy runs at the
pinned rate, queued on its stream like any kernel: the host goes on launching while it
runs. NOMINAL: the source is pinned off the training thread (a DataLoader's pin-memory
thread, or a buffer pinned once); LOW: the training thread pins it every step (a host
copy at PIN_BYTES_PER_S) and the copy runs at the lower pinned rate; HIGH: no pinning
cost, the best pinned rate.

Measured on the H200 (torch 2.11, sample_traces/host_bound_pageable and _pinned: the same
9.8 MB batches): pageable HtoD ran at about 12 GB/s with the host blocked about 0.9 ms a
copy; pinned at about 55 GB/s with cudaMemcpyAsync returning at once. Checked against the
`pinned` pair of workloads/diff_pairs.py.
"""

from __future__ import annotations

import numpy as np

from tracelens.derive.graph import DependencyGraph
from tracelens.derive.replay import Edit
from tracelens.derive.transforms import Variant, cut_waits

#: A non-blocking cudaMemcpyAsync's host time under the profiler (H200: 6-12 µs).
ASYNC_COPY_CALL_US = 10.0
#: Pinned host-to-device rate (H200 over PCIe Gen5, host_bound_pinned: ~55 GB/s);
#: LOW takes 40 GB/s.
PINNED_BYTES_PER_S = 55e9
PINNED_LOW_BYTES_PER_S = 40e9
#: Copying a batch into pinned memory on the host (t.pin_memory(): a page-locked
#: allocation and a memcpy), LOW's cost on the training thread.
PIN_BYTES_PER_S = 8e9


def apply(
    g: DependencyGraph,
    edit: Edit,
    variant: Variant,
    call_rows: np.ndarray,
    copy_rows: np.ndarray,
    copy_bytes: np.ndarray,
    pinned_rate: float = 0.0,
) -> int:
    """`call_rows` (model.host) launched `copy_rows` (model.gpu) of `copy_bytes` each.
    `pinned_rate`: a pinned HtoD rate measured in this trace, if any (bytes/s)."""
    assert edit.dur is not None
    calls = g.node_of_host_rows(np.asarray(call_rows, dtype=np.int64))
    copies = g.node_of_gpu_rows(np.asarray(copy_rows, dtype=np.int64))
    nbytes = np.asarray(copy_bytes, dtype=np.float64)
    rate = pinned_rate if pinned_rate > 0 else PINNED_BYTES_PER_S
    if variant == Variant.LOW:
        rate = min(rate, PINNED_LOW_BYTES_PER_S)
    ok = (calls >= 0) & (copies >= 0)
    cut_waits(g, edit, calls[ok])
    own = np.full(int(ok.sum()), ASYNC_COPY_CALL_US)
    if variant == Variant.LOW:
        own = own + nbytes[ok] / PIN_BYTES_PER_S * 1e6
    edit.dur[calls[ok]] = np.minimum(edit.dur[calls[ok]], own) if variant != Variant.LOW else own
    edit.dur[copies[ok]] = np.minimum(edit.dur[copies[ok]], nbytes[ok] / rate * 1e6)
    return int(ok.sum())
