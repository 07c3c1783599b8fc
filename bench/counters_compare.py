"""Roofline bound from hardware counters vs from the models, each against Nsight Compute (issue 35).

    python bench/counters_compare.py [--traces tests/data/counters] [--ncu tests/data/counters] [-v]

Inputs per case of workloads/ncu_cases.py, captured in one H200 device call by
workloads/counters/run_h200.sh:
- `<traces>/counters_<case>.pt.trace.json.gz`: `tracelens capture --counters --steps 3-4` of
  `ncu_cases.py CASE --mode loop`: the counters pass measured step 3 under Nsight Compute,
  the timing pass recorded steps 3-4 (its trace holds both);
- `<ncu>/<case>.csv.gz`: `ncu --section SpeedOfLight --section LaunchStats --csv --page details`
  over step 3 of `ncu_cases.py CASE --mode ncu` (the same iteration).

For each trace the roofline is computed twice, with the counters (derive/counters.py) and
without them (the models alone), and each bound is compared with Nsight Compute's verdict
per launch exactly as bench/ncu_compare.py does (SOLBottleneck rule; a family's verdict is
the one holding most of its launches' time; launches paired by the kernel's identifier).
Prints a table per case: families and time agreeing, model vs counters.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from ncu_compare import Pair, agreement, family_verdict, identifier, read_ncu  # noqa: E402

from tracelens.derive.context import AnalysisContext  # noqa: E402
from tracelens.derive.roofline import Roofline  # noqa: E402
from tracelens.model import load_trace  # noqa: E402
from tracelens.model.trace import TraceModel  # noqa: E402

CASES = ("gemm", "elementwise", "attention", "train")
DATA = REPO / "tests" / "data" / "counters"


def _step_kernels(model: TraceModel, roof: Roofline, step: int) -> tuple[list[str], dict[str, str], list[bool]]:
    k = model.kernels()
    k = k[k["step"] == step].sort_values("ts")
    bound = {r.name: r.bound for r in roof.kernels}
    latency = set(roof.latency_rows.tolist())
    return [str(n) for n in k["name"]], bound, [int(i) in latency for i in k.index]


def pairs(case: str, model: TraceModel, ncu_csv: Path, step: int) -> list[Pair]:
    roof = AnalysisContext(model).roofline
    ncu = read_ncu(ncu_csv)
    names, bound, on_own = _step_kernels(model, roof, step)
    a = [identifier(n.name) for n in ncu]
    b = [identifier(n) for n in names]
    out = []
    for blk in difflib.SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks():
        for j in range(blk.size):
            fam = names[blk.b + j]
            fb = bound.get(fam, "unknown")
            out.append(Pair(case, fam, ncu[blk.a + j], "latency" if on_own[blk.b + j] else fb, "", fb))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces", type=Path, default=DATA)
    parser.add_argument("--ncu", type=Path, default=DATA)
    parser.add_argument("--cases", nargs="*", default=list(CASES))
    parser.add_argument("-v", "--verbose", action="store_true", help="list every family")
    args = parser.parse_args()
    totals: dict[str, list[Pair]] = defaultdict(list)
    rows = []
    print("| case | launches paired | measured launches | families: model | counters | time: model | counters |")
    print("|---|---|---|---|---|---|---|")
    for case in args.cases:
        trace = args.traces / f"counters_{case}.pt.trace.json.gz"
        csv = args.ncu / f"{case}.csv.gz"
        if not trace.exists() or not csv.exists():
            print(f"| {case} | (missing {trace.name if not trace.exists() else csv.name}) | | | | | |")
            continue
        measured = load_trace(trace)
        sets = measured.kernel_counters
        step = sets[-1].steps[0] if sets and sets[-1].steps else int(measured.kernels()["step"].max())
        modelled = dataclasses.replace(measured, kernel_counters=())
        pm = pairs(case, modelled, csv, step)
        pc = pairs(case, measured, csv, step)
        am, ac = agreement(pm), agreement(pc)
        roof = AnalysisContext(measured).roofline
        n_meas = sum(r.measured_launches for r in roof.kernels)
        n_ncu = len(read_ncu(csv))
        print(f"| {case} | {len(pc)}/{n_ncu} | {n_meas} | {am.families_agree}/{am.families} | "
              f"{ac.families_agree}/{ac.families} | {am.by_time:.1%} | {ac.by_time:.1%} |")  # fmt: skip
        totals["model"] += pm
        totals["counters"] += pc
        fam_m: dict[str, list[Pair]] = defaultdict(list)
        for p in pm:
            fam_m[p.family].append(p)
        fam_c: dict[str, list[Pair]] = defaultdict(list)
        for p in pc:
            fam_c[p.family].append(p)
        for fam, ps in fam_c.items():
            v = family_verdict(ps)
            bm, bc = fam_m[fam][0].family_bound if fam in fam_m else "-", ps[0].family_bound
            t = sum(p.ncu.duration_us for p in ps)
            rows.append((bm in v, bc in v, case, fam, len(ps), t, "/".join(sorted(v)), bm, bc))
    if totals:
        am, ac = agreement(totals["model"]), agreement(totals["counters"])
        print(f"| all | {len(totals['counters'])} | | {am.families_agree}/{am.families} | "
              f"{ac.families_agree}/{ac.families} | {am.by_time:.1%} | {ac.by_time:.1%} |")  # fmt: skip
    print("\nfamilies where a bound disagrees with Nsight Compute (model / counters):")
    for ok_m, ok_c, case, fam, n, t, v, bm, bc in sorted(rows, key=lambda r: (r[0] and r[1], -r[5])):
        if ok_m and ok_c and not args.verbose:
            continue
        mark = "  " if ok_m and ok_c else "!!"
        print(f"{mark} {case:11s} {n:3d}x {t:9.1f} us ncu={v:15s} model={bm:8s} counters={bc:8s} | {fam[:90]}")


if __name__ == "__main__":
    main()
