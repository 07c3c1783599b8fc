"""A training step captured whole into one CUDA graph, profiled three ways (issue 32).

Writes into --out:

- ``graph_train_eager.pt.trace.json.gz``: the same step run eagerly (2 profiled steps),
  each module's forward inside a ``record_function("module::<fqn>")`` range;
- ``graph_train_capture.pt.trace.json.gz``: the profiler running during the capture
  (what vLLM's ``capture_traces/`` and SGLang's capture traces are): the launches with
  their ops, shapes, Python stacks and module ranges, no kernels (nothing runs);
- ``graph_train_replay.pt.trace.json.gz``: 10 profiled replays (``ProfilerStep#N``):
  kernels only, launched by ``cudaGraphLaunch``;
- ``graph_train_api.json``: what this torch has of the CUDA-graph annotation API
  (``torch.cuda.graph(enable_annotations=...)``, ``torch.cuda.graph_annotations``,
  ``export_chrome_trace(cuda_graph_annotations=...)``) and, where it records
  annotations, ``graph_train_annotations.pickle`` (node id -> annotation dicts).

When a single-rank NCCL group can be made, the step all-reduces the head's gradients
inside the graph (communication captured in a graph). One GPU launches no NCCL kernel for
that all_reduce; under torchrun (WORLD_SIZE > 1) each rank joins the real group, its
all_reduces launch NCCL kernels that the graph replays, and each rank writes into
``--out/rank<r>/`` with its capture trace already in ``capture_traces/`` beside the
replay, as tracelens looks for it:

    python workloads/inputs/graph_train.py --out /tmp/graph_train            # CUDA
    python workloads/inputs/graph_train.py --device cpu --out /tmp/gt_cpu    # smoke test
    NCCL_NVLS_ENABLE=0 python -m torch.distributed.run --standalone --nproc-per-node 2 \
        workloads/inputs/graph_train.py --out /tmp/graph_comm                 # 2 GPUs
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import inspect
import json
import os
import pickle
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function, schedule

BATCH, SEQ, DIM, HEADS, CLASSES = 8, 256, 1024, 16, 1000


class Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).unbind(2)
        a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class Net(nn.Module):
    def __init__(self, dim: int, heads: int, classes: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Block(dim, heads) for _ in range(2)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.norm(x))


def module_ranges(model: nn.Module, enter: Callable[[str], Any]) -> list[Any]:
    """Open a scope per module forward (a record_function range, or mark_kernels)."""
    handles = []
    open_scopes: dict[int, list[Any]] = {}
    for name, mod in model.named_modules():
        fqn = name or "model"

        def pre(m: nn.Module, _inp: Any, fqn: str = fqn) -> None:
            cm = enter(fqn)
            cm.__enter__()
            open_scopes.setdefault(id(m), []).append(cm)

        def post(m: nn.Module, _inp: Any, _out: Any) -> None:
            stack = open_scopes.get(id(m))
            if stack:
                stack.pop().__exit__(None, None, None)

        handles.append(mod.register_forward_pre_hook(pre))
        handles.append(mod.register_forward_hook(post))
    return handles


def api_report() -> dict[str, Any]:
    out: dict[str, Any] = {"torch": torch.__version__, "cuda": torch.version.cuda}
    out["graph_enable_annotations"] = "enable_annotations" in inspect.signature(torch.cuda.graph.__init__).parameters
    out["export_params"] = list(inspect.signature(torch.profiler.profile.export_chrome_trace).parameters)
    for mod in (
        "torch.cuda.graph_annotations",
        "torch.cuda._graph_annotations",
        "torch.cuda._annotate_cuda_graph_trace",
    ):
        try:
            __import__(mod)
            out[mod] = True
        except Exception as exc:
            out[mod] = f"{type(exc).__name__}: {exc}"
    try:
        import cuda.bindings  # type: ignore[import-not-found]  # noqa: F401

        out["cuda_bindings"] = True
    except Exception as exc:
        out["cuda_bindings"] = f"{type(exc).__name__}: {exc}"
    try:
        from torch.cuda import _graph_annotations as ga

        out["tools_id_available"] = not ga._is_tools_id_unavailable()
    except Exception as exc:
        out["tools_id_available"] = f"{type(exc).__name__}: {exc}"
    try:
        import pynvml

        pynvml.nvmlInit()
        out["driver"] = pynvml.nvmlSystemGetDriverVersion()
        out["driver_cuda"] = pynvml.nvmlSystemGetCudaDriverVersion_v2()
    except Exception as exc:
        out["driver"] = f"{type(exc).__name__}: {exc}"
    return out


def export(prof: Any, path: Path) -> None:
    tmp = Path(tempfile.mkdtemp()) / "t.json"
    prof.export_chrome_trace(str(tmp))
    with open(tmp, "rb") as src, gzip.open(path, "wb", compresslevel=9) as dst:
        shutil.copyfileobj(src, dst)
    shutil.rmtree(tmp.parent, ignore_errors=True)
    print(f"wrote {path} ({path.stat().st_size} bytes)", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="graph_train")
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    out = Path(args.out)
    cuda = args.device.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        sys.exit("CUDA requested but not available")
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world > 1:  # under torchrun: a real NCCL group, a folder per rank
        if not cuda:
            sys.exit("WORLD_SIZE > 1 needs CUDA")
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        out = out / f"rank{rank}"
    out.mkdir(parents=True, exist_ok=True)
    captures = out / "capture_traces" if world > 1 else out
    captures.mkdir(parents=True, exist_ok=True)
    api = api_report()
    print("api", json.dumps(api), flush=True)
    dev = torch.device(args.device)
    b, t, d = (BATCH, SEQ, DIM) if cuda else (2, 16, 64)
    torch.manual_seed(0)  # the same weights on every rank
    model = Net(d, HEADS if cuda else 4, CLASSES if cuda else 10).to(dev, torch.bfloat16)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, capturable=cuda, foreach=True)
    static_x = torch.randn(b, t, d, device=dev, dtype=torch.bfloat16)
    static_y = torch.randint(0, CLASSES if cuda else 10, (b, t), device=dev)

    comm = None
    if cuda:
        try:
            import torch.distributed as dist

            os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
            os.environ.setdefault("MASTER_PORT", "29531")
            dist.init_process_group(
                "nccl", rank=rank, world_size=world, device_id=torch.device("cuda", torch.cuda.current_device())
            )
            comm = dist
            api["nccl"] = True
        except Exception as exc:
            api["nccl"] = f"{type(exc).__name__}: {exc}"
            print("no NCCL:", exc, flush=True)

    def step() -> torch.Tensor:
        loss = F.cross_entropy(model(static_x).float().flatten(0, 1), static_y.flatten())
        loss.backward()
        if comm is not None:
            with record_function("all_reduce_head_grads"):
                for p in model.head.parameters():
                    comm.all_reduce(p.grad)
        opt.step()
        return loss

    rf_handles = module_ranges(model, lambda fqn: record_function(f"module::{fqn}"))
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    side = torch.cuda.Stream() if cuda else None
    with torch.cuda.stream(side) if side is not None else contextlib.nullcontext():
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            step()
    if cuda:
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()

    # 1. eager reference
    with profile(activities=acts, record_shapes=True, with_stack=True) as prof:
        for _ in range(2):
            opt.zero_grad(set_to_none=True)
            step()
            prof.step()
        if cuda:
            torch.cuda.synchronize()
    export(prof, out / "graph_train_eager.pt.trace.json.gz")
    if not cuda:
        (out / "graph_train_api.json").write_text(json.dumps(api, indent=1))
        return 0

    # 2. capture under the profiler (the "capture trace")
    annotate = False
    ann_handles: list[Any] = []
    ga = None
    if api.get("graph_enable_annotations") and api.get("tools_id_available") is True:
        try:
            from torch.cuda import _graph_annotations as ga

            ga.clear_kernel_annotations()
            ann_handles = module_ranges(model, lambda fqn: ga.mark_kernels({"name": fqn, "module_fqn": fqn}))
            annotate = True
        except Exception as exc:
            api["annotation_setup"] = f"{type(exc).__name__}: {exc}"
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    t0 = time.perf_counter()
    kw = {"enable_annotations": True} if annotate else {}
    try:
        with (
            profile(activities=acts, record_shapes=True, with_stack=True) as prof,
            record_function(f"capture_{b}_train"),
            torch.cuda.graph(graph, **kw),
        ):
            static_loss = step()
    except Exception as exc:
        if comm is None or world > 1:
            raise  # a 2-rank run is for the captured collective: no sample without it
        # A collective that cannot be captured here: capture the step without it.
        api["capture_with_comm"] = f"{type(exc).__name__}: {exc}"
        print("capture with the all_reduce failed:", exc, flush=True)
        comm = None
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        opt.zero_grad(set_to_none=True)
        with (
            profile(activities=acts, record_shapes=True, with_stack=True) as prof,
            record_function(f"capture_{b}_train"),
            torch.cuda.graph(graph, **kw),
        ):
            static_loss = step()
    api["capture_s"] = time.perf_counter() - t0
    export(prof, captures / "graph_train_capture.pt.trace.json.gz")
    for h in ann_handles:
        h.remove()
    if annotate and ga is not None:
        try:
            anns = dict(ga.get_kernel_annotations())
            api["annotations"] = len(anns)
            with open(out / "graph_train_annotations.pickle", "wb") as f:
                pickle.dump(anns, f)
        except Exception as exc:
            api["annotations"] = f"{type(exc).__name__}: {exc}"

    # 3. replays
    data = [torch.randn_like(static_x) for _ in range(4)]
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    losses = []
    with profile(
        activities=acts, record_shapes=True, with_stack=True, schedule=schedule(wait=0, warmup=2, active=10, repeat=1)
    ) as prof:
        for i in range(12):
            static_x.copy_(data[i % len(data)])
            graph.replay()
            losses.append(static_loss)
            prof.step()
        torch.cuda.synchronize()
    export(prof, out / "graph_train_replay.pt.trace.json.gz")
    api["loss_last"] = float(static_loss.item())
    (out / "graph_train_api.json").write_text(json.dumps(api, indent=1))
    for h in rf_handles:
        h.remove()
    if comm is not None:
        comm.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
