"""What `tracelens report TRACE` can start before the command line is parsed.

typer and the rest of tracelens take ~0.4 s to import (pandas, the analyzers, pydantic
through typer's parameter coercion) before a report reads its trace. For a trace large
enough for the split load (tracelens.model.loader.start_split_early), its second process
is forked first thing and decodes its share of the events meanwhile. This module imports
nothing heavy itself: `python -m tracelens` calls `start` before importing the command.

The scan here only has to find the one input; typer still parses the arguments. A line it
does not understand starts nothing, and a child that no load takes is stopped, so the
report is the same either way.
"""

from __future__ import annotations

import contextlib
import sys

#: `report`'s options that take a value (the next argument, or after `=`) and its flags.
VALUE_OPTIONS = frozenset(
    {"--html", "--markdown", "--md", "--json", "--out-dir", "--window", "--steps", "--scheduler", "--workers",
     "--perfetto"}
)  # fmt: skip
FLAGS = frozenset({"--quiet", "-q", "--per-rank", "--redact"})


def scan_report(args: list[str]) -> tuple[str, list[tuple[str, str | None]]] | None:
    """(the one input, the options in order with their values; None for a flag) of a
    `report` command line; None for any other command, several inputs or none, a value
    missing, or an argument this scan does not know (--help, a typo, a new option)."""
    if not args or args[0] != "report":
        return None
    found: list[str] = []
    options: list[tuple[str, str | None]] = []
    rest = iter(args[1:])
    for arg in rest:
        name, eq, value = arg.partition("=")
        if arg in VALUE_OPTIONS:
            nxt = next(rest, None)
            if nxt is None:
                return None  # "requires an argument": typer words it
            options.append((arg, nxt))
        elif eq and name in VALUE_OPTIONS:
            options.append((name, value))
        elif arg in FLAGS:
            options.append((arg, None))
        elif arg == "--":
            found.extend(rest)
        elif arg.startswith("-") and arg != "-":
            return None
        else:
            found.append(arg)
    return (found[0], options) if len(found) == 1 else None


def start(args: list[str]) -> None:
    """For `report TRACE` on a large file, fork the split load's second process now."""
    scanned = scan_report(args)
    if scanned is None or scanned[0].lower().endswith((".pickle", ".pkl", ".pickle.gz", ".pkl.gz")):  # a snapshot
        return
    from tracelens.model.loader import early_started, start_split_early

    if early_started():
        return
    with contextlib.suppress(OSError, ValueError):
        start_split_early(scanned[0])


def discard() -> None:
    """Stop the early child if no load took it (nothing when none was started)."""
    loader = sys.modules.get("tracelens.model.loader")
    if loader is not None:
        loader.discard_early()
