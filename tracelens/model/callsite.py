"""The calling statement, from the source: torch.profiler's 2024+ frames name only a
function's `def` line, so when the source file is readable at report time the function
is parsed with `ast` and the calls that match the C call (`<built-in method item ...>`)
or, when there is none, the op (`aten::index` for `x[mask]`, `aten::is_nonzero` for a
tensor `if`) are the candidates. One candidate line gives `call_line`; several give the
first with `ambiguous` set.
"""

from __future__ import annotations

import ast
import io
import os
import re
import sys
import tokenize
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from tracelens.model.schema import Kind
from tracelens.model.trace import TraceModel
from tracelens.report.findings import PySource as PySource

_PYTHON = int(Kind.PYTHON)
_NO_OP = -1


_FRAME_RE = re.compile(r"^(?P<file>.*?)\((?P<line>\d+)\): (?P<func>.*)$")


#: Environment variable: extra directories (os.pathsep-separated) where sources named by
#: relative paths in a trace are looked up, for traces captured elsewhere.
SOURCES_ENV = "TRACELENS_SOURCES"


#: Longest code text kept for a source cell; longer lines are cut with an ellipsis.
MAX_CODE_CHARS = 120


_CALL_RES = (
    re.compile(r"^<built-in method (\w+) of "),
    re.compile(r"^<built-in function (\w+)>"),
)


#: Python frames of torch's own that stand for a Python-level construct in the caller.
_DUNDER_KEYS = {"__format__": ("format", ""), "__repr__": ("repr", ""), "__str__": ("repr", "")}


#: Module call wrappers: the caller's statement is a `self.layer(x)`, one of many: skip.
_MODULE_CALLS = frozenset({"_call_impl", "_wrapped_call_impl", "__call__"})


#: Ops that run directly in the caller's frame (no C-call frame between) and the syntax
#: that makes them: boolean-mask indexing, its store, a tensor's truth value, float(t).
_OP_KEYS = {
    "aten::index": ("subscript", ""),
    "aten::nonzero": ("subscript", ""),
    "aten::index_put_": ("store", ""),
    "aten::_index_put_impl_": ("store", ""),
    "aten::masked_select": ("subscript", ""),
    "aten::is_nonzero": ("truth", ""),
    "aten::item": ("scalar", ""),
    "aten::_local_scalar_dense": ("scalar", ""),
}


#: Builtins that turn a tensor into a Python scalar (tensor.__float__ etc. have no frame).
_SCALAR_FUNCS = frozenset({"float", "int", "bool", "complex"})


_REPR_FUNCS = frozenset({"print", "str", "repr", "format"})


_PY_PREDICATES = frozenset(
    {"isinstance", "hasattr", "callable", "len", "bool", "issubclass", "all", "any", "float", "int"}
)


@dataclass
class _Parsed:
    """A readable source file: its lines, and its syntax tree parsed when first needed.

    A call site's function is parsed on its own as a rule (`def_at`): the whole file is
    parsed only for `<module>` frames, frames that were running when the recording began,
    and functions whose lines could not be cut out. capture_generate's 8 transformers
    files: their whole parse was 0.09 of the analysis' 1.1 s under cProfile, and their
    trees ~6 MB of its peak RSS (151 -> 145 MB; issue 30)."""

    lines: list[str]
    text: str
    #: The whole file's tree once parsed (None until then, and when it does not parse).
    parsed_tree: ast.Module | None = None
    parse_tried: bool = False
    #: The file's function defs by name, made on first use: `_scope` looks one up per
    #: distinct call site, and walking the whole tree each time was most of the analysis
    #: where the frames' library files are on disk (a Llama generate reported on the H200
    #: box, transformers installed: 132 walks of its modules, 11.7 of 14.2 s under cProfile).
    functions: dict[str, list[ast.FunctionDef | ast.AsyncFunctionDef]] | None = None
    #: `def_at`'s answers by (function, def line).
    segments: dict[tuple[str, int], ast.FunctionDef | ast.AsyncFunctionDef | None] = field(default_factory=dict)
    #: The lines as the parser counts them (`str.splitlines` also splits at form feeds).
    code_lines: list[str] | None = None

    @property
    def tree(self) -> ast.Module | None:
        if not self.parse_tried:
            self.parse_tried = True
            try:
                self.parsed_tree = ast.parse(self.text)
            except (SyntaxError, ValueError):
                self.parsed_tree = None
        return self.parsed_tree

    def defs(self, name: str) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
        if self.functions is None:
            found: dict[str, list[ast.FunctionDef | ast.AsyncFunctionDef]] = {}
            tree = self.tree
            for n in _statements(tree) if tree is not None else ():
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    found.setdefault(n.name, []).append(n)
            self.functions = found
        return self.functions.get(name, [])

    def def_at(self, name: str, def_line: int) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        """The def of `name` whose code object starts at `def_line`, parsed from its own
        lines (`_def_lines`) with the file's line numbers and columns; None when those
        lines are not such a def or do not parse on their own (then the file is parsed)."""
        key = (name, def_line)
        if key not in self.segments:
            if self.code_lines is None:
                self.code_lines = _NEWLINE_RE.split(self.text)
            self.segments[key] = _segment_def(self.code_lines, name, def_line)
        return self.segments[key]

    #: Each searched scope's own nodes (`_own_nodes`), by the scope node's id: a scope is
    #: searched once per syntax key of its call sites.
    own: dict[int, list[ast.AST]] = field(default_factory=dict)

    def own_nodes(self, scope: ast.AST) -> list[ast.AST]:
        if id(scope) not in self.own:
            self.own[id(scope)] = _own_nodes(scope)
        return self.own[id(scope)]


