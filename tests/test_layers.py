"""The package's shape, checked from its imports (every `import` and `from ... import` in
tracelens/, at module level or inside a function, read with ast): no import cycles, and
the layer rules of the architecture (docs: README "Layout" and CONTRIBUTING.md)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest
from support.corpus import REPO

PACKAGE = REPO / "tracelens"

#: The layers, as path prefixes of module names (the longest prefix wins).
LAYERS = {
    "face": ("tracelens.cli", "tracelens.__main__", "tracelens.early", "tracelens.mcp_server"),
    "job": ("tracelens.job",),
    "diff": ("tracelens.diff", "tracelens.gate"),
    "pipeline": (
        "tracelens.assemble",
        "tracelens.assemble_inputs",
        "tracelens.assemble_snapshot",
        "tracelens.ranking",
        "tracelens.predict",
    ),
    "explain": ("tracelens.explain",),
    "render": ("tracelens.render",),
    "contract": ("tracelens.report",),
    "analyzers": ("tracelens.analyzers",),
    "derive": ("tracelens.derive",),
    "model": ("tracelens.model",),
    "capture": ("tracelens.capture",),
    "domain": ("tracelens.domain",),
    "base": ("tracelens.errors", "tracelens.output", "tracelens.redact"),
}
#: Imports that must never run, and why (the project's target layers).
NEVER = [
    ("derive", "analyzers", "derived data never asks an analyzer"),
    ("model", "derive", "the model knows nothing above it"),
    ("model", "analyzers", "the model knows nothing above it"),
    ("contract", "analyzers", "the contract stands alone"),
    ("contract", "model", "the contract stands alone"),
    ("contract", "derive", "the contract stands alone"),
    ("render", "model", "renderers see only the finished report"),
    ("render", "derive", "renderers see only the finished report"),
    ("render", "analyzers", "renderers see only the finished report"),
    ("capture", "analyzers", "capture meets report only at the trace file"),
    ("capture", "derive", "capture meets report only at the trace file"),
    ("job", "face", "the job is a library, the face calls it"),
    ("explain", "analyzers", "the words are written from facts, not by asking analyzers"),
    ("domain", "model", "the domain's facts sit below everything"),
    ("domain", "derive", "the domain's facts sit below everything"),
    ("domain", "analyzers", "the domain's facts sit below everything"),
]


def module_name(path: Path) -> str:
    rel = path.relative_to(REPO).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path) -> Iterator[str]:
    """The tracelens modules `path` imports (a `from pkg import name` of a submodule
    counts as importing the submodule)."""
    me = module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.startswith("tracelens"))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*up, base]) if base else ".".join(up)
            if not base.startswith("tracelens"):
                continue
            for a in node.names:
                sub = f"{base}.{a.name}"
                yield (
                    sub
                    if (PACKAGE.parent / (sub.replace(".", "/") + ".py")).exists()
                    or (PACKAGE.parent / sub.replace(".", "/") / "__init__.py").exists()
                    else base
                )


@cache
def import_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        me = module_name(path)
        graph[me] = {m for m in imports_of(path) if m != me}
    return graph


def layer_of(module: str) -> str | None:
    best: tuple[int, str] | None = None
    for layer, prefixes in LAYERS.items():
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and (best is None or len(p) > best[0]):
                best = (len(p), layer)
    return best[1] if best else None


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm).
    A package imports its __init__'s names: `tracelens.x` -> `tracelens.x.y` edges made by
    a package's own __init__ re-exporting its modules are ignored (that is no cycle a
    reader follows)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def edges(v: str) -> set[str]:
        return {w for w in graph.get(v, ()) if w in graph and not w.startswith(v + ".")}

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges(v):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles() -> None:
    found = cycles(import_graph())
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


def test_cycles_are_seen() -> None:
    """Positive control: a cycle through three modules, and one through a lazy import."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


@pytest.mark.parametrize("rule", NEVER, ids=lambda r: f"{r[0]}-not-{r[1]}")
def test_layer_rule(rule: tuple[str, str, str]) -> None:
    src, dst, why = rule
    graph = import_graph()
    broken = sorted(
        f"{a} -> {b}" for a, targets in graph.items() if layer_of(a) == src for b in targets if layer_of(b) == dst
    )
    assert not broken, f"{why}: " + ", ".join(broken)


def test_no_analyzer_imports_another() -> None:
    """Analyzers are leaves: what two share is derived data (tracelens.derive) or the
    registry's base types."""
    graph = import_graph()
    shared = {"tracelens.analyzers", "tracelens.analyzers.base"}
    broken = sorted(
        f"{a} -> {b}"
        for a, targets in graph.items()
        if a.startswith("tracelens.analyzers.") and a not in shared
        for b in targets
        if b.startswith("tracelens.analyzers") and b not in shared
    )
    assert not broken, ", ".join(broken)


def test_every_module_is_in_a_layer() -> None:
    loose = [m for m in import_graph() if m != "tracelens" and layer_of(m) is None]
    assert not loose, f"modules in no layer (add them to LAYERS): {loose}"
