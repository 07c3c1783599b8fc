"""Time `tracelens report` against HolisticTraceAnalysis's load on the same real traces.

    python bench/bench_load.py [TRACE_DIR_OR_FILES...] [--repeat N] [--json OUT]

For every trace, in fresh processes (so imports and peak memory are per run):
- tracelens: the whole `tracelens report TRACE --json ...` command (interpreter start,
  imports, load, all analyzers, rendering), plus the load and analysis times it reports;
- HTA: `TraceAnalysis(trace_dir=...)` alone (HTA's load: parse, correlation, iteration
  tagging), timed inside its process, plus that process's wall time.
Peak RSS of each process comes from wait4(). The best of --repeat runs is kept.

Prints the machine, the versions, and a Markdown table. Needs the `hta` extra for the
HTA column (pip install -e ".[hta]"); without it the column says n/a.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TRACES = REPO.parent / "shared" / "real_traces"

HTA_SNIPPET = r"""
import os, sys, time, warnings
warnings.simplefilter("ignore")
os.environ.setdefault("HTA_DISABLE_NS_ROUNDING", "1")
from hta.trace_analysis import TraceAnalysis
t0 = time.perf_counter()
TraceAnalysis(trace_dir=sys.argv[1])
print(f"HTA_LOAD_S={time.perf_counter() - t0:.4f}")
"""


@dataclass
class Row:
    trace: str
    mb_gz: float
    mb_json: float
    events: int
    tracelens_s: float
    tracelens_load_s: float
    tracelens_analysis_s: float
    tracelens_rss_mb: float
    hta_load_s: float | None
    hta_wall_s: float | None
    hta_rss_mb: float | None

    @property
    def ratio(self) -> float | None:
        """HTA's load over tracelens's whole report command (the issue's bar)."""
        return self.hta_load_s / self.tracelens_s if self.hta_load_s else None

    @property
    def load_ratio(self) -> float | None:
        """HTA's load over tracelens's load, both in-process."""
        return self.hta_load_s / self.tracelens_load_s if self.hta_load_s and self.tracelens_load_s else None

    @property
    def process_ratio(self) -> float | None:
        """HTA process (import + load) over tracelens process (import + load + analysis + render)."""
        return self.hta_wall_s / self.tracelens_s if self.hta_wall_s else None


def _run(cmd: list[str], cwd: str | None = None) -> tuple[float, float, str, int]:
    """Wall seconds, peak RSS MB, stdout, exit code of one child process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=cwd, text=True)
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_maxrss / 1024.0, out, proc.returncode


_EVENTS_SNIPPET = r"""
import gzip, sys, msgspec
from pathlib import Path
class Top(msgspec.Struct):
    traceEvents: list[msgspec.Raw] = []
path = Path(sys.argv[1])
raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
print(len(msgspec.json.decode(raw, type=Top).traceEvents), len(raw))
"""


def _events(path: Path) -> tuple[int, int]:
    """Event count and JSON size, worked out in a child process: a child's peak RSS
    (wait4's ru_maxrss) starts from its parent's peak at the fork, so decompressing the
    trace here would inflate every RSS measured after it."""
    out = subprocess.run([sys.executable, "-c", _EVENTS_SNIPPET, str(path)], check=True, capture_output=True, text=True)
    n_events, n_bytes = out.stdout.split()
    return int(n_events), int(n_bytes)


def bench_one(path: Path, repeat: int, have_hta: bool) -> Row:
    n_events, json_bytes = _events(path)
    best: tuple[float, float, float, float] | None = None
    with tempfile.TemporaryDirectory() as tmp:
        out_json = Path(tmp) / "r.json"
        for _ in range(repeat):
            wall, rss, _, rc = _run(
                [sys.executable, "-m", "tracelens", "report", str(path), "--json", str(out_json), "-q"]
            )
            if rc != 0:
                raise SystemExit(f"tracelens failed on {path}")
            rep = json.loads(out_json.read_text())
            cand = (wall, rep["load_seconds"], rep["analysis_seconds"], rss)
            if best is None or cand[0] < best[0]:
                best = cand
        hta_load = hta_wall = hta_rss = None
        if have_hta:
            d = Path(tmp) / "hta"
            d.mkdir()
            shutil.copy(path, d / path.name)
            for _ in range(repeat):
                wall, rss, out, rc = _run([sys.executable, "-c", HTA_SNIPPET, str(d)])
                line = next((ln for ln in out.splitlines() if ln.startswith("HTA_LOAD_S=")), None)
                if rc != 0 or line is None:
                    break
                load = float(line.split("=", 1)[1])
                if hta_load is None or load < hta_load:
                    hta_load, hta_wall, hta_rss = load, wall, rss
    assert best is not None
    return Row(
        trace=f"{path.parent.name}/{path.name}",
        mb_gz=path.stat().st_size / 1e6,
        mb_json=json_bytes / 1e6,
        events=n_events,
        tracelens_s=best[0],
        tracelens_load_s=best[1],
        tracelens_analysis_s=best[2],
        tracelens_rss_mb=best[3],
        hta_load_s=hta_load,
        hta_wall_s=hta_wall,
        hta_rss_mb=hta_rss,
    )


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f", {kb / 1024 / 1024:.0f} GiB RAM"
    except (OSError, ValueError, IndexError):
        pass
    return f"{cpu}, {os.cpu_count()} cores{mem}, {platform.system()} {platform.release()}"


def versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    parts = [f"python {platform.python_version()}"]
    for dist in ("tracelens-gpu", "msgspec", "pandas", "numpy", "isal", "holistictraceanalysis"):
        try:
            parts.append(f"{dist} {version(dist)}")
        except PackageNotFoundError:
            parts.append(f"{dist} (not installed)")
    return ", ".join(parts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("traces", nargs="*", type=Path, help=f"trace files or folders (default {DEFAULT_TRACES})")
    ap.add_argument("--repeat", type=int, default=1, help="runs per tool and trace; the best is kept")
    ap.add_argument("--json", type=Path, help="also write the rows as JSON here")
    args = ap.parse_args()
    paths: list[Path] = []
    for p in args.traces or [DEFAULT_TRACES]:
        paths.extend(sorted(p.rglob("*.json.gz")) + sorted(p.rglob("*.json")) if p.is_dir() else [p])
    try:
        import hta  # noqa: F401

        have_hta = True
    except ImportError:
        have_hta = False
    print(f"machine: {machine()}")
    print(f"versions: {versions()}")
    print(
        f"runs: best of {args.repeat}; tracelens = whole `tracelens report` process; HTA = TraceAnalysis() load only\n"
    )
    header = (
        "| trace | MB gz | MB json | events | tracelens report s | tracelens load / analysis s | HTA load s "
        "| HTA load / tracelens report | HTA load / tracelens load | HTA process s | HTA process / tracelens report "
        "| tracelens peak RSS MB | HTA peak RSS MB |"
    )
    print(header)
    print("|" + "---|" * 13)
    rows = []
    for path in paths:
        r = bench_one(path, args.repeat, have_hta)
        rows.append(r)

        def f(v: float | None, fmt: str) -> str:
            return "n/a" if v is None else format(v, fmt)

        print(
            f"| {r.trace} | {r.mb_gz:.2f} | {r.mb_json:.1f} | {r.events:,} | {r.tracelens_s:.2f} | "
            f"{r.tracelens_load_s:.2f} / {r.tracelens_analysis_s:.2f} | {f(r.hta_load_s, '.2f')} | "
            f"{f(r.ratio, '.1f')}x | {f(r.load_ratio, '.1f')}x | {f(r.hta_wall_s, '.2f')} | "
            f"{f(r.process_ratio, '.1f')}x | "
            f"{r.tracelens_rss_mb:.0f} | {f(r.hta_rss_mb, '.0f')} |",
            flush=True,
        )
    with_hta = [r for r in rows if r.ratio is not None]
    if with_hta:
        print()
        for label, attr in (
            ("HTA load / tracelens whole report", "ratio"),
            ("HTA load / tracelens load", "load_ratio"),
            ("HTA process / tracelens process", "process_ratio"),
        ):
            vals = sorted((getattr(r, attr), r.trace) for r in with_hta if getattr(r, attr) is not None)
            slower = [t for v, t in vals if v < 1]
            print(
                f"{label}: min {vals[0][0]:.1f}x, median {vals[len(vals) // 2][0]:.1f}x, max {vals[-1][0]:.1f}x "
                f"over {len(vals)} traces; tracelens slower on {len(slower)}: {', '.join(slower) or 'none'}"
            )
    if args.json:
        args.json.write_text(
            json.dumps(
                [
                    asdict(r) | {"ratio": r.ratio, "load_ratio": r.load_ratio, "process_ratio": r.process_ratio}
                    for r in rows
                ],
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
