"""Many ranks (issue 15): the job report on the H200 gloo captures (3 ranks on one GPU:
balanced, one rank slow on the host, one rank with 3x the GPU work), HTA's sampled
rank-0/1 pair of a 128-rank DLRM job, and the inputs a job can get wrong."""

from __future__ import annotations

import gzip
import json
import re
import shutil
import subprocess
from pathlib import Path

import msgspec
import pytest
from support.cli import PY, cli
from support.corpus import REPO, SAMPLES, job_of, real

from tracelens.domain import fmt_us
from tracelens.job import analyze, expand, looks_like_ranks, map_ranks, rank_inputs
from tracelens.job.discover import rank_from_name
from tracelens.job.model import RankFailure, RankSummary
from tracelens.job.summarize import collective_kind, summarize
from tracelens.render.job import render_job_html, render_job_json, render_job_markdown, render_job_terminal
from tracelens.report.job_report import JobReport

#: What the workload planted (workloads/ranks/gloo_ranks.py): rank 1 is the slow one,
#: 15 ms of host busy loop per step in host_slow.
SLOW_RANK = 1
SLOW_HOST_US = 15_000.0


def case(name: str) -> Path:
    p = SAMPLES / f"ranks_{name}"
    if not p.is_dir():
        pytest.fail(f"sample rank traces missing: {p}")
    return p


def test_host_slow_rank_is_named_with_its_reason_and_cost() -> None:
    rep = job_of(case("host_slow"))
    assert rep.job.ranks == 3 and rep.job.world_size == 3 and rep.job.backend == "gloo"
    assert [s.rank for s in rep.job.stragglers] == [SLOW_RANK]
    s = rep.job.stragglers[0]
    assert s.reason == "host_bound"
    assert s.late_share == 1.0 and s.late_count == s.matched == 6
    # The others wait for it most of its 15 ms busy loop per step (the GPU work before the
    # all-reduce overlaps part of it), and it has about that much more host-bound time.
    assert 0.6 * SLOW_HOST_US < s.cost_us < 1.1 * SLOW_HOST_US
    assert 0.7 * SLOW_HOST_US < s.reason_us < 1.1 * SLOW_HOST_US
    assert "DataLoader" in s.advice
    others = [r for r in rep.ranks if r.rank != SLOW_RANK]
    assert all(r.wait_us > 0.6 * SLOW_HOST_US for r in others)
    assert next(r for r in rep.ranks if r.rank == SLOW_RANK).wait_us < 0.05 * SLOW_HOST_US
    assert "Rank 1 is the straggler" in rep.job.headline
    assert "host-bound work: Python outside torch ops" in rep.job.headline
    # The lateness picture: rank 1 reaches every step's all-reduce last by most of its loop.
    late = {r.rank: [s.late_us for s in r.late_by_step] for r in rep.ranks}
    assert len(late[SLOW_RANK]) == 6 and min(late[SLOW_RANK]) > 0.6 * SLOW_HOST_US
    # (the fast ones share the GPU, so one of them reaches it up to 3 ms after the other)
    assert all(max(v) < 0.25 * SLOW_HOST_US for k, v in late.items() if k != SLOW_RANK)
    assert rep.job.lost_to_slowest_us > 0.5 * SLOW_HOST_US


def test_gpu_heavy_rank_is_load_imbalance() -> None:
    rep = job_of(case("gpu_heavy"))
    assert [s.rank for s in rep.job.stragglers] == [SLOW_RANK]
    s = rep.job.stragglers[0]
    assert s.reason.startswith("gpu_busy")
    assert "load imbalance" in s.advice
    # It runs 3x the matmuls (12 instead of 4 per step): the extra GPU time before the
    # collective is at least the others' wait for it.
    assert s.reason_us >= s.cost_us > 1000.0


def test_balanced_job_has_no_straggler() -> None:
    rep = job_of(case("balanced"))
    assert rep.job.stragglers == []
    assert rep.job.headline.startswith("No straggler")  # said first (issue 28)
    # One rank may still come last (three processes share one GPU), but its own ledger
    # does not explain it; it is said apart, not named a straggler.
    for u in rep.job.late_unexplained:
        assert u.reason in ("communication", "idle_other") or u.reason_us < 0.5 * u.cost_us


