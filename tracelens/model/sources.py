"""Python source attribution: which line of the user's program caused a host event.

Two vintages carry Python stacks:
- 2024+ `python_function` events (with_stack=True), named `path.py(LINE): func`, nested
  around the ops they called. LINE is the line of the function's `def`, not the call
  (gpu-trace-facts.md), so it points at the function to change.
- 2021-2022 `Call stack` string args on ops: `path.py(LINE): func;...`, innermost first,
  with LINE the calling line.

The frame we blame is the innermost one that is not PyTorch's own machinery, the
standard library or a C builtin: for a Hugging Face model that is the modeling file, for a
script the script.

Since the 2024+ frames name only the `def` line, the statement that made the call is
inferred when the source file is readable at report time (`callsite.py`): the function is
parsed with `ast` and the calls that match the C call (`<built-in method item ...>`) or,
when there is none, the op (`aten::index` for `x[mask]`, `aten::is_nonzero` for a tensor
`if`) are the candidates. One candidate line gives `call_line`; several give the first
with `ambiguous` set.
"""

from __future__ import annotations

import ast
import io
import os
import re
import sys
import tokenize
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from tracelens.domain import PROFILER_FRAMES
from tracelens.model.schema import Kind
from tracelens.model.trace import TraceModel
from tracelens.report.findings import PySource as PySource  # the contract's type, made here

_PYTHON = int(Kind.PYTHON)
#: Pointer-doubling passes when finding each frame's user frame: 2**64 frames deep is
#: beyond any stack, so more passes means a cycle.
MAX_DOUBLINGS = 64
_FRAME_RE = re.compile(r"^(?P<file>.*?)\((?P<line>\d+)\): (?P<func>.*)$")

#: Frames that are machinery rather than the program being profiled: PyTorch itself (its
#: nn.Module call wrappers, profiler, overrides), stdlib entry points and wrappers, and C
#: builtins (`<built-in method ...>`). The frame we blame is the first one not listed.
_MACHINERY_PREFIXES = ("torch/", "tracelens/", "<")
_MACHINERY_FILES = frozenset({"threading.py", "runpy.py", "contextlib.py", "functools.py", "__init__.py<string>"})
_MACHINERY_DIRS = ("/multiprocessing/", "/concurrent/futures/", "/importlib/")
_STDLIB_RE = re.compile(r"/lib/python3\.\d+/(?!site-packages|dist-packages)")


def parse_frame(text: str, line_is_def: bool = False) -> PySource | None:
    m = _FRAME_RE.match(text.strip())
    if not m:
        return None
    return PySource(
        file=_short_path(m.group("file")), line=int(m.group("line")), function=m.group("func"), line_is_def=line_is_def
    )


def _short_path(path: str) -> str:
    """Drop the site-packages/venv prefix: `.../site-packages/transformers/x.py` ->
    `transformers/x.py`; keep user paths as written."""
    for marker in ("site-packages/", "dist-packages/"):
        i = path.rfind(marker)
        if i >= 0:
            return path[i + len(marker) :]
    return path


def is_machinery(file: str) -> bool:
    f = file.replace("\\", "/")
    if f.startswith(_MACHINERY_PREFIXES):
        return True
    if f.rsplit("/", 1)[-1] in _MACHINERY_FILES:
        return True
    slashed = "/" + f
    return any(d in slashed for d in _MACHINERY_DIRS) or bool(_STDLIB_RE.search(f))


def python_stack(model: TraceModel, row: int, limit: int = 64) -> list[str]:
    """Python frame names around a host row, innermost first (2024+ traces, else the
    2021-2022 `Call stack` of the nearest op that has one)."""
    arr = model.arrays
    frames: list[str] = []
    frame = int(arr.py_frame[row])
    while frame >= 0 and len(frames) < limit:
        if arr.kind[frame] == _PYTHON:
            frames.append(arr.name(frame))
        frame = int(arr.py_frame[int(arr.parent[frame])]) if arr.parent[frame] >= 0 else -1
    if frames:
        return frames
    cs = _nearest_call_stack(model, row)
    return [f for f in cs.split(";") if f][:limit] if cs else []


