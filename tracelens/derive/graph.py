"""The dependency graph of the analysed window, for what-if replay (issue 25; Daydream,
Zhu et al., USENIX ATC 2020).

Nodes are the host's runtime/driver calls on each launching thread (cudaLaunchKernel,
cudaMemcpyAsync, cudaStreamSynchronize, cudaMalloc, ...: the outermost call where one
nests in another) and the GPU's activities (kernels, copies, memsets) on each stream.
Each thread and each stream is a chain: a node starts after its predecessor on the chain
ends plus a gap, and

- on a thread the gap is the host's own work between two calls (Python, aten dispatch),
  kept as measured;
- on a stream the gap is the device's back-to-back gap when the kernel was queued, or
  what separated it from its predecessor when something else held it back.

Edges between chains:

- launch -> activity (correlation): an activity starts no earlier than its launch call
  started plus the launch latency;
- GPU -> host waits: a blocking call (stream/device/event synchronize, a copy to or from
  pageable memory, and any host call of WAIT_CALL_MIN_US or more, such as cudaFree or a
  launch that found the queue full) that returned within RETURN_SLACK_US after GPU work
  launched before it ended, ends no earlier than that work (per stream, the latest);
- stream -> stream (an event wait): an activity that started later than its stream and
  its launch explain, right after an activity on another stream of its device ended;
- thread -> thread: a thread that waits inside the autograd engine (run_backward) while
  another thread runs the backward (fork at its entry, join at the other's last call).

Every delay is the measured one on the edge that bound the node and a nominal one (this
trace's median launch latency, back-to-back gap, return latency) on the others, capped so
that no edge is later than the measured time: replaying the graph unmodified reproduces
every node's measured times, and a transform (derive/transforms/) changes durations, gaps
and edges and replays. What happened before the window is fixed at its measured times.

Built once per report (AnalysisContext.graph); vectorised over the window's nodes.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pandas as pd

from tracelens.derive.graph_order import topological_order
from tracelens.derive.graph_select import GPU as GPU
from tracelens.derive.graph_select import HOST as HOST
from tracelens.derive.graph_select import select_window_nodes
from tracelens.derive.graph_threads import _thread_key, _thread_waits
from tracelens.derive.host_calls import queued_copy_call_rows
from tracelens.derive.window import Window
from tracelens.domain import ASYNC_COPY_APIS, SYNC_APIS
from tracelens.model.schema import Kind
from tracelens.model.trace import TraceModel, name_matches

#: A host call that lasted this long may have waited for the device (cudaFree syncs it;
#: a launch blocks when the launch queue is full), and is checked for a wait like a sync.
WAIT_CALL_MIN_US = 50.0
#: A call waited on GPU work when it returned within this long after that work ended:
#: a sync returns 3-15 µs after its stream drains under the profiler (host_sync_mask and
#: train_step on the H200, the 2021 V100 ResNet traces), a pageable copy a few µs after.
RETURN_SLACK_US = 50.0
#: CUPTI aligns host and device clocks to within a few µs.
CLOCK_SLACK_US = 5.0
#: A waiting call's own host time when it does not wait (a sync that finds its stream idle
#: returns in 2-6 µs under the profiler in the H200 traces).
WAIT_BASE_US = 5.0
#: Nominal delays when the trace has too few cases to measure them: launch latency on an
#: idle stream (4-10 µs on the H200 and A100 traces) and the gap between back-to-back
#: kernels on a stream (about 1 µs).
DEFAULT_LAUNCH_LATENCY_US = 6.0
DEFAULT_GPU_GAP_US = 1.0
#: A stream "was busy" at a launch when its predecessor ended this long after the launch
#: (the kernel was queued): those kernels measure the back-to-back gap.
QUEUED_MIN_US = 20.0
#: An activity's start is explained by its stream and launch when it is within this long
#: of the later of the two nominal times.
EXPLAINED_US = 5.0
#: A cross-stream wait: the activity started within this long after an activity on
#: another stream of its device ended, later than its stream and launch explain.
CROSS_STREAM_MAX_US = 50.0

#: Edge types: the source's start or end, plus the delay, bounds the target's start or end.
START_START = np.int8(0)
END_START = np.int8(1)
END_END = np.int8(2)

_ACTIVITY_KINDS = (int(Kind.KERNEL), int(Kind.MEMCPY), int(Kind.MEMSET))
_NEG = -np.inf


@dataclass(frozen=True)
class DependencyGraph:
    """Nodes in chain order (each chain's nodes contiguous, in time order); edge arrays."""

    window_start: float
    window_end: float
    device: int
    # -- nodes
    kind: np.ndarray  # HOST or GPU
    row: np.ndarray  # model.host row (HOST) or model.gpu row (GPU)
    chain: np.ndarray  # chain index
    ts: np.ndarray  # measured start
    end: np.ndarray  # measured end
    gap: np.ndarray  # start >= chain predecessor's end + gap
    dur: np.ndarray  # end >= start + dur (a waiting call's own time, without the wait)
    s_fixed: np.ndarray  # start >= this (a launch before the window); -inf when none
    e_fixed: np.ndarray  # end >= this (a wait on work before the window); -inf when none
    counted: np.ndarray  # bool: its end counts toward the window's end
    # -- chains
    chain_first: np.ndarray  # index of each chain's first node; a final entry = n
    chain_init: np.ndarray  # each chain's state before its first node (fixed)
    chain_host: np.ndarray  # bool
    chain_key: tuple[tuple[int, int], ...]  # (pid, tid) of a thread, (device, stream) of a stream
    chain_tail: np.ndarray  # host chains: measured time from the last node's end to the window's end marker
    chain_paces: np.ndarray  # bool: a host chain whose end counts toward the window's end (it launches or joins)
    #: the window's end less the latest end the graph explains: time at the window's end
    #: with no event in it (a recording that stopped mid-iteration); kept as measured
    uncovered_tail_us: float
    # -- edges
    e_src: np.ndarray
    e_dst: np.ndarray
    e_delay: np.ndarray
    e_type: np.ndarray
    # -- this trace's nominal delays
    launch_latency_us: float
    gpu_gap_us: float
    return_latency_us: float
    #: node index of a model.host row (-1 when the row is no node): for the transforms
    host_node: dict[int, int]
    #: per node, the host node that launched it (its launch edge's source), -1 if none
    launcher: np.ndarray
    notes: tuple[str, ...] = ()

    @property
    def n(self) -> int:
        return len(self.kind)

    @cached_property
    def order(self) -> np.ndarray:
        """The nodes in an order that respects every dependency (derive/replay.py's ordered
        pass; computed once: removing edges keeps it valid)."""
        return np.array(topological_order(self.n, self.chain_first, self.e_src, self.e_dst), dtype=np.int64)

    @property
    def n_chains(self) -> int:
        return len(self.chain_init)

    def node_of_gpu_rows(self, rows: np.ndarray) -> np.ndarray:
        """Node indexes of model.gpu rows (-1 where a row is no node)."""
        gpu_nodes = np.flatnonzero(self.kind == GPU)
        gpu_rows = self.row[gpu_nodes]
        order = np.argsort(gpu_rows, kind="stable")
        sorted_rows = gpu_rows[order]
        rows = np.asarray(rows, dtype=np.int64)
        at = np.searchsorted(sorted_rows, rows)
        at_c = np.clip(at, 0, max(len(sorted_rows) - 1, 0))
        hit = (at < len(sorted_rows)) & (sorted_rows[at_c] == rows) if len(sorted_rows) else np.zeros(len(rows), bool)
        return np.where(hit, gpu_nodes[order][at_c], -1) if len(sorted_rows) else np.full(len(rows), -1)

    def node_of_host_rows(self, rows: np.ndarray) -> np.ndarray:
        return np.array([self.host_node.get(int(r), -1) for r in np.asarray(rows).tolist()], dtype=np.int64)


def _percentile_or(values: np.ndarray, q: float, default: float, min_count: int = 8) -> float:
    values = values[np.isfinite(values)]
    return float(np.percentile(values, q)) if len(values) >= min_count else default


def build_graph(
    model: TraceModel, window_start: float, window_end: float, device: int | None, host_end: float | None = None
) -> DependencyGraph | None:
    """The dependency graph of [window_start, window_end] (the primary device's ledger
    window), or None when there is no GPU activity to replay. `host_end` is where the
    window's host side ends (the last step's host end; the window's end by default):
    calls after it belong to what follows the window even while the GPU still runs its
    last step."""
    if device is None or not len(model.host):
        return None
    w0, w1 = float(window_start), float(window_end)
    h1 = min(float(host_end), w1) if host_end is not None else w1
    nodes = select_window_nodes(model, w0, w1, h1)
    if nodes is None:
        return None
    host, kind, row, chain, ts, end = model.host, nodes.kind, nodes.row, nodes.chain, nodes.ts, nodes.end
    keys, chain_first, chain_host, t_uniq = nodes.keys, nodes.chain_first, nodes.chain_host, nodes.t_uniq
    host_node, act_pos, a_call, a_call_ts = nodes.host_node, nodes.act_pos, nodes.a_call, nodes.a_call_ts
    h_ts = host["ts"].to_numpy(dtype=np.float64)
    n, n_chains = len(kind), len(chain_first) - 1

    # -- chain initial states: the end of what ran on the chain before its first node
    chain_init = nodes.chain_init(w0)
    firsts = chain_first[:-1]
    prev_end = np.empty(n)
    prev_end[1:] = end[:-1]
    prev_end[firsts] = chain_init
    measured_gap = ts - prev_end

    gap = measured_gap.copy()
    dur = end - ts
    s_fixed = np.full(n, _NEG)
    e_fixed = np.full(n, _NEG)
    src: list[np.ndarray] = []
    dst: list[np.ndarray] = []
    dly: list[np.ndarray] = []
    typ: list[np.ndarray] = []
    notes: list[str] = []

    # -- launch -> activity, and the stream gap
    launch_latency, gpu_gap = _add_launch_edges(
        n, kind, act_pos, a_call, h_ts, ts, end, prev_end, chain, keys, host_node, gap, s_fixed, (src, dst, dly, typ)
    )

    # -- GPU -> host waits
    return_latency = _add_wait_edges(
        n, host, kind, row, ts, end, chain, keys, a_call_ts, act_pos, host_node, dur, (src, dst, dly, typ),
        queued_copy_call_rows(model),
    )

    # -- thread -> thread: the autograd engine's fork and join
    f_src, f_dst, f_delay, j_nodes = _thread_waits(model, ts, end, kind, chain, chain_first, chain_host, keys, w0, w1)
    if len(f_dst):
        src.append(f_src)
        dst.append(f_dst)
        dly.append(f_delay)
        typ.append(np.full(len(f_dst), END_START))
        # The waiting node's (and the forked node's) own gap is what the thread did besides waiting.
        gap[j_nodes[:, 0].astype(np.int64)] = j_nodes[:, 1]
    e_src = np.concatenate(src) if src else np.empty(0, np.int64)
    e_dst = np.concatenate(dst) if dst else np.empty(0, np.int64)
    e_delay = np.concatenate(dly) if dly else np.empty(0)
    e_type = np.concatenate(typ) if typ else np.empty(0, np.int8)

    # -- the window's end
    counted, chain_tail, uncovered = _window_end(host, kind, ts, end, t_uniq, chain_first, chain_host, w0, w1, h1)
    if uncovered > EXPLAINED_US:
        notes.append(
            f"the window's last {uncovered / 1e3:.1f} ms hold no recorded event (the recording stopped mid-iteration): "
            "kept as measured"
        )
    launcher, paces = _launchers_and_pace(n, n_chains, chain, kind, chain_host, e_src, e_dst, e_type)
    return DependencyGraph(
        chain_paces=paces,
        launcher=launcher,
        uncovered_tail_us=uncovered,
        window_start=w0,
        window_end=w1,
        device=int(device),
        kind=kind,
        row=row,
        chain=chain,
        ts=ts,
        end=end,
        gap=gap,
        dur=dur,
        s_fixed=s_fixed,
        e_fixed=e_fixed,
        counted=counted,
        chain_first=chain_first,
        chain_init=chain_init,
        chain_host=chain_host,
        chain_key=tuple(keys),
        chain_tail=chain_tail,
        e_src=e_src.astype(np.int64),
        e_dst=e_dst.astype(np.int64),
        e_delay=e_delay.astype(np.float64),
        e_type=e_type.astype(np.int8),
        launch_latency_us=launch_latency,
        gpu_gap_us=gpu_gap,
        return_latency_us=return_latency,
        host_node=host_node,
        notes=tuple(notes),
    )


def _add_launch_edges(
    n: int,
    kind: np.ndarray,
    act_pos: np.ndarray,
    a_call: np.ndarray,
    h_ts: np.ndarray,
    ts: np.ndarray,
    end: np.ndarray,
    prev_end: np.ndarray,
    chain: np.ndarray,
    keys: list[tuple[int, int]],
    host_node: dict[int, int],
    gap: np.ndarray,
    s_fixed: np.ndarray,
    edges: tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray], list[np.ndarray]],
) -> tuple[float, float]:
    """Each GPU node's launch edge (from the call that launched it) and its stream gap,
    and the cross-stream waits that explain a start neither does: appends the edges to
    `edges` (src, dst, delay, type), sets the GPU nodes' `gap` and the fixed starts of
    those launched before the window in `s_fixed`. Returns the fitted launch latency and
    GPU gap (µs)."""
    src, dst, dly, typ = edges
    is_gpu = kind == GPU
    g_nodes = np.flatnonzero(is_gpu)
    pos = act_pos[g_nodes]
    l_call = a_call[pos]
    l_ts = np.where(l_call >= 0, h_ts[np.clip(l_call, 0, None)], np.nan)
    g_ts, g_prev = ts[g_nodes], prev_end[g_nodes]
    idle_stream = g_prev < l_ts  # the stream was free when the launch began
    launch_latency = _percentile_or(g_ts[idle_stream] - l_ts[idle_stream], 50, DEFAULT_LAUNCH_LATENCY_US)
    launch_latency = max(launch_latency, 0.0)
    queued = l_ts + QUEUED_MIN_US < g_prev
    gpu_gap = max(_percentile_or(g_ts[queued] - g_prev[queued], 50, DEFAULT_GPU_GAP_US), 0.0)
    t_launch = np.where(np.isfinite(l_ts), l_ts + launch_latency, _NEG)
    t_chain = g_prev + gpu_gap
    natural = np.maximum(t_launch, t_chain)
    unexplained = g_ts > natural + EXPLAINED_US
    # Cross-stream waits: the latest end on another stream of the device before the start.
    node_launch = np.full(n, _NEG)
    node_launch[g_nodes] = np.where(np.isfinite(l_ts), l_ts, _NEG)
    x_src = _cross_stream_sources(g_nodes[unexplained], ts, end, chain, kind, keys, natural[unexplained], node_launch)
    has_x = x_src >= 0
    x_nodes = g_nodes[unexplained][has_x]
    x_from = x_src[has_x]
    cross = np.zeros(len(g_nodes), dtype=bool)
    cross[np.flatnonzero(unexplained)[has_x]] = True
    if len(x_nodes):
        src.append(x_from)
        dst.append(x_nodes)
        dly.append(ts[x_nodes] - end[x_from])
        typ.append(np.full(len(x_nodes), END_START))
    # Which natural edge binds: the later one (with the unexplained slack when no other
    # stream explains it).
    launch_binds = ~cross & np.isfinite(t_launch) & (t_launch >= t_chain)
    chain_binds = ~cross & ~launch_binds
    exact_l = g_ts - l_ts
    exact_c = g_ts - g_prev
    gap[g_nodes] = np.where(chain_binds, exact_c, np.minimum(gpu_gap, exact_c))
    l_delay = np.where(launch_binds, exact_l, np.minimum(launch_latency, exact_l))
    has_l = np.isfinite(l_ts)
    l_node = np.full(len(g_nodes), -1, dtype=np.int64)
    if has_l.any():
        l_node[has_l] = np.array([host_node.get(int(r), -1) for r in l_call[has_l].tolist()], dtype=np.int64)
    live = has_l & (l_node >= 0)
    src.append(l_node[live])
    dst.append(g_nodes[live])
    dly.append(l_delay[live])
    typ.append(np.full(int(live.sum()), START_START))
    fixed_l = has_l & (l_node < 0)  # launched before the window: a fixed bound
    s_fixed[g_nodes[fixed_l]] = l_ts[fixed_l] + l_delay[fixed_l]
    return launch_latency, gpu_gap


