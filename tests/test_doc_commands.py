"""The `tracelens capture` commands the README and the agents' skill file give parse as
they are meant: capture's own options come before the script, since everything after the
script is the script's (`allow_interspersed_args=False`). The README's GitHub Actions
gate snippet had `train.py --steps 60` and docs/agents.md `train.py --steps 10-14
--no-report -o run.pt.trace.json.gz`: both handed capture's options to train.py."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import typer

from tracelens.cli import app

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", REPO / "docs" / "agents.md"]


def _fenced_lines(path: Path) -> list[str]:
    out, inside = [], False
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("```"):
            inside = not inside
        elif inside:
            out.append(line)
    return out


def _commands(name: str) -> list[tuple[str, str]]:
    found = []
    for path in DOCS:
        for line in _fenced_lines(path):
            m = re.search(rf"\btracelens {name} (.*)$", line)
            if m and "[OPTIONS]" not in m.group(1) and "BEFORE AFTER" not in m.group(1):
                found.append((path.name, m.group(1).split(" #", 1)[0].strip()))
    return found


def _command(name: str) -> Any:
    """The command as typer builds it (typer 0.24+ carries its own click: no isinstance)."""
    return typer.main.get_command(app).commands[name]  # type: ignore[attr-defined]


def _option_names(cmd: Any) -> set[str]:
    return {o for p in cmd.params if p.param_type_name == "option" for o in (*p.opts, *p.secondary_opts)}


CAPTURES = _commands("capture")


def test_the_docs_have_capture_commands() -> None:
    assert len(CAPTURES) >= 5 and any(doc == "agents.md" for doc, _ in CAPTURES)


@pytest.mark.parametrize(("doc", "line"), CAPTURES)
def test_capture_options_come_before_the_script(doc: str, line: str) -> None:
    cmd = _command("capture")
    args = shlex.split(line)
    ctx = cmd.make_context("capture", args, resilient_parsing=True)
    ours = _option_names(cmd)
    assert not [a for a in ctx.args if a.split("=", 1)[0] in ours], f"{doc}: {line}"


def test_diff_gate_options_in_the_docs_exist() -> None:
    ours = _option_names(_command("diff"))
    used = {tok for _, line in _commands("diff") for tok in shlex.split(line) if tok.startswith("-") and tok != "-"}
    yaml = (REPO / "README.md").read_text()
    used |= set(re.findall(r"(?<![\w-])(--[a-z][a-z-]+)", yaml[yaml.index("#### A CI gate") :][:2500]))
    used -= _option_names(_command("capture"))
    assert used and used <= ours


def _schema(name: str) -> dict[str, Any]:
    import json

    out = json.loads((REPO / "tracelens" / "report" / "schemas" / name).read_text())
    assert isinstance(out, dict)
    return out


def _props(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    """The properties of a schema node, through $ref, anyOf (nullable) and array items."""
    for _ in range(8):
        if "$ref" in node:
            node = schema["$defs"][node["$ref"].rsplit("/", 1)[-1]]
        elif "anyOf" in node:
            node = next(n for n in node["anyOf"] if n.get("type") != "null")
        elif node.get("type") == "array":
            node = node["items"]
        else:
            break
    props = node.get("properties", {})
    assert isinstance(props, dict)
    return props


def test_the_skill_file_names_fields_the_json_has() -> None:
    """Every dotted field docs/agents.md tells an agent to read (`summary.primary`,
    `verdict.within_noise`, `snapshot.sites[]`, ...) and every field it lists for
    `findings[]` is in the report's or the diff's JSON schema."""
    text = (REPO / "docs" / "agents.md").read_text()
    report, diff = _schema("report-v2.schema.json"), _schema("diff-v1.schema.json")
    # Where a path starts: the diff's verdict, a finding's prediction, else the report.
    roots = {"verdict": (diff, "DiffReport"), "causes": (diff, "DiffReport"), "prediction": (report, "Finding")}
    dotted = set(re.findall(r"`([a-z_]+(?:\.[a-z_]+)+)(?:\[\])?`", text)) - {"torch.profiler"}
    assert len(dotted) >= 10
    for path in sorted(dotted):
        head, *rest = path.split(".")
        schema, top = roots.get(head, (report, "Report"))
        props = _props(schema, schema["$defs"][top])
        for part in (head, *rest):
            assert part in props, f"docs/agents.md: {path} ({part})"
            props = _props(schema, props[part])
    bullet = text[text.index("- `findings[]`") :].split("\n- ", 1)[0]
    finding = _props(report, report["$defs"]["Finding"])
    names = set(re.findall(r"`([a-z_]+)(?:\[\])?`", bullet)) - {"findings", "replay", "estimate", "file", "line",
                                                                 "function"}  # fmt: skip
    assert len(names) >= 10 and names <= set(finding), names - set(finding)
