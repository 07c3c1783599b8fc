"""`tracelens diff` on the H200 before/after pairs (workloads/diff_pairs.py) against the
step times measured with CUDA events outside the profiler (stored in each trace's
metadata as `event_step_ms`). Prints a table with the machine and versions.

    python bench/diff_pairs_check.py
"""

from __future__ import annotations

import json
import platform
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tracelens import __version__  # noqa: E402
from tracelens.diff import build_diff  # noqa: E402
from tracelens.model import load_trace  # noqa: E402

PAIRS = ("compile", "graph", "align", "repeat")


def event_us(path: Path) -> float:
    meta = load_trace(path).meta.metadata.get("tracelens_workload")
    data = json.loads(meta) if isinstance(meta, str) else (meta or {})
    return float(data["event_step_ms"]) * 1e3


def rows() -> list[dict[str, float | str | bool]]:
    out = []
    for pair in PAIRS:
        b = REPO / "sample_traces" / f"diff_{pair}_before.pt.trace.json.gz"
        a = REPO / "sample_traces" / f"diff_{pair}_after.pt.trace.json.gz"
        v = build_diff(load_trace(b), load_trace(a)).verdict
        eb, ea = event_us(b), event_us(a)
        out.append(
            {
                "pair": pair,
                "events_before_us": eb,
                "events_after_us": ea,
                "events_change_us": ea - eb,
                "diff_before_us": v.before_step_us,
                "diff_after_us": v.after_step_us,
                "diff_change_us": v.change_us,
                "noise_us": v.noise_us,
                "within_noise": v.within_noise,
                "main_cause": v.main_cause or "",
            }
        )
    return out


def main() -> None:
    print(f"tracelens {__version__} · Python {platform.python_version()} · {platform.machine()}")
    print("traces captured on an NVIDIA H200 (torch 2.11.0+cu130); CUDA events taken outside the profiler\n")
    print("| pair | CUDA events (µs/step) | diff (µs/step) | diff vs events | noise | verdict |")
    print("|---|---|---|---|---|---|")
    for r in rows():
        ev, df = float(r["events_change_us"]), float(r["diff_change_us"])
        small = abs(ev) < 0.01 * float(r["events_before_us"])  # a change this small is noise in both
        rel = "n/a" if small else f"{(df - ev) / abs(ev):+.0%}"
        print(
            f"| {r['pair']} | {r['events_before_us']:.0f} -> {r['events_after_us']:.0f} ({ev:+.0f}) | "
            f"{r['diff_before_us']:.0f} -> {r['diff_after_us']:.0f} ({df:+.0f}) | {rel} | ±{r['noise_us']:.0f} | "
            f"{'within noise' if r['within_noise'] else r['main_cause']} |"
        )


if __name__ == "__main__":
    main()
