"""Issue 18: the Markdown summary read as GitHub-flavoured Markdown (markdown-it-py's
gfm-like preset, from the dev extra): its tables are tables with every row complete, and
trace text stays text (no mentions, issue references, emphasis or links made of it)."""

from __future__ import annotations

import dataclasses
import re

import pytest
from support.corpus import REAL_TRACES, SAMPLE_TRACES, report_of, sample

from tracelens.render import render_markdown

markdown_it = pytest.importorskip("markdown_it")


def gfm(text: str) -> str:
    # linkify needs linkify-it-py; GitHub's bare-URL autolinks are broken by md() anyway.
    return str(markdown_it.MarkdownIt("gfm-like", {"linkify": False}).render(text))


def tables(html: str) -> list[list[int]]:
    """Cells per row of each rendered table."""
    out = []
    for table in re.findall(r"<table>(.*?)</table>", html, re.S):
        out.append([len(re.findall(r"<t[hd][ >]", row)) for row in re.findall(r"<tr>(.*?)</tr>", table, re.S)])
    return out


@pytest.mark.slow
@pytest.mark.parametrize("path", [*SAMPLE_TRACES, *REAL_TRACES][::3], ids=lambda p: p.name.split(".")[0])
def test_tables_are_tables(path: object) -> None:
    text = render_markdown(report_of(path))  # type: ignore[arg-type]
    html = gfm(text)
    found = tables(html)
    assert len(found) >= 2  # the ledger and the questions at least
    for rows in found:
        assert len(set(rows)) == 1, rows  # no row split by a stray `|`
    assert "record_shapes" in html


def test_trace_text_stays_text() -> None:
    rep = report_of(sample("host_sync_mask"))
    hostile = "@octocat #12 GH-7 *bold* _em_ [link](http://x.io) <b>tag</b> a|b `code` ~~del~~"
    findings = tuple(dataclasses.replace(f, title=f"{f.title} {hostile}") for f in rep.findings)
    kernels = tuple(dataclasses.replace(k, name=f"{k.name} {hostile}") for k in rep.kernels)
    text = render_markdown(dataclasses.replace(rep, findings=findings, kernels=kernels))
    html = gfm(text)
    for rows in tables(html):
        assert len(set(rows)) == 1, rows
    assert "<strong>bold</strong>" not in html and "<em>em</em>" not in html and "<del>" not in html
    assert 'href="http://x.io"' not in html and "<b>tag</b>" not in html and "<code>code</code>" not in html
    # Mentions and references are broken by a zero-width space GitHub does not link.
    plain = html.replace("&amp;#8203;", "\u200b").replace("&#8203;", "\u200b")
    assert "@octocat" not in plain and "@\u200boctocat" in plain
    assert "#12" not in plain and "#\u200b12" in plain and "GH-7" not in plain
