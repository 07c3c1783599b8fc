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
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from tracelens.model.schema import Kind
from tracelens.model.trace import TraceModel

_PYTHON = int(Kind.PYTHON)
_FRAME_RE = re.compile(r"^(?P<file>.*?)\((?P<line>\d+)\): (?P<func>.*)$")

#: Frames that are machinery rather than the program being profiled: PyTorch itself (its
#: nn.Module call wrappers, profiler, overrides), stdlib entry points and wrappers, and C
#: builtins (`<built-in method ...>`). The frame we blame is the first one not listed.
_MACHINERY_PREFIXES = ("torch/", "tracelens/", "<")
_MACHINERY_FILES = frozenset({"threading.py", "runpy.py", "contextlib.py", "functools.py", "__init__.py<string>"})
_MACHINERY_DIRS = ("/multiprocessing/", "/concurrent/futures/", "/importlib/")
_STDLIB_RE = re.compile(r"/lib/python3\.\d+/(?!site-packages|dist-packages)")
#: Frames inside the profiler itself: a sync issued from here is the profiler's own.
PROFILER_FRAMES = ("torch/profiler/", "torch/autograd/profiler.py", "torch/autograd/profiler_util.py")


@dataclass(frozen=True)
class PySource:
    """One Python frame: where a finding comes from.

    `line_is_def` is True for 2024+ `python_function` frames, whose line is the line of
    the function's `def` (not of the call inside it); False for 2021-2022 `Call stack`
    frames, whose line is the calling line."""

    file: str
    line: int | None
    function: str
    line_is_def: bool = False

    @property
    def label(self) -> str:
        return f"{self.file}:{self.line}" if self.line is not None else self.file

    @property
    def where(self) -> str:
        """For titles: "at file:line" for a call line, "in func() (file:line)" for a def line."""
        if self.line_is_def:
            return f"in {self.function}() ({self.label})"
        return f"at {self.label}"


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


def user_source(model: TraceModel, row: int) -> PySource | None:
    """The innermost non-machinery frame that led to host row `row`, or None.

    Memoised per Python frame (and per `Call stack` string in 2021-2022 traces): every
    frame on a walk learns the answer, so resolving all kernels' sources is linear."""
    arr = model.arrays
    memo: dict[int, PySource | None] = model.memo.setdefault("user_frame", {})
    frame = int(arr.py_frame[row])
    if frame < 0:
        return _user_source_from_call_stack(model, row)
    path: list[int] = []
    found: PySource | None = None
    while frame >= 0:
        if frame in memo:
            found = memo[frame]
            break
        path.append(frame)
        src = parse_frame(arr.name(frame), line_is_def=True)
        if src is not None and not is_machinery(src.file):
            found = src
            break
        p = int(arr.parent[frame])
        frame = int(arr.py_frame[p]) if p >= 0 else -1
    for f in path:
        memo[f] = found
    return found


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
