"""Renderers: each takes a finished Report and returns text. None of them reads a trace
or a file (as in memray's reporters); writing is done by tracelens.output."""

from tracelens.render.html import render_html
from tracelens.render.json import render_json
from tracelens.render.markdown import render_markdown
from tracelens.render.terminal import render_terminal

__all__ = ["render_html", "render_json", "render_markdown", "render_terminal"]
