"""Many ranks of one job: discover the per-rank traces, map the single-trace pipeline
over them on Dask, and analyse the ranks together (clock alignment, collective matching,
skew, stragglers with their reason, the job's headline). See README.md, "Many ranks"."""

from __future__ import annotations

from tracelens.job.analyze import analyze
from tracelens.job.discover import expand, looks_like_ranks, rank_inputs
from tracelens.job.model import RankFailure, RankInput, RankSummary
from tracelens.job.run import map_ranks
from tracelens.report.job_report import JobReport

__all__ = [
    "JobReport",
    "RankFailure",
    "RankInput",
    "RankSummary",
    "analyze",
    "expand",
    "looks_like_ranks",
    "map_ranks",
    "rank_inputs",
]
