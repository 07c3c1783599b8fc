"""Kernels replayed from CUDA graphs, given back what their capture knew, on the H200
samples in tests/data/inputs (README there): a training step captured whole into one
graph (capture trace beside the replay, and the same replay with PyTorch 2.12+'s
annotations baked in), and a decode loop in graph mode with one graph per batch size."""

from __future__ import annotations

import gzip
import json
import re
from collections import defaultdict
from pathlib import Path

import pytest
from support.corpus import model_of, report_of

from tracelens.derive.graph_nodes import graph_nodes
from tracelens.model.graph_annotations import read_graph_args

DATA = Path(__file__).parent / "data" / "inputs"
REPLAY = DATA / "graph_train" / "graph_train_replay.pt.trace.json.gz"
EAGER = DATA / "graph_train" / "graph_train_eager.pt.trace.json.gz"
ANNOTATED = DATA / "graph_annotated" / "graph_train_annotated.pt.trace.json.gz"
DECODE = DATA / "serve_decode" / "serve_decode.pt.trace.json.gz"


def _eager_ops() -> list[tuple[str, str]]:
    """(op, kernel) of the eager step's GPU work in order, straight from the JSON: the op
    is the innermost cpu_op whose External id the kernel carries."""
    ev = json.loads(gzip.decompress(EAGER.read_bytes()))["traceEvents"]
    op_of = {e["args"]["External id"]: e["name"] for e in sorted(ev, key=lambda e: e.get("dur", 0), reverse=True)
             if e.get("cat") == "cpu_op" and "External id" in e.get("args", {})}  # fmt: skip
    # The trace holds two eager steps (no ProfilerStep marks): the second one.
    work = sorted((e for e in ev if e.get("cat") in ("kernel", "gpu_memset")), key=lambda e: e["ts"])
    work = work[len(work) // 2 :]
    return [(op_of.get(e.get("args", {}).get("External id"), ""), e["name"]) for e in work]


@pytest.mark.slow
def test_replayed_kernels_get_their_capture_ops_as_the_eager_step_has_them() -> None:
    """The capture trace's launches matched to the replay's kernels in order give each
    replayed kernel the op the eager run of the same step launched it from."""
    model = model_of(REPLAY)
    gn = graph_nodes(model)
    assert gn.replays == 10 and gn.replayed_kernels == 1710 and gn.from_capture == 1710
    assert gn.captures == ("graph_train_capture.pt.trace.json.gz",)
    launch = model.gpu["launch"].to_numpy()
    first = sorted(r for r in gn.nodes if launch[r] == min(launch[list(gn.nodes)]))
    first.sort(key=lambda r: float(model.gpu["ts"].iat[r]))
    replayed = [(gn.nodes[r].op, str(model.gpu["name"].iat[r])) for r in first]
    eager = _eager_ops()
    assert len(replayed) == 171
    # The same kernels in the same order; the eager step launches a few more (the loss
    # scaling and zero_grad outside the graph), so compare by kernel name in order.
    names = [k for _, k in eager]
    pos = 0
    agree = 0
    for op, kernel in replayed:
        while pos < len(names) and names[pos] != kernel:
            pos += 1
        assert pos < len(names), f"{kernel} not found in order in the eager step"
        agree += eager[pos][0] == op
        pos += 1
    assert agree >= 0.95 * len(replayed)


@pytest.mark.slow
def test_modules_phases_and_the_roofline_from_the_capture_trace() -> None:
    rep = report_of(REPLAY)
    g = rep.graphs
    assert g is not None and g.replays == 10 and g.captured_share == pytest.approx(1.0)
    by = {(m.module, m.phase): m for m in g.modules}
    # forward under each module's hook range, backward through autograd's sequence
    # numbers to the forward op's module, the optimizer's step apart
    assert by[("blocks.0.fc1", "forward")].op == "aten::addmm"
    assert by[("blocks.0.fc1", "backward")].op == "aten::mm"
    assert sum(m.time_us for m in g.modules if m.phase == "optimizer") > 0.3 * g.replayed_us
    assert by[("blocks.0", "backward")].op == "aten::_cudnn_attention_backward"
    # Before, 68% of the window was "kernels without a model"; every replayed kernel
    # now has one, and the GEMMs reach 60-75% of the bf16 tensor-core roof.
    assert rep.roofline is not None and rep.roofline.coverage > 0.99
    gemms = [k for k in rep.kernels if k.name.startswith("nvjet")]
    assert gemms and all(k.bound == "compute" and 0.55 < k.roof_share < 0.8 for k in gemms[:4])
    assert rep.summary.primary == "compute_bound"


@pytest.mark.slow
def test_the_same_step_modelled_eagerly_and_replayed() -> None:
    """A replayed kernel's FLOPs and bytes (from its capture op) are those the eager run
    of the same step gives the same kernel (from its own op)."""
    eager = {p.name: p for p in report_of(EAGER).roofline.points}  # type: ignore[union-attr]
    replay = {p.name: p for p in report_of(REPLAY).roofline.points}  # type: ignore[union-attr]
    both = set(eager) & set(replay)
    assert len(both) >= 20
    for name in both:
        assert replay[name].intensity == pytest.approx(eager[name].intensity, rel=0.02), name
        assert replay[name].family == eager[name].family


@pytest.mark.slow
def test_baked_in_annotations_read_alone() -> None:
    """PyTorch 2.12+'s format (graph node id, name/module_fqn, autograd_phase): read with
    no capture trace, the modules and phases are those the capture trace gave."""
    args = read_graph_args(ANNOTATED)
    assert args.inline_annotated and len(args.events) == 1710
    assert all(e.graph_id == 7 and e.node_id >> 32 == 7 for e in args.events)
    ann = report_of(ANNOTATED).graphs
    cap = report_of(REPLAY).graphs
    assert ann is not None and cap is not None
    assert ann.inline_annotated and ann.captured_share == 0.0
    assert ann.annotated_share == pytest.approx(0.5187, abs=0.01)  # the optimizer and loss have no module
    a = {(m.module, m.phase): m.time_us for m in ann.modules if m.module}
    c = {(m.module, m.phase): m.time_us for m in cap.modules if m.module}
    assert a and set(a) <= set(c)
    for key, t in a.items():
        assert t == pytest.approx(c[key]), key


@pytest.mark.slow
def test_one_graph_per_batch_size_is_told_apart_by_the_serving_step() -> None:
    rep = report_of(DECODE)
    g = rep.graphs
    assert g is not None and g.replays == 48 and g.captured_share == pytest.approx(1.0)
    assert set(g.captures) == {"bs_1_rank0.json.gz", "bs_8_rank0.json.gz", "bs_32_rank0.json.gz"}
    model = model_of(DECODE)
    nodes = graph_nodes(model).nodes
    # Each replay matched the capture of its own batch size (the graphs launch the same
    # kernels in the same order: only the step's bs= tells them apart).
    launch = model.gpu["launch"].to_numpy()
    graph_of: dict[int, set[str]] = defaultdict(set)
    for r, n in nodes.items():
        graph_of[int(launch[r])].add(n.graph)
    assert all(len(v) == 1 for v in graph_of.values())
    for lr, graphs in graph_of.items():
        step = next(model.arrays.name(r) for r in model.host_chain(lr) if model.arrays.name(r).startswith("step["))
        bs = re.search(r"bs=(\d+)", step)
        assert bs is not None and graphs == {f"capture_{bs.group(1)}_decode"}
    shapes = {n.graph: n.shapes["Input Dims"][0][0] for n in nodes.values() if n.op == "aten::_cudnn_attention_forward"}
    assert shapes == {"capture_1_decode": 1, "capture_8_decode": 8, "capture_32_decode": 32}
    assert rep.roofline is not None and rep.roofline.coverage > 0.9


@pytest.mark.slow
def test_decode_attention_in_graph_mode_gets_a_roofline_and_the_cache_use() -> None:
    rep = report_of(DECODE)
    s = rep.serving
    assert s is not None and s.framework == "sglang" and s.steps == 48 and s.with_sizes == 48
    assert s.attention_modelled_share == pytest.approx(1.0)
    sdpa = [k for k in rep.kernels if "sdpa" in k.name]
    assert sdpa and sdpa[0].bound == "memory" and sdpa[0].roof_share > 0.6
    # The static cache is read whole (2048 positions a request); the requests hold
    # Σ N_KV of them, which the step annotations give: recomputed here from the JSON.
    meta = json.loads((DATA / "serve_decode" / "serve_decode.json").read_text())
    ev = json.loads(gzip.decompress(DECODE.read_bytes()))["traceEvents"]
    steps = [e for e in ev if e.get("cat") == "user_annotation" and e["name"].startswith("step[")]
    use = []
    for e in steps:
        kv = dict(re.findall(r"(\w+)=(\d+)", e["name"]))
        use.append(int(kv["g_sk"]) / (int(kv["bs"]) * meta["max_kv"]))
    assert min(use) <= s.cache_use <= max(use)
    assert s.cache_use == pytest.approx(sum(use) / len(use), abs=0.08)  # time-weighted vs plain mean


@pytest.mark.slow
def test_annotations_that_carry_shapes_give_the_roofline_alone() -> None:
    """Where a pipeline puts the launching op and its shape args into the annotation
    (`op`, `Input Dims`, ... as JSON strings), the replay alone, with no capture trace,
    gets the roofline the capture trace gave: every kernel modelled alike."""
    alone = report_of(DATA / "graph_annotated" / "graph_train_annotated_shapes.pt.trace.json.gz")
    with_capture = report_of(REPLAY)
    assert alone.graphs is not None and alone.graphs.captured_share == 0.0
    assert alone.roofline is not None and alone.roofline.coverage > 0.99
    ref = {p.name: p for p in with_capture.roofline.points}  # type: ignore[union-attr]
    for p in alone.roofline.points:
        assert p.intensity == pytest.approx(ref[p.name].intensity, rel=0.02), p.name
    assert alone.summary.primary == with_capture.summary.primary == "compute_bound"


def test_a_collective_inside_a_graph_is_seen_with_its_bytes(tmp_path: Path) -> None:
    """Edge case, synthetic (one GPU cannot replay an NCCL kernel from a graph: a 1-rank
    all_reduce launches none; tests/data/inputs/README.md): an NCCL kernel replayed from a
    graph with the collective's fields baked into its args, as
    torch.distributed._cuda_graph_annotations records them, is communication with its
    message size and bandwidth."""
    nelems = 64 * 2**20  # 128 MiB of bf16
    ann = {"name": "allreduce", "Collective name": "allreduce", "In msg nelems": str(nelems),
           "Out msg nelems": str(nelems), "Group size": "8", "dtype": "BFloat16",
           "Process Group Name": "0", "Process Group Description": "default_pg",
           "Process Group Ranks": "[0, 1, 2, 3, 4, 5, 6, 7]"}  # fmt: skip
    nccl = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
    gemm = "nvjet_sm90_tst_128x128_64x6_2x1_v_bz_NNT"
    events: list[dict[str, object]] = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0.0, "dur": 5000.0}
    ]
    for i in range(3):
        t = 100.0 + i * 1500
        node = {"correlation": 100 + i, "device": 0, "stream": 7, "graph id": 3}
        events += [
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "pid": 1, "tid": 1, "ts": t, "dur": 10.0,
             "args": {"correlation": 100 + i}},
            {"ph": "X", "cat": "kernel", "name": gemm, "pid": 0, "tid": 7, "ts": t + 20, "dur": 300.0,
             "args": {**node, "graph node id": (3 << 32) | 1, "name": "layers.0.mlp", "module_fqn": "layers.0.mlp"}},
            {"ph": "X", "cat": "kernel", "name": nccl, "pid": 0, "tid": 7, "ts": t + 330, "dur": 800.0,
             "args": {**node, "graph node id": (3 << 32) | 2, **ann}},
        ]  # fmt: skip
    path = tmp_path / "graphed_allreduce.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": events, "cudaGraphInlineAnnotated": True,
                                "deviceProperties": [{"id": 0, "name": "NVIDIA H200", "numSms": 132,
                                                      "computeMajor": 9, "computeMinor": 0}]}))  # fmt: skip
    rep = report_of(path)
    g = rep.graphs
    assert g is not None and g.replays == 3 and g.annotated_share == pytest.approx(1.0)
    (c,) = g.collectives
    assert (c.collective, c.group, c.group_size, c.dtype, c.calls) == ("allreduce", "default_pg", 8, "BFloat16", 3)
    assert c.bytes == 2 * nelems
    assert c.algbw_gbps == pytest.approx(2 * nelems / 800e-6 / 1e9, rel=1e-6)
    assert {(m.module, m.phase) for m in g.modules} >= {("layers.0.mlp", "forward")}
    # the ledger sees the replayed NCCL kernel as communication
    assert rep.gpu_time.total.get("communication") > 0


