"""Terminal: a short colour summary (colour is dropped when output is not a terminal).

Every piece of text that can come from the trace or the command line is made `plain`
before it is laid out: no control characters (OSC/CSI sequences, CR, backspace) reach
the terminal, and no piece is longer than a few lines."""

from __future__ import annotations

import dataclasses

import typer

from tracelens.render.causes import CAUSE_SHORT
from tracelens.render.format import pct, plain, us
from tracelens.report import Report

_STATUS_STYLE = {
    "yes": ("YES", "red"),
    "minor": ("minor", "yellow"),
    "no": ("no", "green"),
    "not_measurable": ("n/m", "bright_black"),
    "not_built": ("not built", "bright_black"),
}
_SEVERITY_COLOUR = {"high": "red", "medium": "yellow", "low": "cyan", "info": "bright_black"}
_QUESTION_SHORT = {
    "host_waits": "Host waits on device / device on host?",
    "launch": "Kernel-launch overhead?",
    "memory": "Memory-bandwidth bound?",
    "shape_dynamism": "Shape dynamism?",
    "allocation": "Allocation?",
    "compute": "Raw compute, matmul shapes, clocks?",
}
MAX_FINDINGS = 5
#: Our own sentences (headline, advice, notes) may quote trace text; cap them too.
MAX_PROSE = 1_000


def _plain_text(report: Report) -> Report:
    """The report with every text field the summary prints made plain (names, paths,
    sentences quoting them); numbers and our own labels are left as they are."""
    t, s = report.trace, report.summary
    return dataclasses.replace(
        report,
        trace=dataclasses.replace(t, file_name=plain(t.file_name), gpu_name=plain(t.gpu_name)),
        summary=dataclasses.replace(
            s,
            primary=None if s.primary is None else plain(s.primary),
            headline=plain(s.headline, MAX_PROSE),
            primary_advice="\n".join(plain(line, MAX_PROSE) for line in s.primary_advice.split("\n")),
            notes=tuple(plain(n, MAX_PROSE) for n in s.notes),
        ),
        findings=tuple(dataclasses.replace(f, title=plain(f.title)) for f in report.findings),
    )


def render_terminal(report: Report, outputs: list[str] | None = None) -> str:
    report, outputs = _plain_text(report), [plain(o) for o in outputs or ()]
    t = report.trace
    gt = report.gpu_time.total
    lines: list[str] = []
    w = report.window
    steps = f"{w.steps} {'detected iterations' if w.source == 'detected' else 'steps'}" if w.steps else "no steps found"
    lines.append(
        typer.style("tracelens", bold=True) + f"  {t.file_name}  ({t.gpu_name}, {steps}, {us(gt.window_us)} analysed)"
    )
    if gt.window_us > 0:
        parts = [f"{CAUSE_SHORT[e.cause]} {pct(e.share)}" for e in gt.ledger if e.share >= 0.005]
        lines.append(
            f"GPU busy {pct(gt.busy_us / gt.window_us)}, idle {pct(gt.idle_us / gt.window_us)}: " + " · ".join(parts)
        )
    lines.append("")
    s = report.summary
    if s.primary:
        lines.append(typer.style("Primary bottleneck: ", bold=True) + typer.style(s.primary, fg="red", bold=True))
        lines.append(f"  {s.headline}")
        lines.append(
            f"  Costs {us(s.primary_time_us)} ({pct(s.primary_share)}); expected gain up to {us(s.primary_gain_us)}"
            + (f" ({us(s.primary_gain_per_step_us)} per step)." if s.per_step_us else ".")
        )
        lines.append("  Fix: " + s.primary_advice.replace("\n", "\n       "))
    else:
        lines.append(typer.style("No primary bottleneck: ", bold=True) + s.headline)
    for note in s.notes:
        lines.append(typer.style("  Note: ", fg="cyan") + note)
    lines.append("")
    lines.append(typer.style("In diagnostic order:", bold=True))
    for q in report.questions:
        label, colour = _STATUS_STYLE.get(q.status, (q.status, "white"))
        cost = f"  {us(q.time_us)} ({pct(q.share)})" if q.status in ("yes", "minor") else ""
        lines.append(
            f"  {q.number}. {_QUESTION_SHORT.get(q.id, q.question):40s} {typer.style(f'{label:9s}', fg=colour)}{cost}"
        )
    if report.findings:
        lines.append("")
        lines.append(typer.style("Findings:", bold=True))
        for f in report.findings[:MAX_FINDINGS]:
            sev = typer.style(f"[{f.severity.value}]", fg=_SEVERITY_COLOUR.get(f.severity.value, "white"))
            indent = "    ↳ " if f.parent else "  "
            lines.append(f"{indent}{sev} {f.category.value}: {f.title}")
        if len(report.findings) > MAX_FINDINGS:
            lines.append(f"  … {len(report.findings) - MAX_FINDINGS} more in the full report")
    if outputs:
        lines.append("")
        lines.append("Reports: " + ", ".join(outputs))
    return "\n".join(lines) + "\n"
