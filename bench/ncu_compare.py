"""Compare tracelens' per-kernel `bound` with Nsight Compute's Speed Of Light verdict.

    python bench/ncu_compare.py [--data tests/data/ncu] [--traces sample_traces] [-v]

Inputs, per case of workloads/ncu_cases.py (captured by bench/ncu_compare_capture.sh on an
H200): `<data>/<case>.csv.gz`, the output of `ncu --clock-control none --section
SpeedOfLight --section LaunchStats --csv --page details` over one step, and
`<traces>/ncu_<case>.pt.trace.json.gz` (both in tests/data/ncu by default), a torch.profiler trace of the same step.

Nsight Compute's verdict per kernel launch comes from its SOLBottleneck rule:
- "low compute throughput and memory bandwidth" or "grid is too small": latency;
- otherwise ("Compute/Memory is more heavily utilized", "greater than 80.0%", "well-balanced"):
  every unit (compute, memory) at or above NCU_NEAR_PCT (60%) of its peak, the threshold
  of the rule itself: a kernel at 65% SM and 67% memory throughput is near both roofs, and
  either answer agrees (the rule text names the higher one).
Launches are paired with the trace's kernels by aligning the two sequences of function
names (Nsight Compute and CUPTI demangle differently, so only the identifier is compared).
A kernel family is a kernel name in the trace (one row of kernels[]); its Nsight Compute
verdict is the one holding most of its launches' time, compared with the family's bound.
By time, each launch (weighted by its Nsight Compute duration) is compared with the bound
tracelens gives that launch: its family's, or latency for a launch latency-bound on its own
(too short, too small a grid: Roofline.latency_rows, which the ledger counts as latency).
Agreement is printed by family and by time, per case and overall.
"""

from __future__ import annotations

import argparse
import csv
import difflib
import gzip
import io
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tracelens.derive.context import AnalysisContext  # noqa: E402
from tracelens.derive.counters import kernel_identifier  # noqa: E402
from tracelens.model import load_trace  # noqa: E402

CASES = ("train", "encoder", "attention", "compiled", "elementwise", "gemm")
#: Cases printed below the totals, not in them: held-out checks of a model fitted elsewhere
#: (`spill`: the L2 spill model of fp32 memory-efficient attention, fitted on `onchip`).
HELD_OUT = ("spill",)
#: Nsight Compute's SOLBottleneck threshold for "utilizing greater than 80%".
NCU_NEAR_PCT = 60.0


@dataclass(frozen=True)
class NcuKernel:
    index: int
    name: str
    duration_us: float
    sm_pct: float
    mem_pct: float
    dram_pct: float
    grid: int
    waves: float
    rule: str  # the SOLBottleneck text
    verdict: frozenset[str]


def _num(text: str) -> float:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def verdict_of(rule: str, sm: float, mem: float) -> frozenset[str]:
    """Nsight Compute's SOLBottleneck rule text as a set of bounds."""
    low = rule.lower()
    if "too small" in low or "low compute throughput" in low:
        return frozenset({"latency"})
    if "compute is more heavily" in low:
        return frozenset({"compute"})
    if "memory is more heavily" in low:
        return frozenset({"memory"})
    near = {b for b, v in (("compute", sm), ("memory", mem)) if v >= NCU_NEAR_PCT}
    return frozenset(near or {"compute" if sm >= mem else "memory"})


#: Nsight Compute picks the Duration unit per report (ns on the comparison cases, us/ms on `spill`).
_DURATION_US = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}


