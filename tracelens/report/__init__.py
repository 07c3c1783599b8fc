"""The contract: everything a renderer may show and every JSON field other tools may read,
as plain serializable data with no analysis behind it (standard library and msgspec
only: no numpy, no pandas, nothing of the pipeline).

- `Report` (trace_report.py): one trace's report, made by tracelens.assemble;
- `DiffReport` (diff_report.py): `tracelens diff`'s, made by tracelens.diff;
- `JobReport` (job_report.py): many ranks' job report, made by tracelens.job;
- their findings (findings.py) and enumerated values (enums.py).

Renderers (tracelens.render) see only these. The JSON outputs are these structures
encoded as-is; schemas/ holds their JSON schemas, generated from the classes
(`python -m tracelens.report.schema`) and checked against the schema versions by the
tests.
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tracelens.report.diff_report import (
        DIFF_SCHEMA_VERSION,
        CauseChange,
        Change,
        Counter,
        DiffReport,
        Side,
        Verdict,
    )
    from tracelens.report.enums import CAUSES, STARTUP_KINDS, Category, Cause, Severity
    from tracelens.report.findings import Finding, Metric, PySource, Site
    from tracelens.report.job_report import JOB_SCHEMA_VERSION, JobReport
    from tracelens.report.snapshot_report import (
        SNAPSHOT_SCHEMA_VERSION,
        SnapshotBlock,
        SnapshotCategory,
        SnapshotOom,
        SnapshotReport,
        SnapshotSite,
        SnapshotSummary,
        SnapshotTimeline,
    )
    from tracelens.report.trace_report import (
        SCHEMA_VERSION,
        ClockTimeline,
        CountersSummary,
        GpuTimeSummary,
        GraphCollectiveRow,
        GraphModuleRow,
        GraphSummary,
        KernelRow,
        KernelSource,
        LedgerEntry,
        MatmulRow,
        MeasuredKernel,
        MemoryTimeline,
        MisalignedDim,
        ModelCheckRow,
        OpRow,
        Question,
        Report,
        RooflinePoint,
        RooflineSummary,
        ServingPhaseRow,
        ServingSummary,
        SourceRow,
        StartupItem,
        StepRow,
        StreamBusy,
        Summary,
        Timeline,
        TimeSplit,
        TraceInfo,
        UncoveredOp,
        WindowInfo,
    )

#: Where each name is defined: a name is imported when first asked for (PEP 562), so
#: `tracelens report` does not import the diff's and the job's contracts (their classes'
#: creation is a part of every start-up).
_NAMES: dict[str, str] = {
    "diff_report": "DIFF_SCHEMA_VERSION CauseChange Change Counter DiffReport Side Verdict",
    "enums": "CAUSES STARTUP_KINDS Category Cause Severity",
    "findings": "Finding Metric PySource Site",
    "job_report": "JOB_SCHEMA_VERSION JobReport",
    "snapshot_report": (
        "SNAPSHOT_SCHEMA_VERSION SnapshotBlock SnapshotCategory SnapshotOom SnapshotReport SnapshotSite "
        "SnapshotSummary SnapshotTimeline"
    ),
    "trace_report": (
        "SCHEMA_VERSION ClockTimeline CountersSummary GpuTimeSummary GraphCollectiveRow GraphModuleRow "
        "GraphSummary KernelRow KernelSource LedgerEntry MatmulRow MeasuredKernel MemoryTimeline "
        "MisalignedDim ModelCheckRow OpRow Question Report RooflinePoint RooflineSummary ServingPhaseRow "
        "ServingSummary SourceRow StartupItem StepRow StreamBusy Summary Timeline TimeSplit TraceInfo "
        "UncoveredOp WindowInfo"
    ),
}
_WHERE = {name: f"tracelens.report.{module}" for module, names in _NAMES.items() for name in names.split()}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "CAUSES",
    "DIFF_SCHEMA_VERSION",
    "JOB_SCHEMA_VERSION",
    "SCHEMA_VERSION",
    "SNAPSHOT_SCHEMA_VERSION",
    "STARTUP_KINDS",
    "Category",
    "Cause",
    "CauseChange",
    "Change",
    "ClockTimeline",
    "Counter",
    "CountersSummary",
    "DiffReport",
    "Finding",
    "GpuTimeSummary",
    "GraphCollectiveRow",
    "GraphModuleRow",
    "GraphSummary",
    "JobReport",
    "KernelRow",
    "KernelSource",
    "LedgerEntry",
    "MatmulRow",
    "MeasuredKernel",
    "MemoryTimeline",
    "Metric",
    "MisalignedDim",
    "ModelCheckRow",
    "OpRow",
    "PySource",
    "Question",
    "Report",
    "RooflinePoint",
    "RooflineSummary",
    "ServingPhaseRow",
    "ServingSummary",
    "Severity",
    "Side",
    "Site",
    "SnapshotBlock",
    "SnapshotCategory",
    "SnapshotOom",
    "SnapshotReport",
    "SnapshotSite",
    "SnapshotSummary",
    "SnapshotTimeline",
    "SourceRow",
    "StartupItem",
    "StepRow",
    "StreamBusy",
    "Summary",
    "TimeSplit",
    "Timeline",
    "TraceInfo",
    "UncoveredOp",
    "Verdict",
    "WindowInfo",
]