#: Nodes that hold statements in their list fields (bodies, handlers, match cases): a def
#: is a statement, so only these need visiting to find every def.
_STATEMENT_HOLDERS = (ast.stmt, ast.excepthandler, ast.match_case)


def _statements(tree: ast.AST) -> Iterator[ast.AST]:
    """The tree's statements (and handlers, match cases) in `ast.walk`'s breadth-first
    order, without visiting expressions: no def lives inside one, and they are most of a
    module's nodes (capture_generate's 8 transformers files: `ast.walk` over all 53k
    nodes was 0.13 of the analysis' 1.1 s under cProfile)."""
    todo = deque([tree])
    while todo:
        node = todo.popleft()
        for field_name in node._fields:
            value = getattr(node, field_name, None)
            if isinstance(value, list):
                todo.extend(v for v in value if isinstance(v, _STATEMENT_HOLDERS))
        yield node


def _callee_key(name: str) -> tuple[str, str] | None:
    """What the callee frame says about the caller's syntax: ("call", NAME) for a C call
    or a named Python function, ("format"/"repr", "") for torch's dunders, None for module
    calls and frames that name nothing useful."""
    for pattern in _CALL_RES:
        m = pattern.match(name)
        if m:
            return ("call", m.group(1))
    m = _FRAME_RE.match(name.strip())
    if not m:
        return None
    func = m.group("func")
    if func in _DUNDER_KEYS:
        return _DUNDER_KEYS[func]
    if func in _MODULE_CALLS or func.startswith("<") or not func.isidentifier():
        return None
    return ("call", func)


def _op_key(model: TraceModel, row: int, user: int) -> tuple[str, str] | None:
    """For a row issued directly in the user's frame: the outermost op between the two,
    mapped to the syntax that makes it (None for ordinary ops, e.g. `a * b`)."""
    arr = model.arrays
    o = int(arr.op[row])
    if o < 0 or int(arr.py_frame[o]) != user:
        return None
    while True:
        p = int(arr.parent[o])
        up = int(arr.op[p]) if p >= 0 else -1
        if up < 0 or int(arr.py_frame[up]) != user:
            break
        o = up
    return _OP_KEYS.get(arr.name(o))


def _op_key_ids(model: TraceModel, rows: np.ndarray, users: np.ndarray) -> np.ndarray:
    """`ordinals.key_id(_op_key(model, row, user))` for many rows at once: each row's op
    climbs its enclosing ops while they run in the same user frame, all rows a level per
    numpy step (a decode loop asked this of 1.3 * 10^5 rows one Python walk each)."""
    arr = model.arrays
    ordinals = _callee_ordinals(model)
    out = np.full(len(rows), ordinals.key_id(None), dtype=np.int64)
    o = arr.op[rows]
    ok = o >= 0
    ok[ok] = arr.py_frame[o[ok]] == users[ok]
    at = np.flatnonzero(ok)
    cur, user = o[at], users[at]
    outermost = np.empty(len(at), dtype=np.int64)
    pos = np.arange(len(at))
    while len(pos):
        p = arr.parent[cur]
        up = np.where(p >= 0, arr.op[np.clip(p, 0, None)], _NO_OP)
        climbs = up >= 0
        climbs[climbs] = arr.py_frame[up[climbs]] == user[climbs]
        outermost[pos[~climbs]] = cur[~climbs]
        pos, cur, user = pos[climbs], up[climbs], user[climbs]
    codes = arr.name_codes[outermost]
    used, inverse = np.unique(codes, return_inverse=True)
    ids = np.array([ordinals.key_id(_OP_KEYS.get(arr.name_table[c])) for c in used.tolist()], dtype=np.int64)
    out[at] = ids[inverse.reshape(-1)]
    return out


