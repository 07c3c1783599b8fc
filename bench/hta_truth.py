"""Write tests/data/hta_truth.json: HolisticTraceAnalysis' idle breakdown and
communication overlap on the public traces tests/test_hta.py compares ours with.

    python bench/hta_truth.py

Needs the hta extra (pip install -e .[hta]) and ../shared/real_traces. Run it again when
HTA's pin or one of those traces changes (test_hta.py fails until then).
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from support.corpus import REAL_TRACES  # noqa: E402
from support.hta_truth import HTA_TRUTH, compute_all  # noqa: E402


def main() -> int:
    warnings.simplefilter("ignore")
    truth = compute_all({p.name: p for p in REAL_TRACES})
    HTA_TRUTH.write_text(json.dumps(truth, indent=1, sort_keys=True) + "\n")
    print(f"wrote {HTA_TRUTH}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