def _add_wait_edges(
    n: int,
    host: pd.DataFrame,
    kind: np.ndarray,
    row: np.ndarray,
    ts: np.ndarray,
    end: np.ndarray,
    chain: np.ndarray,
    keys: list[tuple[int, int]],
    a_call_ts: np.ndarray,
    act_pos: np.ndarray,
    host_node: dict[int, int],
    dur: np.ndarray,
    edges: tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray], list[np.ndarray]],
    queued_copies: np.ndarray,
) -> float:
    """GPU -> host waits (syncs, async copies, long calls that end when GPU work does):
    appends their END_END edges to `edges` and caps a waiting call's own `dur` at
    WAIT_BASE_US (the rest of it is the wait). Returns the fitted return latency (µs)."""
    src, dst, dly, typ = edges
    h_nodes = np.flatnonzero(kind == HOST)
    names = host["name"]
    call_names = names.iloc[row[h_nodes]]
    is_sync = name_matches(call_names, SYNC_APIS.__contains__)
    # A copy that only queues (derive/host_calls.queued_copy_call_rows) waits only as a
    # long call (a full launch queue), never as a copy.
    is_copy = name_matches(call_names, ASYNC_COPY_APIS.__contains__) & ~np.isin(row[h_nodes], queued_copies)
    long_call = (end[h_nodes] - ts[h_nodes]) >= WAIT_CALL_MIN_US
    candidates = h_nodes[is_sync | is_copy | long_call]
    w_src, w_dst, w_lat = _waits(candidates, ts, end, kind, chain, keys, a_call_ts, act_pos, row, host_node)
    return_latency = _percentile_or(w_lat, 50, RETURN_SLACK_US / 4, min_count=1)
    if len(w_dst):
        binding_end = np.full(n, _NEG)
        np.maximum.at(binding_end, w_dst, end[w_src])
        exact = end[w_dst] - end[w_src]
        ret = end[w_dst] - binding_end[w_dst]
        src.append(w_src)
        dst.append(w_dst)
        dly.append(np.where(end[w_src] >= binding_end[w_dst], exact, np.minimum(exact, ret)))
        typ.append(np.full(len(w_dst), END_END))
        waiting = np.unique(w_dst)
        dur[waiting] = np.minimum(dur[waiting], WAIT_BASE_US)
    return return_latency


