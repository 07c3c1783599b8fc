"""Where a report's analysis time goes, for one trace: the load (timed), then
build_report under cProfile (the CLI ends with os._exit, so `python -m cProfile -m
tracelens` writes nothing). Prints the versions, the two times and the top functions by
cumulative and by own time.

    python bench/profile_analysis.py TRACE [--top 50]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import platform
import pstats
import sys
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("--top", type=int, default=50)
    args = ap.parse_args()
    import numpy
    import pandas

    from tracelens.assemble import build_report
    from tracelens.model.loader.load import load_trace

    versions = f"python {platform.python_version()}, pandas {pandas.__version__}, numpy {numpy.__version__}"
    print(f"{versions}, {platform.node()}")
    t = time.perf_counter()
    model = load_trace(args.trace)
    print(f"load {time.perf_counter() - t:.2f} s")
    prof = cProfile.Profile()
    t = time.perf_counter()
    prof.enable()
    build_report(model)
    prof.disable()
    print(f"analysis {time.perf_counter() - t:.2f} s (under cProfile)")
    for key in ("cumulative", "tottime"):
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats(key).print_stats(args.top)
        print(out.getvalue())
    sys.stdout.flush()


if __name__ == "__main__":
    main()