def _refine(model: TraceModel, src: PySource, user: int, callee: int, row: int) -> PySource:
    key = _row_callee_key(model, callee) if callee >= 0 else _op_key(model, row, user)
    if key is None:
        return src
    # Several calls of the same name in one function (`a.mean()` ... `b.mean()`): this
    # call's position among the same-named calls of this frame instance picks the
    # statement, when that instance made exactly as many such calls as there are in the
    # source (straight-line code). (-1, -1) when not applicable.
    ordinal, count = _ordinal(model, user, callee, key) if callee >= 0 else (-1, -1)
    return _refined(model, src, user, key, ordinal, count)


def _running_at_start(model: TraceModel, frame: int) -> bool:
    """Whether `frame` was running when the recording began: torch names such a frame by
    the line it was at then, not by its def line. Its tracer opens those frames at its
    start, one after another (a few µs apart on the H200), before the first op or
    annotation of the recording (ProfilerStep#N: ~0.4 ms later in the detection capture)."""
    caches = model.source_caches
    if caches.frames_at_start is None:
        ts = model.host["ts"].to_numpy()
        other = ts[model.arrays.kind != _PYTHON]
        caches.frames_at_start = (ts, float(other.min()) if len(other) else float("-inf"))
    ts, first_op = caches.frames_at_start
    return bool(ts[frame] < first_op)


def _refined(model: TraceModel, src: PySource, user: int, key: tuple[str, str], ordinal: int, count: int) -> PySource:
    """`_refine`'s answer once its key and ordinal are known (the same memo); a frame that
    was running when the recording began is searched whole (`_running_at_start`)."""
    memo: dict[tuple[str, tuple[str, str], int, int, bool], PySource] = model.source_caches.call_line
    running = _running_at_start(model, user)
    mkey = (model.arrays.name(user), key, ordinal, count, running)
    if mkey not in memo:
        memo[mkey] = _infer(model, src, key, ordinal, count, running)
    return memo[mkey]


def _row_callee_key(model: TraceModel, row: int) -> tuple[str, str] | None:
    """`_callee_key` of a row's name, worked out once per distinct name."""
    arr = model.arrays
    memo: dict[int, tuple[str, str] | None] = model.source_caches.callee_key
    code = arr.name_codes.item(row)
    if code not in memo:
        memo[code] = _callee_key(arr.name_table[code])
    return memo[code]


def _ordinal(model: TraceModel, user: int, callee: int, key: tuple[str, str]) -> tuple[int, int]:
    """(position, count) of `callee` among the calls `user` made with the same syntax key
    (its children frames of that key, in row order); (-1, -1) when callee is not one of
    user's children with that key."""
    ordinals = _callee_ordinals(model)
    slot = ordinals.slot.item(callee)
    if (
        slot < 0
        or ordinals.caller.item(slot) != user
        or ordinals.keys[ordinals.key_ids.item(model.arrays.name_codes.item(callee))] != key
    ):
        return (-1, -1)
    return (ordinals.ordinal.item(slot), ordinals.count.item(slot))


@dataclass(frozen=True)
class _Ordinals:
    """For every Python frame row (by `slot`): its caller frame and its position and
    count among the caller's children frames of the same syntax key (`_callee_key` of the
    frame's name, one id per distinct key in `keys`), in row order; -1 for frames
    without a caller frame. A loop body's frame makes thousands of calls: grouping them
    is one sort, not a pass per frame instance."""

    slot: np.ndarray  # per host row: its index here, -1 for rows that are not frames
    caller: np.ndarray
    ordinal: np.ndarray
    count: np.ndarray
    key_ids: np.ndarray  # per host name code: its key id
    keys: list[tuple[str, str] | None]  # by key id; keys[0] is None (no key)
    key_index: dict[tuple[str, str] | None, int]
    none_key: int = 0

    def key_id(self, key: tuple[str, str] | None) -> int:
        """The id of a key (an op's, say), given one if it has none yet."""
        found = self.key_index.setdefault(key, len(self.keys))
        if found == len(self.keys):
            self.keys.append(key)
        return found


