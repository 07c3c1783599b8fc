"""The shape of a finding's words, and the finding made from facts and words."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tracelens.analyzers.base import Found, Place
from tracelens.domain import severity_for
from tracelens.report.findings import Finding, Metric, PySource, Site


@dataclass(frozen=True)
class Words:
    """What a category's writer says about one finding."""

    title: str
    advice: str
    gain_note: str
    labels: Mapping[str, str]  # evidence id -> its label
    places: Sequence[str] = ()  # each place's description, in the finding's order
    place_advice: Sequence[str] = ()  # each place's own advice where it differs ("" for none)
    texts: Mapping[str, str] = field(default_factory=dict)  # evidence id -> its value, for text evidence


def where(source: PySource) -> str:
    """For titles: "at file:line" for a call line, "in func() (file:line)" for a def line."""
    if source.line_is_def:
        # torch.profiler records the function's def line, not the call's: say so
        return f"in {source.function}() (def at {source.label})"
    return f"at {source.label}"


def top_place(found: Found[Any, Any]) -> Place[Any] | None:
    """The finding's costliest place (its first), where its concrete fix starts."""
    return found.places[0] if found.places else None


def led_by(first: str, advice: str) -> str:
    """The advice with its concrete start first (issue 27: the site, chain or kernel before
    the general words); the advice alone where there is no start."""
    return f"{first} {advice}" if first else advice


def finding(found: Found[Any, Any], words: Words, share: float) -> Finding:
    """The report's finding: the facts with their words (`share`: of the window)."""
    advice = list(words.place_advice) + [""] * (len(found.places) - len(words.place_advice))
    return Finding(
        category=found.category,
        severity=severity_for(share),
        title=words.title,
        time_us=found.time_us,
        share=share,
        advice=words.advice,
        expected_gain_us=found.expected_gain_us,
        gain_note=words.gain_note,
        evidence=tuple(
            Metric(words.labels[e.id], words.texts.get(e.id, e.value), e.unit, e.id, e.total) for e in found.evidence
        ),
        sites=tuple(
            Site(
                description=text,
                count=p.count,
                time_us=p.time_us,
                host_us=p.host_us,
                ops=p.ops,
                api=p.api,
                source=p.source,
                stack=p.stack,
                kernels=p.kernels,
                steps=p.steps,
                kind=p.kind,
                advice=tip,
                call=p.call,
            )
            for p, text, tip in zip(found.places, words.places, advice, strict=True)
        ),
        sources=found.sources,
        device=found.device,
        tags=found.tags,
    )
