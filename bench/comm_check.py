"""Communication figures of Kineto traces computed straight from the raw JSON, to check
tracelens' against: bytes, algorithm and bus bandwidth (nccl-tests' definitions), exposed
collective time and the share other GPU work overlaps. Plain `json`; nothing here comes
from tracelens (a different algorithm on purpose: calls are counted from the GPU's
collective kernels, sizes found by time containment around each kernel's launch).

    python bench/comm_check.py TRACE [TRACE ...] [--tracelens-json DIR]

With --tracelens-json, DIR holds tracelens' JSON report of each trace (<name>.json, as
`tracelens report TRACE --json DIR/<name>.json` writes it): its analysed window (the only
number taken from it, so both count the same span) and its communication evidence, printed
beside these. Without it, the window is the trace's ProfilerStep span, else all of it.
"""

from __future__ import annotations

import argparse
import bisect
import gzip
import json
import platform
from pathlib import Path
from typing import Any

#: Bytes per element by the dtype names records and shapes use (lower case).
ITEMSIZE = {"float": 4, "float32": 4, "double": 8, "half": 2, "c10::half": 2, "bfloat16": 2, "c10::bfloat16": 2,
            "long": 8, "long int": 8, "int": 4, "byte": 1, "char": 1, "signed char": 1, "unsigned char": 1,
            "bool": 1, "int8": 1, "float16": 2}  # fmt: skip
TIMED = {
    "cpu_op",
    "operator",
    "user_annotation",
    "cuda_runtime",
    "runtime",
    "cuda_driver",
    "python_function",
    "kernel",
    "gpu_memcpy",
    "memcpy",
    "gpu_memset",
    "memset",
    "cuda_sync",
    "gpu_user_annotation",
}
COMM_KERNEL = ("nccl", "rccl", "allreduce", "all_reduce", "allgather", "reducescatter", "alltoall", "sendrecv")


def kind_of(name: str) -> str:
    n = name.lower().replace("_", "")
    for key, kind in (("allreduce", "all_reduce"), ("allgather", "all_gather"), ("reducescatter", "reduce_scatter"),
                      ("alltoall", "all_to_all"), ("broadcast", "broadcast"), ("sendrecv", "send_recv"),
                      ("send", "send_recv"), ("recv", "send_recv"), ("reduce", "reduce")):  # fmt: skip
        if key in n:
            return kind
    return "other"


def factor(kind: str, n: int) -> float | None:
    if kind in ("broadcast", "reduce", "send_recv"):
        return 1.0
    if n <= 1:
        return None
    return {"all_reduce": 2 * (n - 1) / n, "all_gather": (n - 1) / n, "reduce_scatter": (n - 1) / n,
            "all_to_all": (n - 1) / n}.get(kind)  # fmt: skip


def load(path: Path) -> dict[str, Any]:
    with open(path, "rb") as fh:
        head = fh.read(2)
    opener = gzip.open if head == b"\x1f\x8b" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        doc: dict[str, Any] = json.load(fh)
    return doc