def _window_end(
    host: pd.DataFrame,
    kind: np.ndarray,
    ts: np.ndarray,
    end: np.ndarray,
    t_uniq: np.ndarray,
    chain_first: np.ndarray,
    chain_host: np.ndarray,
    w0: float,
    w1: float,
    h1: float,
) -> tuple[np.ndarray, np.ndarray, float]:
    """The window's end: host chains end at their thread's last event in the window; GPU
    nodes launched in the window (or not launched from the trace) count. A GPU node that
    starts after the window's end is the next iteration's (a detected iteration ends with
    its last kernel; the host may have launched the next one). Returns (counted,
    chain_tail, the window's end no recorded event covers, µs)."""
    n_chains = len(chain_host)
    # nodes launched in the window (or not launched from the trace) count.
    # A GPU node that starts after the window's end is the next iteration's (a detected
    # iteration ends with its last kernel; the host may have launched the next one).
    counted = (kind == HOST) | (ts < w1)
    chain_tail = np.zeros(n_chains)
    top = host[(host["parent"].to_numpy() < 0)]
    top_ts, top_end = top["ts"].to_numpy(), top["end"].to_numpy()
    top_key = _thread_key(top["pid"].to_numpy(), top["tid"].to_numpy())
    for c in range(len(t_uniq)):
        last = int(chain_first[c + 1]) - 1
        mine = (top_key == t_uniq[c]) & (top_ts < h1) & (top_end > w0)
        marker = float(np.minimum(top_end[mine], h1).max()) if mine.any() else end[last]
        # Negative when the last call runs past the window's host end: the chain's part
        # of the window ends at the marker all the same.
        chain_tail[c] = marker - end[last]
    host_chains = np.flatnonzero(chain_host)
    explained = max(
        float((end[chain_first[1:][host_chains] - 1] + chain_tail[host_chains]).max(initial=_NEG)),
        float(end[counted & (kind == GPU)].max(initial=_NEG)),
    )
    uncovered = max(w1 - explained, 0.0) if np.isfinite(explained) else 0.0
    return counted, chain_tail, uncovered


