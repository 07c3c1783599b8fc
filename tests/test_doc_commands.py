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
