"""What a change did to the verdicts: the primary, its gain and the predicted step of every
trace's report, from two code trees, side by side (the developers' guide: a changed verdict
on a public trace is said in the closing note, what it was and what it is).

    python bench/verdict_changes.py BASELINE_TREE [TRACES...]

BASELINE_TREE as for bench/same_reports.py (`git archive <commit> | tar -x -C /tmp/base`);
the candidate is this repository. Default traces: sample_traces/*.json.gz and
../shared/real_traces/**/*.json.gz. Prints one row per trace whose primary, primary gain
(per step, more than 1% apart) or predicted step (more than 1% apart) differ, and a count.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from same_reports import REPO, default_traces, report_pairs

#: Two gains or steps this close (relative) are the same verdict.
SAME_SHARE = 0.01


def _verdict(doc: dict[str, Any]) -> tuple[str, float, float]:
    s = doc.get("summary") or {}
    return str(s.get("primary") or ""), float(s.get("primary_gain_per_step_us") or 0.0), float(
        s.get("predicted_step_us") or 0.0
    )


def _apart(a: float, b: float) -> bool:
    return abs(a - b) > SAME_SHARE * max(abs(a), abs(b), 1e-9)


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    base = Path(argv[0]).resolve()
    traces = [Path(a) for a in argv[1:]] or default_traces()
    changed = 0
    print("| trace | primary before -> after | gain µs/step before -> after | predicted step µs before -> after |")
    print("|---|---|---|---|")
    for trace, before, after in report_pairs(base, REPO, traces):
        a, b = _verdict(before), _verdict(after)
        if a[0] != b[0] or _apart(a[1], b[1]) or _apart(a[2], b[2]):
            changed += 1
            print(f"| {trace.name} | {a[0]} -> {b[0]} | {a[1]:.0f} -> {b[1]:.0f} | {a[2]:.0f} -> {b[2]:.0f} |")
    print(f"\n{changed} of {len(traces)} verdicts changed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
