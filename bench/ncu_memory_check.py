"""What tracelens' byte model says each kernel moves, against what Nsight Compute saw reach
DRAM and L2 (issue 10, third pass).

    python bench/ncu_memory_check.py [CASE ...] [--raw SUFFIX]

Reads `tests/data/ncu/<case>_mem.csv.gz` (bench/ncu_compare_memory.sh: dram__bytes_read/
write, lts__t_sectors_op_read/write, lts__t_bytes, lts__throughput per launch, same step and
kernel order as `<case>.csv.gz`) and the case's trace, pairs the launches as
bench/ncu_compare.py does, and prints per kernel family (per launch, MB): tracelens'
modelled bytes, DRAM read and written, L2 written, the DRAM and L2 throughput Nsight
Compute reports and tracelens' share of the DRAM roof. `--raw nocache` reads the
`train_nocache.csv.gz` capture (the same step without Nsight Compute's cache flush).
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from ncu_compare import family_verdict, identifier, pairs_for, read_ncu, read_raw  # noqa: E402

from tracelens.derive.context import AnalysisContext  # noqa: E402
from tracelens.model import load_trace  # noqa: E402

DATA = REPO / "tests" / "data" / "ncu"


def _f(d: dict[str, float | str], key: str) -> float:
    v = d.get(key, 0.0)
    return v if isinstance(v, float) else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("cases", nargs="*", default=["train", "attention", "encoder", "elementwise"])
    parser.add_argument("--raw", default="mem", help="suffix of the raw capture: mem (default) or nocache")
    args = parser.parse_args()
    for case in args.cases:
        path = DATA / f"{case}_{args.raw}.csv.gz"
        if not path.exists():
            sys.exit(f"no {path}")
        sol, mem = read_ncu(DATA / f"{case}.csv.gz"), read_raw(path)
        if [identifier(k.name) for k in sol] != [identifier(str(m["Kernel Name"])) for m in mem]:
            sys.exit(f"{path}: launches differ from {case}.csv.gz")
        trace = load_trace(DATA / f"ncu_{case}.pt.trace.json.gz")
        roof = {r.name: r for r in (AnalysisContext(trace)).roofline.kernels}
        fams: dict[str, list[tuple[float, dict[str, float | str], object]]] = defaultdict(list)
        for p in pairs_for(case, DATA, DATA):
            fams[p.family].append((p.ncu.duration_us, mem[p.ncu.index - sol[0].index], p))
        print(f"\n{case} ({args.raw}): per launch, MB; DRAM%/L2% time-weighted (ncu); M% tracelens' DRAM share")
        print("ok  n   ncu us   model  DRAM rd  DRAM wr  L2 wr  DRAM%  L2%   M%  tracelens/ncu  family")
        for fam, rows in sorted(fams.items(), key=lambda kv: -sum(t for t, *_ in kv[1])):
            n, t = len(rows), sum(r[0] for r in rows)
            r = roof.get(fam)
            verdict = family_verdict([p for *_, p in rows])  # type: ignore[misc]
            ok = r is not None and r.bound in verdict
            per = {k: sum(_f(m, k) for _, m, _ in rows) / n / 1e6
                   for k in ("dram__bytes_read.sum", "dram__bytes_write.sum")}  # fmt: skip
            l2w = sum(_f(m, "lts__t_sectors_op_write.sum") for _, m, _ in rows) * 32 / n / 1e6
            dram = sum(_f(m, "dram__throughput.avg.pct_of_peak_sustained_elapsed") * d for d, m, _ in rows) / t
            l2 = sum(_f(m, "lts__throughput.avg.pct_of_peak_sustained_elapsed") * d for d, m, _ in rows) / t
            model = r.bytes / r.count / 1e6 if r and r.count else 0.0
            share = r.memory_share if r else 0.0
            print(f"{'  ' if ok else '!!'} {n:2d} {t:8.1f} {model:7.2f} {per['dram__bytes_read.sum']:8.2f} "
                  f"{per['dram__bytes_write.sum']:8.2f} {l2w:6.2f} {dram:5.0f} {l2:5.0f} {share:4.0%}"
                  f"  {(r.bound if r else '-'):>8}/{'/'.join(sorted(verdict)):8} {fam[:70]}")  # fmt: skip


if __name__ == "__main__":
    main()
