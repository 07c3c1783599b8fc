"""Does `tracelens report` scale linearly, and how far is it from HTA and from the floor?
Whole reports on 1x/2x/4x/8x copies of a real trace and on a corpus of real captures.

    python bench/bench_scale.py [--source TRACE] [--unit-mb 250] [--factors 1,2,4,8]
                                [--hta 1,2] [--cache DIR] [--extra TRACE...]
                                [--corpus DIR] [--runs N] [--no-floor]

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
--extra adds traces as they are; --corpus DIR adds every *.json.gz / *.json in DIR (the
real H200 captures of bench/RESULTS.md's "bench corpus", e.g. /work/bench_data), each with
HTA's load beside it.

The floor (unless --no-floor), in its own process for each input: read the file, gunzip it
(ISA-L when installed, else zlib) and `msgspec.json.decode` the whole JSON into Python
objects, with the cyclic GC off (with it on, the decode of a 198 MB trace took 4x longer:
that would be a floor no reader has to pay). Nothing can read a trace's events into
Python faster with these libraries, so `report / floor` is what tracelens adds on top of
just reading the events.

Each row has the load average (1 minute) read just before it: the machine is shared, and
a row measured under load is not comparable with a quiet one. --runs N repeats the whole
table N times (three separate runs for a claim). Prints the machine, the versions, a
Markdown table per run and, last, each goal's worst case over all runs.
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


def _floor(path: Path) -> float:
    """Seconds to read, gunzip and msgspec-decode the whole file (the module docstring's
    floor), timed in this process: run it in a fresh child (`_in_child("--_floor", ...)`)."""
    import gc

    gc.disable()
    t0 = time.perf_counter()
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        try:
            from isal import igzip

            raw = igzip.decompress(raw)
        except ImportError:
            raw = gzip.decompress(raw)
    top = msgspec.json.decode(raw)
    seconds = time.perf_counter() - t0
    assert isinstance(top, dict)
    return seconds


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


_IMAGE_SNIPPET = "import tracelens.cli, tracelens.assemble, tracelens.render, tracelens.model.loader, pandas"


def _image_mb() -> float:
    """Peak memory (as `_run` measures it) of a process that only imports what a report
    imports: the fixed part of every report's peak, whatever the trace's size."""
    _, _, rss, _, _ = _run([sys.executable, "-c", _IMAGE_SNIPPET], _REPORT_ENV)
    return rss


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


#: The issue's goals (issue 30), checked over every row of every run.
GOAL_HTA_RATIO = 10.0  # whole report at least 10x faster than HTA's load
GOAL_FLOOR_RATIO = 2.0  # at most 2x the floor
GOAL_MEMORY_RATIO = 1.5  # peak memory at most 1.5x the JSON
GOAL_250MB_S = 2.5  # 250 MB of JSON under 2.5 s


def _fmt(v: float | None, fmt: str) -> str:
    return "n/a" if v is None else format(v, fmt)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--_size":  # helper mode, see _in_child
        size, events = _json_size(Path(sys.argv[2]))
        print(size, events)
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--_floor":
        print(f"{_floor(Path(sys.argv[2])):.4f}")
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--_make":
        make_scaled(Path(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4]))
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    ap.add_argument("--unit-mb", type=float, default=250.0, help="JSON size of the 1x input")
    ap.add_argument("--factors", default="1,2,4,8")
    ap.add_argument("--hta", default="1,2", help="factors HTA loads too ('' for none; corpus traces always)")
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--extra", type=Path, nargs="*", default=[])
    ap.add_argument("--corpus", type=Path, help="a folder of real captures (every *.json.gz, *.json in it)")
    ap.add_argument("--runs", type=int, default=1, help="repeat the whole table this many times")
    ap.add_argument("--no-floor", action="store_true", help="skip the floor (gunzip + msgspec decode)")
    ap.add_argument("--no-hta", action="store_true", help="no HTA load at all (not for the corpus either)")
    ap.add_argument(
        "--source-compile", action="store_true", help="run tracelens as this environment does (no bytecode kept)"
    )
    args = ap.parse_args()
    factors = [int(f) for f in args.factors.split(",") if f]
    hta_factors = {int(f) for f in args.hta.split(",") if f}
    have_hta = not args.no_hta
    try:
        import hta  # noqa: F401
    except ImportError:
        have_hta = False
    if not have_hta:
        hta_factors = set()
    args.cache.mkdir(parents=True, exist_ok=True)
    inputs: list[tuple[str, Path, bool]] = []
    unit = 0
    src_json = 0
    if factors:
        src_json = int(_in_child("--_size", str(args.source)).split()[0])
        unit = max(1, round(args.unit_mb * 1e6 / src_json))
    for f in factors:
        path = args.cache / f"{args.source.name.split('.')[0]}_x{unit * f}.json.gz"
        if not path.exists():
            print(f"making {path} ({unit * f} copies)", file=sys.stderr, flush=True)
            _in_child("--_make", str(args.source), str(unit * f), str(path))
        inputs.append((f"{f}x", path, f in hta_factors))
    corpus = sorted(p for p in args.corpus.iterdir() if p.name.endswith((".json.gz", ".json"))) if args.corpus else []
    inputs += [(p.name.split(".")[0], p, have_hta) for p in [*corpus, *args.extra]]
    global _REPORT_ENV
    if not args.source_compile and os.environ.get("PYTHONDONTWRITEBYTECODE"):
        _REPORT_ENV = _byte_compiled_env(args.cache)
    print(f"machine: {machine()}")
    cached = _REPORT_ENV is not None or not os.environ.get("PYTHONDONTWRITEBYTECODE")
    print(f"tracelens bytecode: {'kept between runs' if cached else 'compiled from source in each run'}")
    print(f"versions: {versions()}")
    if factors:
        print(f"source: {args.source.name} ({src_json / 1e6:.1f} MB JSON), 1x = {unit} copies")
    sizes = {path: tuple(map(int, _in_child("--_size", str(path)).split())) for _, path, _ in inputs}
    image = _image_mb()
    print(f"image: {image:.0f} MB (a process that imported the report's modules and read no trace)")
    rows: list[dict[str, Any]] = []
    for run in range(1, args.runs + 1):
        print(
            f"\nrun {run} of {args.runs}, {time.strftime('%H:%M:%S')}, load average before: "
            + " ".join(f"{v:.1f}" for v in os.getloadavg())
        )
        print(
            "| input | MB json | events | load avg | report s | load / analysis s | s per 1M events | HTA load s "
            "| HTA / report | floor s | report / floor | peak memory MB | memory / JSON | (memory - image) / JSON "
            "| report CPU s | HTA CPU s |"
        )
        print("|" + "---|" * 16)
        for label, path, with_hta in inputs:
            json_bytes, n_events = sizes[path]
            load_avg = os.getloadavg()[0]
            wall, cpu, rss, rep = _report(path)
            hta_s, hta_cpu, _ = _hta(path) if with_hta else (None, None, None)
            floor = None if args.no_floor else float(_in_child("--_floor", str(path)))
            mb = json_bytes / 1e6
            row = {
                "run": run,
                "input": label,
                "mb": mb,
                "events": n_events,
                "load_avg": load_avg,
                "wall": wall,
                "hta": hta_s,
                "floor": floor,
                "memory": rss / mb,
            }
            rows.append(row)
            print(
                f"| {label} | {mb:.0f} | {n_events:,} | {load_avg:.1f} | {wall:.2f} | "
                f"{rep['load_seconds']:.2f} / {rep['analysis_seconds']:.2f} | {wall / n_events * 1e6:.2f} | "
                f"{_fmt(hta_s, '.2f')} | {_fmt(hta_s / wall if hta_s else None, '.1f')}x | {_fmt(floor, '.2f')} | "
                f"{_fmt(wall / floor if floor else None, '.2f')}x | {rss:.0f} | {rss / mb:.2f} | "
                f"{(rss - image) / mb:.2f} | {cpu:.2f} | {_fmt(hta_cpu, '.2f')} |",
                flush=True,
            )
        print("load average after: " + " ".join(f"{v:.1f}" for v in os.getloadavg()))
    _print_goals(rows)


def _print_goals(rows: list[dict[str, Any]]) -> None:
    """Each goal's worst row over all runs (the worst case first, as the issue asks)."""
    print("\ngoals, worst case over all runs:")
    with_hta = [r for r in rows if r["hta"]]
    if with_hta:
        w = min(with_hta, key=lambda r: r["hta"] / r["wall"])
        ok = w["hta"] / w["wall"] >= GOAL_HTA_RATIO
        print(
            f"- HTA load / report >= {GOAL_HTA_RATIO:g}x: {'met' if ok else 'NOT met'}; worst "
            f"{w['hta'] / w['wall']:.1f}x ({w['input']}, run {w['run']}, load average {w['load_avg']:.1f})"
        )
    with_floor = [r for r in rows if r["floor"]]
    if with_floor:
        w = max(with_floor, key=lambda r: r["wall"] / r["floor"])
        ok = w["wall"] / w["floor"] <= GOAL_FLOOR_RATIO
        print(
            f"- report / floor <= {GOAL_FLOOR_RATIO:g}x: {'met' if ok else 'NOT met'}; worst "
            f"{w['wall'] / w['floor']:.2f}x ({w['input']}, run {w['run']}, load average {w['load_avg']:.1f})"
        )
    w = max(rows, key=lambda r: r["memory"])
    print(
        f"- peak memory / JSON <= {GOAL_MEMORY_RATIO:g}: {'met' if w['memory'] <= GOAL_MEMORY_RATIO else 'NOT met'}; "
        f"worst {w['memory']:.2f} ({w['input']}, {w['mb']:.0f} MB, run {w['run']})"
    )
    w = max(rows, key=lambda r: r["wall"] / r["mb"])
    per = w["wall"] / w["mb"] * 250
    print(
        f"- 250 MB under {GOAL_250MB_S:g} s (scaled by JSON size): {'met' if per < GOAL_250MB_S else 'NOT met'}; "
        f"worst {per:.2f} s per 250 MB ({w['input']}, run {w['run']})"
    )
    per_event = [r["wall"] / r["events"] * 1e6 for r in rows]
    print(f"- linear in events: {min(per_event):.2f}-{max(per_event):.2f} s per 1M events over all rows")


if __name__ == "__main__":
    main()
