"""The command line: outputs, bad input (one clear line, exit 2, no traceback), and
that the input is never modified."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from support.cli import PY, TIMEOUT_S, argv, cli, error_lines, one_error_line_problem
from support.corpus import sample
from support.synthetic import tiny_trace


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_help_teaches() -> None:
    out = cli("--help")
    assert out.returncode == 0
    assert "tracelens report trace.json.gz" in out.stdout and "tracelens capture train.py" in out.stdout
    sub = cli("report", "--help")
    assert sub.returncode == 0 and "--markdown" in sub.stdout and "--json" in sub.stdout


@pytest.mark.slow
def test_default_outputs_go_to_reports_dir(tmp_path: Path) -> None:
    trace = sample("host_sync_mask")
    before = digest(trace)
    out = cli("report", trace, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    stem = "host_sync_mask.pt.trace"
    for ext in ("html", "md", "json"):
        assert (tmp_path / "reports" / f"{stem}.{ext}").stat().st_size > 500
    assert "Primary bottleneck" in out.stdout and "Host syncs" in out.stdout
    assert digest(trace) == before  # the input is only read
    # No temp files left behind by the atomic writes.
    assert not [p for p in (tmp_path / "reports").iterdir() if p.name.startswith(".")]


@pytest.mark.slow
def test_explicit_outputs_only(tmp_path: Path) -> None:
    out = cli("report", sample("launch_bound"), "--json", tmp_path / "r.json", "-q")
    assert out.returncode == 0, out.stderr
    assert out.stdout == ""
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["summary"]["primary"] == "launch_overhead"
    assert not (tmp_path / "reports").exists()


BAD_INPUTS = {
    "not_json.json": b"this is not json at all\n",
    "empty.json": b"",
    "no_events.json": b'{"schemaVersion": 1, "deviceProperties": []}',
    "list_of_numbers.json": b"[1, 2, 3]",
    # A Chrome trace from another tool (no PyTorch ops, runtime calls or kernels).
    "other_tool.json": json.dumps(
        {"traceEvents": [{"ph": "X", "name": "v8.compile", "cat": "v8", "pid": 1, "tid": 1, "ts": 1, "dur": 5}]}
    ).encode(),
    "empty_events.json": b'{"traceEvents": []}',
    "scalar.json": b"42",
}


@pytest.mark.parametrize("name", sorted(BAD_INPUTS))
def test_bad_input_one_line_exit_2(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_bytes(BAD_INPUTS[name])
    before = digest(path)
    out = cli("report", path, "--json", tmp_path / "out.json")
    assert out.returncode == 2, (out.returncode, out.stderr)
    assert one_error_line_problem(out.stderr) is None
    assert "Traceback" not in out.stderr
    assert digest(path) == before
    assert not (tmp_path / "out.json").exists()


@pytest.mark.slow
def test_truncated_gzip(tmp_path: Path) -> None:
    data = sample("host_sync_mask").read_bytes()
    path = tmp_path / "cut.json.gz"
    path.write_bytes(data[: len(data) // 2])
    out = cli("report", path, "--json", tmp_path / "o.json")
    assert out.returncode == 2 and "gzip" in out.stderr and len(error_lines(out.stderr)) == 1


@pytest.mark.slow
def test_truncated_json(tmp_path: Path) -> None:
    raw = gzip.decompress(sample("host_sync_mask").read_bytes())
    path = tmp_path / "cut.json"
    path.write_bytes(raw[: len(raw) // 3])
    out = cli("report", path, "--json", tmp_path / "o.json")
    assert out.returncode == 2 and "truncated" in out.stderr.lower(), out.stderr


@pytest.mark.slow
def test_directory_and_missing_file(tmp_path: Path) -> None:
    out = cli("report", tmp_path)
    assert out.returncode == 2 and "directory" in out.stderr
    out = cli("report", tmp_path / "nope.json.gz")
    assert out.returncode == 2 and "no such file" in out.stderr


def test_unwritable_output_is_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    out = cli("report", sample("launch_bound"), "--json", blocker / "sub" / "r.json")
    # Refused before the trace is read (issue 18: it used to fail after the analysis), as
    # a usage error: exit 2, one line.
    assert out.returncode == 2, out.stderr
    assert len(error_lines(out.stderr)) == 1 and "Traceback" not in out.stderr
    assert "is not a directory" in out.stderr


@pytest.mark.slow
def test_unwritable_output_fails_before_the_work(tmp_path: Path) -> None:
    """A large trace takes seconds to analyse; a bad output path must not wait for it. The
    outputs are checked before the trace is read: with an unreadable trace as well, the
    error is the output's."""
    blocker = tmp_path / "file"
    blocker.write_text("x")
    garbage = tmp_path / "garbage.json"
    garbage.write_text("{not json")
    out = cli("report", garbage, "--out-dir", blocker / "reports")
    assert out.returncode == 2 and "is not a directory" in out.stderr, out.stderr
    # Positive control: with a writable output the same trace is refused for what it is.
    bad = cli("report", garbage, "--out-dir", tmp_path / "reports")
    assert bad.returncode == 2 and "is not a directory" not in bad.stderr and "JSON" in bad.stderr, bad.stderr
    out = cli("report", sample("launch_bound"), "--html", tmp_path)  # a directory
    assert out.returncode == 2 and "is a directory" in out.stderr


