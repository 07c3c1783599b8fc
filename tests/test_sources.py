"""The calling statement inferred from the source (issue 12): torch.profiler names only
a function's `def` line; tracelens parses the function and finds the `.item()`,
`x[mask]`, tensor `if` ... that made the call."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from support.cli import cli
from support.corpus import REPO

from tracelens.model import load_trace
from tracelens.model.callsite import _callee_ordinals, _infer, _op_key, _op_key_ids
from tracelens.model.sources import PySource, _distinct_rows, _user_frame, user_source, user_sources
from tracelens.model.trace import TraceModel

WORKLOAD = REPO / "workloads" / "capture_mask_sum.py"
H200_TRACE = REPO / "sample_traces" / "capture_mask_sum.pt.trace.json.gz"


def _marked_lines() -> dict[str, int]:
    """LINE_* markers in the workload: the lines the report must name."""
    out = {}
    for i, text in enumerate(WORKLOAD.read_text().splitlines(), 1):
        if "# LINE_" in text:
            out[text.split("# LINE_")[1].split(":")[0]] = i
    return out


def _lines_by_op(m: TraceModel, names: tuple[str, ...]) -> dict[str, set[tuple[int | None, str, bool]]]:
    arr = m.arrays
    out: dict[str, set[tuple[int | None, str, bool]]] = {}
    for r in range(len(m.host)):
        n = arr.name(r)
        if n in names:
            s = user_source(m, r)
            if s is not None and s.file.endswith("capture_mask_sum.py"):
                out.setdefault(n, set()).add((s.call_line, s.code, s.ambiguous))
    return out


def _check_mask_sum(m: TraceModel) -> None:
    want = _marked_lines()
    got = _lines_by_op(m, ("aten::nonzero", "aten::is_nonzero", "aten::item"))
    assert {line for line, _, _ in got["aten::nonzero"]} == {want["INDEX"]}
    assert {line for line, _, _ in got["aten::is_nonzero"]} == {want["TRUTH"]}
    # aten::item runs under the tensor `if` (is_nonzero > item) and under .item()
    assert {line for line, _, _ in got["aten::item"]} == {want["TRUTH"], want["ITEM"]}
    assert all(not amb for v in got.values() for _, _, amb in v)
    assert ("sel = y[mask]" in {c for _, c, _ in got["aten::nonzero"]}) and all(
        "#" not in c for v in got.values() for _, c, _ in v
    )


@pytest.mark.skipif(not H200_TRACE.exists(), reason="H200 capture not committed")
def test_h200_mask_sum_names_each_sync_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """The H200 capture (frames name `capture_mask_sum.py(DEF)`, the script given as
    workloads/capture_mask_sum.py from the repository root there): each sync's line."""
    monkeypatch.chdir(REPO)
    m = load_trace(H200_TRACE)
    _check_mask_sum(m)
    syncs = _lines_by_op(m, ("cudaStreamSynchronize",))
    assert {line for line, _, _ in syncs["cudaStreamSynchronize"]} == set(_marked_lines().values())


