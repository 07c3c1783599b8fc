"""JSON: the Report as-is, for machines. Field names are the documented contract."""

from __future__ import annotations

import msgspec

from tracelens.report import Report


def _enc_hook(obj: object) -> object:
    """numpy scalars that slipped into the report encode as plain numbers."""
    item = getattr(obj, "item", None)
    if callable(item):
        return item()
    raise NotImplementedError(f"cannot encode {type(obj).__name__}")


_encoder = msgspec.json.Encoder(enc_hook=_enc_hook)


def to_builtins(report: object) -> object:
    """The report (or any part of the contract) as plain dicts/lists (enums as their values, NaN as null)."""
    return msgspec.json.decode(_encoder.encode(report))


def render_json(report: Report) -> str:
    """Strict JSON whatever the report holds: msgspec writes NaN and ±inf as null, never
    as the non-standard NaN/Infinity tokens (the last guard; analyzers should not make
    them in the first place, and tests/fuzz.py reports every null where a number belongs)."""
    return msgspec.json.format(_encoder.encode(report), indent=2).decode() + "\n"
