"""The words of the matmul table: what is misaligned in a shape."""

from __future__ import annotations

from tracelens.report.trace_report import MatmulRow, MisalignedDim


def misaligned_text(d: MisalignedDim) -> str:
    if d.operand == "C":
        return f"the output's N {d.value}"
    return f"{d.operand}'s leading dimension {d.value} ({d.dim})"


def worded(row: MatmulRow) -> MatmulRow:
    """The row with its misaligned dimensions in words."""
    from dataclasses import replace

    return replace(row, misaligned=tuple(misaligned_text(d) for d in row.misaligned_dims))
