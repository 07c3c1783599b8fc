"""What analyzers return and how severe it is.

Findings are the contract's data (tracelens.report.findings), re-exported here for the
analyzers with the severity rule (tracelens.domain).
"""

from __future__ import annotations

from collections.abc import Callable

from tracelens.derive.roofline import KernelRoof
from tracelens.domain import HIGH_SHARE as HIGH_SHARE
from tracelens.domain import LOW_SHARE as LOW_SHARE
from tracelens.domain import MEDIUM_SHARE as MEDIUM_SHARE
from tracelens.domain import severity_for as severity_for
from tracelens.report.enums import Category as Category
from tracelens.report.enums import Severity as Severity
from tracelens.report.enums import Unit as Unit
from tracelens.report.findings import Finding as Finding
from tracelens.report.findings import Metric as Metric
from tracelens.report.findings import Prediction as Prediction
from tracelens.report.findings import Site as Site


def kernel_sites(rows: list[KernelRoof], describe: Callable[[KernelRoof], str], limit: int) -> tuple[Site, ...]:
    """The costliest kernel groups of the roofline as finding sites."""
    return tuple(
        Site(description=describe(r), count=r.count, time_us=r.bound_us, kernels=(r.name,)) for r in rows[:limit]
    )