@pytest.mark.slow
def test_cpu_capture_of_mask_sum(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    out = tmp_path / "ms.json.gz"
    res = cli("capture", "--no-report", "-o", out, WORKLOAD, "--device", "cpu", "--steps", "8", cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    _check_mask_sum(load_trace(out))  # found through the capture's recorded command and cwd


def test_host_sync_sites_carry_the_code(monkeypatch: pytest.MonkeyPatch) -> None:
    """A trace from elsewhere (the workload harness, frames `host_sync_mask.py(58)`): with
    the sources on TRACELENS_SOURCES the host-sync sites name each statement, and
    `a.mean()` ... `b.mean()` in one function are told apart by their order."""
    from tracelens.analyzers import host_sync
    from tracelens.derive.context import AnalysisContext

    monkeypatch.setenv("TRACELENS_SOURCES", str(REPO / "workloads"))
    m = load_trace(REPO / "sample_traces" / "host_sync_mask.pt.trace.json.gz")
    (f,) = host_sync.analyze(AnalysisContext(m))
    code = {s.source.call_line: s.source.code for s in f.places if s.source is not None}
    assert code == {
        62: "sel = y[mask]",
        64: "if loss.item() > 0:",
        69: "stats = torch.stack([z.mean(), z.amax(), z.amin(), loss]).tolist()",
    }
    monkeypatch.delenv("TRACELENS_SOURCES")
    m = load_trace(REPO / "sample_traces" / "host_sync_mask.pt.trace.json.gz")
    (f,) = host_sync.analyze(AnalysisContext(m))
    assert all(s.source is None or s.source.call_line is None for s in f.places)  # no file: the def line only


def _model_for(tmp_path: Path, source: str) -> TraceModel:
    """A trace model whose only use here is the source lookup (cwd = tmp_path)."""
    (tmp_path / "prog.py").write_text(source)
    return load_trace(REPO / "sample_traces" / "launch_bound.pt.trace.json.gz")


PROG = """import torch


def f(x, flag):
    a = x.sum().item()
    if flag:
        b = x.max().item()
    else:
        b = 0.0
    sel = x[x > 0]
    first = x[0]
    if x.any():
        pass
    if flag is None or len(x) > 3:
        pass
    return a + b + sel.numel() + first


def g():
    def inner():
        return 1 .bit_length()
    return inner
"""


@pytest.mark.parametrize(
    ("key", "lines", "ambiguous"),
    [
        (("call", "item"), (5, 7), True),  # two .item() calls: both candidates named
        (("subscript", ""), (10,), False),  # x[x > 0], not x[0]
        (("truth", ""), (12,), False),  # `if x.any():`, not `if flag` twice... see below
        (("call", "nosuch"), (), False),
    ],
)
def test_candidates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key: tuple[str, str], lines: tuple[int, ...], ambiguous: bool
) -> None:
    monkeypatch.chdir(tmp_path)
    m = _model_for(tmp_path, PROG)
    src = PySource("prog.py", 4, "f", line_is_def=True)
    got = _infer(m, src, key)
    if not lines:
        assert got.call_line is None
        return
    if key == ("truth", ""):
        # `if flag:` may be a tensor too (a Name): the `is None or len()` test may not.
        assert got.candidates == (6, 12) and got.ambiguous
        return
    assert got.call_line == lines[0] and got.ambiguous is ambiguous and got.line_inferred
    assert got.candidates == (lines if ambiguous else ())
    assert got.label == "prog.py:4" and got.call_label == f"prog.py:{lines[0]}"


def test_changed_or_missing_source_is_not_guessed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    m = _model_for(tmp_path, PROG)
    # The trace says f's def is on line 9: the file changed since, so no line is inferred.
    assert _infer(m, PySource("prog.py", 9, "f", True), ("call", "item")).call_line is None
    assert _infer(m, PySource("missing.py", 4, "f", True), ("call", "item")).call_line is None
    # Calls inside a nested def run in another frame: not candidates of g.
    assert _infer(m, PySource("prog.py", 19, "g", True), ("call", "bit_length")).call_line is None


def test_a_frame_running_at_the_recording_start_is_searched_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch names a frame that was already running when the recording began by the line
    it was at then (`tracelens capture` starts in an optimizer.step() hook: the H200
    detection capture's loop is "detection_train.py(83): main", line 83 being
    `optimizer.step()`): for such a frame the line inside f's body still finds f, and its
    calls are inferred; for any other frame it means the file changed."""
    monkeypatch.chdir(tmp_path)
    m = _model_for(tmp_path, PROG)
    running = _infer(m, PySource("prog.py", 9, "f", True), ("call", "item"), running=True)
    assert running.call_line == 5 and running.candidates == (5, 7)
    assert _infer(m, PySource("prog.py", 9, "f", True), ("call", "item")).call_line is None
    # A line outside every f is no f at all.
    assert _infer(m, PySource("prog.py", 19, "f", True), ("call", "item"), running=True).call_line is None


def test_a_source_file_is_walked_once_for_all_its_call_sites(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each call site looks up its function's def: the def is parsed from its own lines,
    once for all its sites, and the file is not parsed whole (issue 30: capture_generate's
    8 transformers files, 0.09 s of parse); where the whole file is needed (a frame that
    was running when the recording began) it is parsed and walked once for all sites, not
    once per site (on the H200 box, where a Llama generate's transformers files were on
    disk, 132 walks were 11.7 of the analysis' 14.2 s)."""
    import ast

    import tracelens.model.callsite as callsite

    monkeypatch.chdir(tmp_path)
    m = _model_for(tmp_path, PROG)
    walks: list[ast.AST] = []
    parses: list[int] = []
    real_statements, real_parse = callsite._statements, ast.parse

    def counting_statements(node: ast.AST):  # type: ignore[no-untyped-def]
        walks.append(node)
        return real_statements(node)

    def counting_parse(text: str, *args, **kwargs):  # type: ignore[no-untyped-def]
        parses.append(len(text))
        return real_parse(text, *args, **kwargs)

    monkeypatch.setattr(callsite, "_statements", counting_statements)
    monkeypatch.setattr(callsite.ast, "parse", counting_parse)
    for key in (("call", "item"), ("subscript", ""), ("truth", ""), ("call", "sum"), ("call", "max")):
        assert _infer(m, PySource("prog.py", 4, "f", True), key).line_inferred
    assert _infer(m, PySource("prog.py", 19, "g", True), ("call", "inner")).call_line is None
    assert len(parses) == 2 and max(parses) < len(PROG)  # f's lines, g's lines: never the file
    assert not walks
    for line in (5, 7, 10):  # running when the recording began: named by the line it was at
        assert _infer(m, PySource("prog.py", line, "f", True), ("call", "item"), running=True).line_inferred
    assert len(parses) == 3 and parses[-1] == len(PROG)
    assert sum(isinstance(n, ast.Module) for n in walks) == 1


def test_a_def_parsed_from_its_lines_is_the_whole_files_def() -> None:
    """`_segment_def` cuts a def out of its file (decorators, a signature over several
    lines, nested defs, a dedented comment and a closing bracket at its indentation) and
    parses it with the file's line numbers and columns: the same nodes as the whole
    file's parse; lines that are no such def, or are cut inside a string, give None."""
    import ast

    from tracelens.model.callsite import _NEWLINE_RE, _segment_def, _statements

    text = SEGMENT_PROG
    lines = _NEWLINE_RE.split(text)
    want = {
        (n.name, n.lineno): n
        for n in _statements(ast.parse(text))
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
    }
    firsts = {(n.name, min([n.lineno, *(d.lineno for d in n.decorator_list)])): n for n in want.values()}
    for (name, line), node in {**want, **firsts}.items():
        got = _segment_def(lines, name, line)
        if name == "doc":  # its docstring has a dedented line: cut inside the string
            assert got is None
            continue
        assert got is not None, (name, line)
        dump = [ast.dump(b, include_attributes=True) for b in got.body]
        assert dump == [ast.dump(b, include_attributes=True) for b in node.body]
    assert len(firsts) == 5
    assert _segment_def(lines, "method", 2) is None  # a line of no def
    assert _segment_def(lines, "other_name", 4) is None and _segment_def(lines, "method", 4) is not None


SEGMENT_PROG = """class C:
    x = 1

    @staticmethod
    @functools.lru_cache(
        maxsize=None,
    )
    def method(
        a,
        b=(1, 2),
    ) -> int:
        def inner():
# a comment at column 0
            return a
        return inner() + b[0]

    async def coro(self):
        async with self.lock:
            return [
        1]

    def doc(self):
        \"\"\"A docstring with
a dedented line.\"\"\"
        return 2


@decorator
def top(x):
    if x:
        return x.item()
    return 0
"""


NESTED_DEFS = """\
import contextlib

def f():
    def f():
        pass
    x = [lambda: 1 for _ in range(3)]
    return x

class C:
    @staticmethod
    def f(a=(lambda: 2)):
        pass

    class D:
        async def g(self):
            async with contextlib.nullcontext():
                def f():
                    pass

try:
    def g():
        pass
except ValueError:
    def f():
        pass
else:
    def g():
        pass
finally:
    for i in range(2):
        def f():
            pass
    else:
        while False:
            def g():
                pass

match 1:
    case 1:
        def f():
            pass
    case _:
        if True:
            def g():
                pass
        else:
            with open(__file__):
                def f():
                    pass
"""


@pytest.mark.parametrize("source", ["nested", "ast", "typing", "callsite"])
def test_statements_find_the_defs_ast_walk_finds_in_its_order(source: str) -> None:
    """`_Parsed.defs` looks for defs among statements only (issue 30: `ast.walk` over all
    of a module's expressions was most of the time of the lookups on capture_generate):
    the same defs, in `ast.walk`'s breadth-first order (the first def at a line wins)."""
    import ast
    import inspect
    import typing

    import tracelens.model.callsite as callsite

    modules = {"ast": ast, "typing": typing, "callsite": callsite}
    text = NESTED_DEFS if source == "nested" else inspect.getsource(modules[source])
    tree = ast.parse(text)
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef)
    want = [n for n in ast.walk(tree) if isinstance(n, kinds)]
    got = [n for n in callsite._statements(tree) if isinstance(n, kinds)]
    assert [id(n) for n in got] == [id(n) for n in want]
    assert len(want) >= 12
    # It visits far fewer nodes than the walk: not the expressions.
    assert len(list(callsite._statements(tree))) < len(list(ast.walk(tree))) / 2