def read_ncu(path: Path) -> list[NcuKernel]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:  # type: ignore[operator]
        lines = [ln for ln in f if ln.startswith('"')]  # ncu and the program also print other lines
    rows: dict[int, dict[str, str]] = defaultdict(dict)
    for r in csv.DictReader(io.StringIO("".join(lines))):
        i = int(r["ID"])
        d = rows[i]
        d["name"] = r["Kernel Name"]
        if r["Rule Name"] == "SOLBottleneck":
            d["rule"] = r["Rule Description"]
        elif r["Metric Name"]:
            d[r["Metric Name"]] = r["Metric Value"]
            d[r["Metric Name"] + " unit"] = r.get("Metric Unit", "")
    out = []
    for i in sorted(rows):
        d = rows[i]
        sm, mem = _num(d.get("Compute (SM) Throughput", "0")), _num(d.get("Memory Throughput", "0"))
        rule = d.get("rule", "")
        dram, grid, waves = _num(d.get("DRAM Throughput", "0")), int(_num(d.get("Grid Size", "0"))), 0.0
        waves = _num(d.get("Waves Per SM", "0"))
        duration_us = _num(d.get("Duration", "0")) * _DURATION_US.get(d.get("Duration unit", "ns"), 1e-3)
        kern = NcuKernel(i, d["name"], duration_us, sm, mem, dram, grid, waves, rule,
                         verdict_of(rule, sm, mem))  # fmt: skip
        out.append(kern)
    return out


#: Units of Nsight Compute's raw page, to bytes, sectors and microseconds.
_UNIT_SCALE = {"byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "sector": 1.0, "Ksector": 1e3,
               "Msector": 1e6, "Gsector": 1e9, "usecond": 1.0, "nsecond": 1e-3, "msecond": 1e3,
               "us": 1.0, "ns": 1e-3, "ms": 1e3}  # fmt: skip


def read_raw(path: Path) -> list[dict[str, float | str]]:
    """Nsight Compute's `--page raw --csv` (gzipped or not): one dict per profiled launch in
    ID order, numbers scaled to bytes, sectors and microseconds where the unit row says
    so; "Kernel Name" and other text as text."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:  # type: ignore[operator]
        rows = list(csv.reader(io.StringIO("".join(ln for ln in f if ln.startswith('"')))))
    header, units = rows[0], rows[1]
    out: list[dict[str, float | str]] = []
    for r in rows[2:]:
        d: dict[str, float | str] = {}
        for h, u, v in zip(header, units, r, strict=False):
            try:
                d[h] = float(v.replace(",", "")) * _UNIT_SCALE.get(u, 1.0)
            except ValueError:
                d[h] = v
        out.append(d)
    return out


def identifier(name: str) -> str:
    """The function's own name: 'void at::native::(anonymous namespace)::foo<...>(...)' -> 'foo'."""
    return kernel_identifier(name)


@dataclass(frozen=True)
class Pair:
    case: str
    family: str  # the trace's kernel name
    ncu: NcuKernel
    bound: str  # tracelens' for this launch: its family's, or latency for a launch latency-bound on its own
    detail: str  # tracelens' shares of its roofs
    family_bound: str = ""  # tracelens' bound of the family (kernels[])


def last_step_kernels(path: Path) -> tuple[list[str], dict[str, str], dict[str, str], list[bool]]:
    """Kernel names of the trace's last ProfilerStep in launch order, tracelens' bound per
    kernel name, each name's share of the roof, and whether tracelens counts each launch
    as latency-bound on its own (Roofline.latency_rows)."""
    model = load_trace(path)
    roof = (AnalysisContext(model)).roofline
    bound = {r.name: r.bound for r in roof.kernels}
    share = {r.name: f"C {r.compute_share:4.0%} M {r.memory_share:4.0%} grid {r.grid}" for r in roof.kernels}
    k = model.kernels()
    k = k[k["step"] >= 0]
    last = k[k["step"] == k["step"].max()].sort_values("ts")
    latency = set(roof.latency_rows.tolist())
    return [str(n) for n in last["name"]], bound, share, [int(i) in latency for i in last.index]


def pairs_for(case: str, data: Path, traces: Path) -> list[Pair]:
    ncu = read_ncu(data / f"{case}.csv.gz")
    names, bound, detail, on_own = last_step_kernels(traces / f"ncu_{case}.pt.trace.json.gz")
    a = [identifier(n.name) for n in ncu]
    b = [identifier(n) for n in names]
    out = []
    for blk in difflib.SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks():
        for j in range(blk.size):
            fam = names[blk.b + j]
            family_bound = bound.get(fam, "unknown")
            launch_bound = "latency" if on_own[blk.b + j] else family_bound
            out.append(Pair(case, fam, ncu[blk.a + j], launch_bound, detail.get(fam, ""), family_bound))
    return out