_BUILTIN_RES = (
    (re.compile(r"^<built-in method (\w+) of Tensor object"), "Tensor.{}()"),
    (re.compile(r"^<built-in method (\w+) of type object"), "torch.{}()"),
    (re.compile(r"^<built-in method (\w+) of PyCapsule object"), "torch._C.{}()"),
    (re.compile(r"^<built-in function (\w+)>"), "{}()"),
    (re.compile(r"^<built-in method (\w+) of "), "{}()"),
)
_DUNDER_CALLS = {
    "Tensor.__getitem__()": "tensor[index]",
    "Tensor.__setitem__()": "tensor[index] = value",
    "Tensor.__bool__()": "bool(tensor) / if tensor:",
    "Tensor.__float__()": "float(tensor)",
    "Tensor.__int__()": "int(tensor)",
    "Tensor.__format__()": "f-string of a tensor",
    "Tensor.__repr__()": "repr/print of a tensor",
}


def python_call(model: TraceModel, row: int) -> str:
    """The Python-level call that issued a host row, from the innermost `<built-in ...>`
    frame (2024+ traces): e.g. "Tensor.item()", "tensor[index]", "torch.nonzero()"."""
    for frame in python_stack(model, row, limit=4):
        if not frame.startswith("<built-in"):
            continue
        for pattern, template in _BUILTIN_RES:
            m = pattern.match(frame)
            if m:
                call = template.format(m.group(1))
                return _DUNDER_CALLS.get(call, call)
    return ""


#: What a memo holds for a row not looked up yet (None is an answer: no user frame).
_MISSING = object()


def user_source(model: TraceModel, row: int) -> PySource | None:
    """The innermost non-machinery frame that led to host row `row`, or None, with the
    calling statement inferred from the source where it is readable (`call_line`).

    Memoised per Python frame (and per `Call stack` string in 2021-2022 traces): every
    frame on a walk learns the answer, so resolving all kernels' sources is linear. The
    answer is memoised per row too: several analyzers ask about the same launch rows."""
    memo_row: dict[int, PySource | None] = model.memo.setdefault("user_source_row", {})
    row = int(row)
    found = memo_row.get(row, _MISSING)
    if found is _MISSING:
        found = memo_row[row] = _user_source(model, row)
    return found  # type: ignore[return-value]


def _user_source(model: TraceModel, row: int) -> PySource | None:
    arr = model.arrays
    # `.item()` reads a Python int straight from the array (per row: no numpy scalar).
    frame = arr.py_frame.item(row)
    if frame < 0:
        return _user_source_from_call_stack(model, row) if _has_call_stacks(model) else None
    user, callee = _user_frame(model, frame)
    if user < 0:
        return None
    memo_src: dict[int, PySource | None] = model.memo.setdefault("user_frame_src", {})
    if user not in memo_src:
        memo_src[user] = _frame_of(model, user)
    found = memo_src[user]
    if found is None:
        return None
    return _refine(model, found, user, callee, row)


def _user_frame(model: TraceModel, frame: int) -> tuple[int, int]:
    """(user frame row, the frame directly inside it on this chain or -1) for a Python
    frame row; (-1, -1) when no frame on the chain is the user's."""
    table = _user_frames(model)
    if table is not None:
        users, callees, index = table
        i = index.item(frame)
        if i >= 0:
            return users.item(i), callees.item(i)
    return _user_frame_walk(model, frame)


