"""Chromium's own layout of an HTML report: which elements stick out of a narrow viewport.

The report is copied with a small script appended that opens every <details> (what a
reader can expand must fit too), then lists each element whose box reaches past the
viewport's edges; headless Chromium's --dump-dom prints the page after the script ran.
Used by tests/test_render_layout.py and by hand (python tests/layout.py REPORT.html)."""

from __future__ import annotations

import html as html_lib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

#: The phone width the issue names (an iPhone 12-15 in portrait).
PHONE_PX = 390
#: A box may reach this far past an edge (sub-pixel rounding of borders).
SLACK_PX = 1.0
#: Most offending elements listed in a failure message.
MAX_LISTED = 12
#: Seconds one Chromium run may take (47 reports laid out in one run: about 20 s here).
TIMEOUT_S = 300
#: Pages laid out by one Chromium run: with 16 its DOM was dumped before every frame had
#: reported, and once with 8 at 1400 px; a failed run is retried a page at a time.
PAGES_PER_RUN = 6
#: Virtual time each page gets to load and run its script.
VIRTUAL_MS_PER_PAGE = 2000

_PROBE = """
<script>
window.addEventListener("load", function () {
  document.querySelectorAll("details").forEach(function (d) { d.open = true; });
  var vw = document.documentElement.clientWidth, bad = [];
  document.querySelectorAll("body *").forEach(function (el) {
    if (el.id === "layout-result") return;
    var r = el.getBoundingClientRect();
    if (r.width === 0 && r.height === 0) return;
    if (r.right > vw + %(slack)s || r.left < -%(slack)s) {
      var cls = el.className && el.className.baseVal === undefined ? "." + el.className : "";
      var text = (el.textContent || "").trim().slice(0, 60);
      bad.push(el.tagName.toLowerCase() + cls + " " + Math.round(r.left) + ".." + Math.round(r.right) + ": " + text);
    }
  });
  var sw = document.documentElement.scrollWidth, sh = document.documentElement.scrollHeight;
  parent.postMessage(JSON.stringify({name: window.name, viewport: vw, scroll_width: sw, height: sh,
    count: bad.length, bad: bad.slice(0, %(listed)s)}), "*");
});
</script>
"""
#: Headless Chromium lays a window out at least 500 px wide, whatever --window-size says,
#: so the report is laid out in an iframe of the width asked for; it posts its result to
#: this page, which writes it where --dump-dom shows it.
_FRAME = """<!doctype html><html><body style="margin:0">
%(frames)s
<script>
var results = {}, expected = %(count)s;
window.addEventListener("message", function (e) {
  var r = JSON.parse(e.data);
  results[r.name] = r;
  if (Object.keys(results).length === expected) {
    var out = document.createElement("pre");
    out.id = "layout-result";
    out.textContent = "LAYOUT" + JSON.stringify(results) + "END";
    document.body.appendChild(out);
  }
});
</script></body></html>
"""


def chromium() -> str | None:
    """A Chromium (or Chrome) binary, or None: $CHROMIUM first, then the usual names."""
    env = os.environ.get("CHROMIUM")
    if env and shutil.which(env):
        return shutil.which(env)
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless_shell"):
        found = shutil.which(name)
        if found:
            return found
    return None


def overflow_many(pages: dict[str, str], width: int = PHONE_PX, dark: bool = False) -> dict[str, dict[str, object]]:
    """Lay each page out at `width` CSS px and return name -> {viewport, scroll_width,
    count, bad}: PAGES_PER_RUN pages per Chromium run, one iframe each."""
    names = list(pages)
    out: dict[str, dict[str, object]] = {}
    for i in range(0, len(names), PAGES_PER_RUN):
        chunk = {n: pages[n] for n in names[i : i + PAGES_PER_RUN]}
        try:
            out.update(_overflow_run(chunk, width, dark))
        except RuntimeError:
            # A slow run dumps its DOM before every frame reported: one page a run then.
            for name, html in chunk.items():
                out.update(_overflow_run({name: html}, width, dark))
    return out


def _overflow_run(pages: dict[str, str], width: int, dark: bool) -> dict[str, dict[str, object]]:
    binary = chromium()
    if binary is None:
        raise RuntimeError("no Chromium binary found")
    probe = _PROBE % {"slack": SLACK_PX, "listed": MAX_LISTED}
    with tempfile.TemporaryDirectory() as tmp:
        frames = []
        for i, (name, html) in enumerate(pages.items()):
            page = html.replace("</body>", probe + "</body>") if "</body>" in html else html + probe
            (Path(tmp) / f"page{i}.html").write_text(page, encoding="utf-8")
            frames.append(
                f'<iframe name="{html_lib.escape(name)}" src="page{i}.html" width="{width}" height="900" '
                'style="border:0;display:block"></iframe>'
            )
        path = Path(tmp) / "frame.html"
        path.write_text(_FRAME % {"frames": "\n".join(frames), "count": len(pages)}, encoding="utf-8")
        cmd = [
            binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--mute-audio",
            "--no-first-run", f"--user-data-dir={tmp}/profile", f"--window-size={max(width, 500) + 20},1000",
            f"--virtual-time-budget={VIRTUAL_MS_PER_PAGE * max(len(pages), 1)}", "--dump-dom",
            f"--blink-settings=preferredColorScheme={0 if dark else 1}",
            path.as_uri(),
        ]  # fmt: skip
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, check=False).stdout
    marker = 'id="layout-result">LAYOUT'
    start = out.find(marker)
    end = out.find("END</pre>", start)
    if start < 0 or end < 0:
        raise RuntimeError(f"Chromium printed no layout result ({len(out)} characters of DOM)")
    result: dict[str, dict[str, object]] = json.loads(html_lib.unescape(out[start + len(marker) : end]))
    return result


def overflow(html: str, width: int = PHONE_PX, dark: bool = False) -> dict[str, object]:
    """One page: {viewport, scroll_width, count, bad}."""
    return overflow_many({"page": html}, width, dark)["page"]


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        print(arg, overflow(Path(arg).read_text(encoding="utf-8")))
