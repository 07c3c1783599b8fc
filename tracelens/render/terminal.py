"""Terminal: a short colour summary (colour is dropped when output is not a terminal).

Every piece of text that can come from the trace or the command line goes through
`plain`: no control characters (OSC/CSI sequences, CR, backspace) reach the terminal,
and no piece is longer than a few lines."""

from __future__ import annotations

import typer

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


def render_terminal(report: Report, outputs: list[str] | None = None) -> str:
    t = report.trace
    gt = report.gpu_time.total
    lines: list[str] = []
    steps = f"{len(t.steps)} steps" if t.steps else "no ProfilerStep markers"
    lines.append(
        typer.style("tracelens", bold=True)
        + f"  {plain(t.file_name)}  ({plain(t.gpu_name)}, {steps}, {us(gt.window_us)} profiled)"
    )
    if gt.window_us > 0:
        lines.append(
            f"GPU busy {pct(gt.busy_us / gt.window_us)}, idle {pct(gt.idle_us / gt.window_us)}: "
            f"host sync {pct(gt.host_sync_us / gt.window_us)} · launch {pct(gt.launch_us / gt.window_us)} · "
            f"host-bound {pct(gt.host_bound_us / gt.window_us)} · profiler {pct(gt.profiler_us / gt.window_us)} · "
            f"other {pct(gt.other_us / gt.window_us)}"
        )
    lines.append("")
    s = report.summary
    if s.primary:
        lines.append(
            typer.style("Primary bottleneck: ", bold=True) + typer.style(plain(s.primary), fg="red", bold=True)
        )
        lines.append(f"  {plain(s.headline, MAX_PROSE)}")
        lines.append(
            f"  Costs {us(s.primary_time_us)} ({pct(s.primary_share)}); expected gain up to {us(s.primary_gain_us)}."
        )
        advice = "\n       ".join(plain(line, MAX_PROSE) for line in s.primary_advice.split("\n"))
        lines.append("  Fix: " + advice)
    else:
        lines.append(typer.style("No primary bottleneck: ", bold=True) + plain(s.headline, MAX_PROSE))
    for note in s.notes:
        lines.append(typer.style("  Note: ", fg="cyan") + plain(note, MAX_PROSE))
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
            lines.append(f"  {sev} {f.category.value}: {plain(f.title)}")
        if len(report.findings) > MAX_FINDINGS:
            lines.append(f"  … {len(report.findings) - MAX_FINDINGS} more in the full report")
    if outputs:
        lines.append("")
        lines.append("Reports: " + ", ".join(plain(o) for o in outputs))
    return "\n".join(lines) + "\n"