@pytest.mark.slow
@pytest.mark.skipif(os.name != "posix", reason="posix permissions")
def test_read_only_input_is_fine(tmp_path: Path) -> None:
    path = tmp_path / "ro.json.gz"
    path.write_bytes(sample("launch_bound").read_bytes())
    path.chmod(0o444)
    out = cli("report", path, "--md", tmp_path / "r.md", "-q")
    assert out.returncode == 0, out.stderr


@pytest.mark.slow
def test_base_install_never_pulls_torch() -> None:
    """torch is only needed by `capture` (an extra); `report` must not import it."""
    import tomllib

    meta = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]
    assert not [d for d in meta["dependencies"] if d.split(">")[0].split("=")[0].strip().lower() == "torch"]
    assert meta["name"] != "tracelens"  # the PyPI name belongs to another project
    out = subprocess.run(
        [PY, "-c", "import sys, tracelens.cli, tracelens.assemble; print('torch' in sys.modules)"],
        capture_output=True,
        text=True,
    )
    assert out.stdout.strip() == "False"


def test_a_json_report_imports_no_template_engine_or_network_stack() -> None:
    """What a `report --json` imports before its work: not jinja2 (only HTML and Markdown
    render templates) nor urllib.request / ssl (xml.sax.saxutils pulled them in for the
    pictures' escaping): 13 + 18 ms of every report's start-up (issue 30)."""
    code = (
        "import sys, tracelens.cli, tracelens.assemble, tracelens.render, tracelens.render.charts; "
        "print(sorted(m for m in ('jinja2', 'ssl', 'urllib.request', 'http.client') if m in sys.modules))"
    )
    out = subprocess.run([PY, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "[]", out.stderr


# --------------------------------------------------------------------------------------
# Never destroy a file (issue 14): outputs that are the input, links, non-regular files.
# --------------------------------------------------------------------------------------
def _refused(out: subprocess.CompletedProcess[str], what: str) -> None:
    assert out.returncode == 2, (out.returncode, out.stderr)
    assert one_error_line_problem(out.stderr) is None and what in out.stderr, out.stderr


def test_output_onto_the_input_is_refused(tmp_path: Path) -> None:
    trace = tmp_path / "t.json.gz"
    trace.write_bytes(sample("launch_bound").read_bytes())
    before = digest(trace)
    _refused(cli("report", trace, "--json", trace), "is the input trace")
    # Through a symlink and a hard link too, whichever report it is.
    (tmp_path / "link").symlink_to(trace)
    _refused(cli("report", trace, "--html", tmp_path / "link"), "is the input trace")
    os.link(trace, tmp_path / "hard")
    _refused(cli("report", tmp_path / "hard", "--md", trace), "is the input trace")
    assert digest(trace) == before


@pytest.mark.slow
def test_default_names_onto_the_input_are_refused(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    reports.mkdir()
    trace = reports / "run.json"
    trace.write_bytes(gzip.decompress(sample("launch_bound").read_bytes()))
    before = digest(trace)
    _refused(cli("report", "reports/run.json", cwd=tmp_path), "is the input trace")  # reports/run.json
    _refused(cli("report", "run.json", "--out-dir", ".", cwd=reports), "is the input trace")
    assert digest(trace) == before
    assert sorted(p.name for p in reports.iterdir()) == ["run.json"]  # no work was done


@pytest.mark.slow
def test_two_reports_on_one_path_are_refused(tmp_path: Path) -> None:
    _refused(cli("report", sample("launch_bound"), "--md", tmp_path / "a", "--json", tmp_path / "a"), "twice")
    _refused(cli("report", sample("launch_bound"), "--md", "-", "--json", "-"), "standard output")


@pytest.mark.slow
def test_outputs_write_through_symlinks(tmp_path: Path) -> None:
    real_file = tmp_path / "real.json"
    real_file.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(real_file)
    out = cli("report", sample("launch_bound"), "--json", link, "-q")
    assert out.returncode == 0, out.stderr
    assert link.is_symlink() and json.loads(real_file.read_text())["summary"]["primary"] == "launch_overhead"
    # A dangling link gets its target created.
    dangling = tmp_path / "dangling.md"
    dangling.symlink_to(tmp_path / "new.md")
    assert cli("report", sample("launch_bound"), "--md", dangling, "-q").returncode == 0
    assert dangling.is_symlink() and (tmp_path / "new.md").read_text().startswith("### tracelens")


@pytest.mark.slow
def test_stdout_outputs(tmp_path: Path) -> None:
    out = cli("report", sample("launch_bound"), "--json", "-")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["summary"]["primary"] == "launch_overhead"
    assert "Primary bottleneck" in out.stderr  # the summary moved out of the report's way
    # /dev/stdout is written in place, never renamed over.
    out = cli("report", sample("launch_bound"), "--md", "/dev/stdout", "-q")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("### tracelens") and Path("/dev/stdout").exists()


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_fifo_input_and_output(tmp_path: Path) -> None:
    fifo = tmp_path / "in.json"
    os.mkfifo(fifo)
    _refused(cli("report", fifo, "--json", tmp_path / "o.json"), "not a regular file")
    _refused(cli("report", "/dev/zero", "--json", tmp_path / "o.json"), "not a regular file")
    # A FIFO output is written into, not replaced.
    out_fifo = tmp_path / "out.md"
    os.mkfifo(out_fifo)
    proc = subprocess.Popen(argv("report", sample("launch_bound"), "--md", out_fifo, "-q"))
    with open(out_fifo) as fh:
        text = fh.read()
    assert proc.wait(timeout=120) == 0
    assert text.startswith("### tracelens") and out_fifo.is_fifo()


@pytest.mark.slow
def test_non_utf8_and_control_characters_in_paths(tmp_path: Path) -> None:
    odd = os.fsencode(tmp_path) + b"/tr\xff\xfe\x1b]0;x\x07.json.gz"
    with open(odd, "wb") as fh:
        fh.write(sample("launch_bound").read_bytes())
    out_dir = tmp_path / "out"
    res = subprocess.run(
        [os.fsencode(PY), b"-m", b"tracelens", b"report", odd, b"--out-dir", os.fsencode(out_dir)],
        capture_output=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    assert b"\x1b" not in res.stdout and b"\xff" not in res.stdout and "\ufffd".encode() in res.stdout
    report = json.loads(next(out_dir.glob("*.json")).read_text())
    assert "\ufffd" in report["trace"]["file_name"]
    assert not [p for p in out_dir.iterdir() if p.name.endswith(".tmp")]
    # A missing file with such a name: one clean line.
    res = subprocess.run(
        [os.fsencode(PY), b"-m", b"tracelens", b"report", odd + b"nope"], capture_output=True, timeout=60
    )
    assert res.returncode == 2 and res.stderr.count(b"\n") == 1 and b"\x1b" not in res.stderr


@pytest.mark.slow
def test_ctrl_c_is_one_line_and_exit_130(tmp_path: Path) -> None:
    import signal
    import time

    # 120,000 events: about 10 s of work, long enough to interrupt.
    trace = tmp_path / "big.json"
    trace.write_text(json.dumps(tiny_trace(30_000)))
    proc = subprocess.Popen(
        argv("report", trace, "--out-dir", tmp_path / "out"),
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(2.0)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    if proc.returncode == 0:
        pytest.skip("the report finished before the signal")
    assert proc.returncode == 130, err
    # Progress lines (a load over a second reports its stages), then one line; no
    # traceback, no blank line, no click "Aborted!".
    lines = err.rstrip("\n").split("\n")
    assert lines[-1] == "tracelens: interrupted", err
    assert all(line.startswith("tracelens: ") for line in lines) and "Aborted" not in err, err
    assert not [p for p in tmp_path.rglob("*.tmp")]


_WRITER = """
import sys
from tracelens.output import write_atomic
text = "x" * 50_000_000
print("ready", flush=True)
while True:
    write_atomic(sys.argv[1], text)
"""


@pytest.mark.slow
def test_sigint_during_writes_leaves_no_temp_file(tmp_path: Path) -> None:
    import signal
    import time

    target = tmp_path / "r.html"
    for delay in (0.05, 0.2, 0.35, 0.5):
        # SIGINT back to its default in the child: a shell's background job starts with it
        # ignored, and Python then never raises KeyboardInterrupt (the test waited 300 s).
        proc = subprocess.Popen(
            [PY, "-c", _WRITER, str(target)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        try:
            assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
            time.sleep(delay)
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=TIMEOUT_S)  # a hang guard: 50 MB writes take long on a loaded disk
        finally:
            proc.kill()  # a failed run leaves no writer behind (one ran on for 50 CPU minutes)
            proc.wait()
        assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")], delay
        if target.exists():  # whatever is there is one whole report
            assert target.stat().st_size == 50_000_000


# --------------------------------------------------------------------------------------
# Nothing unescaped: a trace whose names carry terminal escapes, mentions and HTML.
# --------------------------------------------------------------------------------------
CORPUS = Path(__file__).resolve().parent / "fuzz_corpus"


@pytest.mark.slow
def test_hostile_trace_text_is_neutralised(tmp_path: Path) -> None:
    trace = CORPUS / "injection_text.json"
    out = cli("report", trace, "--md", tmp_path / "r.md", "--html", tmp_path / "r.html", "--json", tmp_path / "r.json")
    assert out.returncode == 0, out.stderr
    term = out.stdout
    for ch in ("\x1b", "\x07", "\r", "\x08", "\x9b", "\u202e"):
        assert ch not in term, repr(ch)
    assert max(len(line) for line in term.splitlines()) < 2_000
    md = (tmp_path / "r.md").read_text()
    assert len(md) < 65_536
    for raw in ("@octocat", "@org/team", " #123", "pytorch/pytorch#1", "GH-12", "#1}", "<img", "[a](", "http://"):
        assert raw not in md, raw
    assert "@&#8203;octocat" in md and "#&#8203;123" in md and "GH&#8203;-12" in md
    assert not any(ch in md for ch in ("\x1b", "\x07", "\x08", "\x9b"))
    html = (tmp_path / "r.html").read_text()
    assert '<meta http-equiv="Content-Security-Policy" content="default-src \'none\';' in html
    assert "<img src=x>" not in html and "&lt;img src=x&gt;" in html
    # No external request: nothing is loaded from anywhere (links to docs are fine: they
    # are only followed by a click, and the CSP blocks fetches anyway).
    for attr in ("src=", "@import", "url(", "srcset="):
        for m in re.finditer(re.escape(attr), html):
            value = html[m.end() : m.end() + 12].strip("\"'( ")
            assert not value.startswith(("http", "//")), html[m.start() - 40 : m.end() + 40]
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["trace"]["gpu_name"].startswith("@octocat")  # the JSON keeps the data as it was


def test_markdown_fits_one_github_comment() -> None:
    from tracelens.render.markdown import GITHUB_COMMENT_LIMIT, MAX_MARKDOWN_CHARS, fit_comment

    body = (
        "### tracelens\n\n<details><summary>x</summary>\n\n"
        + "| a | b |\n" * 20_000
        + "\n</details>\n\n<sub>Generated</sub>\n"
    )
    cut = fit_comment(body)
    assert len(cut) <= MAX_MARKDOWN_CHARS < GITHUB_COMMENT_LIMIT
    assert cut.count("<details>") == cut.count("</details>") == 1 and cut.endswith("<sub>Generated</sub>\n")
    assert "Cut here to fit" in cut
    assert fit_comment("short") == "short"


def test_json_is_strict_even_with_nan() -> None:
    import dataclasses

    from support.corpus import report_of

    from tracelens.render import render_json

    rep = report_of(sample("launch_bound"))
    bad = dataclasses.replace(rep, summary=dataclasses.replace(rep.summary, primary_share=float("nan")))
    text = render_json(bad)

    def no_constants(name: str) -> float:
        raise ValueError(name)

    data = json.loads(text, parse_constant=no_constants)
    assert data["summary"]["primary_share"] is None


@pytest.mark.slow
def test_fast_exit_loses_no_output(tmp_path: Path) -> None:
    """The report command leaves by os._exit once its outputs are written (no heap
    teardown): what went to a pipe must still arrive whole, and the exit code stay 0."""
    trace = sample("host_sync_mask")
    piped = cli("report", trace, "--md", "-")
    assert piped.returncode == 0, piped.stderr
    filed = cli("report", trace, "--md", tmp_path / "r.md", "-q")
    assert filed.returncode == 0, filed.stderr
    expected = (tmp_path / "r.md").read_text()
    # The same Markdown (its generation time aside, and the pictures' line: a Markdown
    # file has SVGs beside it, standard output none; blank lines aside), to the last line.
    assert "drag r.ledger.svg and r.timeline.svg (written beside this file)" in expected
    strip = lambda text: [  # noqa: E731
        ln
        for ln in text.splitlines()
        if ln.strip() and "generated" not in ln.lower() and not ln.startswith("_Pictures for")
    ]
    assert strip(piped.stdout) == strip(expected) and len(expected) > 1000
    json_out = cli("report", trace, "--json", "-")
    assert json_out.returncode == 0 and json.loads(json_out.stdout)["summary"]["primary"]


def test_the_early_scan_finds_one_report_input_or_none() -> None:
    from tracelens.early import scan_report

    def found(*args: str) -> str | None:
        scanned = scan_report(list(args))
        return scanned[0] if scanned else None

    assert found("report", "t.json.gz", "--json", "o.json", "-q") == "t.json.gz"
    assert found("report", "--md", "x.md", "--out-dir=r", "t.json", "--redact") == "t.json"
    assert found("report", "--json", "-q", "t.json") == "t.json"  # -q is --json's value
    assert found("report", "--", "-odd.json") == "-odd.json"
    assert found("report", "a.json", "b.json") is None  # ranks of a job
    assert found("report", "t.json", "--help") is None
    assert found("report", "t.json", "--new-option") is None
    assert found("report", "t.json", "--json") is None  # a value missing
    assert found("capture", "train.py") is None
    assert found() is None
    assert scan_report(["report", "--json=-", "t", "-q", "--html", "h"]) == (
        "t",
        [("--json", "-"), ("-q", None), ("--html", "h")],
    )


_EARLY = (
    "import sys, tracelens.model.loader.split as S, tracelens.model.loader.load as L; "
    "S.SPLIT_MIN_JSON_BYTES = 0; S.EARLY_SHARE = S.Share(1, 2, 3); take = L._adopt_early; "
    "L._adopt_early = lambda p: (lambda c: (print('adopted', c is not None, file=sys.stderr), c)[1])(take(p)); "
    "import gc, tracelens.cli as cli; leave = cli._hard_exit; "
    "cli._hard_exit = lambda code: (print('frozen', gc.get_freeze_count() > 0 and gc.isenabled(), file=sys.stderr), "
    "leave(code)); "
    "sys.argv = ['tracelens', *sys.argv[1:]]; cli.main()"
)


@pytest.mark.slow
def test_a_report_whose_load_starts_before_the_imports_is_the_same(tmp_path: Path) -> None:
    # The early child (forked before typer parses) reads 2 of every 3 batches; the JSON
    # report must be the one the one-process load gives.
    trace = sample("train_step")
    early = subprocess.run(
        [PY, "-c", _EARLY, "report", str(trace), "--json", str(tmp_path / "a.json"), "-q"],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "TRACELENS_LOAD_PROCESSES": ""},
    )  # fmt: skip
    # The early child was taken by the load, and the model frozen out of the GC's scans.
    assert early.returncode == 0 and early.stderr == "adopted True\nfrozen True\n", early.stderr
    one = subprocess.run(
        argv("report", trace, "--json", tmp_path / "b.json", "-q"),
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "TRACELENS_LOAD_PROCESSES": "1"},
    )  # fmt: skip
    assert one.returncode == 0, one.stderr
    skip = {"load_seconds", "analysis_seconds", "generated_at"}
    a, b = (json.loads((tmp_path / f).read_text()) for f in ("a.json", "b.json"))
    assert {k: v for k, v in a.items() if k not in skip} == {k: v for k, v in b.items() if k not in skip}
    bad = subprocess.run(
        [PY, "-c", _EARLY, "report", str(trace), "--window", "5:1", "-q"], capture_output=True, text=True, timeout=300
    )
    assert bad.returncode == 2 and "expected 0 <= START < END" in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["{t}"],
        ["{t}", "--json", "o.json", "-q"],
        ["--md=x.md", "{t}", "--html", "-", "--redact", "--quiet"],
        ["{t}", "--json", "a.json", "--json", "b.json", "--out-dir", "r", "--perfetto", "p.json.gz"],
        [
            "{t}",
            "--markdown",
            "",
            "--",
        ],
    ],
)
def test_the_fast_report_line_passes_what_typer_passes(args: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import tracelens.cli as cli
    from tracelens.cli import report as report_cmd

    trace = str(sample("host_sync_mask"))
    line = ["report", *(a.format(t=trace) for a in args)]
    calls: list[tuple[Any, ...]] = []
    monkeypatch.setattr(report_cmd, "_report_one", lambda *a, **k: (calls.append((a, k)), ())[1])
    fast = cli._fast_report(line)
    assert fast is not None
    report_cmd.report(**fast)
    monkeypatch.setattr(cli, "_fast_report", lambda args: None)
    with pytest.raises(SystemExit) as done:
        cli.main(line)
    assert done.value.code == 0
    assert len(calls) == 2 and calls[0] == calls[1]


@pytest.mark.parametrize(
    "line",
    [
        ["report", "{t}", "--window", "1:2"],
        ["report", "{t}", "--per-rank"],
        ["report", "no-such-file.json"],
        ["report", "{t}", "{t}"],
        ["report", "{t}", "--help"],
        ["capture", "x.py"],
    ],
)
def test_other_lines_go_to_typer(line: list[str]) -> None:
    from tracelens.cli import _fast_report

    assert _fast_report([a.format(t=sample("host_sync_mask")) for a in line]) is None


# Issue 27: the common slips get a hint (one line, exit 2, no traceback), and a folder of
# independent traces gets every readable one reported, one line each, the rest listed.


def test_usage_lines_name_their_arguments() -> None:
    for command, want in (("report", "[OPTIONS] TRACE..."), ("diff", "[OPTIONS] BEFORE AFTER"),
                          ("capture", "[OPTIONS] [SCRIPT]")):  # fmt: skip
        out = cli(command, "--help")
        assert out.returncode == 0 and want in out.stdout.splitlines()[0], out.stdout[:200]
        assert "{" not in out.stdout.splitlines()[0]


def test_json_named_where_only_the_gz_exists(tmp_path: Path) -> None:
    gz = tmp_path / "run.pt.trace.json.gz"
    gz.write_bytes(sample("light_idle").read_bytes())
    out = cli("report", tmp_path / "run.pt.trace.json", "--out-dir", tmp_path)
    assert out.returncode == 2 and one_error_line_problem(out.stderr) is None
    assert f"did you mean {gz}?" in out.stderr and "Traceback" not in out.stderr
    out = cli("diff", tmp_path / "run.pt.trace.json", gz, "--out-dir", tmp_path)
    assert out.returncode == 2 and "did you mean" in out.stderr


@pytest.mark.parametrize("name", ["profile.nsys-rep", "profile.sqlite", "old.qdrep"])
def test_nsight_files_say_what_to_do(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_bytes(b"SQLite format 3\x00" + bytes(100))
    out = cli("report", path, "--out-dir", tmp_path)
    assert out.returncode == 2 and one_error_line_problem(out.stderr) is None
    assert "Nsight Systems" in out.stderr and "torch.profiler" in out.stderr and "tracelens capture" in out.stderr


def test_a_trace_without_the_command(tmp_path: Path) -> None:
    trace = sample("light_idle")
    out = cli(trace, "-q")
    assert out.returncode == 2 and one_error_line_problem(out.stderr) is None
    assert f"tracelens report {trace} -q" in out.stderr
    script = tmp_path / "train.py"
    script.write_text("print(1)\n")
    out = cli(script)
    assert out.returncode == 2 and f"tracelens capture {script}" in out.stderr


def test_folder_of_independent_traces(tmp_path: Path) -> None:
    folder = tmp_path / "mixed"
    folder.mkdir()
    for name in ("light_idle", "host_sync_static"):
        (folder / f"{name}.pt.trace.json.gz").write_bytes(sample(name).read_bytes())
    (folder / "measured.json").write_text('{"sizes": [1, 2]}')  # a JSON that is no trace
    (folder / "broken.json").write_text('{"traceEvents": [')
    (folder / "ranks").mkdir()  # a job's folder beside the samples: said, not read
    (folder / "ranks" / "rank0.json").write_text("{}")
    out = cli("report", folder, "--out-dir", tmp_path / "r", env={"COLUMNS": "80"})
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines[:-1]), lines  # all but the last, which names a path
    # One line per reported trace, then the skipped ones with their reason, then the count.
    assert sum(line.startswith("  light_idle ") for line in lines) == 1
    assert sum(line.startswith("  host_sync_static ") for line in lines) == 1
    assert any(line.startswith("  skipped measured.json: ") and "traceEvents" in line for line in lines)
    assert any(line.startswith("  skipped broken.json: ") and "truncated" in line for line in lines)
    assert lines[-1].startswith("2 of 4 reported, 2 skipped: ")
    assert lines[-2].startswith("  not read: ranks/ (folders of traces")
    assert len(lines) == 7
    for name in ("light_idle", "host_sync_static"):
        for ext in ("html", "md", "json"):
            assert (tmp_path / "r" / f"{name}.pt.trace.{ext}").is_file()
    # -q: nothing on stdout, the skipped ones on stderr (the same folder, its two traces
    # swapped for the smallest sample: reporting them again showed nothing new, 1.2 s).
    for name in ("light_idle", "host_sync_static"):
        (folder / f"{name}.pt.trace.json.gz").unlink()
    (folder / "small.pt.trace.json.gz").write_bytes(sample("diff_align_u_before").read_bytes())
    out = cli("report", folder, "-q", "--out-dir", tmp_path / "q")
    assert out.returncode == 0 and out.stdout == ""
    assert sorted(line.split(":")[1].strip() for line in out.stderr.splitlines()) == [
        "skipped broken.json", "skipped measured.json"]  # fmt: skip


def test_folder_with_nothing_readable(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text("{}")
    (tmp_path / "b.json").write_text("[1]")
    out = cli("report", tmp_path, "--out-dir", tmp_path / "r")
    assert out.returncode == 2 and "none of the 2 traces could be read" in out.stderr
