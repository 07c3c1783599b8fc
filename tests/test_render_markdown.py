"""Issue 18: the Markdown summary read as GitHub-flavoured Markdown (markdown-it-py's
gfm-like preset, from the dev extra): its tables are tables with every row complete, and
trace text stays text (no mentions, issue references, emphasis or links made of it)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest
from support.corpus import REAL_TRACES, SAMPLE_TRACES, diff_of, report_of, sample

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


# Issue 27: the structure GitHub makes of the Markdown, read from markdown-it's tokens (not
# the text): every finding's cost, fix and evidence are items of one list, never a line
# glued to a paragraph ("...enable_timing=True)).- sync calls: 161"); tables are tables;
# details balance; no paragraph ends in a dangling "- ".


def tokens(text: str) -> list[Any]:
    return list(markdown_it.MarkdownIt("gfm-like", {"linkify": False}).parse(text))


def structure_problems(text: str) -> list[str]:
    """What does not render as the template means it, as lines a failure can print."""
    toks = tokens(text)
    out = []
    for i, t in enumerate(toks):
        if t.type != "inline" or i == 0 or toks[i - 1].type != "paragraph_open":
            continue
        for line in t.content.split("\n"):
            if re.match(r"\s*[-*+] \S", line) and not (t.map and text.splitlines()[t.map[0]].startswith(">")):
                out.append(f"a list line inside a paragraph: {line[:100]!r}")
        if re.search(r"[^\s\\]- \S", t.content) and re.search(r"[.):]- [a-z]", t.content):
            out.append(f"a bullet glued to the text before it: {t.content[:120]!r}")
        if t.content.rstrip().endswith(("-", "- ")) and not t.content.rstrip().endswith("--"):
            out.append(f"a paragraph ending in '-': {t.content[-80:]!r}")
    if text.count("<details>") != text.count("</details>"):
        out.append(f"details: {text.count('<details>')} opened, {text.count('</details>')} closed")
    # Every delimiter row in the source starts a table that renders as one.
    delimiters = sum(1 for line in text.splitlines() if re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", line.strip()))
    rendered = sum(1 for t in toks if t.type == "table_open")
    if delimiters != rendered:
        out.append(f"{delimiters} table delimiter rows but {rendered} tables rendered")
    for rows in tables(gfm(text)):
        if len(set(rows)) != 1:
            out.append(f"a table with rows of {sorted(set(rows))} cells")
    return out


def finding_lists(text: str) -> list[tuple[str, int]]:
    """Each finding section (`#### N. [...]`): its heading and the items of its first list."""
    toks = tokens(text)
    out = []
    for i, t in enumerate(toks):
        if t.type == "heading_open" and t.tag == "h4" and re.match(r"\d+\. \[", toks[i + 1].content):
            j = i + 3
            while j < len(toks) and toks[j].type not in ("bullet_list_open", "heading_open"):
                j += 1
            items = 0
            if j < len(toks) and toks[j].type == "bullet_list_open":
                depth = 0
                for t2 in toks[j:]:
                    depth += t2.nesting if t2.type.startswith("bullet_list") else 0
                    if t2.type == "list_item_open" and depth == 1:
                        items += 1
                    if depth == 0:
                        break
            out.append((toks[i + 1].content, items))
    return out


def _check_report_structure(path: Path) -> None:
    rep = report_of(path)
    text = render_markdown(rep)
    assert not structure_problems(text), structure_problems(text)
    sections = finding_lists(text)
    assert len(sections) == len(rep.findings)
    for (heading, items), f in zip(sections, rep.findings, strict=True):
        # Cost and gain, what to change, then one item per evidence metric.
        assert items == 2 + len(f.evidence), (heading, items, len(f.evidence))


@pytest.mark.parametrize("name", ["host_sync_mask", "power_gemm", "dyn_recompile"])
def test_markdown_structure(name: str) -> None:
    _check_report_structure(sample(name))


@pytest.mark.slow
@pytest.mark.parametrize("path", [*SAMPLE_TRACES, *REAL_TRACES], ids=lambda p: p.name.split(".")[0])
def test_every_sample_markdown_renders_as_meant(path: Path) -> None:
    _check_report_structure(path)


def test_job_and_diff_markdown_structure() -> None:
    from support.corpus import SAMPLES, job_of

    from tracelens.render.diff import render_diff_markdown
    from tracelens.render.job import render_job_markdown

    for folder in ("ranks_host_slow", "ranks_gpu_heavy"):
        text = render_job_markdown(job_of(SAMPLES / folder))
        assert not structure_problems(text), (folder, structure_problems(text))
        assert "…" not in text  # our sentences are never cut (and if they were, at a word)
    d = diff_of(sample("host_bound_pageable"), sample("host_bound_pinned"))
    text = render_diff_markdown(d)
    assert not structure_problems(text), structure_problems(text)


def test_prose_is_cut_at_words() -> None:
    from tracelens.render.format import prose
    from tracelens.render.job import md_prose

    advice = "give its DataLoader more workers (num_workers, pin_memory=True, prefetch_factor), " * 30
    for limit in (80, 300, 1500):
        cut = prose(advice, limit)
        assert len(cut) <= limit and cut.endswith("…")
        assert advice.startswith(cut[:-1]) and advice[len(cut) - 1] in " ,"  # ends where a word ends
    assert prose("short", 80) == "short"
    assert "num\\_wo…" not in md_prose(advice, 300) and md_prose(advice, 300).endswith("…")


def test_the_pictures_line_is_not_a_table_row() -> None:
    """The pictures' line follows the ledger table: without a blank line before it, GFM
    makes it one more row of that table (seen in the README's sample report)."""
    text = render_markdown(report_of(sample("host_sync_mask")), charts=("a.ledger.svg", "a.timeline.svg"))
    html = gfm(text)
    assert "<p><em>Pictures for this comment" in html
    assert all(len(set(rows)) == 1 for rows in tables(html))
