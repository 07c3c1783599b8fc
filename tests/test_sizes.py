"""Sizes a reader can hold (issue 26): every module under tracelens/ under MAX_MODULE_LINES
lines, every function (its decorators, signature and body) at most MAX_FUNCTION_LINES,
read with ast. Offenders still to split are listed in KNOWN_* with the size they had
when listed: they may shrink, never grow, and each leaves the list once it fits (the
test then says so), so the lists only get shorter."""

from __future__ import annotations

import ast
from pathlib import Path

from support.corpus import REPO

PACKAGE = REPO / "tracelens"
MAX_MODULE_LINES = 700
MAX_FUNCTION_LINES = 120

#: Modules still over the limit: path -> lines when listed.
KNOWN_MODULES: dict[str, int] = {}
#: Functions still over the limit: "path:qualified name" -> lines when listed (none left).
KNOWN_FUNCTIONS: dict[str, int] = {}


def module_lines(path: Path) -> int:
    return len(path.read_text().splitlines())


def function_lines(source: str) -> dict[str, int]:
    """Qualified name ("Class.method", "outer.inner") -> lines, decorators included."""
    out: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    start = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                    out[name] = (child.end_lineno or child.lineno) - start + 1
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return out


def _modules() -> dict[str, int]:
    return {str(p.relative_to(REPO)): module_lines(p) for p in sorted(PACKAGE.rglob("*.py"))}


def _functions() -> dict[str, int]:
    out: dict[str, int] = {}
    for p in sorted(PACKAGE.rglob("*.py")):
        rel = str(p.relative_to(REPO))
        out.update({f"{rel}:{name}": n for name, n in function_lines(p.read_text()).items()})
    return out


def _check(sizes: dict[str, int], limit: int, known: dict[str, int], what: str) -> list[str]:
    problems = []
    for name, n in sorted(sizes.items(), key=lambda kv: -kv[1]):
        if n > limit and name not in known:
            problems.append(f"{name}: {n} lines (the limit is {limit}): split it along its own sections")
        elif name in known and n > known[name]:
            problems.append(f"{name}: {n} lines, grown from {known[name]} while it waits to be split")
    for name in sorted(known):
        if name not in sizes:
            problems.append(f"{name}: listed in KNOWN_{what} but gone: take it off the list")
        elif sizes[name] <= limit:
            problems.append(f"{name}: {sizes[name]} lines, within the limit now: take it off KNOWN_{what}")
    return problems


def test_modules_are_under_the_limit() -> None:
    problems = _check(_modules(), MAX_MODULE_LINES - 1, KNOWN_MODULES, "MODULES")
    assert not problems, "\n".join(problems)


def test_functions_are_under_the_limit() -> None:
    problems = _check(_functions(), MAX_FUNCTION_LINES, KNOWN_FUNCTIONS, "FUNCTIONS")
    assert not problems, "\n".join(problems)


def test_sizes_are_measured() -> None:
    """Positive control: a decorated nested function counts its decorator and body, a
    method is named by its class, and an over-long one is reported."""
    source = "class A:\n    @staticmethod\n    def m():\n        def inner():\n            pass\n        return 1\n"
    assert function_lines(source) == {"A.m": 5, "A.m.inner": 2}
    assert _check({"x.py:f": 130, "y.py:g": 10}, 120, {}, "FUNCTIONS") == [
        "x.py:f: 130 lines (the limit is 120): split it along its own sections"
    ]
    assert _check({"x.py:f": 110}, 120, {"x.py:f": 130}, "FUNCTIONS") == [
        "x.py:f: 110 lines, within the limit now: take it off KNOWN_FUNCTIONS"
    ]
    assert _check({"x.py:f": 140}, 120, {"x.py:f": 130}, "FUNCTIONS") == [
        "x.py:f: 140 lines, grown from 130 while it waits to be split"
    ]
