"""What analyzers return: findings as facts, never as words.

An analyzer returns `Found`s: the category, the time it costs and the gain its fix
should bring, its own typed facts (a dataclass of the analyzer's, e.g. the misaligned
matmuls and their operands), evidence as `Fact`s (an id, a number or name, a unit) and
the `Place`s in the program it comes from, each with its typed facts. tracelens.explain
writes the words (title, advice, evidence labels, site descriptions) from them; the
pipeline then fits the findings to the ledger (tracelens.ranking).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from tracelens.derive.roofline import KernelRoof
from tracelens.domain import LOW_SHARE as LOW_SHARE
from tracelens.report.enums import Category as Category
from tracelens.report.enums import Unit as Unit
from tracelens.report.findings import PySource

F = TypeVar("F")
P = TypeVar("P")


@dataclass(frozen=True)
class Fact:
    """One piece of evidence as data: `id` (stable, what explain/ names and JSON carries),
    the number or name, its unit, and whether a duration is a window total (see Metric)."""

    id: str
    value: float | int | str
    unit: Unit = "text"
    total: bool = True


@dataclass(frozen=True)
class Place(Generic[P]):
    """One place in the program a finding comes from, with what it costs there: the
    report's Site without its words, and the facts explain/ describes it from."""

    count: int  # occurrences in the trace
    time_us: float  # the cost attributed to this place (same meaning as Found.time_us)
    facts: P
    host_us: float = 0.0  # host time spent (e.g. blocked in the sync call)
    ops: tuple[str, ...] = ()  # enclosing aten ops, innermost first
    api: str = ""  # runtime call, e.g. cudaStreamSynchronize
    source: PySource | None = None
    stack: tuple[PySource, ...] = ()  # user frames, innermost first
    kernels: tuple[str, ...] = ()
    steps: tuple[int, ...] = ()
    kind: str = ""  # a finding-specific id, e.g. the sync construct
    call: str = ""  # the Python call made here ("" where none or unknown), e.g. x.item()


@dataclass(frozen=True)
class Found(Generic[F, P]):
    """What an analyzer found, as facts."""

    category: Category
    time_us: float  # time this costs (GPU idle it causes, or GPU time at stake)
    expected_gain_us: float  # what the fix should save, at best
    facts: F  # the analyzer's own: what explain/ writes the title and advice from
    evidence: tuple[Fact, ...] = ()
    places: tuple[Place[P], ...] = ()
    sources: tuple[PySource, ...] = ()
    device: int | None = None
    tags: tuple[str, ...] = ()


def kernel_places(rows: list[KernelRoof], limit: int) -> tuple[Place[Any], ...]:
    """The costliest kernel groups of the roofline as finding places (described from
    the kernel's roofline row)."""
    return tuple(Place(count=r.count, time_us=r.bound_us, facts=r, kernels=(r.name,)) for r in rows[:limit])
