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
inferred when the source file is readable at report time (tracelens.model.callsite): the function is
parsed with `ast` and the calls that match the C call (`<built-in method item ...>`) or,
when there is none, the op (`aten::index` for `x[mask]`, `aten::is_nonzero` for a tensor
`if`) are the candidates. One candidate line gives `call_line`; several give the first
with `ambiguous` set.
"""

from __future__ import annotations

import re
import sys

import numpy as np
import pandas as pd

from tracelens.domain import PROFILER_FRAMES, PROFILER_STEP_PREFIX, is_library_file
from tracelens.model.callsite import _FRAME_RE, _PYTHON, _callee_ordinals, _op_key_ids, _refine, _refined, frame_slots
from tracelens.model.schema import Kind
from tracelens.model.trace import TraceModel
from tracelens.report.findings import PySource as PySource

#: Pointer-doubling passes when finding each frame's user frame: 2**64 frames deep is
#: beyond any stack, so more passes means a cycle.
MAX_DOUBLINGS = 64


#: Frames that are machinery rather than the program being profiled: PyTorch itself (its
#: nn.Module call wrappers, profiler, overrides), stdlib entry points and wrappers, and C
#: builtins (`<built-in method ...>`). The frame we blame is the first one not listed.
_MACHINERY_PREFIXES = ("torch/", "tracelens/", "<")


_MACHINERY_FILES = frozenset({"threading.py", "runpy.py", "contextlib.py", "functools.py", "__init__.py<string>"})


_MACHINERY_DIRS = ("/multiprocessing/", "/concurrent/futures/", "/importlib/")


_STDLIB_RE = re.compile(r"/lib/python3\.\d+/(?!site-packages|dist-packages)")
#: Python writes a stdlib package's frames relative to its lib dir ("json/encoder.py(183):
#: encode", diff_graph_after): a relative path under a stdlib package is the stdlib's, not
#: the program's (issue 27: it was named as the user's source). `test` is left out: it is
#: also what a project calls its tests' folder.
_STDLIB_PACKAGES = frozenset(sys.stdlib_module_names) - {"test", "__future__"}


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


#: Public name of the path shortening, for readers of other inputs (memory snapshots).
short_path = _short_path


def is_machinery(file: str) -> bool:
    f = file.replace("\\", "/")
    if f.startswith(_MACHINERY_PREFIXES):
        return True
    if f.rsplit("/", 1)[-1] in _MACHINERY_FILES:
        return True
    slashed = "/" + f
    if "/" in f and not f.startswith(("/", ".")) and f.split("/", 1)[0] in _STDLIB_PACKAGES:
        return True
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
    memo_row: dict[int, PySource | None] = model.source_caches.user_source_row
    row = int(row)
    found = memo_row.get(row, _MISSING)
    if found is _MISSING:
        found = memo_row[row] = _user_source(model, row)
    return found  # type: ignore[return-value]


def user_sources(model: TraceModel, rows: np.ndarray | list[int]) -> list[PySource | None]:
    """`user_source` of each row (the same answers, the same objects), worked out for all
    rows at once: a decode loop's analyzers ask about 10^5 launch and op rows, and one
    walk and refinement per row was most of their time on stack-heavy traces.

    A row's answer depends only on its user frame's name, the syntax key of the call
    (from the callee frame's name, or the op issued directly in the user's frame) and the
    call's ordinal among the frame's same-key calls: those are found in numpy, and each
    distinct combination is refined once. Rows without a Python frame (2021-2022 `Call
    stack` traces) and traces whose frames need the walk go row by row."""
    rows = np.asarray(rows, dtype=np.int64)
    out: list[PySource | None] = [None] * len(rows)
    if not len(rows):
        return out
    arr = model.arrays
    table = _user_frames(model)
    frames = arr.py_frame[rows]
    framed = frames >= 0
    slow = np.flatnonzero(~framed) if table is not None else np.arange(len(rows))
    for i in slow.tolist():
        out[i] = user_source(model, rows.item(i))
    if table is None or not bool(framed.any()):
        return out
    users_all, callees_all, index = table
    at = np.flatnonzero(framed)
    slot = index[frames[at]]
    user = users_all[slot]
    found = user >= 0
    at, user, callee = at[found], user[found], callees_all[slot[found]]
    if not len(at):
        return out
    ordinals = _callee_ordinals(model)
    key_ids, keys = ordinals.key_ids, ordinals.keys
    # The syntax key: the callee frame's (by its name), else the op's issued in the frame.
    has_callee = callee >= 0
    key = np.full(len(at), ordinals.none_key, dtype=np.int64)
    key[has_callee] = key_ids[arr.name_codes[callee[has_callee]]]
    ordinal = np.full(len(at), -1, dtype=np.int64)
    count = np.full(len(at), -1, dtype=np.int64)
    cslot = index[callee[has_callee]]
    ordinal[has_callee] = ordinals.ordinal[cslot]
    count[has_callee] = ordinals.count[cslot]
    direct = np.flatnonzero(~has_callee)
    if len(direct):
        key[direct] = _op_key_ids(model, rows[at[direct]], user[direct])
    # One refinement per distinct (user frame name, key, ordinal, count).
    ucode = arr.name_codes[user].astype(np.int64)
    firsts, inverse = _distinct_rows((ucode, key, ordinal + 1, count + 1))
    memo_src: dict[int, PySource | None] = model.source_caches.user_frame_src
    answers: list[PySource | None] = []
    distinct = zip(key[firsts].tolist(), ordinal[firsts].tolist(), count[firsts].tolist(), firsts.tolist(), strict=True)
    for k, o, c, first in distinct:
        u = user.item(first)
        if u not in memo_src:
            memo_src[u] = _frame_of(model, u)
        src = memo_src[u]
        if src is not None and keys[k] is not None:
            src = _refined(model, src, u, keys[k], o, c)
        answers.append(src)
    for i, j in zip(at.tolist(), inverse.tolist(), strict=True):
        out[i] = answers[j]
    return out


def _distinct_rows(columns: tuple[np.ndarray, ...]) -> tuple[np.ndarray, np.ndarray]:
    """For rows given as columns of non-negative ints: the first row of each distinct
    combination (in the combinations' lexicographic order) and each row's combination,
    as `np.unique(np.stack(columns, axis=1), axis=0, return_index=True,
    return_inverse=True)` has them. The columns are packed into one int64 in mixed radix
    when they fit (the same order): a 1-D unique sorts plain integers where the 2-D one
    sorts row views (large_generate's three calls: most of user_sources' time)."""
    packed = np.zeros(len(columns[0]), dtype=np.int64)
    room = 1
    for col in columns:
        base = int(col.max(initial=0)) + 1
        room *= base
        if room >= 2**62:
            _, firsts, inverse = np.unique(np.stack(columns, axis=1), axis=0, return_index=True, return_inverse=True)
            return firsts, inverse.reshape(-1)
        packed = packed * base + col
    _, firsts, inverse = np.unique(packed, return_index=True, return_inverse=True)
    return firsts, inverse.reshape(-1)


def _user_source(model: TraceModel, row: int) -> PySource | None:
    arr = model.arrays
    # `.item()` reads a Python int straight from the array (per row: no numpy scalar).
    frame = arr.py_frame.item(row)
    if frame < 0:
        return _user_source_from_call_stack(model, row) if _has_call_stacks(model) else None
    user, callee = _user_frame(model, frame)
    if user < 0:
        return None
    memo_src: dict[int, PySource | None] = model.source_caches.user_frame_src
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
    memo: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray] | None] = model.source_caches.user_frames
    if "all" in memo:
        return memo["all"]
    arr = model.arrays
    frames = np.flatnonzero(arr.kind == _PYTHON)
    n = len(frames)
    index = frame_slots(model)
    parents = arr.parent[frames]
    up_rows = np.where(parents >= 0, arr.py_frame[np.clip(parents, 0, None)], -1)
    del parents
    up = np.where(up_rows >= 0, index[np.clip(up_rows, 0, None)], n)  # n: past the outermost frame
    if bool(np.any((up_rows >= 0) & (up == -1))):
        memo["all"] = None
        return None
    del up_rows
    codes = arr.name_codes[frames]
    distinct = np.unique(codes)
    user_code = np.zeros(int(distinct.max()) + 1 if len(distinct) else 0, dtype=bool)
    for code in distinct.tolist():
        src = _frame_of_code(model, code)
        user_code[code] = src is not None and not _is_machinery_file(model, src.file)
    is_user = np.append(user_code[codes], False)  # slot n: past the outermost frame
    # jump[i]: how far up the chain from i a walk has got, stopping at a user frame (or n);
    # below[i]: the frame it passed last before that (i itself at first).
    slots = np.arange(n + 1, dtype=np.int32)
    jump = np.where(is_user, slots, np.append(up, n))
    below = np.where(is_user, -1, slots)
    del slots, up, codes
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
    # int32 (row numbers fit): the table stays with the model (large_compile: 2 MB a
    # column in int64, made at the analysis' memory peak).
    rows = np.append(frames, -1).astype(np.int32)
    users = np.where(found, rows[jump], -1)[:n]
    callees = np.where(found & ~is_user, rows[np.clip(below, 0, None)], -1)[:n]
    table = (users, callees, index)
    memo["all"] = table
    return table


def _user_frame_walk(model: TraceModel, frame: int) -> tuple[int, int]:
    arr = model.arrays
    memo: dict[int, tuple[int, int]] = model.source_caches.user_frame
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
    memo: dict[int, PySource | None] = model.source_caches.frame_of_name
    if code not in memo:
        memo[code] = parse_frame(model.arrays.name_table[code], line_is_def=True)
    return memo[code]


def _is_machinery_file(model: TraceModel, file: str) -> bool:
    memo: dict[str, bool] = model.source_caches.machinery_file
    if file not in memo:
        memo[file] = is_machinery(file)
    return memo[file]


def _has_call_stacks(model: TraceModel) -> bool:
    """Whether any host row has a `Call stack` string (2021-2022 traces). A 2024+ trace
    has none, and rows outside Python frames then have no source without a walk each."""
    memo: dict[str, bool] = model.source_caches.has_call_stacks
    if "any" not in memo:
        stacks = model.arrays.call_stack
        present = stacks[np.flatnonzero(pd.notna(stacks))] if len(stacks) else stacks
        memo["any"] = any(isinstance(cs, str) and cs for cs in present.tolist())
    return memo["any"]


def _user_source_from_call_stack(model: TraceModel, row: int) -> PySource | None:
    memo: dict[str, PySource | None] = model.source_caches.user_call_stack
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
    memo: dict[int, str | None] = model.source_caches.nearest_call_stack
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


def program_source(model: TraceModel, row: int) -> PySource | None:
    """The innermost frame of the program itself that led to host row `row`: neither
    machinery nor a library's (domain.LIBRARY_PACKAGES), or None when the stack has none."""
    is_def = bool(model.arrays.py_frame[row] >= 0)
    for frame in python_stack(model, row):
        src = parse_frame(frame, line_is_def=is_def)
        if src is not None and not is_machinery(src.file) and not is_library_file(src.file):
            return src
    return None


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
        if not name.startswith(PROFILER_STEP_PREFIX):
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
