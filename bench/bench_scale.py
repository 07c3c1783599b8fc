"""Does `tracelens report` scale linearly? Whole reports on 1x/2x/4x/8x copies of a real trace.

    python bench/bench_scale.py [--source TRACE] [--unit-mb 250] [--factors 1,2,4,8]
                                [--hta 1,2] [--cache DIR] [--extra TRACE...]

The inputs are made here, from a trace in the repository (default
sample_traces/train_step.pt.trace.json.gz, 8.5 MB of JSON): its events are repeated end
to end until the JSON reaches --unit-mb (that is "1x"), and 2x/4x/8x repeat it 2/4/8
times as often. Each copy is shifted in time by the trace's span and has its ids offset
(External id, correlation, Python id/parent id, flow ids, ProfilerStep#N), so a copy is
more steps of the same program, not a repeat that the loader would drop. Files are
written gzipped into --cache (made once, reused).

For each input, in a fresh process: the whole `tracelens report TRACE --json OUT -q`
command (wall time and peak RSS from wait4), with tracelens' modules byte-compiled as an
installed package has them (--source-compile: as this environment runs a checkout, with
PYTHONDONTWRITEBYTECODE=1, compiling every module from source in every run: ~0.1 s on
the development machine), and HolisticTraceAnalysis's load
(`TraceAnalysis(trace_dir=...)`, timed inside its process) for the factors in --hta.
--extra adds traces as they are (e.g. the captured H200 traces in /work/bench_data).
Prints the machine, the versions and a Markdown table.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_load import HTA_SNIPPET, machine, versions

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SOURCE = REPO / "sample_traces" / "train_step.pt.trace.json.gz"
DEFAULT_CACHE = Path(tempfile.gettempdir()) / "tracelens-bench-scale"

#: Event args that are ids, offset per copy so no two copies share one.
_ID_ARGS = ("External id", "external id", "correlation", "Python id", "Python parent id", "Ev Idx")
_STEP = re.compile(r"^ProfilerStep#(\d+)$")


def _open_write(path: Path) -> Any:
    try:  # isal writes gzip several times faster than zlib, when present
        from isal import igzip

        return igzip.open(path, "wb", compresslevel=1)
    except ImportError:
        return gzip.open(path, "wb", compresslevel=1)


def _read(path: Path) -> dict[str, Any]:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    top = msgspec.json.decode(raw)
    assert isinstance(top, dict)
    return top


def make_scaled(source: Path, copies: int, out: Path) -> None:
    """Write `copies` copies of source's events end to end (see the module docstring)."""
    top = _read(source)
    events: list[dict[str, Any]] = top.pop("traceEvents")
    timed = [e for e in events if isinstance(e.get("ts"), int | float)]
    t0 = min(e["ts"] for e in timed)
    t1 = max(e["ts"] + (e.get("dur") or 0) for e in timed)
    period = (t1 - t0) * 1.01 + 10.0
    id_span = 1 + max(
        [int(v) for e in events for k in _ID_ARGS if isinstance(v := (e.get("args") or {}).get(k), int)]
        + [int(e["id"]) for e in events if isinstance(e.get("id"), int)]
        + [0]
    )
    steps = [int(m.group(1)) for e in events if (m := _STEP.match(str(e.get("name", ""))))]
    step_span = (max(steps) - min(steps) + 1) if steps else 0
    enc = msgspec.json.Encoder()
    tmp = out.with_suffix(".part")
    with _open_write(tmp) as fh:
        head = {k: v for k, v in top.items()}
        fh.write(enc.encode(head)[:-1] + (b', "traceEvents": [' if head else b'{"traceEvents": ['))
        first = True
        for k in range(copies):
            batch = []
            for e in events:
                if k and e.get("ph") == "M":
                    continue  # metadata once
                e2 = dict(e)
                if k:
                    if isinstance(e2.get("ts"), int | float):
                        e2["ts"] = e2["ts"] + k * period
                    if isinstance(e2.get("id"), int):
                        e2["id"] = e2["id"] + k * id_span
                    args = e2.get("args")
                    if isinstance(args, dict):
                        args = dict(args)
                        for key in _ID_ARGS:
                            v = args.get(key)
                            if isinstance(v, int) and v >= 0:
                                args[key] = v + k * id_span
                        e2["args"] = args
                    m = _STEP.match(str(e2.get("name", "")))
                    if m:
                        e2["name"] = f"ProfilerStep#{int(m.group(1)) + k * step_span}"
                batch.append(e2)
            body = enc.encode(batch)[1:-1]
            if body:
                fh.write((b"" if first else b",") + body)
                first = False
        fh.write(b"]}")
    tmp.replace(out)