def frame_slots(model: TraceModel) -> np.ndarray:
    """Per host row: its index among the Python frame rows (in row order), -1 for rows
    that are not frames; int32, one array for the frame tables that index by it."""
    found = model.source_caches.frame_slots
    if found is None:
        is_frame = model.arrays.kind == _PYTHON
        found = np.full(len(is_frame), -1, dtype=np.int32)
        found[is_frame] = np.arange(int(is_frame.sum()), dtype=np.int32)
        model.source_caches.frame_slots = found
    return found


def _callee_ordinals(model: TraceModel) -> _Ordinals:
    memo: dict[str, Any] = model.source_caches.callee_ordinals
    if "all" in memo:
        found: _Ordinals = memo["all"]
        return found
    arr = model.arrays
    # Keys per distinct name: as _row_callee_key has them (one memo for both).
    names: dict[int, tuple[str, str] | None] = model.source_caches.callee_key
    keys: list[tuple[str, str] | None] = [None]
    key_index: dict[tuple[str, str] | None, int] = {None: 0}
    frames = np.flatnonzero(arr.kind == _PYTHON)
    used = np.unique(arr.name_codes[frames]).tolist()
    key_ids = np.zeros(len(arr.name_table), dtype=np.int64)
    for code in used:
        if code not in names:
            names[code] = _callee_key(arr.name_table[code])
        k = names[code]
        key_ids[code] = key_index.setdefault(k, len(keys))
        if len(keys) < len(key_index):
            keys.append(k)
    n = len(frames)
    slot = frame_slots(model)
    # int32 (rows and counts fit): these stay with the model, and were built at the
    # analysis' memory peak (large_compile: 2.4 MB per column in int64).
    parents = arr.parent[frames]
    caller = np.where(parents >= 0, arr.py_frame[np.clip(parents, 0, None)], -1).astype(np.int32)
    del parents
    ordinal = np.full(n, -1, dtype=np.int32)
    count = np.full(n, -1, dtype=np.int32)
    has = np.flatnonzero(caller >= 0)
    if len(has):
        fkey = key_ids[arr.name_codes[frames[has]]].astype(np.int32)
        c = caller[has]
        order = np.lexsort((frames[has], fkey, c))
        c, k = c[order], fkey[order]
        del fkey
        order = has[order]
        del has
        starts = np.flatnonzero(np.concatenate(([True], (c[1:] != c[:-1]) | (k[1:] != k[:-1]))))
        del c, k
        sizes = np.diff(np.append(starts, len(order)))
        group = np.repeat(np.arange(len(starts), dtype=np.int32), sizes)
        ordinal[order] = np.arange(len(order), dtype=np.int32) - starts[group]
        count[order] = sizes[group]
    found = _Ordinals(slot, caller, ordinal, count, key_ids, keys, key_index)
    memo["all"] = found
    return found


def _strip_comment(line: str) -> str:
    try:
        for tok in tokenize.generate_tokens(io.StringIO(line).readline):
            if tok.type == tokenize.COMMENT:
                return line[: tok.start[1]].rstrip()
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass
    return line


def _infer(
    model: TraceModel, src: PySource, key: tuple[str, str], ordinal: int = -1, count: int = -1, running: bool = False
) -> PySource:
    parsed = _parse_source(model, src.file)
    if parsed is None or src.line is None:
        return src
    scope = _scope(parsed, src.function, src.line, running)
    if scope is None:  # no such def at that line: the file changed since the trace
        return src
    nodes = sorted(_candidates(parsed.own_nodes(scope), key), key=lambda n: (_line(n), getattr(n, "col_offset", 0)))
    lines = sorted({_line(n) for n in nodes})
    if not lines:
        return src
    if len(lines) > 1 and 0 <= ordinal < count == len(nodes):
        lines = [_line(nodes[ordinal])]
    text = parsed.lines[lines[0] - 1] if lines[0] <= len(parsed.lines) else ""
    code = _strip_comment(text).strip()
    if len(code) > MAX_CODE_CHARS:
        code = code[: MAX_CODE_CHARS - 1] + "…"
    return replace(
        src,
        call_line=lines[0],
        code=code,
        line_inferred=True,
        ambiguous=len(lines) > 1,
        candidates=tuple(lines) if len(lines) > 1 else (),
    )


