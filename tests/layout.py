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
#: Seconds one page may take (the largest report loads in about 2 s here).
TIMEOUT_S = 120

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
  parent.postMessage(JSON.stringify({viewport: vw, scroll_width: document.documentElement.scrollWidth,
    count: bad.length, bad: bad.slice(0, %(listed)s)}), "*");
});
</script>
"""
#: Headless Chromium lays a window out at least 500 px wide, whatever --window-size says,
#: so the report is laid out in an iframe of the width asked for; it posts its result to
#: this page, which writes it where --dump-dom shows it.
_FRAME = """<!doctype html><html><body style="margin:0">
<iframe src="page.html" width="%(width)s" height="900" style="border:0"></iframe>
<script>
window.addEventListener("message", function (e) {
  var out = document.createElement("pre");
  out.id = "layout-result";
  out.textContent = "LAYOUT" + e.data + "END";
  document.body.appendChild(out);
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


def overflow(html: str, width: int = PHONE_PX, dark: bool = False) -> dict[str, object]:
    """Lay `html` out at `width` CSS px and return {viewport, scroll_width, count, bad}."""
    binary = chromium()
    if binary is None:
        raise RuntimeError("no Chromium binary found")
    probe = _PROBE % {"slack": SLACK_PX, "listed": MAX_LISTED}
    page = html.replace("</body>", probe + "</body>") if "</body>" in html else html + probe
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "page.html").write_text(page, encoding="utf-8")
        path = Path(tmp) / "frame.html"
        path.write_text(_FRAME % {"width": width}, encoding="utf-8")
        cmd = [
            binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--mute-audio",
            "--no-first-run", f"--user-data-dir={tmp}/profile", f"--window-size={max(width, 500) + 20},1000",
            "--virtual-time-budget=5000", "--dump-dom",
            f"--blink-settings=preferredColorScheme={0 if dark else 1}",
            path.as_uri(),
        ]  # fmt: skip
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, check=False).stdout
    marker = 'id="layout-result">LAYOUT'
    start = out.find(marker)
    end = out.find("END</pre>", start)
    if start < 0 or end < 0:
        raise RuntimeError(f"Chromium printed no layout result ({len(out)} characters of DOM)")
    text = out[start + len(marker) : end]
    return json.loads(html_lib.unescape(text))


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        print(arg, overflow(Path(arg).read_text(encoding="utf-8")))