def test_clocks_align_on_the_all_reduces() -> None:
    for name in ("balanced", "host_slow", "gpu_heavy"):
        rep = job_of(case(name))
        # One host: the clocks agree, and the all-reduces end within tens of µs.
        assert rep.job.alignment_error_us is not None and rep.job.alignment_error_us < 100.0
        assert all(abs(r.clock_offset_us) < 500.0 for r in rep.ranks)
        assert rep.job.matched_collectives == 6 and rep.job.unmatched_collectives == 0


def test_collectives_carry_bytes_and_bandwidth() -> None:
    rep = job_of(case("host_slow"))
    (row,) = rep.collectives
    assert (row.group, row.kind, row.count, row.source) == ("gloo", "all_reduce", 6, "host")
    assert row.bytes == 4 * 2**20  # 1 Mi fp32 elements, from the c10d op's shapes
    assert row.median_skew_us > 0.6 * SLOW_HOST_US and row.last_rank == SLOW_RANK
    # gloo moves CUDA tensors through the host: about a GB/s, far below NVLink.
    assert 0.1 < row.busbw_gbps < 20.0 and row.busbw_gbps == pytest.approx(row.algbw_gbps * 4 / 3, rel=1e-3)


def test_json_contract() -> None:
    doc = json.loads(render_job_json(job_of(case("host_slow"))))
    job = doc["job"]
    for key in ("ranks", "world_size", "steps", "alignment_error_us", "stragglers"):
        assert key in job
    for key in ("rank", "late_share", "cost_us", "reason", "advice"):
        assert key in job["stragglers"][0]
    for key in ("rank", "file", "step_us", "ledger"):
        assert key in doc["ranks"][0]
    assert {"cause", "time_us", "share"} <= set(doc["ranks"][0]["ledger"][0])
    for key in ("group", "kind", "count", "bytes", "median_skew_us", "busbw_gbps", "exposed_us"):
        assert key in doc["collectives"][0]
    assert msgspec.json.decode(render_job_json(job_of(case("host_slow"))), type=JobReport).job.ranks == 3


def test_html_markdown_terminal() -> None:
    rep = job_of(case("host_slow"))
    html = render_job_html(rep)
    assert 'name="viewport"' in html and '<svg class="heat" viewBox=' in html
    assert "http://" not in html.replace("http://www.w3.org", "") and "https://" not in html
    assert html.count("<rect") >= 2 * 3 * 6  # two pictures of 3 ranks x 6 steps
    assert "Who is late, rank × step" in html
    assert "rank 1 ◀" in html
    md = render_job_markdown(rep)
    assert "| 1 | 6 of 6 (100%)" in md and "host-bound work: Python outside torch ops" in md
    term = render_job_terminal(rep, ["out.html"])
    assert "Rank 1 is the straggler" in term and "wrote out.html" in term
    # Wrapped at the width asked for (issue 28), whatever the width.
    for width in (60, 100):
        lines = render_job_terminal(rep, ["out.html"], width=width).splitlines()
        assert max(len(line) for line in lines) <= width and len(lines) > 10
    # "latest to arrive" lists ranks by how late they are, the latest first.
    latest = next(line for line in term.splitlines() if "latest to arrive" in line)
    assert latest.strip().startswith("latest to arrive: rank 1 ")


def test_reasons_and_causes_are_in_plain_words() -> None:
    """Issue 28: the job summary said "reason gpu_busy_latency". Every reason and cause id
    (the ones with an underscore; "communication" is a word) is said in words in the
    terminal summary and the Markdown, on a GPU-heavy straggler and a host-bound one."""
    from tracelens.explain.job import REASON_WORDS

    ids = sorted((k for k in REASON_WORDS if "_" in k), key=len, reverse=True)
    for name, words in (("gpu_heavy", "more GPU work ("), ("host_slow", "host-bound work: Python outside torch ops")):
        rep = job_of(case(name))
        text = render_job_terminal(rep, [], width=100) + render_job_markdown(rep)
        assert words in text, name
        assert not [i for i in ids if re.search(rf"\b{i}\b", text)], name


