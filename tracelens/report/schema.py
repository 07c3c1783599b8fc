"""JSON schemas of the three reports, generated from the contract's classes.

    python -m tracelens.report.schema           # write schemas/ for the current versions
    python -m tracelens.report.schema --check   # exit 1 when schemas/ is out of date

Each schema is a file per version (`report-v2.schema.json`): a field added within a
version regenerates its file; a field removed, renamed or retyped breaks what other
tools read, so it takes a new version (SCHEMA_VERSION, DIFF_SCHEMA_VERSION,
JOB_SCHEMA_VERSION) and a new file beside the old one. tests/test_contract.py checks
both (`breaking` below says which changes break).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import msgspec

from tracelens.report.diff_report import DIFF_SCHEMA_VERSION, DiffReport
from tracelens.report.job_report import JOB_SCHEMA_VERSION, JobReport
from tracelens.report.snapshot_report import SNAPSHOT_SCHEMA_VERSION, SnapshotReport
from tracelens.report.trace_report import SCHEMA_VERSION, Report

SCHEMA_DIR = Path(__file__).resolve().parent / "schemas"
#: Each report: its class, its schema version, and what it is.
REPORTS: dict[str, tuple[type[Any], int, str]] = {
    "report": (Report, SCHEMA_VERSION, "tracelens report: one trace"),
    "diff": (DiffReport, DIFF_SCHEMA_VERSION, "tracelens diff: two traces compared"),
    "job": (JobReport, JOB_SCHEMA_VERSION, "tracelens report of a folder of ranks: one job"),
    "snapshot": (SnapshotReport, SNAPSHOT_SCHEMA_VERSION, "tracelens report of a CUDA memory snapshot"),
}


def schema(name: str) -> dict[str, Any]:
    """The JSON schema of report `name` at its current version."""
    cls, version, title = REPORTS[name]
    out: dict[str, Any] = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": f"{title} (schema_version {version})",
        "x-schema-version": version,
    }
    out.update(msgspec.json.schema(cls))
    return out


def schema_path(name: str, version: int | None = None) -> Path:
    return SCHEMA_DIR / f"{name}-v{REPORTS[name][1] if version is None else version}.schema.json"


def schema_text(name: str) -> str:
    return json.dumps(schema(name), indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def breaking(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """What `new` breaks of `old` for a reader: definitions or properties gone, and
    properties whose schema changed (a new property or definition breaks nothing)."""
    out = []
    old_defs, new_defs = old.get("$defs", {}), new.get("$defs", {})
    for name, old_def in old_defs.items():
        new_def = new_defs.get(name)
        if new_def is None:
            out.append(f"{name}: gone")
            continue
        old_props, new_props = old_def.get("properties"), new_def.get("properties")
        if old_props is None:  # an enumeration: values may be added, not removed
            gone = set(old_def.get("enum", [])) - set(new_def.get("enum", []))
            out.extend(f"{name}: value {v!r} gone" for v in sorted(gone))
            continue
        for prop, prop_schema in old_props.items():
            if prop not in (new_props or {}):
                out.append(f"{name}.{prop}: gone")
            elif new_props[prop] != prop_schema:
                out.append(f"{name}.{prop}: {prop_schema} -> {new_props[prop]}")
    return out


def main(argv: list[str]) -> int:
    stale = []
    for name in REPORTS:
        path = schema_path(name)
        text = schema_text(name)
        if path.exists() and path.read_text() == text:
            continue
        if "--check" in argv:
            stale.append(path.name)
            continue
        SCHEMA_DIR.mkdir(exist_ok=True)
        path.write_text(text)
        print(f"wrote {path}")
    if stale:
        print("out of date: " + ", ".join(stale) + " (python -m tracelens.report.schema)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
