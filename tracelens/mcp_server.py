"""`tracelens mcp`: a Model Context Protocol server (stdio) for coding agents.

Four tools, each returning parts of the JSON contract (README, "JSON output"), so an
agent reads the same fields a script reading `--json` would:

- `report(path, window?, steps?)`: the whole JSON report of a trace, or of a memory
  snapshot (`.pickle`);
- `findings(path, category?, min_severity?)`: the verdict (`summary`, `window`,
  `ledger`) and the findings, ranked, optionally filtered;
- `explain_finding(path, category, index?)`: one finding with everything the report
  has about it: its evidence, sites and sources, the question it answers, its ledger
  cause, its parent and the findings that refine it, and its kernels;
- `diff(before, after)`: the JSON of `tracelens diff`.

A trace is analysed once per (file, size, mtime, window, steps) and kept for the
session (up to MAX_CACHED), so `findings` then `explain_finding` on the same trace cost
one analysis. The server reads only the files it is asked about and makes no network
request; a bad input is the tool's error (isError) with tracelens' one-line message.

The `mcp` SDK is an optional extra (`pip install 'tracelens-gpu[mcp]'`), imported only
here and only when the command runs. Both its 1.x (`FastMCP`) and 2.x (`MCPServer`)
spellings are accepted.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections import OrderedDict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tracelens.errors import TraceInputError, UsageError

#: Analysed traces kept in memory by one server (a report's model is large).
MAX_CACHED = 4
#: Severities, most severe first (the JSON's `severity` values).
SEVERITY_ORDER = ("high", "medium", "low", "info")
#: What `report` returns when asked for parts only (the rest of the JSON is left out).
REPORT_PARTS = (
    "schema_version", "trace", "summary", "window", "ledger", "questions", "findings", "kernels", "ops", "sources",
    "roofline", "memory", "snapshot", "gpu_time", "matmuls",
)  # fmt: skip

SERVER_INSTRUCTIONS = (
    "tracelens explains why a PyTorch GPU program is slow from a torch.profiler (Kineto) trace, or what holds its "
    "memory from a torch.cuda.memory snapshot pickle. Call findings(path) first: summary.headline is the verdict, "
    "summary.primary the category to fix first, findings[] are ranked by expected_gain_us. Then "
    "explain_finding(path, category) for one finding's evidence and source lines, and diff(before, after) after a "
    "change to check that the step got faster by about the expected gain."
)

_cache: OrderedDict[tuple[Any, ...], dict[str, Any]] = OrderedDict()


def _key(path: str, *extra: object) -> tuple[Any, ...]:
    p = Path(path).expanduser()
    try:
        st = p.stat()
    except FileNotFoundError:
        raise TraceInputError(f"{p.name}: no such file") from None
    except OSError as exc:
        raise TraceInputError(f"{p.name}: cannot be read ({exc.strerror or type(exc).__name__})") from None
    return (str(p.resolve()), st.st_size, st.st_mtime_ns, *extra)


def _cached(key: tuple[Any, ...], build: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    found = _cache.get(key)
    if found is None:
        found = build()
        _cache[key] = found
        while len(_cache) > MAX_CACHED:
            _cache.popitem(last=False)
    else:
        _cache.move_to_end(key)
    return found


def report_json(path: str, window: str | None = None, steps: str | None = None) -> dict[str, Any]:
    """The JSON report of a trace (or of a memory snapshot) as plain data."""
    from tracelens.model.snapshot import looks_like_snapshot
    from tracelens.render.json import to_builtins

    def build() -> dict[str, Any]:
        if looks_like_snapshot(path):
            if window or steps:
                raise UsageError("window and steps are for traces, not memory snapshots")
            return _snapshot_json(path)
        from tracelens.assemble import build_report
        from tracelens.cli.common import _parse_step_range, _parse_window
        from tracelens.derive.context import AnalysisContext
        from tracelens.model import load_trace

        user_window = _parse_window(window) if window else None
        user_steps = _parse_step_range(steps) if steps else None
        model = load_trace(Path(path).expanduser())
        ctx = AnalysisContext(model, user_window=user_window, user_steps=user_steps)
        out = to_builtins(build_report(model, ctx=ctx))
        assert isinstance(out, dict)
        return out

    return _cached(_key(path, "report", window, steps), build)


def _snapshot_json(path: str) -> dict[str, Any]:
    import datetime as _dt

    from tracelens import __version__
    from tracelens.assemble_snapshot import summarize_snapshot
    from tracelens.model.snapshot import load_snapshot
    from tracelens.render.json import to_builtins
    from tracelens.report import SCHEMA_VERSION, SnapshotReport

    rep = SnapshotReport(
        schema_version=SCHEMA_VERSION,
        tool="tracelens",
        tool_version=__version__,
        generated_at=_dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat(),
        snapshot=summarize_snapshot(load_snapshot(Path(path).expanduser())),
    )
    out = to_builtins(rep)
    assert isinstance(out, dict)
    return out


def report_parts(
    path: str, window: str | None = None, steps: str | None = None, parts: list[str] | None = None
) -> dict[str, Any]:
    full = report_json(path, window, steps)
    if not parts:
        return full
    unknown = [p for p in parts if p not in REPORT_PARTS]
    if unknown:
        raise UsageError(f"unknown part {unknown[0]!r}: one of {', '.join(REPORT_PARTS)}")
    return {p: full.get(p) for p in parts}


def findings_json(path: str, category: str | None = None, min_severity: str | None = None) -> dict[str, Any]:
    """The verdict and the ranked findings (optionally one category, or at least a severity)."""
    full = report_json(path)
    if "snapshot" in full and "findings" not in full:
        raise UsageError("a memory snapshot has no findings: use report(path) for what holds its peak")
    found = list(full.get("findings") or [])
    if category:
        found = [f for f in found if f.get("category") == category]
    if min_severity:
        if min_severity not in SEVERITY_ORDER:
            raise UsageError(f"min_severity is one of {', '.join(SEVERITY_ORDER)}")
        keep = set(SEVERITY_ORDER[: SEVERITY_ORDER.index(min_severity) + 1])
        found = [f for f in found if f.get("severity") in keep]
    return {
        "summary": full.get("summary"),
        "window": full.get("window"),
        "ledger": full.get("ledger"),
        "findings": found,
        "categories": sorted({str(f.get("category")) for f in full.get("findings") or []}),
    }


def explain_json(path: str, category: str, index: int = 0) -> dict[str, Any]:
    """One finding and what the report says around it."""
    full = report_json(path)
    if "findings" not in full:
        raise UsageError("a memory snapshot has no findings: use report(path)")
    same = [f for f in full["findings"] if f.get("category") == category]
    if not same:
        have = sorted({str(f.get("category")) for f in full["findings"]})
        raise UsageError(f"no {category!r} finding in this trace; it has: {', '.join(have) or 'none'}")
    if not 0 <= index < len(same):
        raise UsageError(f"index {index} out of range: {len(same)} {category!r} finding(s)")
    finding = same[index]
    position = full["findings"].index(finding)
    question = next((q for q in full.get("questions") or [] if position in (q.get("finding_indexes") or [])), None)
    causes = {category, finding.get("parent")}
    named = {str(k) for site in finding.get("sites") or [] for k in site.get("kernels") or []}
    kernels = [k for k in full.get("kernels") or [] if k.get("name") in named]
    return {
        "finding": finding,
        "rank": position,
        "is_primary": (full.get("summary") or {}).get("primary") == category,
        "question": question,
        "ledger": [e for e in full.get("ledger") or [] if e.get("cause") in causes],
        "parent": next((f for f in full["findings"] if f.get("category") == finding.get("parent")), None),
        "refined_by": [f for f in full["findings"] if f.get("parent") == category],
        "kernels": kernels,
        "window": full.get("window"),
    }


def diff_json(before: str, after: str) -> dict[str, Any]:
    """The JSON of `tracelens diff BEFORE AFTER`."""
    import msgspec

    def build() -> dict[str, Any]:
        from tracelens.diff import build_diff
        from tracelens.model import load_trace
        from tracelens.render.diff import render_diff_json

        d = build_diff(load_trace(Path(before).expanduser()), load_trace(Path(after).expanduser()))
        out = msgspec.json.decode(render_diff_json(d))
        assert isinstance(out, dict)
        return out

    return _cached(_key(before, "diff") + _key(after), build)


def _tool_error() -> type[Exception]:
    """The SDK's exception whose message reaches the agent (any other is logged as a
    crash and reported without its text): mcp 2.x's, else 1.x's."""
    import importlib

    for module in ("mcp.server.mcpserver.exceptions", "mcp.server.fastmcp.exceptions"):
        try:
            found = getattr(importlib.import_module(module), "ToolError", None)
        except ImportError:
            continue
        if isinstance(found, type) and issubclass(found, Exception):
            return found
    return RuntimeError


@contextlib.contextmanager
def _tool_call() -> Iterator[None]:
    """One tool call: stdout is the protocol's channel, so anything a library prints
    goes to stderr; a user error (a missing file, a refused pickle, a bad argument)
    becomes the tool's error with tracelens' one-line message."""
    from tracelens.errors import TracelensError

    with contextlib.redirect_stdout(sys.stderr):
        try:
            yield
        except TracelensError as exc:
            raise _tool_error()(str(exc)) from None


def _server_class() -> Any:
    """mcp 2.x's MCPServer, else 1.x's FastMCP (the same decorator and stdio run)."""
    import importlib

    for module, name in (("mcp.server.mcpserver", "MCPServer"), ("mcp.server.fastmcp", "FastMCP")):
        try:
            found = getattr(importlib.import_module(module), name, None)
        except ImportError:
            continue
        if found is not None:
            return found
    raise UsageError("tracelens mcp needs the MCP SDK, an optional extra: pip install 'tracelens-gpu[mcp]'")


def report_tool(
    path: str, window: str | None = None, steps: str | None = None, parts: list[str] | None = None
) -> dict[str, Any]:
    """The JSON report of a torch.profiler trace (.json or .json.gz) or of a CUDA memory snapshot (.pickle).
    window is START:END seconds from the trace's start, steps is N-M (ProfilerStep numbers); parts picks
    top-level fields (summary, findings, ledger, window, questions, kernels, ops, sources, roofline, ...)."""
    with _tool_call():
        return report_parts(path, window, steps, parts)


def findings_tool(path: str, category: str | None = None, min_severity: str | None = None) -> dict[str, Any]:
    """The verdict (summary.headline, summary.primary) and the findings ranked by expected gain, each with its
    time_us, expected_gain_us, advice, evidence and Python sources. Filter by category or min_severity
    (high, medium, low, info)."""
    with _tool_call():
        return findings_json(path, category, min_severity)


def explain_finding_tool(path: str, category: str, index: int = 0) -> dict[str, Any]:
    """One finding (the index-th of its category) with its evidence, sites, sources and advice, the diagnostic
    question it answers, its ledger cause, its parent and the findings refining it, and its kernels."""
    with _tool_call():
        return explain_json(path, category, index)


def diff_tool(before: str, after: str) -> dict[str, Any]:
    """Compare two traces of the same program: the change in step time split by cause (verdict, causes[]) and
    what changed underneath (kernels, ops, syncs, host work)."""
    with _tool_call():
        return diff_json(before, after)


#: The tools, by the names agents call them.
TOOLS: dict[str, Callable[..., dict[str, Any]]] = {
    "report": report_tool,
    "findings": findings_tool,
    "explain_finding": explain_finding_tool,
    "diff": diff_tool,
}


def build_server() -> Any:
    """The server with its four tools (not started)."""
    from tracelens import __version__

    cls = _server_class()
    try:
        server = cls("tracelens", instructions=SERVER_INSTRUCTIONS, version=__version__, log_level="WARNING")
    except TypeError:  # mcp 1.x's FastMCP takes no version
        server = cls("tracelens", instructions=SERVER_INSTRUCTIONS, log_level="WARNING")
    for name, fn in TOOLS.items():
        server.add_tool(fn, name=name, description=fn.__doc__)
    return server


def serve() -> None:
    """Run the server on stdio until the client closes it."""
    server = build_server()
    os.environ.setdefault("TRACELENS_MCP", "1")
    server.run()