def test_a_collective_captured_into_a_graph_gets_its_bytes_from_the_capture_trace(tmp_path: Path) -> None:
    """Edge case, synthetic (as above: one GPU launches no NCCL kernel): a replay with no
    annotations, its capture trace beside it in capture_traces/. The NCCL launch at
    capture sits under its record_param_comms, whose fields (what the H200's 1-rank
    capture recorded: allreduce, 1,024,000 bf16 elements) give the replayed kernel its
    collective and bytes; before, a captured node took a collective from annotations only."""
    nelems = 1_024_000
    nccl = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
    gemm = "nvjet_sm90_tst_128x128_64x6_2x1_v_bz_NNT"
    props = [{"id": 0, "name": "NVIDIA H200", "numSms": 132, "computeMajor": 9, "computeMinor": 0}]
    comm_args = {"External id": 11, "Collective name": "allreduce", "In msg nelems": nelems,
                 "Out msg nelems": nelems, "Group size": 2, "dtype": "BFloat16", "Process Group Name": "0",
                 "Process Group Description": "default_pg", "Process Group Ranks": "[0, 1]"}  # fmt: skip
    cap: list[dict[str, object]] = [
        {"ph": "X", "cat": "user_annotation", "name": "capture_8_train", "pid": 1, "tid": 1, "ts": 0.0,
         "dur": 1000.0, "args": {"External id": 1}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10.0, "dur": 50.0,
         "args": {"External id": 10, "Input Dims": [[2048, 1024], [1024, 1024]],
                  "Input type": ["c10::BFloat16", "c10::BFloat16"]}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 20.0, "dur": 5.0,
         "args": {"External id": 10, "correlation": 1}},
        {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1, "ts": 100.0, "dur": 80.0,
         "args": comm_args},
        {"ph": "X", "cat": "cpu_op", "name": "nccl:all_reduce", "pid": 1, "tid": 1, "ts": 110.0, "dur": 60.0,
         "args": {"External id": 12}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernelExC", "pid": 1, "tid": 1, "ts": 120.0,
         "dur": 5.0, "args": {"External id": 12, "correlation": 2}},
    ]  # fmt: skip
    (tmp_path / "capture_traces").mkdir()
    (tmp_path / "capture_traces" / "capture.pt.trace.json").write_text(
        json.dumps({"traceEvents": cap, "deviceProperties": props})
    )
    events: list[dict[str, object]] = []
    for i in range(3):
        t = 100.0 + i * 1500
        events += [
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 1, "tid": 1, "ts": t - 50,
             "dur": 1500.0},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "pid": 1, "tid": 1, "ts": t, "dur": 10.0,
             "args": {"correlation": 100 + i}},
            {"ph": "X", "cat": "kernel", "name": gemm, "pid": 0, "tid": 7, "ts": t + 20, "dur": 300.0,
             "args": {"correlation": 100 + i, "device": 0, "stream": 7, "graph id": 3}},
            {"ph": "X", "cat": "kernel", "name": nccl, "pid": 0, "tid": 7, "ts": t + 330, "dur": 400.0,
             "args": {"correlation": 100 + i, "device": 0, "stream": 7, "graph id": 3}},
        ]  # fmt: skip
    path = tmp_path / "replay.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": events, "deviceProperties": props}))
    rep = report_of(path)
    g = rep.graphs
    assert g is not None and g.replays == 3 and g.captured_share == pytest.approx(1.0)
    assert g.annotated_share == 0
    (c,) = g.collectives
    assert (c.collective, c.group, c.group_size, c.dtype, c.calls) == ("allreduce", "default_pg", 2, "BFloat16", 3)
    assert c.bytes == 2 * nelems
    assert c.algbw_gbps == pytest.approx(2 * nelems / 400e-6 / 1e9, rel=1e-6)
    assert rep.gpu_time.total.get("communication") > 0


COMM = DATA / "graph_comm" / "rank0"


@pytest.mark.slow
@pytest.mark.skipif(
    not (COMM / "graph_train_replay.pt.trace.json.gz").exists(),
    reason="2-GPU sample not made yet: workloads/inputs/run_h200x2_graph_comm.sh on nvidia-h200-x2",
)
def test_h200x2_allreduce_replayed_from_a_graph() -> None:
    """Rank 0 of graph_train.py under torchrun on 2 H200s: the head's weight and bias
    gradients (1,024,000 and 1,000 bf16 elements) all-reduced by NCCL inside the captured
    step, replayed 10 times; its capture trace in capture_traces/ beside the replay."""
    rep = report_of(COMM / "graph_train_replay.pt.trace.json.gz")
    g = rep.graphs
    assert g is not None and g.replays == 10 and g.captured_share > 0.99
    got = {(c.collective, c.bytes, c.group_size, c.dtype): c.calls for c in g.collectives}
    assert got == {("allreduce", 2 * 1_024_000, 2, "BFloat16"): 10, ("allreduce", 2 * 1_000, 2, "BFloat16"): 10}
    assert rep.gpu_time.total.get("communication") > 0