@pytest.mark.slow
def test_hta_sampled_pair_is_a_partial_job_and_names_no_straggler() -> None:
    paths = [real("sampled_rank-0.json.gz"), real("sampled_rank-1.json.gz")]
    results, _, _ = map_ranks(rank_inputs([str(p) for p in paths]), workers=1)
    rep = analyze(results)
    assert [r.rank for r in rep.ranks] == [0, 1] and rep.job.world_size == 128 and rep.job.backend == "nccl"
    assert any("126 of 128 ranks are missing" in p for p in rep.job.problems)
    # HTA down-sampled these traces: the 10 NCCL kernels per rank are not the same calls,
    # so after alignment their ends stay far apart, and no straggler is named.
    assert rep.job.matched_collectives == 10
    assert rep.job.alignment_error_us is not None and rep.job.alignment_error_us > 1000.0
    assert rep.job.stragglers == [] and "no straggler is named" in rep.job.headline
    assert all(r.ledger for r in rep.ranks)


def test_rank_identity_problems(tmp_path: Path) -> None:
    src = case("balanced")
    shutil.copy(src / "rank0.pt.trace.json.gz", tmp_path / "rank0.pt.trace.json.gz")
    shutil.copy(src / "rank0.pt.trace.json.gz", tmp_path / "copy_of_rank0_again.json.gz")  # says rank 0 too
    shutil.copy(src / "rank1.pt.trace.json.gz", tmp_path / "rank1.pt.trace.json.gz")
    (tmp_path / "rank2.pt.trace.json.gz").write_bytes(b"\x1f\x8b not a gzip stream")
    inputs = rank_inputs(expand([str(tmp_path)]))
    results, _, _ = map_ranks(inputs, workers=1)
    assert sum(isinstance(r, RankFailure) for r in results) == 1
    rep = analyze(results)
    assert [r.rank for r in rep.ranks] == [0, 1]
    text = " ".join(rep.job.problems)
    assert "rank 0 appears twice" in text
    assert "rank2.pt.trace.json.gz (rank 2) could not be read" in text
    assert "1 of 3 ranks are missing (ranks 2)" in text
    assert rep.failed[0].rank == 2


def test_rank_from_file_name() -> None:
    assert rank_from_name("out/rank12.pt.trace.json.gz") == 12
    assert rank_from_name("trace_rank-3.json") == 3
    assert rank_from_name("worker_7.json.gz") == 7
    assert rank_from_name("worker0.1623143089861.pt.trace.json.gz") is None  # a timestamp, not a rank
    assert rank_from_name("gemm_bf16.pt.trace.json.gz") is None


def test_collective_kinds() -> None:
    assert collective_kind("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*)") == "all_reduce"
    assert collective_kind("c10d::_allgather_base_") == "all_gather"
    assert collective_kind("nccl:_reduce_scatter_base") == "reduce_scatter"
    assert collective_kind("c10d::alltoall_base_") == "all_to_all"
    assert collective_kind("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t") == "send_recv"
    assert collective_kind("gloo:barrier") == "barrier"


def test_unrelated_traces_are_not_a_job() -> None:
    files = [str(SAMPLES / "host_sync_mask.pt.trace.json.gz"), str(SAMPLES / "launch_bound.pt.trace.json.gz")]
    assert not looks_like_ranks(rank_inputs(files))
    assert looks_like_ranks(rank_inputs(expand([str(case("balanced"))])))


def test_summary_is_small_and_pickles() -> None:
    import pickle

    s = summarize(rank_inputs([str(case("host_slow") / "rank1.pt.trace.json.gz")])[0])
    assert isinstance(s, RankSummary) and s.rank == 1 and s.rank_source == "distributedInfo"
    blob = pickle.dumps(s)
    assert len(blob) < 20_000  # what crosses the process boundary, for a 13 kB trace
    assert pickle.loads(blob) == s


