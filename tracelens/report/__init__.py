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