#: How often the memory of a run's processes is sampled (seconds): reading smaps_rollup walks
#: the page tables, and every 10 ms slowed a 3 s report by 0.3-0.8 s.
_SAMPLE_S = 0.05


def _kb(path: str, key: str) -> int:
    try:
        with open(path) as fh:
            for line in fh:
                if line.startswith(key):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _memory_kb(pid: int) -> int:
    """Summed PSS of pid and its children (the report's second loading process): PSS counts
    a page two processes share once, where RSS would count it in both. 0 where /proc has
    no smaps_rollup (not Linux)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            pids = [pid, *map(int, fh.read().split())]
    except OSError:
        pids = [pid]
    return sum(_kb(f"/proc/{p}/smaps_rollup", "Pss:") for p in pids)


def _run(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float, float, str, int]:
    """Wall seconds, CPU seconds (user + system, children included), peak memory MB,
    stdout, exit code of one child process. CPU time is the steadier number on a shared
    machine. Peak memory is the larger of wait4's peak RSS (that of the largest process
    only) and the peak, sampled every _SAMPLE_S, of the processes' summed PSS: a large
    trace is loaded by two processes at once."""
    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.DEVNULL, text=True, env=env)
        peak_kb = 0
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)  # this child's own rusage
            if pid:
                break
            peak_kb = max(peak_kb, _memory_kb(proc.pid))
            time.sleep(_SAMPLE_S)
        wall = time.perf_counter() - t0
        proc.returncode = code = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        out.seek(0)
        text = out.read()
    return wall, usage.ru_utime + usage.ru_stime, max(usage.ru_maxrss, peak_kb) / 1024.0, text, code


def _json_size(path: Path) -> tuple[int, int]:
    class Top(msgspec.Struct):
        traceEvents: list[msgspec.Raw] = []

    raw = path.read_bytes()
    raw = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    return len(raw), len(msgspec.json.decode(raw, type=Top).traceEvents)


def _in_child(*args: str) -> str:
    """Run this script's helper mode in a child process. The parent must stay small: a
    child's peak RSS (wait4's ru_maxrss) starts from its parent's peak at the fork, so a
    parent that had decompressed a trace would inflate every measurement after it."""
    out = subprocess.run([sys.executable, __file__, *args], check=True, capture_output=True, text=True)
    return out.stdout


#: The report's environment: None is this process's own (--source-compile).
_REPORT_ENV: dict[str, str] | None = None


def _byte_compiled_env(cache: Path) -> dict[str, str]:
    """This environment with tracelens' bytecode kept under `cache` (not in the source
    tree), as pip's install compiles it; warmed by one import of the report's modules.
    HTA, installed in site-packages, has its bytecode already."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(cache / "pycache")
    warm = "import tracelens.cli, tracelens.assemble, tracelens.render, tracelens.derive.context, tracelens.redact"
    subprocess.run([sys.executable, "-c", warm], env=env, check=True)
    return env


def _report(path: Path) -> tuple[float, float, float, dict[str, Any]]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "r.json"
        cmd = [sys.executable, "-m", "tracelens", "report", str(path), "--json", str(out), "-q"]
        wall, cpu, rss, _, rc = _run(cmd, _REPORT_ENV)
        if rc != 0:
            raise SystemExit(f"tracelens failed on {path} (exit {rc})")
        return wall, cpu, rss, json.loads(out.read_text())


