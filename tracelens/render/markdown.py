"""Markdown: a compact summary to paste into a GitHub issue, details folded away.

Trace text is untrusted: `md` escapes Markdown and HTML metacharacters so a kernel name
cannot inject links, images, HTML or break a table; it breaks GitHub's mentions and
issue references so a pasted report pings nobody and links nothing; it drops control
characters and caps each piece, and the whole summary fits one GitHub comment.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence

from tracelens.render.causes import CAUSE_LABELS
from tracelens.render.format import analysed_us, plain
from tracelens.render.html import environment
from tracelens.report import Report

#: GitHub rejects a comment or issue body longer than this many characters.
GITHUB_COMMENT_LIMIT = 65_536
#: What the summary may take of it: the rest is room for the user's own words.
MAX_MARKDOWN_CHARS = 60_000
#: One piece of text (a title, an advice, a source label) before escaping; escaping can
#: make it a few times longer. Our own prose stays under this; a 30,000-character
#: function name is cut in the middle.
MAX_MD_TEXT = 1_000
#: A zero-width space as an HTML entity (ASCII, visible in the source as what it is):
#: placed after `@`, `#` or `GH` it stops GitHub's mention and reference autolinks,
#: and renders as nothing.
_ZWSP = "&#8203;"
#: `@user`, `@org/team` (and the `@` of an e-mail address).
_MENTION = re.compile(r"@(?=[A-Za-z0-9_-])")
#: `#123`, `owner/repo#123` (kernel names carry `#1` from `{lambda(int)#1}`).
_ISSUE_REF = re.compile(r"#(?=\d)")
#: `GH-123`.
_GH_REF = re.compile(r"\b(GH)(?=-\d)", re.IGNORECASE)

#: Characters that can start formatting, links, images or HTML, or break a table cell,
#: anywhere in a line. (Line-start-only syntax such as `#`, `-`, `1.` cannot occur: the
#: text is always placed after other text or in a table cell.)
_MD_SPECIAL = re.compile(r"([\\`*_\[\]|~])")


def md(text: object, limit: int = MAX_MD_TEXT) -> str:
    """Escape untrusted text for GitHub-flavoured Markdown (tables included)."""
    s = str(text).replace("\r", " ").replace("\n", " ")
    s = plain(s, limit=limit)
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    s = _MD_SPECIAL.sub(r"\\\1", s)
    # Break GitHub's bare-URL autolinks (http://..., www.) in untrusted text.
    s = s.replace("://", ":\\/\\/").replace("www.", "www\\.")
    # Break issue references, then mentions (after escaping, so the entity stays one;
    # references first, as the entity itself holds a `#` and digits).
    s = _ISSUE_REF.sub("#" + _ZWSP, s)
    s = _MENTION.sub("@" + _ZWSP, s)
    return _GH_REF.sub(r"\1" + _ZWSP, s)


def md_lines(text: object) -> str:
    """Escaped text whose line breaks survive in a table cell, list item or quote."""
    return "<br>".join(md(line) for line in str(text).split("\n"))


_TRUNCATED = "\n\n_Cut here to fit one GitHub comment: the HTML and JSON reports have everything._\n"


def fit_comment(text: str, limit: int = MAX_MARKDOWN_CHARS) -> str:
    """Cut the summary at a line boundary so it fits in `limit` characters, closing the
    details block if the cut falls inside it. The top (verdict, questions, findings
    table) comes first in the template, so it is what survives."""
    if len(text) <= limit:
        return text
    footer = text[text.rfind("\n<sub>") :] if "\n<sub>" in text else ""
    room = limit - len(_TRUNCATED) - len(footer) - len("\n</details>\n")
    cut = text.rfind("\n", 0, max(room, 0))
    head = text[: max(cut, 0)]
    closing = "\n</details>\n" if head.count("<details>") > head.count("</details>") else ""
    return head + _TRUNCATED + closing + footer


def _fits_one_comment(
    render: Callable[[Report, Sequence[str]], str],
) -> Callable[..., str]:
    """Whatever the template makes of a report, what comes out fits one GitHub comment."""

    @functools.wraps(render)
    def fitted(report: Report, charts: Sequence[str] = ()) -> str:
        return fit_comment(render(report, charts))

    return fitted


@_fits_one_comment
def render_markdown(report: Report, charts: Sequence[str] = ()) -> str:
    """The summary; `charts` names the SVG pictures written beside it (render/charts.py),
    which it tells the reader to drag into the comment."""
    env = environment(autoescape=False)
    env.filters["md"] = md
    env.filters["md_lines"] = md_lines
    from tracelens.render.html import device_label, primary_index

    return env.get_template("report.md.j2").render(
        r=report,
        labels=CAUSE_LABELS,
        device=device_label(report),
        primary_index=primary_index(report),
        analysed_us=analysed_us(report),
        charts=[md(c) for c in charts],
    )