def _user_frames(model: TraceModel) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """`_user_frame` of every Python frame row at once: (user, callee, index), where
    index maps a host row to its slot (-1 for rows that are not Python frames).

    Whether a frame is the user's depends on its name only (checked once per distinct
    name); the nearest such frame up each chain is found by pointer doubling over the
    frames' callers (log2 of the stack depth numpy passes), rather than a walk per frame.
    None when a frame's caller is not itself a Python frame row (then frames are walked)."""
    memo: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray] | None] = model.memo.setdefault("user_frames", {})
    if "all" in memo:
        return memo["all"]
    arr = model.arrays
    frames = np.flatnonzero(arr.kind == _PYTHON)
    n = len(frames)
    index = np.full(len(arr.kind), -1, dtype=np.int64)
    index[frames] = np.arange(n)
    parents = arr.parent[frames]
    up_rows = np.where(parents >= 0, arr.py_frame[np.clip(parents, 0, None)], -1)
    up = np.where(up_rows >= 0, index[np.clip(up_rows, 0, None)], n)  # n: past the outermost frame
    if bool(np.any((up_rows >= 0) & (up == -1))):
        memo["all"] = None
        return None
    codes = arr.name_codes[frames]
    distinct = np.unique(codes)
    user_code = np.zeros(int(distinct.max()) + 1 if len(distinct) else 0, dtype=bool)
    for code in distinct.tolist():
        src = _frame_of_code(model, code)
        user_code[code] = src is not None and not _is_machinery_file(model, src.file)
    is_user = np.append(user_code[codes], False)  # slot n: past the outermost frame
    # jump[i]: how far up the chain from i a walk has got, stopping at a user frame (or n);
    # below[i]: the frame it passed last before that (i itself at first).
    slots = np.arange(n + 1)
    jump = np.where(is_user, slots, np.append(up, n))
    below = np.where(is_user, -1, slots)
    for _ in range(MAX_DOUBLINGS):
        moving = ~is_user[jump] & (jump != n)
        if not bool(np.any(moving)):
            break
        below = np.where(moving, below[jump], below)
        jump = np.where(moving, jump[jump], jump)
    else:  # a cycle of callers (a broken trace): leave it to the walk
        memo["all"] = None
        return None
    found = is_user[jump]
    rows = np.append(frames, -1)
    users = np.where(found, rows[jump], -1)[:n]
    callees = np.where(found & ~is_user, rows[np.clip(below, 0, None)], -1)[:n]
    table = (users, callees, index)
    memo["all"] = table
    return table


def _user_frame_walk(model: TraceModel, frame: int) -> tuple[int, int]:
    arr = model.arrays
    memo: dict[int, tuple[int, int]] = model.memo.setdefault("user_frame", {})
    path: list[int] = []
    user, callee = -1, -1
    f = frame
    while f >= 0:
        if f in memo:
            user, callee = memo[f]
            if user == f:  # the chain below reached the user frame through path[-1]
                callee = path[-1] if path else -1
            break
        src = _frame_of(model, f)
        if src is not None and not _is_machinery_file(model, src.file):
            user = f
            memo[f] = (f, -1)
            callee = path[-1] if path else -1
            break
        path.append(f)
        p = int(arr.parent[f])
        f = int(arr.py_frame[p]) if p >= 0 else -1
    for p_ in path:
        memo[p_] = (user, callee if user >= 0 else -1)
    return user, callee


def _frame_of(model: TraceModel, row: int) -> PySource | None:
    """`parse_frame(name, line_is_def=True)` of a Python frame row, once per distinct name
    (a decode loop runs the same few thousand frames once per token)."""
    return _frame_of_code(model, int(model.arrays.name_codes[row]))


def _frame_of_code(model: TraceModel, code: int) -> PySource | None:
    memo: dict[int, PySource | None] = model.memo.setdefault("frame_of_name", {})
    if code not in memo:
        memo[code] = parse_frame(model.arrays.name_table[code], line_is_def=True)
    return memo[code]


def _is_machinery_file(model: TraceModel, file: str) -> bool:
    memo: dict[str, bool] = model.memo.setdefault("machinery_file", {})
    if file not in memo:
        memo[file] = is_machinery(file)
    return memo[file]


def _has_call_stacks(model: TraceModel) -> bool:
    """Whether any host row has a `Call stack` string (2021-2022 traces). A 2024+ trace
    has none, and rows outside Python frames then have no source without a walk each."""
    memo: dict[str, bool] = model.memo.setdefault("has_call_stacks", {})
    if "any" not in memo:
        stacks = model.arrays.call_stack
        present = stacks[np.flatnonzero(pd.notna(stacks))] if len(stacks) else stacks
        memo["any"] = any(isinstance(cs, str) and cs for cs in present.tolist())
    return memo["any"]


def _user_source_from_call_stack(model: TraceModel, row: int) -> PySource | None:
    memo: dict[str, PySource | None] = model.memo.setdefault("user_call_stack", {})
    cs = _nearest_call_stack(model, row)
    if cs is None:
        return None
    if cs not in memo:
        found = None
        for frame in cs.split(";"):
            src = parse_frame(frame) if frame else None
            if src is not None and not is_machinery(src.file):
                found = src
                break
        memo[cs] = found
    return memo[cs]


