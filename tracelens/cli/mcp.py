"""`tracelens mcp`: tracelens for coding agents, over the Model Context Protocol
(tracelens.mcp_server; the `mcp` SDK is an optional extra, imported only here)."""

from __future__ import annotations


def mcp() -> None:
    """Serve tracelens to coding agents over the Model Context Protocol (stdio): tools
    report, findings, explain_finding and diff, returning the JSON report's parts.
    Needs the optional extra: pip install 'tracelens-gpu[mcp]'.

    Example (an agent's MCP configuration): {"command": "tracelens", "args": ["mcp"]}
    """
    from tracelens.mcp_server import serve

    serve()
