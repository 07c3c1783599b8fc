"""The contract (tracelens.report): it stands alone, its JSON schemas are generated from
its classes and kept per schema version, and the reports tracelens writes follow them."""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import pytest
from support.corpus import SAMPLES, diff_of, job_of, report_of, sample

from tracelens.render import render_json
from tracelens.render.diff import render_diff_json
from tracelens.render.job import render_job_json
from tracelens.report import CAUSES
from tracelens.report.schema import REPORTS, breaking, schema, schema_path, schema_text


@pytest.mark.slow
def test_the_contract_imports_nothing_of_the_pipeline() -> None:
    """Renderers and other tools can read a report without numpy, pandas or any analysis
    code: importing the contract loads none of them."""
    code = (
        "import sys, tracelens.report, tracelens.report.schema; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('numpy', 'pandas') "
        "or m.startswith(('tracelens.model', 'tracelens.derive', 'tracelens.analyzers', 'tracelens.render'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
    # Positive control: the same probe does see what a module of the pipeline pulls in.
    probe = code.replace("import sys, tracelens.report,", "import sys, tracelens.derive.ledger,")
    seen = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert "numpy" in seen.stdout and "tracelens.model.trace" in seen.stdout


@pytest.mark.parametrize("name", sorted(REPORTS))
def test_schema_file_is_current_for_its_version(name: str) -> None:
    path = schema_path(name)
    assert path.exists(), f"no {path.name}: run python -m tracelens.report.schema"
    committed = json.loads(path.read_text())
    assert committed["x-schema-version"] == REPORTS[name][1]
    if path.read_text() != schema_text(name):
        broken = breaking(committed, schema(name))
        assert not broken, (
            f"{name}: fields other tools read changed within schema version {REPORTS[name][1]}: "
            + "; ".join(broken[:10])
            + ". Bump the version, then run python -m tracelens.report.schema (the old file stays)."
        )
        pytest.fail(f"{path.name} is out of date (fields were added): run python -m tracelens.report.schema")


def test_breaking_changes_are_told_from_additions() -> None:
    old = schema("report")
    added = copy.deepcopy(old)
    added["$defs"]["LedgerEntry"]["properties"]["note"] = {"type": "string"}
    assert breaking(old, added) == []
    # Positive controls: a field gone, a field retyped, an enumeration value gone.
    gone = copy.deepcopy(old)
    del gone["$defs"]["LedgerEntry"]["properties"]["share"]
    assert breaking(old, gone) == ["LedgerEntry.share: gone"]
    retyped = copy.deepcopy(old)
    retyped["$defs"]["LedgerEntry"]["properties"]["time_us"] = {"type": "string"}
    assert breaking(old, retyped) and breaking(old, retyped)[0].startswith("LedgerEntry.time_us")
    fewer = copy.deepcopy(old)
    fewer["$defs"]["Severity"]["enum"].remove("info")
    assert breaking(old, fewer) == ["Severity: value 'info' gone"]


@pytest.mark.slow
def test_reports_follow_their_schemas() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    diff = diff_of(sample("diff_align_before"), sample("diff_align_after"))
    outputs = {
        "report": render_json(report_of(sample("host_sync_mask"))),
        "diff": render_diff_json(diff),
        "job": render_job_json(job_of(SAMPLES / "ranks_host_slow")),
    }
    for name, text in outputs.items():
        jsonschema.validate(json.loads(text), schema(name))
    # Positive control: a report that breaks the schema is refused.
    bad = json.loads(outputs["report"])
    bad["ledger"][0]["cause"] = "not_a_cause"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema("report"))


def test_ledger_causes_are_the_contracts() -> None:
    from tracelens.derive.ledger import BUSY_CAUSES, IDLE_CAUSES

    assert tuple(dict.fromkeys(BUSY_CAUSES + IDLE_CAUSES)) == CAUSES


def test_a_sync_site_carries_its_call_as_a_field() -> None:
    """Site.call: the host_sync finding's sites say their Python call as data, and the
    headline names the fix from that field, never from the site's description."""
    from dataclasses import replace

    from tracelens.explain.headline import first_fix
    from tracelens.report import Category

    (f,) = [f for f in report_of(sample("host_sync_mask")).findings if f.category == Category.HOST_SYNC]
    calls = {s.kind: s.call for s in f.sites}
    assert calls["item"] == "Tensor.item()" and calls["data_dependent_shape"] == "tensor[bool_mask]"
    assert all(s.description.startswith(f"{s.call} (") for s in f.sites if s.call)
    # The headline reads the field: a description saying another call changes nothing,
    # and a changed call shows (the construct's label stands in where there is none).
    renamed = replace(f, sites=tuple(replace(s, description="other.call() (item): x > y") for s in f.sites))
    assert first_fix(renamed) == first_fix(f) and "Tensor.item()" in first_fix(f)
    moved = replace(f, sites=(replace(f.sites[0], call="y.cpu()"), replace(f.sites[0], call="", kind="branch")))
    assert first_fix(moved).startswith("remove the host syncs (y.cpu(), branch)")