def union(iv: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for a, b in sorted(iv):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def covered(iv: list[tuple[float, float]], a: float, b: float) -> float:
    """Length of [a, b) inside the sorted disjoint intervals iv."""
    total = 0.0
    i = max(bisect.bisect_right([x[0] for x in iv], a) - 1, 0) if iv else 0
    while i < len(iv) and iv[i][0] < b:
        lo, hi = max(iv[i][0], a), min(iv[i][1], b)
        if hi > lo:
            total += hi - lo
        i += 1
    return total


def first_tensor_elems(dims: Any, which: int = 0) -> int:
    if not isinstance(dims, list) or not dims:
        return 0
    order = [which] + [i for i in range(len(dims)) if i != which]
    for i in order:
        if i >= len(dims):
            continue
        d = dims[i]
        if isinstance(d, list) and d and all(isinstance(x, int) for x in d):
            n = 1
            for x in d:
                n *= x
            return n
        if isinstance(d, list) and d and all(isinstance(x, list) for x in d):
            total = 0
            for t in d:
                if isinstance(t, list) and t and all(isinstance(x, int) for x in t):
                    n = 1
                    for x in t:
                        n *= x
                    total += n
            if total:
                return total
    return 0


def message(kind: str, args: dict[str, Any], n: int) -> int:
    """nccl-tests' size S from a record's args."""
    eb = ITEMSIZE.get(str(args.get("dtype", "")).lower())
    inn, out = int(args.get("In msg nelems") or 0), int(args.get("Out msg nelems") or 0)
    if eb is None or not (inn or out):
        return 0
    if kind == "all_gather":
        return (out or inn * n) * eb
    if kind == "reduce_scatter":
        return (inn or out * n) * eb
    return (inn or out) * eb


def analyse(path: Path, window: tuple[float, float] | None) -> dict[str, Any]:
    doc = load(path)
    evs = [e for e in doc.get("traceEvents", []) if isinstance(e, dict) and e.get("ph") == "X"]
    world = int((doc.get("distributedInfo") or {}).get("world_size") or 0)
    gpu_cats = ("kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset")
    gpu = [e for e in evs if e.get("cat", "").lower() in gpu_cats]
    kernels = [
        e for e in gpu if e.get("cat", "").lower() == "kernel" and any(m in e["name"].lower() for m in COMM_KERNEL)
    ]
    if window is None:
        steps = [
            e
            for e in evs
            if e.get("name", "").startswith("ProfilerStep#")
            and e.get("cat") in ("user_annotation", "Operator", "cpu_op")
        ]
        if steps:
            window = (min(float(e["ts"]) for e in steps), max(float(e["ts"]) + float(e["dur"]) for e in steps))
        else:
            window = (min(float(e["ts"]) for e in evs), max(float(e["ts"]) + float(e.get("dur", 0)) for e in evs))
    lo_w, hi_w = window
    # The launch of each kernel (by correlation), and the host ops around it on that thread.
    runtime = ("cuda_runtime", "runtime", "cuda_driver")
    launches = {e["args"]["correlation"]: e for e in evs if e.get("cat", "").lower() in runtime
                and isinstance(e.get("args"), dict) and "correlation" in e["args"]}  # fmt: skip
    host = sorted((e for e in evs if e.get("cat", "").lower() in ("cpu_op", "user_annotation", "operator")),
                  key=lambda e: float(e["ts"]))  # fmt: skip
    by_tid: dict[Any, list[dict[str, Any]]] = {}
    for e in host:
        by_tid.setdefault(e.get("tid"), []).append(e)
    busy_other: dict[Any, list[tuple[float, float]]] = {}
    comm_iv: dict[Any, list[tuple[float, float]]] = {}
    kernel_ids = {id(k) for k in kernels}
    for e in gpu:
        dev = (e.get("args") or {}).get("device", e.get("pid"))
        iv = (float(e["ts"]), float(e["ts"]) + float(e["dur"]))
        (comm_iv if id(e) in kernel_ids else busy_other).setdefault(dev, []).append(iv)
    total_bytes = 0
    total_time = 0.0
    per_kind: dict[str, list[float]] = {}
    sources: set[str] = set()
    calls = 0
    any_guess = False
    for k in kernels:
        t0, t1 = float(k["ts"]), float(k["ts"]) + float(k["dur"])
        if not (t1 > lo_w and t0 < hi_w):
            continue
        calls += 1
        a = k.get("args") or {}
        kind = kind_of(a.get("Collective name") or k["name"])
        n = int(a.get("Group size") or 0)
        guessed = not n  # no record says the group: take the world (marked * in the table)
        n = n or world
        size = message(kind, a, n) if "In msg nelems" in a else 0
        src = "kernel args" if size else ""
        launch = launches.get(a.get("correlation"))
        if launch is not None and not size:
            lt = float(launch["ts"])
            around = [
                h for h in by_tid.get(launch.get("tid"), []) if float(h["ts"]) <= lt <= float(h["ts"]) + float(h["dur"])
            ]
            for h in around:
                ha = h.get("args") or {}
                if h["name"] == "record_param_comms" and ha.get("Collective name") not in (None, "wait"):
                    kind = kind_of(ha["Collective name"]) if kind == "other" else kind
                    if ha.get("Group size"):
                        n, guessed = int(ha["Group size"]), False
                    size, src = message(kind, ha, n), "record_param_comms"
                    if size:
                        break
            if not size:
                # The op that issued it: a c10d op or backend annotation, else (vLLM's
                # symm_mem ops) the innermost op around the launch that has shapes.
                named = [h for h in around if h["name"].startswith(("c10d::", "nccl:"))]
                shaped = [h for h in around if h.get("cat", "").lower() in ("cpu_op", "operator")]
                shaped.sort(key=lambda h: float(h["dur"]))
                for h in named or shaped[:1]:
                    if (h.get("args") or {}).get("Input Dims"):
                        if kind in ("other", "send_recv"):
                            kind = kind_of(h["name"])
                        which = (
                            {"all_gather": 0, "reduce_scatter": 1, "all_to_all": 1}.get(kind, 0)
                            if h["name"].startswith("c10d::")
                            else 0
                        )
                        elems = first_tensor_elems(h["args"]["Input Dims"], which)
                        types = h["args"].get("Input type") or []
                        t = types[which] if which < len(types) else (types[0] if types else "float")
                        if elems:
                            size, src = elems * ITEMSIZE.get(str(t).lower(), 4), "shapes"
                            break
        if size:
            sources.add(src)
            total_bytes += size
            total_time += t1 - t0
            f = factor(kind, n)
            per_kind.setdefault(kind, [0.0, 0.0, 0.0])
            per_kind[kind][0] += size
            per_kind[kind][1] += t1 - t0
            per_kind[kind][2] = f or 0.0
            any_guess = any_guess or guessed
    exposed = 0.0
    comm_total = 0.0
    for dev, ivs in comm_iv.items():
        mine = union(ivs)
        other = union(busy_other.get(dev, []))
        for a, b in mine:
            a, b = max(a, lo_w), min(b, hi_w)
            if b <= a:
                continue
            comm_total += b - a
            exposed += (b - a) - covered(other, a, b)
    algbw = total_bytes / (total_time * 1e-6) if total_time else 0.0
    busbw = max(((s / (t * 1e-6)) * f for s, t, f in per_kind.values() if t and f), default=0.0)
    return {"calls": calls, "bytes": total_bytes, "algbw": algbw, "busbw": busbw, "exposed_us": exposed,
            "overlap": 1 - exposed / comm_total if comm_total else 0.0, "sources": sorted(sources),
            "world_guess": any_guess}  # fmt: skip


def tracelens_side(report: dict[str, Any]) -> dict[str, Any]:
    comm = next((f for f in report.get("findings", []) if f.get("category") == "communication"), None)
    ev = {e["label"]: e["value"] for e in (comm or {}).get("evidence", [])}

    def pick(prefix: str) -> Any:
        return next((v for k, v in ev.items() if k.startswith(prefix)), 0)

    return {"calls": pick("collectives"), "bytes": pick("bytes moved"), "algbw": pick("algorithm bandwidth"),
            "busbw": pick("bus bandwidth (nccl"), "exposed_us": pick("exposed collective kernel time"),
            "overlap": pick("of it overlapped"), "sources": pick("message sizes from")}  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("traces", nargs="+", type=Path)
    p.add_argument("--tracelens-json", type=Path)
    args = p.parse_args()
    print(f"machine: {platform.node()}; python {platform.python_version()}; window: tracelens' analysed window"
          if args.tracelens_json else "window: ProfilerStep span")  # fmt: skip
    print("| trace | side | calls | bytes | algbw GB/s | busbw GB/s | exposed ms | overlap | sizes from |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|")
    for t in args.traces:
        name = t.name.removesuffix(".gz").removesuffix(".json")
        rep = None
        window = None
        if args.tracelens_json is not None:
            rp = args.tracelens_json / f"{name}.json"
            if rp.exists():
                rep = json.loads(rp.read_text())
                doc = load(t)
                # Its times count from the first host or GPU event (Kineto's span rows and
                # profiler overhead rows are neither).
                ts = [float(e["ts"]) for e in doc["traceEvents"] if isinstance(e, dict) and e.get("ph") == "X"
                      and isinstance(e.get("ts"), int | float) and str(e.get("cat", "")).lower() in TIMED]  # fmt: skip
                origin = min(ts)
                window = (origin + rep["window"]["start_us"], origin + rep["window"]["end_us"])
        mine = analyse(t, window)
        sides = [("raw JSON", mine)] + ([("tracelens", tracelens_side(rep))] if rep else [])
        for side, r in sides:
            raw = r.get("sources")
            src = ", ".join(map(str, raw)) if isinstance(raw, list | tuple | set) else str(raw or "")
            print(f"| {name} | {side} | {r['calls']} | {r['bytes'] / 1e6:.1f} MB | {r['algbw'] / 1e9:.2f} | "
                  f"{r['busbw'] / 1e9:.2f}{'*' if r.get('world_guess') and r['busbw'] else ''} | "
                  f"{r['exposed_us'] / 1e3:.2f} | {r['overlap']:.1%} | "
                  f"{src or 'none'} |")  # fmt: skip


if __name__ == "__main__":
    main()
