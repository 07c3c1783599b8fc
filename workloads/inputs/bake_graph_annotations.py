"""Write a replay trace's CUDA-graph annotations in the format PyTorch 2.12+ bakes in,
from the capture trace of the same graph (issue 32).

The H200's torch 2.11 has no annotation API (torch.cuda.graph takes no
enable_annotations, there is no torch.cuda.graph_annotations, and the driver is CUDA 13.0
where cudaGraphNodeGetToolsId needs 13.1): see tests/data/inputs/graph_train/
graph_train_api.json. So the annotated sample is made here, on the real replay trace,
with the annotations a capture under `mark_kernels` module hooks would have recorded,
taken from the real capture trace. Plain json, sharing no code with tracelens (its
tests check tracelens' reading of the result against its own reading of the capture
trace).

Format (torch/profiler/_chrome_trace_export.py after pytorch PR 194854): every replayed
kernel/memcpy/memset gets `graph id` and `graph node id` (the exec graph's id in the high
32 bits, the node in the low), and its node's annotation fields in `args`, values as
strings: `name` and `module_fqn` (the module whose forward launched it, as vLLM's and
torchtitan's module hooks record), `autograd_phase: backward` for the backward of a
module's forward (mark_kernels' backward projection), and for a collective the fields
of its `record_param_comms` (`Collective name`, `In msg nelems`, `dtype`, `Group size`,
...). The file gets `"cudaGraphInlineAnnotated": true`.

`--shapes` also puts the launching op and its shape args into each annotation (`op`,
`Input Dims`, `Input type`, `Input Strides`, `Concrete Inputs`, JSON strings), as a pipeline that wants the
roofline in graph mode without capture traces can.

    python workloads/inputs/bake_graph_annotations.py REPLAY CAPTURE OUT [--shapes]
"""

from __future__ import annotations

import gzip
import json
import sys
from typing import Any

LAUNCHES = {"cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx", "cudaMemsetAsync",
            "cudaMemcpyAsync"}  # fmt: skip
WORK = {"kernel", "gpu_memcpy", "gpu_memset"}
COLLECTIVE_KEYS = ("Collective name", "In msg nelems", "Out msg nelems", "Group size", "dtype", "Process Group Name",
                   "Process Group Description", "Process Group Ranks", "Seq")  # fmt: skip
GRAPH_ID = 7  # any exec graph id: one graph here


def _load(path: str) -> dict[str, Any]:
    with gzip.open(path, "rt") if path.endswith(".gz") else open(path) as f:
        data = json.load(f)
    assert isinstance(data, dict)
    return data


def _enclosing(events: list[dict[str, Any]], tid: Any, t: float) -> list[dict[str, Any]]:
    return [e for e in events if e.get("tid") == tid and e["ts"] <= t <= e["ts"] + e.get("dur", 0)]


SHAPE_KEYS = ("Input Dims", "Input type", "Input Strides", "Concrete Inputs")


def capture_annotations(cap: dict[str, Any], shapes: bool = False) -> list[dict[str, str]]:
    """One annotation per captured launch, in capture order."""
    ev = cap["traceEvents"]
    rt = [e for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")]
    begin = min(e["ts"] for e in rt if e["name"] == "cudaStreamBeginCapture")
    end = max(e["ts"] for e in rt if e["name"] == "cudaStreamEndCapture")
    launches = sorted((e for e in rt if e["name"] in LAUNCHES and begin <= e["ts"] <= end), key=lambda e: e["ts"])
    ops = [e for e in ev if e.get("cat") == "cpu_op"]
    modules = [e for e in ev if e.get("cat") == "user_annotation" and e["name"].startswith("module::")]
    seq_module: dict[int, str] = {}
    for op in sorted(ops, key=lambda e: e["ts"]):
        args = op.get("args", {})
        if "Sequence number" in args and not args.get("Fwd thread id") and args["Sequence number"] not in seq_module:
            inner = _enclosing(modules, op["tid"], op["ts"])
            seq_module[args["Sequence number"]] = (
                min(inner, key=lambda m: m["dur"])["name"][len("module::") :] if inner else ""
            )
    out: list[dict[str, str]] = []
    for launch in launches:
        around = _enclosing(ops, launch["tid"], launch["ts"])
        ann: dict[str, str] = {}
        evaluate = [o for o in around if o["name"].startswith("autograd::engine::evaluate_function")]
        if evaluate:
            module = seq_module.get(evaluate[-1]["args"].get("Sequence number", -1), "")
            if module:
                ann = {"name": module, "module_fqn": module, "autograd_phase": "backward"}
        else:
            inner = _enclosing(modules, launch["tid"], launch["ts"])
            if inner:
                module = min(inner, key=lambda m: m["dur"])["name"][len("module::") :]
                ann = {"name": module, "module_fqn": module}
        if shapes and around:
            op = min(around, key=lambda o: o["dur"])  # the innermost op around the launch
            args = op.get("args", {})
            if "Input Dims" in args:
                ann["op"] = op["name"]
                ann.update({k: json.dumps(args[k]) for k in SHAPE_KEYS if k in args})
        comm = [o for o in around if o["name"] == "record_param_comms"]
        if comm:
            args = comm[-1].get("args", {})
            ann.update({k: str(args[k]) for k in COLLECTIVE_KEYS if k in args})
            ann.setdefault("name", str(args.get("Collective name", "collective")))
        out.append(ann)
    return out


def bake(replay: dict[str, Any], annotations: list[dict[str, str]]) -> int:
    ev = replay["traceEvents"]
    launches = {e["args"]["correlation"] for e in ev if e.get("name") == "cudaGraphLaunch"}
    by_replay: dict[int, list[dict[str, Any]]] = {}
    for e in ev:
        if e.get("cat") in WORK and e.get("args", {}).get("correlation") in launches:
            by_replay.setdefault(e["args"]["correlation"], []).append(e)
    baked = 0
    for events in by_replay.values():
        events.sort(key=lambda e: e["ts"])
        if len(events) != len(annotations):
            raise SystemExit(f"a replay has {len(events)} GPU events, the capture {len(annotations)} launches")
        for i, (e, ann) in enumerate(zip(events, annotations, strict=True)):
            e["args"]["graph id"] = GRAPH_ID
            e["args"]["graph node id"] = (GRAPH_ID << 32) | (i + 1)
            e["args"].update(ann)
            baked += 1 if ann else 0
    replay["cudaGraphInlineAnnotated"] = True
    return baked


def main() -> int:
    argv = [a for a in sys.argv[1:] if a != "--shapes"]
    if len(argv) != 3:
        sys.exit(__doc__)
    replay, cap, out = _load(argv[0]), _load(argv[1]), argv[2]
    n = bake(replay, capture_annotations(cap, shapes="--shapes" in sys.argv))
    with gzip.open(out, "wt", compresslevel=9) as f:
        json.dump(replay, f)
    print(f"{n} GPU events annotated -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