@pytest.mark.parametrize("name", ["plain_tiny_loop", "capture_mask_sum", "dyn_kv_cat"])
def test_user_sources_at_once_are_user_source_row_by_row(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """The bulk lookup (issue 30: the analyzers' launch and op rows at once) gives every
    row the answer the per-row walk gives, calling lines and their ordinals included; each
    on its own model, so neither reads the other's memo."""
    monkeypatch.chdir(REPO)
    path = REPO / "sample_traces" / f"{name}.pt.trace.json.gz"
    by_row, at_once = load_trace(path), load_trace(path)
    rows = np.arange(len(by_row.host))
    want = [user_source(by_row, int(r)) for r in rows]
    got = user_sources(at_once, rows[::-1])[::-1]  # any order: here the reverse of the rows'
    assert got == want
    # Not vacuous: rows with a source, and calling lines inferred from the workload's code.
    assert sum(s is not None for s in want) > len(want) // 3
    assert sum(s is not None and s.line_inferred for s in want) >= 100
    # The same objects, as the memo of the per-row path hands out.
    assert user_sources(at_once, rows[:50]) == [user_source(at_once, int(r)) for r in rows[:50]]


def test_op_keys_at_once_are_op_key_row_by_row(monkeypatch: pytest.MonkeyPatch) -> None:
    """The syntax key of rows issued directly in their user frame (`x[mask]`, a tensor
    `if`), found for all rows at once, is `_op_key`'s for each row."""
    monkeypatch.chdir(REPO)
    m = load_trace(REPO / "sample_traces" / "capture_mask_sum.pt.trace.json.gz")
    arr = m.arrays
    rows = np.flatnonzero(arr.py_frame >= 0)
    users = np.array([_user_frame(m, int(f))[0] for f in arr.py_frame[rows].tolist()], dtype=np.int64)
    rows, users = rows[users >= 0], users[users >= 0]
    ordinals = _callee_ordinals(m)
    want = [_op_key(m, int(r), int(u)) for r, u in zip(rows.tolist(), users.tolist(), strict=True)]
    got = [ordinals.keys[k] for k in _op_key_ids(m, rows, users).tolist()]
    assert got == want
    assert {k for k in want if k is not None} >= {("subscript", ""), ("truth", "")}  # not vacuous


@pytest.mark.parametrize("big", [False, True])
def test_distinct_rows_are_unique_rows(big: bool) -> None:
    """Packed into one integer (or, when the columns' ranges do not fit one, not): the
    first row of each distinct combination, in order, and each row's combination, as the
    2-D unique has them."""
    rng = np.random.default_rng(30)
    cols = tuple(rng.integers(0, 2**60 if big and i == 0 else 6, 5000) for i in range(4))
    _, want_firsts, want_inverse = np.unique(np.stack(cols, axis=1), axis=0, return_index=True, return_inverse=True)
    firsts, inverse = _distinct_rows(cols)
    assert np.array_equal(firsts, want_firsts) and np.array_equal(inverse, want_inverse.reshape(-1))