def _nearest_call_stack(model: TraceModel, row: int) -> str | None:
    """The `Call stack` string of the row or its nearest ancestor, memoised along the
    walk (deeply nested ops would otherwise make this quadratic)."""
    arr = model.arrays
    memo: dict[int, str | None] = model.memo.setdefault("nearest_call_stack", {})
    path: list[int] = []
    found: str | None = None
    r = row
    while r >= 0:
        if r in memo:
            found = memo[r]
            break
        path.append(r)
        cs = arr.call_stack[r]
        if isinstance(cs, str) and cs:
            found = cs
            break
        r = int(arr.parent[r])
    for p in path:
        memo[p] = found
    return found


def user_stack(model: TraceModel, row: int, depth: int = 4) -> list[PySource]:
    """Up to `depth` non-machinery frames, innermost first, for evidence."""
    out: list[PySource] = []
    is_def = bool(model.arrays.py_frame[row] >= 0)
    for frame in python_stack(model, row):
        src = parse_frame(frame, line_is_def=is_def)
        if src is not None and not is_machinery(src.file):
            out.append(src)
            if len(out) >= depth:
                break
    return out


def in_profiler(model: TraceModel, row: int) -> bool:
    """True when the host row was issued by torch.profiler itself (its start/stop sync)."""
    return any(any(p in f for p in PROFILER_FRAMES) for f in python_stack(model, row))


def op_chain(model: TraceModel, row: int, limit: int = 6) -> list[str]:
    """Names of the CPU ops enclosing a host row, innermost first (annotations skipped,
    ProfilerStep included only if nothing else encloses it)."""
    arr = model.arrays
    out: list[str] = []
    r = int(arr.op[row])
    while r >= 0 and len(out) < limit:
        name = arr.name(r)
        if not name.startswith("ProfilerStep#"):
            out.append(name)
        p = int(arr.parent[r])
        r = int(arr.op[p]) if p >= 0 else -1
    return out


def has_python_stacks(model: TraceModel) -> bool:
    kinds = model.host["kind"].to_numpy()
    if bool(np.any(kinds == Kind.PYTHON)):
        return True
    stacks = model.host["call_stack"].to_numpy()
    return any(isinstance(s, str) and s for s in stacks[: min(len(stacks), 50_000)])


# -- the calling statement, from the source -------------------------------------------

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


@dataclass(frozen=True)
class _Parsed:
    lines: list[str]
    tree: ast.Module


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


def _refine(model: TraceModel, src: PySource, user: int, callee: int, row: int) -> PySource:
    arr = model.arrays
    key = _row_callee_key(model, callee) if callee >= 0 else _op_key(model, row, user)
    if key is None:
        return src
    memo: dict[tuple[str, tuple[str, str], int, int, bool], PySource] = model.memo.setdefault("call_line", {})
    # Several calls of the same name in one function (`a.mean()` ... `b.mean()`): this
    # call's position among the same-named calls of this frame instance picks the
    # statement, when that instance made exactly as many such calls as there are in the
    # source (straight-line code). (-1, -1) when not applicable.
    ordinal, count = _ordinal(model, user, callee, key) if callee >= 0 else (-1, -1)
    running = _running_at_start(model, user)
    mkey = (arr.name(user), key, ordinal, count, running)
    if mkey not in memo:
        memo[mkey] = _infer(model, src, key, ordinal, count, running)
    return memo[mkey]


def _running_at_start(model: TraceModel, frame: int) -> bool:
    """Whether `frame` was running when the recording began: torch names such a frame by
    the line it was at then, not by its def line. Its tracer opens those frames at its
    start, one after another (a few µs apart on the H200), before the first op or
    annotation of the recording (ProfilerStep#N: ~0.4 ms later in the detection capture)."""
    cached = model.memo.get("py_frames_at_start")
    if cached is None:
        ts = model.host["ts"].to_numpy()
        other = ts[model.arrays.kind != _PYTHON]
        cached = model.memo["py_frames_at_start"] = (ts, float(other.min()) if len(other) else float("-inf"))
    ts, first_op = cached
    return bool(ts[frame] < first_op)


