"""Markdown: a compact summary to paste into a GitHub issue, details folded away.

Trace text is untrusted: `md` escapes Markdown and HTML metacharacters so a kernel name
cannot inject links, images, HTML or break a table.
"""

from __future__ import annotations

import re

from tracelens.render.causes import CAUSE_LABELS
from tracelens.render.html import environment
from tracelens.report import Report

#: Characters that can start formatting, links, images or HTML, or break a table cell,
#: anywhere in a line. (Line-start-only syntax such as `#`, `-`, `1.` cannot occur: the
#: text is always placed after other text or in a table cell.)
_MD_SPECIAL = re.compile(r"([\\`*_\[\]|~])")


def md(text: object) -> str:
    """Escape untrusted text for GitHub-flavoured Markdown (tables included)."""
    s = str(text)
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    s = s.replace("\r", " ").replace("\n", " ")
    s = _MD_SPECIAL.sub(r"\\\1", s)
    # Break GitHub's bare-URL autolinks (http://..., www.) in untrusted text.
    return s.replace("://", ":\\/\\/").replace("www.", "www\\.")


def md_lines(text: object) -> str:
    """Escaped text whose line breaks survive in a table cell, list item or quote."""
    return "<br>".join(md(line) for line in str(text).split("\n"))


def render_markdown(report: Report) -> str:
    env = environment(autoescape=False)
    env.filters["md"] = md
    env.filters["md_lines"] = md_lines
    return env.get_template("report.md.j2").render(r=report, labels=CAUSE_LABELS)
