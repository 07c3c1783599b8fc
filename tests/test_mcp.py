"""`tracelens mcp` through the MCP SDK's own stdio client: the server is started as an
agent starts it (a subprocess speaking JSON-RPC on stdin/stdout), its tools listed and
called on real traces, and its errors checked to be tracelens' one-line messages."""

from __future__ import annotations

import json
import pickle
import sys
from pathlib import Path
from typing import Any

import pytest

mcp = pytest.importorskip("mcp")
anyio = pytest.importorskip("anyio")

from mcp import ClientSession, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"
BEFORE = SAMPLES / "diff_align_before.pt.trace.json.gz"
AFTER = SAMPLES / "diff_align_after.pt.trace.json.gz"


class _Evil:
    def __reduce__(self) -> tuple[Any, ...]:
        return (print, ("a pickle that runs code",))


def _error(result: Any) -> bool:
    return bool(getattr(result, "is_error", getattr(result, "isError", False)))


def _payload(result: Any) -> dict[str, Any]:
    """The tool's JSON (the SDK sends a dict result as JSON text; 1.x and 2.x alike)."""
    text = "".join(c.text for c in result.content if getattr(c, "type", "") == "text")
    out = json.loads(text)
    assert isinstance(out, dict)
    return out


async def _session_calls(calls: list[tuple[str, dict[str, Any]]]) -> tuple[list[str], list[Any]]:
    params = StdioServerParameters(command=sys.executable, args=["-m", "tracelens", "mcp"])
    async with stdio_client(params) as streams, ClientSession(streams[0], streams[1]) as session:
        await session.initialize()
        tools = [t.name for t in (await session.list_tools()).tools]
        results = [await session.call_tool(name, args) for name, args in calls]
    return tools, results


@pytest.mark.slow
def test_mcp_server_through_the_sdk_client(tmp_path: Path) -> None:
    evil = tmp_path / "evil.pickle"
    evil.write_bytes(pickle.dumps({"segments": [_Evil()]}))
    snap = tmp_path / "tiny.snapshot.pickle"
    seg = {"device": 0, "address": 0, "total_size": 1 << 21, "stream": 0, "segment_type": "large",
           "segment_pool_id": (0, 0), "allocated_size": 1 << 20, "active_size": 1 << 20,
           "blocks": [{"address": 0, "size": 1 << 20, "requested_size": 1 << 20, "state": "active_allocated",
                       "frames": [{"filename": "/home/u/train.py", "line": 3, "name": "forward"}]}]}  # fmt: skip
    snap.write_bytes(pickle.dumps({"segments": [seg], "device_traces": [[]]}))
    calls = [
        ("findings", {"path": str(BEFORE)}),
        ("explain_finding", {"path": str(BEFORE), "category": "misaligned_matmul"}),
        ("report", {"path": str(BEFORE), "parts": ["summary", "ledger"]}),
        ("diff", {"before": str(BEFORE), "after": str(AFTER)}),
        ("report", {"path": str(snap)}),
        ("findings", {"path": str(tmp_path / "missing.json")}),
        ("report", {"path": str(evil)}),
        ("explain_finding", {"path": str(BEFORE), "category": "no_such_category"}),
    ]
    tools, res = anyio.run(_session_calls, calls)
    assert tools == ["report", "findings", "explain_finding", "diff"]
    assert not any(_error(r) for r in res[:5])

    found = _payload(res[0])
    # The same parts as the JSON report: the verdict and the ranked findings.
    assert found["summary"]["primary"] == "misaligned_matmul"
    assert found["findings"][0]["category"] == "misaligned_matmul"
    assert found["findings"][0]["expected_gain_us"] > 0
    assert abs(sum(e["share"] for e in found["ledger"]) - 1) < 1e-6

    explained = _payload(res[1])
    assert explained["finding"]["category"] == "misaligned_matmul"
    assert explained["is_primary"] and explained["rank"] == 0
    assert explained["question"] is not None and explained["question"]["status"] in ("yes", "minor")
    assert any("align1" in k["name"] for k in explained["kernels"])

    assert set(_payload(res[2])) == {"summary", "ledger"}
    d = _payload(res[3])
    assert d["verdict"]["change_us"] < 0  # padding the matmul made the step faster

    s = _payload(res[4])["snapshot"]
    assert s["peak_allocated"] > 0 and s["categories"]

    assert _error(res[5]) and "missing.json: no such file" in res[5].content[0].text
    # The attack pickle is refused by name, and nothing of it ran.
    assert _error(res[6]) and "names builtins.print" in res[6].content[0].text
    assert _error(res[7]) and "misaligned_matmul" in res[7].content[0].text


@pytest.mark.slow
def test_mcp_needs_the_sdk_only_when_run() -> None:
    """Importing the CLI (and tracelens.mcp_server) does not import the SDK."""
    code = "import sys, tracelens.cli, tracelens.mcp_server; sys.exit(1 if 'mcp' in sys.modules else 0)"
    import subprocess

    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