def _search_dirs(model: TraceModel) -> list[Path]:
    memo: dict[str, list[Path]] = model.source_caches.source_dirs
    if "dirs" in memo:
        return memo["dirs"]
    dirs: list[Path] = [Path.cwd()]
    meta = model.meta.metadata.get("tracelens") if isinstance(model.meta.metadata, dict) else None
    if isinstance(meta, dict):
        cwd = meta.get("cwd")
        command = meta.get("command")
        script = command[0] if isinstance(command, list) and command and command[0] != "-m" else None
        for base in ([Path(cwd)] if isinstance(cwd, str) else []) + [Path.cwd()]:
            dirs.append(base)
            if isinstance(script, str):
                dirs.append((base / script).parent)
    dirs += [Path(d) for d in os.environ.get(SOURCES_ENV, "").split(os.pathsep) if d]
    dirs += [Path(p) for p in sys.path if p]  # site-packages: `transformers/models/...`
    memo["dirs"] = list(dict.fromkeys(dirs))
    return memo["dirs"]


def _parse_source(model: TraceModel, file: str) -> _Parsed | None:
    cache: dict[str, _Parsed | None] = model.source_caches.parsed_sources
    if file in cache:
        return cache[file]
    parsed: _Parsed | None = None
    if file.endswith(".py"):
        p = Path(file)
        paths = [p] if p.is_absolute() else [d / p for d in _search_dirs(model)]
        for path in paths:
            try:
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            parsed = _Parsed(text.splitlines(), text)
            break
    cache[file] = parsed
    return parsed


def _scope(parsed: _Parsed, function: str, def_line: int, running: bool = False) -> ast.AST | None:
    """The function whose code object starts at `def_line` (the first decorator's line
    for a decorated one), or the module for `<module>`; for a frame that was `running`
    when the recording began, else the one of that name whose body holds the line."""
    if function == "<module>":
        return parsed.tree
    if not running:
        own = parsed.def_at(function, def_line)
        if own is not None:
            return own
    funcs = parsed.defs(function)
    for node in funcs:
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        if def_line in (first, node.lineno):
            return node
    # A frame that was already running when the recording started is named by the line it
    # was at then, not its def line: `tracelens capture` starts recording in an
    # optimizer.step() hook, so the training loop's function is `main` at the
    # optimizer.step() line (seen on the H200: "detection_train.py(83): main", line 83
    # being `optimizer.step()`). The innermost function of that name holding the line.
    # Only for such frames: for the others a line inside the body means the file changed.
    inside = [n for n in funcs if running and n.lineno <= def_line <= (n.end_lineno or n.lineno)]
    return max(inside, key=lambda n: n.lineno) if inside else None


#: A line that may start a def's code object: a decorator or the def itself.
_DEF_START_RE = re.compile(r"[ \t]*(@|def\b|async\b)")


#: Line ends as the parser has them (`str.splitlines` also splits at form feeds etc.).
_NEWLINE_RE = re.compile(r"\r\n|\r|\n")


def _def_lines(lines: list[str], def_line: int) -> tuple[int, int] | None:
    """[start, end) of the lines of the def (with its decorators) that starts at line
    `def_line`: up to the first line after its `def` that is indented no deeper than it
    (not a blank line, a comment or a closing bracket). None when the line starts no
    def. A cut in the wrong place (a string or a bracket spanning a dedented line) does
    not parse: `_segment_def` then leaves the def to the whole file's parse."""
    i = def_line - 1
    if not 0 <= i < len(lines) or _DEF_START_RE.match(lines[i]) is None:
        return None
    head = lines[i].lstrip()
    base = len(lines[i]) - len(head)
    seen_def = not head.startswith("@")
    j = i + 1
    while j < len(lines):
        text = lines[j]
        rest = text.lstrip()
        if rest and not rest.startswith("#") and len(text) - len(rest) <= base and not rest.startswith((")", "]", "}")):
            if seen_def:
                break
            if not rest.startswith("@"):
                seen_def = True
        j += 1
    return i, j


