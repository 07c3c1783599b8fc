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
    # The frameworks' hooks record a trace as capture does, and report on it in a process
    # of its own (`python -m tracelens report`): capture's side of the trace file.
    "capture": ("tracelens.capture", "tracelens.integrations"),
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
    ("analyzers", "explain", "analyzers state facts; explain/ words them"),
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


def _names_defined(module: str) -> tuple[set[str], set[str]]:
    """(types and constants, functions) a module defines at its top level."""
    path = PACKAGE.parent / (module.replace(".", "/") + ".py")
    if not path.exists():
        path = PACKAGE.parent / module.replace(".", "/") / "__init__.py"
    data: set[str] = set()
    functions: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ClassDef):
            data.add(node.name)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            functions.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            data.update(t.id for t in targets if isinstance(t, ast.Name) and t.id[:1].isupper())
        elif isinstance(node, ast.ImportFrom):
            data.update(a.asname or a.name for a in node.names if (a.asname or a.name)[:1].isupper())
    return data, functions


def test_explain_reads_only_the_analyzers_fact_types() -> None:
    """explain/ words a finding from its facts: from an analyzer's module it may import the
    fact types and named constants (a threshold its sentence quotes), never a function
    (the words never ask an analyzer to compute something)."""
    broken = []
    for path in sorted((PACKAGE / "explain").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import) and any(a.name.startswith("tracelens.analyzers") for a in node.names):
                broken.append(f"{module_name(path)}: import {node.names[0].name}")
            if not isinstance(node, ast.ImportFrom) or not (node.module or "").startswith("tracelens.analyzers"):
                continue
            data, _ = _names_defined(node.module or "")
            broken += [f"{module_name(path)}: {node.module}.{a.name}" for a in node.names if a.name not in data]
    assert not broken, "explain/ imports from analyzers what is no fact type or constant: " + ", ".join(broken)


#: A string of words: two spaces or more (a sentence, a label), outside docstrings.
_WORDS_MIN_SPACES = 2


def words_written(source: str) -> list[str]:
    """The English a module writes: f-strings whose literal text has words in it and
    string constants of three words or more (docstrings and comments aside)."""
    tree = ast.parse(source)
    skip: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        first = body[0] if isinstance(body, list) and body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
            skip.add(id(first.value))  # a docstring
    out: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            parts = [v for v in node.values if isinstance(v, ast.Constant)]
            skip.update(id(v) for v in parts)
            text = "".join(str(v.value) for v in parts)
            if any(w.isalpha() for w in text.split()) and text.strip().count(" ") >= 1:
                out.append(f"{node.lineno}: f{text!r}")
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in skip
            and node.value.strip().count(" ") >= _WORDS_MIN_SPACES
        ):
            out.append(f"{node.lineno}: {node.value!r}")
    return out


def test_analyzers_write_no_words() -> None:
    """Analyzers return facts (ids, numbers, names from the trace); every title, advice,
    label and description is written in explain/ (tracelens/explain/)."""
    written = {module_name(p): words_written(p.read_text()) for p in sorted((PACKAGE / "analyzers").rglob("*.py"))}
    broken = [f"{m}:{w}" for m, ws in written.items() for w in ws]
    assert not broken, "English in analyzers (move it to tracelens/explain/): " + "; ".join(broken)


def test_words_are_seen() -> None:
    """Positive control for the check above: a title, an advice sentence and a label are
    found; ids, names, docstrings and a tile name are not."""
    src = (
        '"""A docstring with many words in it."""\n'
        'title = f"{n} host syncs leave the GPU idle"\n'
        'advice = "Pin the source memory."\n'
        'label = f"busy time at {mhz} MHz"\n'
        'ok = (f"allocated_by.{i}", f"{m}x{n}", "aten::copy_", "SM clock")\n'
    )
    assert [w.split(":")[0] for w in words_written(src)] == ["2", "3", "4"]


def test_every_module_is_in_a_layer() -> None:
    loose = [m for m in import_graph() if m != "tracelens" and layer_of(m) is None]
    assert not loose, f"modules in no layer (add them to LAYERS): {loose}"