def _hta(path: Path) -> tuple[float | None, float | None, float | None]:
    """HTA's load seconds (timed inside its process), its process's CPU seconds and peak RSS."""
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / "hta"
        d.mkdir()
        (d / path.name).symlink_to(path.resolve())
        _, cpu, rss, out, rc = _run([sys.executable, "-c", HTA_SNIPPET, str(d)])
        line = next((ln for ln in out.splitlines() if ln.startswith("HTA_LOAD_S=")), None)
        if rc != 0 or line is None:
            return None, None, None
        return float(line.split("=", 1)[1]), cpu, rss


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--_size":  # helper mode, see _in_child
        size, events = _json_size(Path(sys.argv[2]))
        print(size, events)
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--_make":
        make_scaled(Path(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4]))
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    ap.add_argument("--unit-mb", type=float, default=250.0, help="JSON size of the 1x input")
    ap.add_argument("--factors", default="1,2,4,8")
    ap.add_argument("--hta", default="1,2", help="factors HTA loads too ('' for none)")
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--extra", type=Path, nargs="*", default=[])
    ap.add_argument(
        "--source-compile", action="store_true", help="run tracelens as this environment does (no bytecode kept)"
    )
    args = ap.parse_args()
    factors = [int(f) for f in args.factors.split(",") if f]
    hta_factors = {int(f) for f in args.hta.split(",") if f}
    if hta_factors:
        try:
            import hta  # noqa: F401
        except ImportError:
            hta_factors = set()
    args.cache.mkdir(parents=True, exist_ok=True)
    src_json = int(_in_child("--_size", str(args.source)).split()[0])
    unit = max(1, round(args.unit_mb * 1e6 / src_json))
    inputs: list[tuple[str, Path, bool]] = []
    for f in factors:
        path = args.cache / f"{args.source.name.split('.')[0]}_x{unit * f}.json.gz"
        if not path.exists():
            print(f"making {path} ({unit * f} copies)", file=sys.stderr, flush=True)
            _in_child("--_make", str(args.source), str(unit * f), str(path))
        inputs.append((f"{f}x", path, f in hta_factors))
    inputs += [(p.name, p, bool(hta_factors)) for p in args.extra]
    global _REPORT_ENV
    if not args.source_compile and os.environ.get("PYTHONDONTWRITEBYTECODE"):
        _REPORT_ENV = _byte_compiled_env(args.cache)
    print(f"machine: {machine()}")
    cached = _REPORT_ENV is not None or not os.environ.get("PYTHONDONTWRITEBYTECODE")
    print(f"tracelens bytecode: {'kept between runs' if cached else 'compiled from source in each run'}")
    print(f"versions: {versions()}")
    print(f"source: {args.source.name} ({src_json / 1e6:.1f} MB JSON), 1x = {unit} copies\n")
    print("load average before: " + " ".join(f"{v:.1f}" for v in os.getloadavg()))
    print(
        "| input | MB gz | MB json | events | report s (wall) | report CPU s | load / analysis s | CPU s per 100 MB "
        "| peak memory MB | memory / JSON | HTA load s | HTA CPU s | HTA memory MB | HTA load / report (wall) "
        "| HTA CPU / report CPU |"
    )
    print("|" + "---|" * 15)
    for label, path, with_hta in inputs:
        json_bytes, n_events = map(int, _in_child("--_size", str(path)).split())
        wall, cpu, rss, rep = _report(path)
        hta_s, hta_cpu, hta_rss = _hta(path) if with_hta else (None, None, None)
        mb = json_bytes / 1e6

        def f(v: float | None, fmt: str) -> str:
            return "n/a" if v is None else format(v, fmt)

        print(
            f"| {label} | {path.stat().st_size / 1e6:.1f} | {mb:.0f} | {n_events:,} | {wall:.2f} | {cpu:.2f} | "
            f"{rep['load_seconds']:.2f} / {rep['analysis_seconds']:.2f} | {cpu / mb * 100:.2f} | {rss:.0f} | "
            f"{rss / mb:.2f} | {f(hta_s, '.2f')} | {f(hta_cpu, '.2f')} | {f(hta_rss, '.0f')} | "
            f"{f(hta_s / wall if hta_s else None, '.1f')}x | {f(hta_cpu / cpu if hta_cpu else None, '.1f')}x |",
            flush=True,
        )
    print("load average after: " + " ".join(f"{v:.1f}" for v in os.getloadavg()))


if __name__ == "__main__":
    main()
