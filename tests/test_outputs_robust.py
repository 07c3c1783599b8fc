"""Issue 29's report-side losses: outputs a kill -9 left behind, 250-character names,
which run wrote each output, gzip bombs bounded by the machine and the file's own size
field, and the job report's notes on ranks that do not belong together."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.cli import cli, one_error_line_problem
from support.synthetic import tiny_trace

from tracelens.cli.job import failure_line
from tracelens.errors import TraceInputError
from tracelens.job.model import RankFailure
from tracelens.model import load_trace
from tracelens.output import TEMP_MARK, _host_tag, temp_prefix

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "sample_traces" / "host_sync_static.pt.trace.json.gz"
RANKS = REPO / "sample_traces" / "ranks_host_slow"


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_kill_9s_temp_file_is_removed_by_the_next_run(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    stale = out / f".r.json{TEMP_MARK}{_host_tag()}{_dead_pid()}.abcdefgh.tmp"
    live = out / f".r.md{TEMP_MARK}{_host_tag()}{os.getpid()}.abcdefgh.tmp"  # this process: alive
    foreign = out / ".someone-elses.tmp"
    for p in (stale, live, foreign):
        p.write_text("half a report")
    res = cli("report", SAMPLE, "--json", out / "r.json", "-q", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert not stale.exists() and live.exists() and foreign.exists()
    assert (out / "r.json").exists()


def test_a_250_character_output_name_is_written(tmp_path: Path) -> None:
    """Legal on ext4 (255 bytes), but its temp name was longer: exit 3."""
    name = "r" * 245 + ".json"
    assert len(temp_prefix(name).encode()) + 8 + len(".tmp") <= 255
    res = cli("report", SAMPLE, "--json", tmp_path / name, "-q", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / name).exists() and not list(tmp_path.glob(".*.tmp"))


def test_every_output_says_which_run_wrote_it(tmp_path: Path) -> None:
    res = cli("report", SAMPLE, "--out-dir", tmp_path, "-q", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    stem = "host_sync_static.pt.trace"
    stamp = json.loads((tmp_path / f"{stem}.json").read_text())["generated_at"]
    assert stamp in (tmp_path / f"{stem}.md").read_text().splitlines()[-1]
    assert stamp in (tmp_path / f"{stem}.html").read_text()


def _tiny_json(pad: int = 0) -> bytes:
    doc = tiny_trace()
    doc["zz_pad"] = "x" * pad
    return json.dumps(doc).encode()


def test_a_gzip_that_inflates_past_its_own_size_field_is_refused_there(tmp_path: Path) -> None:
    """ISIZE forged to 16 MiB on 40 MB of JSON: refused at 17 MiB, not at a ratio."""
    gz = gzip.compress(_tiny_json(40_000_000), 9)
    forged = tmp_path / "forged.json.gz"
    forged.write_bytes(gz[:-4] + (2**24 + 1).to_bytes(4, "little"))
    with pytest.raises(TraceInputError, match="more than its gzip size field says"):
        load_trace(forged)


def test_a_gzip_larger_than_the_machine_allows_is_refused_before_inflating(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tracelens.model.loader.read as loader

    monkeypatch.setattr(loader, "json_budget", lambda cap: 10_000_000)  # a small machine
    big = tmp_path / "big.json.gz"
    big.write_bytes(gzip.compress(_tiny_json(20_000_001), 6))
    with pytest.raises(TraceInputError, match="more than this machine's free memory allows"):
        load_trace(big)
    small = tmp_path / "small.json.gz"  # under the budget: read as ever
    small.write_bytes(gzip.compress(_tiny_json(1_000_001), 6))
    assert len(load_trace(small).kernels()) == 2


def test_a_gzip_of_whitespace_or_zeros_is_refused_at_once(tmp_path: Path) -> None:
    for name, data in (("spaces.json.gz", b" " * 30_000_000 + _tiny_json()), ("zeros.json.gz", b"\0" * 30_000_000)):
        p = tmp_path / name
        p.write_bytes(gzip.compress(data, 9))
        res = cli("report", p, "--out-dir", tmp_path / "out", cwd=tmp_path)
        assert res.returncode == 2 and one_error_line_problem(res.stderr) is None, res.stderr
        assert "not a JSON trace" in res.stderr


def test_a_corrupt_rank_is_named_once() -> None:
    f = RankFailure(file="run/rank3.json", name_rank=3, error="run/rank3.json: not a JSON trace (byte 2)")
    line = failure_line(f)
    assert line == "tracelens: run/rank3.json: not a JSON trace (byte 2)"


def _rank_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "job"
    shutil.copytree(RANKS, folder)
    return folder


def _edit(path: Path, fn: object) -> None:
    data = json.loads(gzip.decompress(path.read_bytes()))
    fn(data)  # type: ignore[operator]
    path.write_bytes(gzip.compress(json.dumps(data).encode()))


def _job_problems(folder: Path) -> list[str]:
    from tracelens.job import analyze, expand, map_ranks, rank_inputs

    results, seconds, how = map_ranks(rank_inputs(expand([str(folder)])), workers=1)
    return list(analyze(results, map_seconds=seconds, scheduler=how).job.problems)


def test_job_notes_mixed_gpus_rank_minus_one_and_another_program(tmp_path: Path) -> None:
    folder = _rank_folder(tmp_path)
    assert not any("different" in p or "rank -1" in p for p in _job_problems(folder))  # the control

    def other_gpu(d: dict) -> None:  # type: ignore[type-arg]
        d["deviceProperties"][0]["name"] = "NVIDIA A100-SXM4-80GB"

    _edit(folder / "rank2.pt.trace.json.gz", other_gpu)
    problems = _job_problems(folder)
    assert any("different GPUs" in p and "NVIDIA A100" in p for p in problems), problems

    def minus_one(d: dict) -> None:  # type: ignore[type-arg]
        d["distributedInfo"]["rank"] = -1

    _edit(folder / "rank1.pt.trace.json.gz", minus_one)
    problems = _job_problems(folder)
    assert any("says rank -1" in p for p in problems), problems


def test_a_rank_of_another_program_is_noted(tmp_path: Path) -> None:
    folder = _rank_folder(tmp_path)
    other = json.loads(gzip.decompress((REPO / "sample_traces" / "gemm_bf16.pt.trace.json.gz").read_bytes()))
    mine = json.loads(gzip.decompress((folder / "rank2.pt.trace.json.gz").read_bytes()))
    other["distributedInfo"] = mine["distributedInfo"]
    (folder / "rank2.pt.trace.json.gz").write_bytes(gzip.compress(json.dumps(other).encode()))
    problems = _job_problems(folder)
    assert any("rank 2 looks like a different program" in p for p in problems), problems