@pytest.mark.slow
def test_cli_folder_writes_one_job_report_and_per_rank_reports(tmp_path: Path) -> None:
    out = cli("report", case("host_slow"), "--out-dir", tmp_path / "rep", "--per-rank", "--workers", "2", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "Rank 1 is the straggler" in out.stdout
    assert "ranks" not in out.stderr  # per-rank progress goes to a terminal only (issue 29)
    rep = tmp_path / "rep"
    assert {p.name for p in rep.glob("ranks_host_slow.job.*")} == {
        "ranks_host_slow.job.html", "ranks_host_slow.job.md", "ranks_host_slow.job.json",
    }  # fmt: skip
    assert sorted(p.name for p in (rep / "ranks_host_slow-ranks").glob("*.json")) == [
        "rank0.json",
        "rank1.json",
        "rank2.json",
    ]
    doc = json.loads((rep / "ranks_host_slow.job.json").read_text())
    assert doc["job"]["stragglers"][0]["rank"] == SLOW_RANK


@pytest.mark.slow
def test_cli_redacts_the_job_and_per_rank_reports(tmp_path: Path) -> None:
    folder = tmp_path / "secret-project" / "ranks_host_slow"
    shutil.copytree(case("host_slow"), folder)
    rep = tmp_path / "rep"
    out = cli("report", folder, "--out-dir", rep, "--per-rank", "--workers", "1", "--redact", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    written = [p for p in rep.rglob("*") if p.is_file()]
    assert len(written) == 3 + 3 * 3  # the job report, and each rank's HTML/Markdown/JSON
    for path in written:
        assert str(tmp_path) not in path.read_text(), path.name
    assert str(tmp_path) not in out.stdout
    bad = cli("report", folder, "--perfetto", tmp_path / "p.json", cwd=tmp_path)
    assert bad.returncode == 2 and "--perfetto annotates one trace" in bad.stderr


@pytest.mark.slow
def test_cli_glob_and_files(tmp_path: Path) -> None:
    out = cli("report", str(case("gpu_heavy") / "rank*.json.gz"), "--json", tmp_path / "j.json", "-q", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert json.loads((tmp_path / "j.json").read_text())["job"]["stragglers"][0]["reason"].startswith("gpu_busy")
    files = sorted(case("balanced").glob("*.gz"))
    out = cli("report", *files, "--json", tmp_path / "b.json", "-q", cwd=tmp_path)
    assert out.returncode == 0 and json.loads((tmp_path / "b.json").read_text())["job"]["stragglers"] == []


@pytest.mark.slow
def test_cli_unrelated_traces_get_one_report_each(tmp_path: Path) -> None:
    for name in ("host_sync_mask", "launch_bound"):
        shutil.copy(SAMPLES / f"{name}.pt.trace.json.gz", tmp_path / f"{name}.pt.trace.json.gz")
    out = cli("report", tmp_path, "--out-dir", tmp_path / "rep", "-q", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert sorted(p.name.split(".")[0] for p in (tmp_path / "rep").glob("*.json")) == ["host_sync_mask", "launch_bound"]
    bad = cli("report", tmp_path / "host_sync_mask.pt.trace.json.gz", tmp_path / "launch_bound.pt.trace.json.gz",
                  "--json", tmp_path / "x.json", cwd=tmp_path)  # fmt: skip
    assert bad.returncode == 2 and "not ranks of one job" in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.slow
def test_cli_trace_text_is_escaped(tmp_path: Path) -> None:
    folder = tmp_path / "job"
    folder.mkdir()
    for r in (0, 1):
        shutil.copy(case("host_slow") / f"rank{r}.pt.trace.json.gz", folder / f"rank{r}<img src=x>.pt.trace.json.gz")
    out = cli("report", folder, "--html", tmp_path / "j.html", "--md", tmp_path / "j.md", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    html = (tmp_path / "j.html").read_text()
    assert "<img src=x>" not in html and "&lt;img src=x&gt;" in html
    assert "<img" not in (tmp_path / "j.md").read_text()


@pytest.mark.slow
def test_distributed_scheduler(tmp_path: Path) -> None:
    """`tracelens report DIR --scheduler ADDRESS` on a real `distributed` cluster: a
    LocalCluster of two worker processes (issue 28), each reading its ranks where they
    are; the job report is the one the embedded scheduler makes."""
    distributed = pytest.importorskip("distributed")
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None, memory_limit="2GiB"
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        out = cli("report", case("host_slow"), "--scheduler", cluster.scheduler_address, "--json",
                  tmp_path / "job.json", cwd=tmp_path, timeout=600)  # fmt: skip
        assert out.returncode == 0, out.stderr[-2000:]
        # Both workers took part: each ran tracelens (its summarize) in its own process.
        pids = client.run(lambda: __import__("os").getpid())
        ran = client.run(lambda: "tracelens.job.summarize" in __import__("sys").modules)
    assert len(pids) == 2 and len(set(pids.values())) == 2 and all(ran.values())
    doc = json.loads((tmp_path / "job.json").read_text())
    assert "distributed scheduler at " in doc["scheduler"] and "2 workers" in doc["scheduler"]
    # Dask's default workers run its profiler, whose memory grows with the ranks: said.
    assert "DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED=False" in doc["scheduler"]
    assert [s["rank"] for s in doc["job"]["stragglers"]] == [SLOW_RANK]
    embedded = job_of(case("host_slow"))
    assert doc["job"]["stragglers"][0]["cost_us"] == embedded.job.stragglers[0].cost_us


@pytest.mark.slow
def test_torchrun_capture_one_trace_per_rank_and_one_job_report(tmp_path: Path) -> None:
    """Each torchrun worker runs `tracelens capture`; rank 0 reports once on the set."""
    pytest.importorskip("torch")
    cmd = [PY, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m", "tracelens", "capture",
           "--steps", "3-6", "--no-stack", "--no-nvml", "--out-dir", str(tmp_path / "out"),
           str(REPO / "workloads/ranks/gloo_ranks.py"),
           "--case", "host_slow", "--no-profile", "--device", "cpu"]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    folder = tmp_path / "out" / "gloo_ranks-ranks"
    assert sorted(p.name for p in folder.glob("*.gz")) == ["rank0.pt.trace.json.gz", "rank1.pt.trace.json.gz"]
    for r in (0, 1):
        with gzip.open(folder / f"rank{r}.pt.trace.json.gz") as fh:
            assert json.load(fh)["distributedInfo"]["rank"] == r
    doc = json.loads((tmp_path / "out" / "gloo_ranks-ranks.job.json").read_text())
    # Who is late is not asserted here: two ranks, their gloo threads and the busy loop
    # on this 2-core machine shared with other work do not finish collectives together
    # (the H200 captures above test that); the capture and the one report on the set are.
    assert doc["job"]["ranks"] == 2 and doc["job"]["world_size"] == 2
    assert doc["job"]["matched_collectives"] == 4 and doc["failed"] == []


def test_fsspec_url_prefix() -> None:
    """An fsspec URL prefix (here fsspec's in-memory filesystem, standing for s3:// or
    gs://): listed, downloaded rank by rank, reported as a job."""
    fsspec = pytest.importorskip("fsspec")
    fs = fsspec.filesystem("memory")
    for r in range(3):
        fs.pipe(f"/job15/rank{r}.pt.trace.json.gz", (case("host_slow") / f"rank{r}.pt.trace.json.gz").read_bytes())
    files = expand(["memory://job15/"])
    assert [f.rsplit("/", 1)[-1] for f in files] == [f"rank{r}.pt.trace.json.gz" for r in range(3)]
    # One worker: the synchronous scheduler in this process, which holds the memory filesystem.
    results, _, how = map_ranks(rank_inputs(files), workers=1)
    assert "synchronous" in how and all(isinstance(r, RankSummary) for r in results)
    assert [s.rank for s in analyze(results).job.stragglers] == [SLOW_RANK]


#: Plain torch.profiler rank traces (no tracelens capture) of two gloo ranks sharing the
#: H200: workloads/ranks/plain_gloo.py, rank 1 late by 25 ms of host work per step
#: (Python, a DataLoader, or host ops), ProfilerStep marks, record_function steps or
#: none, with and without stacks; times/ holds the step times measured in the script.
PLAIN = REPO / "tests" / "data" / "plain_gloo_h200"
PLAIN_CASES = {
    # case: (reason id, words in its label)
    "prof_python": ("host_bound", "Python outside torch ops"),
    "prof_python_stack": ("host_bound", "python_work"),
    "func_python": ("host_bound", "Python outside torch ops"),
    "none_python": ("host_bound", "Python outside torch ops"),
    "prof_data": ("host_bound", "data loading"),
    "prof_ops": ("host_bound", "torch ops on the host"),
}


def _median_step_ms(case: str) -> float:
    import statistics

    steps = [json.loads(p.read_text())["step_ms"] for p in sorted((PLAIN / case / "times").glob("rank*.json"))]
    return statistics.median([statistics.median(s) for s in steps])


@pytest.mark.parametrize("case", sorted(PLAIN_CASES))
def test_plain_profiler_rank_traces_name_the_straggler_its_reason_and_cost(case: str) -> None:
    """Issue 28: these jobs headlined "no collective was matched on every rank" while
    aligning clocks on 6 collectives matched on every rank. The straggler's cost is checked
    against the truth measured outside the profiler: the job's step with rank 1's extra
    25 ms minus the balanced job's step."""
    rep = job_of(PLAIN / case)
    reason, words = PLAIN_CASES[case]
    # 6 steps x 2 DDP buckets; without marks the steps are DDP's forward ranges (derive/
    # steps.py), and the collectives after the last forward fall past the last step.
    assert rep.job.ranks == 2 and rep.job.counted_collectives == (10 if case == "none_python" else 12)
    assert [s.rank for s in rep.job.stragglers] == [1], rep.job.headline
    s = rep.job.stragglers[0]
    assert s.reason == reason and words in s.reason_label
    assert rep.job.headline.startswith("Rank 1 is the straggler") and words in rep.job.headline
    truth_us = (_median_step_ms(case) - _median_step_ms("prof_balanced")) * 1e3
    # One number for its cost, within a quarter of the truth (the two buckets of a step
    # overlap in time: their waits are one wait, not two).
    assert 0.75 * truth_us < s.cost_us < 1.25 * truth_us, (s.cost_us, truth_us)
    assert s.cost_us < rep.job.step_us  # never more than a step
    assert f"costs the job {fmt_us(s.cost_us)} per step" in rep.job.headline


def test_a_balanced_plain_job_says_no_straggler_first() -> None:
    rep = job_of(PLAIN / "prof_balanced")
    assert rep.job.stragglers == [] and rep.job.headline.startswith("No straggler")


def test_the_profilers_own_overhead_is_said_when_ranks_record_very_differently() -> None:
    """With stacks, rank 1's Python loop records ~46,000 more frames per step: the report
    says what that could cost at most, and how to measure it; without stacks it does not."""
    stack = job_of(PLAIN / "prof_python_stack").job.stragglers[0]
    plain = job_of(PLAIN / "prof_python").job.stragglers[0]
    assert stack.profiler_us > 0.1 * stack.cost_us and "--no-stack" in stack.advice and "upper" in stack.advice
    assert plain.profiler_us < 0.1 * plain.cost_us and "--no-stack" not in plain.advice
    # Measured (times/): with_stack moved this straggler's cost by about 1 ms of ~26.
    moved = abs(_median_step_ms("prof_python_stack") - _median_step_ms("prof_python"))
    assert moved < 2.0


def _summary(rank: int, calls: list[tuple[float, float]], source: str, python_us: float) -> RankSummary:
    from tracelens.job.model import Collective
    from tracelens.report.job_report import StepTime

    cols = [
        Collective(kind="all_reduce", group="gloo", seq=-1, order=i, step=i, start_us=a, end_us=e, bytes=4 << 20,
                   source=source, exposed_us=0.0, before_host={"host_python": python_us, "host_ops": 1000.0})
        for i, (a, e) in enumerate(calls)
    ]  # fmt: skip
    steps = [StepTime(step=i, start_us=a - 20_000.0, span_us=40_000.0) for i, (a, _) in enumerate(calls)]
    return RankSummary(file=f"rank{rank}", rank=rank, rank_source="distributedInfo", world_size=2, backend="gloo",
                       host_name="h", gpu_name="", origin_us=1e15, window_start_us=0.0, window_end_us=1e6,
                       n_steps=len(calls), steps=steps, ledger=[], findings=[], collectives=cols, throttled=False,
                       load_seconds=0.0, analysis_seconds=0.0, step_source="steps")  # fmt: skip


def test_one_host_gloo_exchanges_that_end_apart_keep_their_arrival_order() -> None:
    """Two CPU ranks on one host (one clock): rank 1 arrives 20 ms late at each call, and
    the exchanges end 8 ms apart (a loaded host delays gloo's threads; ddp_cpu.py run 11 on
    the 2-core machine). That is no reason to distrust who arrived last. Kernels that end
    so far apart are not the same calls, and stay untrusted."""
    step = 40_000.0
    r0 = [(i * step, i * step + 25_000.0) for i in range(6)]
    r1 = [(i * step + 20_000.0, i * step + 25_000.0 + (8_000.0 if i % 2 else -8_000.0)) for i in range(6)]
    rep = analyze([_summary(0, r0, "host", 5_000.0), _summary(1, r1, "host", 25_000.0)])
    assert [s.rank for s in rep.job.stragglers] == [1], rep.job.headline
    assert "clocks agreed before alignment" in rep.job.alignment
    assert rep.job.stragglers[0].reason == "host_python"
    kernels = analyze([_summary(0, r0, "kernel", 5_000.0), _summary(1, r1, "kernel", 25_000.0)])
    assert kernels.job.stragglers == [] and "not the same calls" in kernels.job.headline


def test_a_straggler_whose_own_work_explains_part_of_its_lateness_is_named_with_the_rest_said() -> None:
    """ddp_cpu.py run 3 of the 50 on the loaded 2-core machine: rank 1 was 57.9 ms late per
    step with 28.8 ms of its own extra work (its 20 ms of Python, and host ops), the rest
    the host's scheduling. It is the straggler, and the report says how much its trace
    explains; a rank late by as much with only a little extra work stays unexplained."""
    step = 100_000.0
    r0 = [(i * step, i * step + 60_000.0) for i in range(6)]
    r1 = [(i * step + 58_000.0, i * step + 60_000.0) for i in range(6)]
    rep = analyze([_summary(0, r0, "host", 5_000.0), _summary(1, r1, "host", 24_000.0)])
    (s,) = rep.job.stragglers
    assert s.rank == 1 and s.reason == "host_python" and 18_000 < s.own_us < 20_000 and s.cost_us > 50_000
    assert "accounts for 19.0 ms of it, the rest is delay its trace does not show" in rep.job.headline
    assert "the rest is delay its trace does not show" in s.advice
    little = analyze([_summary(0, r0, "host", 5_000.0), _summary(1, r1, "host", 9_000.0)])
    assert little.job.stragglers == [] and [u.rank for u in little.job.late_unexplained] == [1]
    assert "with only 4.0 ms per step more work than the others" in little.job.headline


@pytest.mark.slow
def test_four_plain_profiler_gloo_ranks_on_the_h200_name_the_straggler() -> None:
    """Four ranks sharing the H200 over gloo (plain_gloo.py --world 4 --stack; comm-h200jobs,
    16 rank processes on the host's 16 cores at once): rank 1's 25 ms of Python per step
    is named, with its frame, and every other rank waits for it."""
    rep = job_of(PLAIN / "prof_python_stack_4rank")
    assert rep.job.ranks == 4 and rep.job.counted_collectives == 12  # 6 steps x 2 DDP buckets
    (s,) = rep.job.stragglers
    assert s.rank == 1 and s.reason == "host_bound" and "plain_gloo.py(54): python_work" in s.reason_label
    assert 20_000 < s.reason_us < 30_000  # 25 ms planted
    assert all(r.wait_us > 15_000 for r in rep.ranks if r.rank != 1)


def test_workers_profiling_is_asked_of_every_worker_and_never_fails_the_job() -> None:
    """The note on Dask's worker profiler rests on each worker's own config."""
    from tracelens.job.run import _workers_profiling

    class FakeClient:
        def __init__(self, answers: dict[str, bool] | Exception) -> None:
            self.answers = answers

        def run(self, fn):  # type: ignore[no-untyped-def]
            assert fn() in (True, False)  # runs here as it would on a worker
            if isinstance(self.answers, Exception):
                raise self.answers
            return self.answers

    assert _workers_profiling(FakeClient({"a": False, "b": True}))
    assert not _workers_profiling(FakeClient({"a": False, "b": False}))
    assert not _workers_profiling(FakeClient(OSError("worker gone")))


def test_a_rank_comes_back_as_a_small_summary() -> None:
    """What a worker sends back per rank stays a few kB (helper mem28b: 5.4 kB a rank on
    the synthetic 64-rank job), so neither the client nor a worker holds traces."""
    import pickle

    from tracelens.job.model import RankInput
    from tracelens.job.summarize import summarize

    for path in sorted(Path(case("host_slow")).glob("*.json*")):
        res = summarize(RankInput(path=str(path), name_rank=None))
        assert isinstance(res, RankSummary), res
        assert len(pickle.dumps(res)) < MAX_RANK_SUMMARY_BYTES, path.name


#: The host_slow ranks' pickled summaries are ~5-6 kB; a trace's frames would be MBs.
MAX_RANK_SUMMARY_BYTES = 64_000
