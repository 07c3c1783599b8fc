"""How much kernel time the roofline's FLOP/byte models cover, trace by trace.

    python bench/roofline_coverage.py [TRACE_DIR_OR_FILES...]

Defaults to the public traces in ../shared/real_traces and the H200 captures in
sample_traces/. For each trace, over the primary GPU's profiled window, communication
kernels excluded:
- modelled: kernel time whose launching op (or an op enclosing it) has a model, plus
  foreach kernels sized from their launch grid (that part also shown alone);
- with a bound: time in kernel classes that got a bound, a class modelled on some calls
  lending it to calls the trace cannot tie to an op (launched before the window);
- the largest uncovered op and why (no launching op, no shapes recorded, no model);
- model errors (kernel classes whose model gave more than the peak, shown as unknown);
- fusible chains found and the time fusing them would save (estimate).
Prints the machine, versions and a Markdown table.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import msgspec
import pandas as pd

import tracelens
from tracelens.derive.context import AnalysisContext
from tracelens.model import load_trace

REPO = Path(__file__).resolve().parents[1]
DEFAULT = [REPO.parent / "shared" / "real_traces", REPO / "sample_traces"]


def traces(args: list[str]) -> list[Path]:
    out: list[Path] = []
    for a in args or [str(p) for p in DEFAULT]:
        p = Path(a)
        out.extend(sorted(p.glob("**/*.json.gz")) if p.is_dir() else [p])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="*")
    paths = traces(parser.parse_args().paths)
    print(f"machine: {platform.processor() or platform.machine()}, {platform.system()} {platform.release()}")
    print(
        f"versions: python {sys.version.split()[0]}, tracelens {tracelens.__version__}, "
        f"msgspec {msgspec.__version__}, pandas {pd.__version__}"
    )
    print()
    print("| trace | GPU | kernel ms | modelled | of it from grids | with a bound | largest uncovered (why) | "
          "model errors | fusible chains | fusing saves | s |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for path in paths:
        t0 = time.perf_counter()
        model = load_trace(path)
        ctx = AnalysisContext(model)
        roof = ctx.roofline
        dev = model.meta.primary_device
        top = roof.unmodelled[0] if roof.unmodelled else None
        uncovered = f"{top.op[:40]} {top.time_us / roof.total_us:.0%} ({top.reason})" if top and roof.total_us else ""
        total = roof.total_us
        print(
            f"| {path.parent.name}/{path.name} | {dev.name if dev else '(none)'} | {total / 1e3:.1f} | "
            f"{roof.coverage:.0%} | {roof.estimated_us / total if total else 0:.0%} | "
            f"{roof.classified:.0%}{'' if roof.peaks else ' (no peaks)'} | {uncovered} | {roof.model_errors} | "
            f"{sum(c.count for c in roof.chains)} | {sum(c.saved_us for c in roof.chains) / 1e3:.1f} ms | "
            f"{time.perf_counter() - t0:.1f} |"
        )


if __name__ == "__main__":
    main()