def _launchers_and_pace(
    n: int,
    n_chains: int,
    chain: np.ndarray,
    kind: np.ndarray,
    chain_host: np.ndarray,
    e_src: np.ndarray,
    e_dst: np.ndarray,
    e_type: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Each GPU node's launching host node (-1: none in the window), and which host chains
    set the window's pace."""
    launcher = np.full(n, -1, dtype=np.int64)
    ss = e_type == START_START
    launcher[e_dst[ss]] = e_src[ss]
    # The host threads that set the window's pace: those that launch GPU work or fork or
    # join another thread. A thread that does neither (a DataLoader's pin-memory thread
    # waiting on its workers, a logging thread) is paced by the training thread's
    # consumption, which the graph does not model: kept as measured, its end would hold
    # every fix's replay at the measured window (capture_train_loader: the CUDA graph
    # replay gained 74 µs of a 3.6 ms launch-bound step).
    paces = np.zeros(n_chains, dtype=bool)
    paces[chain[e_src[ss]]] = True
    hh = (kind[e_src] == HOST) & (kind[e_dst] == HOST) & (chain[e_src] != chain[e_dst])
    paces[chain[e_src[hh]]] = True
    paces[chain[e_dst[hh]]] = True
    if not (paces & chain_host).any():
        paces = chain_host.copy()  # no launches from the window's threads: all of them
    paces &= chain_host
    return launcher, paces


def window_nodes(model: TraceModel, start: float, end: float) -> int:
    """About how many nodes the graph of [start, end] has: its runtime calls and GPU
    activities (a cheap count, before building it)."""
    host = model.host
    ts = host["ts"].to_numpy()
    kind = host["kind"].to_numpy()
    calls = int((((kind == Kind.RUNTIME) | (kind == Kind.DRIVER)) & (ts >= start) & (ts < end)).sum())
    act = model.gpu_activity()
    a_ts = act["ts"].to_numpy()
    return calls + int(((a_ts >= start) & (a_ts < end)).sum())


def host_end_of(model: TraceModel, window: Window) -> float:
    """Where the window's host side ends: the last kept ProfilerStep's host end for a window
    of marked steps, else the window's end."""
    st = model.steps
    if window.source == "steps" and window.steps and not st.empty:
        kept = st[st["step"].isin([s.index for s in window.steps])]
        if len(kept):
            return float(np.nanmax(kept["cpu_end"].to_numpy(dtype=np.float64)))
    return float(window.end_us)


def _cross_stream_sources(
    nodes: np.ndarray,
    ts: np.ndarray,
    end: np.ndarray,
    chain: np.ndarray,
    kind: np.ndarray,
    keys: list[tuple[int, int]],
    natural: np.ndarray,
    launched: np.ndarray,
) -> np.ndarray:
    """For GPU nodes that started later than their stream and launch explain, the node on
    another stream of the same device that ended last before each started (within
    CROSS_STREAM_MAX_US and after the natural start), or -1. The source must have been
    launched before the node: a stream waits on an event recorded before the wait was
    issued, and the wait before the node's launch."""
    out = np.full(len(nodes), -1, dtype=np.int64)
    if not len(nodes):
        return out
    g = np.flatnonzero(kind == GPU)
    dev_of_chain = np.array([k[0] for k in keys], dtype=np.int64)
    g_dev = dev_of_chain[chain[g]]
    for dv in np.unique(g_dev).tolist():
        cand = g[g_dev == dv]
        by_end = cand[np.argsort(end[cand], kind="stable")]
        ends = end[by_end]
        mine = np.flatnonzero(dev_of_chain[chain[nodes]] == dv)
        for i in mine.tolist():
            v = int(nodes[i])
            hi = np.searchsorted(ends, ts[v] + CLOCK_SLACK_US, side="right")
            lo = np.searchsorted(ends, max(natural[i] - CLOCK_SLACK_US, ts[v] - CROSS_STREAM_MAX_US), side="left")
            for j in range(hi - 1, lo - 1, -1):
                u = int(by_end[j])
                if chain[u] != chain[v] and launched[u] < launched[v]:
                    out[i] = u
                    break
    return out


def _waits(
    candidates: np.ndarray,
    ts: np.ndarray,
    end: np.ndarray,
    kind: np.ndarray,
    chain: np.ndarray,
    keys: list[tuple[int, int]],
    a_call_ts: np.ndarray,
    act_pos: np.ndarray,
    row: np.ndarray,
    host_node: dict[int, int],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Wait edges (GPU node -> host node) of the candidate calls that returned within
    RETURN_SLACK_US after GPU work launched before them ended: per stream, the latest such
    node. Also each wait's return latency (call end - latest awaited end)."""
    g = np.flatnonzero(kind == GPU)
    if not len(candidates) or not len(g):
        empty = np.empty(0, np.int64)
        return empty, empty, np.empty(0)
    launched_at = a_call_ts[act_pos[g]]  # NaN: launched before the trace, or not recorded
    launched_at = np.where(np.isnan(launched_at), -np.inf, launched_at)
    order = np.argsort(end[g], kind="stable")
    g_sorted = g[order]
    g_end = end[g_sorted]
    g_launch = launched_at[order]
    g_chain = chain[g_sorted]
    srcs: list[int] = []
    dsts: list[int] = []
    lats: list[float] = []
    for v in candidates.tolist():
        t0, t1 = ts[v], end[v]
        lo = np.searchsorted(g_end, t0, side="right")
        hi = np.searchsorted(g_end, t1 + CLOCK_SLACK_US, side="right")
        if hi <= lo:
            continue
        sel = np.arange(lo, hi)
        sel = sel[g_launch[sel] < t0]
        if not len(sel):
            continue
        latest = float(g_end[sel].max())
        if t1 - latest > RETURN_SLACK_US or latest < t0 + min(WAIT_BASE_US, t1 - t0):
            continue
        # per stream, the latest one
        chains_here = g_chain[sel]
        for c in np.unique(chains_here).tolist():
            k = sel[chains_here == c]
            u = int(g_sorted[k[-1]])
            srcs.append(u)
            dsts.append(v)
        lats.append(max(t1 - latest, 0.0))
    return np.array(srcs, dtype=np.int64), np.array(dsts, dtype=np.int64), np.array(lats)
