"""Before/after check for performance work: the same report JSON from two code trees.

    python bench/same_reports.py BASELINE_TREE [CANDIDATE_TREE] [TRACES...]

BASELINE_TREE is a checkout of the code before the change (e.g. `git archive main | tar
-x -C /tmp/base`), CANDIDATE_TREE defaults to this repository. For every trace (default:
sample_traces/*.json.gz and ../shared/real_traces/**/*.json.gz) each tree writes its JSON
report in its own process; the two are compared with the timing fields removed. Exit 1
on any difference, printing the first differing paths.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
#: Fields that describe this run rather than the trace (wall-clock seconds, the date).
TIMING_FIELDS = frozenset({"load_seconds", "analysis_seconds", "generated_at"})

_WRITER = r"""
import sys
from pathlib import Path
from tracelens.assemble import build_report
from tracelens.errors import TracelensError
from tracelens.model import load_trace
from tracelens.render import render_json
out = Path(sys.argv[1])
for i, trace in enumerate(sys.argv[2:]):
    try:
        text = render_json(build_report(load_trace(trace)))
    except TracelensError as exc:
        text = '{"error": %r}' % str(exc)
    (out / f"{i}.json").write_text(text)
"""


def _strip(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k not in TIMING_FIELDS}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def _diffs(a: Any, b: Any, path: str = "$") -> list[str]:
    if type(a) is not type(b):
        return [f"{path}: {a!r:.80} != {b!r:.80}"]
    if isinstance(a, dict):
        out: list[str] = []
        for key in sorted(set(a) | set(b)):
            if key not in a or key not in b:
                out.append(f"{path}.{key}: only in {'candidate' if key in b else 'baseline'}")
            else:
                out.extend(_diffs(a[key], b[key], f"{path}.{key}"))
        return out
    if isinstance(a, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} items != {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in _diffs(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {a!r:.80} != {b!r:.80}"]


def _reports(tree: Path, traces: list[Path], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    # The tree first; anything already on PYTHONPATH (e.g. an optional isal) after it.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(tree), os.environ.get("PYTHONPATH")]))}
    subprocess.run([sys.executable, "-c", _WRITER, str(out), *map(str, traces)], env=env, check=True, cwd=tree)


def default_traces() -> list[Path]:
    """Every sample trace and every public trace beside the repository."""
    return sorted((REPO / "sample_traces").glob("*.json.gz")) + sorted(
        (REPO.parent / "shared" / "real_traces").glob("**/*.json.gz")
    )


def report_pairs(base: Path, cand: Path, traces: list[Path]) -> Iterator[tuple[Path, Any, Any]]:
    """Each trace with the JSON report of each tree (built in one process per tree)."""
    with tempfile.TemporaryDirectory() as tmp:
        _reports(base, traces, Path(tmp) / "base")
        _reports(cand, traces, Path(tmp) / "cand")
        for i, trace in enumerate(traces):
            a = json.loads((Path(tmp) / "base" / f"{i}.json").read_text())
            yield trace, a, json.loads((Path(tmp) / "cand" / f"{i}.json").read_text())


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    base = Path(argv[0]).resolve()
    cand = Path(argv[1]).resolve() if len(argv) > 1 and Path(argv[1]).is_dir() else REPO
    rest = [Path(a) for a in argv[1:] if not Path(a).is_dir()]
    traces = rest or default_traces()
    bad = 0
    for trace, a, b in report_pairs(base, cand, traces):
        d = _diffs(_strip(a), _strip(b))
        print(f"{'same' if not d else 'DIFFERENT':9} {trace.name}")
        for line in d[:8]:
            print("    " + line)
        bad += bool(d)
    print(f"{len(traces) - bad}/{len(traces)} reports identical")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