def family_verdict(pairs: list[Pair]) -> frozenset[str]:
    weight: dict[frozenset[str], float] = defaultdict(float)
    for p in pairs:
        weight[p.ncu.verdict] += p.ncu.duration_us
    return max(weight, key=lambda v: weight[v])


@dataclass(frozen=True)
class Agreement:
    families: int
    families_agree: int
    time_us: float
    time_agree_us: float

    @property
    def by_family(self) -> float:
        return self.families_agree / self.families if self.families else 0.0

    @property
    def by_time(self) -> float:
        return self.time_agree_us / self.time_us if self.time_us else 0.0


def agreement(pairs: list[Pair]) -> Agreement:
    fams: dict[tuple[str, str], list[Pair]] = defaultdict(list)
    for p in pairs:
        fams[(p.case, p.family)].append(p)
    agree = sum(1 for ps in fams.values() if ps[0].family_bound in family_verdict(ps))
    t = sum(p.ncu.duration_us for p in pairs)
    ta = sum(p.ncu.duration_us for p in pairs if p.bound in p.ncu.verdict)
    return Agreement(len(fams), agree, t, ta)


def all_pairs(data: Path, traces: Path, cases: tuple[str, ...] = CASES) -> list[Pair]:
    return [p for c in cases for p in pairs_for(c, data, traces)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=REPO / "tests" / "data" / "ncu")
    parser.add_argument("--traces", type=Path, default=REPO / "tests" / "data" / "ncu")
    parser.add_argument("-v", "--verbose", action="store_true", help="list every family")
    args = parser.parse_args()
    everything: list[Pair] = []
    print("| case | launches paired | families agreeing | time agreeing |")
    print("|---|---|---|---|")
    for case in CASES:
        ps = pairs_for(case, args.data, args.traces)
        everything += ps
        a = agreement(ps)
        n = len(read_ncu(args.data / f"{case}.csv.gz"))
        print(f"| {case} | {len(ps)}/{n} | {a.families_agree}/{a.families} ({a.by_family:.0%}) | {a.by_time:.1%} |")
    a = agreement(everything)
    print(f"| all | {len(everything)} | {a.families_agree}/{a.families} ({a.by_family:.0%}) | {a.by_time:.1%} |")
    for case in HELD_OUT:
        if (args.data / f"{case}.csv.gz").exists():
            ps = pairs_for(case, args.data, args.traces)
            h = agreement(ps)
            n = len(read_ncu(args.data / f"{case}.csv.gz"))
            print(f"| {case} (held out, not in all) | {len(ps)}/{n} | {h.families_agree}/{h.families} "
                  f"({h.by_family:.0%}) | {h.by_time:.1%} |")  # fmt: skip
    fams: dict[tuple[str, str], list[Pair]] = defaultdict(list)
    for p in everything:
        fams[(p.case, p.family)].append(p)
    print("\nfamilies (disagreements first; ncu SM% / memory% / DRAM% are time-weighted):")
    rows = []
    for (case, fam), ps in fams.items():
        v = family_verdict(ps)
        t = sum(p.ncu.duration_us for p in ps)
        w = [p.ncu.duration_us / t if t else 1 / len(ps) for p in ps]
        sm = sum(x * p.ncu.sm_pct for x, p in zip(w, ps, strict=True))
        mem = sum(x * p.ncu.mem_pct for x, p in zip(w, ps, strict=True))
        dram = sum(x * p.ncu.dram_pct for x, p in zip(w, ps, strict=True))
        ok = ps[0].family_bound in v
        rows.append((ok, -t, case, fam, len(ps), t, "/".join(sorted(v)), ps[0].family_bound, sm, mem, dram,
                     ps[0].detail))  # fmt: skip
    rows.sort()
    for ok, _, case, fam, n, t, v, b, sm, mem, dram, detail in rows:
        if ok and not args.verbose:
            continue
        print(f"{'  ' if ok else '!!'} {case:11s} {n:3d}x {t:9.1f} us ncu={v:15s} tracelens={b:8s} "
              f"SM {sm:3.0f}% mem {mem:3.0f}% DRAM {dram:3.0f}% | {detail} | {fam[:90]}")  # fmt: skip


if __name__ == "__main__":
    main()