class _Children:
    """Python frame rows by the frame that called them, in row (time) order: two sorted
    int64 arrays rather than a dict of lists (21 MB for 280k frames)."""

    def __init__(self, callers: np.ndarray, rows: np.ndarray) -> None:
        order = np.lexsort((rows, callers))
        self._callers = callers[order]
        self._rows = rows[order]

    def rows_of(self, caller: int) -> np.ndarray:
        """The frames `caller` called, in row order (an empty array for none)."""
        # The array method, not np.searchsorted: its dispatch doubled the cost per call.
        lo = int(self._callers.searchsorted(caller, side="left"))
        hi = int(self._callers.searchsorted(caller, side="right"))
        return self._rows[lo:hi]

    def get(self, caller: int, default: list[int]) -> list[int]:
        lo = int(self._callers.searchsorted(caller, side="left"))
        hi = int(self._callers.searchsorted(caller, side="right"))
        return self._rows[lo:hi].tolist() if hi > lo else default


def _child_frames(model: TraceModel) -> _Children:
    """Python frame rows by the frame that called them, in row (time) order."""
    memo: dict[str, _Children] = model.memo.setdefault("child_frames", {})
    if "all" not in memo:
        arr = model.arrays
        rows = np.flatnonzero(arr.kind == _PYTHON)
        parents = arr.parent[rows]
        has = parents >= 0
        rows, parents = rows[has], parents[has]
        callers = arr.py_frame[parents]
        keep = callers >= 0
        memo["all"] = _Children(callers[keep], rows[keep])
    return memo["all"]


def _row_callee_key(model: TraceModel, row: int) -> tuple[str, str] | None:
    """`_callee_key` of a row's name, worked out once per distinct name."""
    arr = model.arrays
    memo: dict[int, tuple[str, str] | None] = model.memo.setdefault("callee_key", {})
    code = arr.name_codes.item(row)
    if code not in memo:
        memo[code] = _callee_key(arr.name_table[code])
    return memo[code]


def _ordinal(model: TraceModel, user: int, callee: int, key: tuple[str, str]) -> tuple[int, int]:
    # The same-named calls of one frame instance, listed once per (frame, name) rather
    # than once per call: a loop body's frame makes thousands.
    # All of a frame's callees are grouped by key in one pass over its children (a frame
    # asked about for several keys is not scanned once per key).
    memo: dict[int, dict[tuple[str, str] | None, dict[int, int]]] = model.memo.setdefault("ordinal", {})
    by_key = memo.get(user)
    if by_key is None:
        by_key = memo[user] = {}
        children = _child_frames(model).rows_of(user)
        arr = model.arrays
        keys: dict[int, tuple[str, str] | None] = model.memo.setdefault("callee_key", {})  # as _row_callee_key
        for f, code in zip(children.tolist(), arr.name_codes[children].tolist(), strict=True):
            if code not in keys:
                keys[code] = _callee_key(arr.name_table[code])
            same = by_key.setdefault(keys[code], {})
            same.setdefault(f, len(same))
    positions = by_key.get(key, {})
    if callee not in positions:
        return (-1, -1)
    return (positions[callee], len(positions))


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
    scope = _scope(parsed.tree, src.function, src.line, running)
    if scope is None:  # no such def at that line: the file changed since the trace
        return src
    nodes = sorted(_candidates(scope, key), key=lambda n: (_line(n), getattr(n, "col_offset", 0)))
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
    memo: dict[str, list[Path]] = model.memo.setdefault("source_dirs", {})
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
    cache: dict[str, _Parsed | None] = model.memo.setdefault("parsed_sources", {})
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
            try:
                parsed = _Parsed(text.splitlines(), ast.parse(text))
            except (SyntaxError, ValueError):
                parsed = None
            break
    cache[file] = parsed
    return parsed


def _scope(tree: ast.Module, function: str, def_line: int, running: bool = False) -> ast.AST | None:
    """The function whose code object starts at `def_line` (the first decorator's line
    for a decorated one), or the module for `<module>`; for a frame that was `running`
    when the recording began, else the one of that name whose body holds the line."""
    if function == "<module>":
        return tree
    funcs = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == function]
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


def _candidates(scope: ast.AST, key: tuple[str, str]) -> list[ast.AST]:
    kind, name = key
    nodes = _own_nodes(scope)
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