def _segment_def(lines: list[str], name: str, def_line: int) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The def of `name` starting at `def_line`, parsed from its own lines; None when
    they are not that def or do not parse alone. Blank lines before it keep the file's
    line numbers, and an indented def goes under an `if 1:` (one line up), which keeps
    its columns: the nodes are the whole file's parse's, position for position."""
    span = _def_lines(lines, def_line)
    if span is None:
        return None
    start, end = span
    indented = lines[start][:1] in (" ", "\t")
    if indented and start == 0:
        return None
    head = "\n" * (start - 1) + "if 1:\n" if indented else "\n" * start
    try:
        tree = ast.parse(head + "\n".join(lines[start:end]) + "\n")
    except (SyntaxError, ValueError, RecursionError):
        return None
    body = tree.body
    if indented:
        if len(body) != 1 or not isinstance(body[0], ast.If):
            return None
        body = body[0].body
    if len(body) != 1 or not isinstance(body[0], (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    node = body[0]
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    return node if node.name == name and def_line in (first, node.lineno) else None


def _own_nodes(scope: ast.AST) -> list[ast.AST]:
    """Nodes that run in the scope's own frame: nested defs, classes and lambdas are
    other frames and are skipped (their bodies, not their decorators or defaults)."""
    out: list[ast.AST] = []
    body = scope.body if isinstance(scope, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef)) else [scope]
    stack: list[ast.AST] = list(reversed(body))
    while stack:
        node = stack.pop()
        out.append(node)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            stack.extend(reversed(node.decorator_list))
            continue
        if isinstance(node, ast.Lambda):
            continue
        stack.extend(reversed(list(ast.iter_child_nodes(node))))
    return out


def _line(node: ast.AST) -> int:
    return int(getattr(node, "lineno", 0))


def _call_name(node: ast.Call) -> str:
    f = node.func
    if isinstance(f, ast.Attribute):
        return f.attr
    if isinstance(f, ast.Name):
        return f.id
    return ""


def _advanced_index(node: ast.Subscript) -> bool:
    """x[mask], x[idx], x[x > 0], x[i, mask]: not x[0], x[1:3] or x["key"] (basic
    indexing or a container lookup, which make no index op)."""
    parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
    return any(not isinstance(p, (ast.Constant, ast.Slice)) and not _is_ellipsis(p) for p in parts)


def _is_ellipsis(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value is Ellipsis


def _may_be_tensor_truth(test: ast.AST) -> bool:
    """A condition whose value may be a tensor: not a constant, `is`/`in` test,
    isinstance/len/hasattr call or a comparison of a Python scalar (`t.item() > 0`)."""
    if isinstance(test, ast.Constant):
        return False
    if isinstance(test, ast.BoolOp):
        return any(_may_be_tensor_truth(v) for v in test.values)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _may_be_tensor_truth(test.operand)
    if isinstance(test, ast.Compare):
        if any(isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn)) for op in test.ops):
            return False
        return not any(_is_python_scalar(x) for x in [test.left, *test.comparators])
    if isinstance(test, ast.Call):
        # Builtins that return Python values (`any(...)`), not tensor methods (`x.any()`).
        builtin = isinstance(test.func, ast.Name) and test.func.id in _PY_PREDICATES
        return not builtin and _call_name(test) not in {"item", "tolist"}
    return not _is_python_scalar(test)


def _is_python_scalar(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return True
    return isinstance(node, ast.Call) and _call_name(node) in {"item", "tolist", "len", "float", "int", "bool"}


def _candidates(nodes: list[ast.AST], key: tuple[str, str]) -> list[ast.AST]:
    """The nodes of a scope (its `_own_nodes`) that can make a call of this syntax key."""
    kind, name = key
    if kind == "call":
        return [n for n in nodes if isinstance(n, ast.Call) and _call_name(n) == name]
    if kind == "subscript":
        return [n for n in nodes if isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Load) and _advanced_index(n)]
    if kind == "store":
        return [n for n in nodes if isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Store)]
    if kind == "truth":
        tests: list[ast.AST] = []
        for n in nodes:
            is_test = isinstance(n, (ast.If, ast.While, ast.IfExp, ast.Assert)) and _may_be_tensor_truth(n.test)
            if is_test or (isinstance(n, ast.Call) and _call_name(n) == "bool"):
                tests.append(n)
        return tests
    if kind == "scalar":
        return [n for n in nodes if isinstance(n, ast.Call) and _call_name(n) in _SCALAR_FUNCS]
    if kind == "format":
        return [
            n for n in nodes if isinstance(n, ast.JoinedStr) or (isinstance(n, ast.Call) and _call_name(n) == "format")
        ]
    if kind == "repr":
        return [n for n in nodes if isinstance(n, ast.Call) and _call_name(n) in _REPR_FUNCS]
    return []
