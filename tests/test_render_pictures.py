"""Issue 27: the ledger bar and the headline chart as standalone SVG files beside the
Markdown, written by `report`, well-formed XML, trace text escaped, named by the Markdown."""

from __future__ import annotations

import dataclasses
import xml.dom.minidom
from pathlib import Path

from support.cli import cli
from support.corpus import report_of, sample

from tracelens.render.charts import chart_files, ledger_svg, render_charts, timeline_svg
from tracelens.render.markdown import render_markdown


def test_report_writes_the_pictures_beside_the_markdown(tmp_path: Path) -> None:
    res = cli("report", sample("power_gemm"), "--out-dir", tmp_path, "-q")
    assert res.returncode == 0, res.stderr
    md = (tmp_path / "power_gemm.pt.trace.md").read_text()
    for kind in ("ledger", "timeline"):
        svg = tmp_path / f"power_gemm.pt.trace.{kind}.svg"
        doc = xml.dom.minidom.parse(str(svg))  # well-formed
        assert doc.documentElement.tagName == "svg"
        text = svg.read_text()
        assert (
            "<script" not in text
            and "href" not in text
            and "http://" not in text.replace('xmlns="http://www.w3.org/2000/svg"', "")
        )
        assert svg.name.replace("_", "\\_") in md  # the Markdown names it (escaped as Markdown)
    assert "drag" in md and "into the issue comment" in md
    # The clock strip is in the headline chart, with the throttle shaded.
    assert "SM clock" in (tmp_path / "power_gemm.pt.trace.timeline.svg").read_text()
    # No temp files left behind (written atomically as the other outputs).
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_no_pictures_beside_markdown_on_stdout(tmp_path: Path) -> None:
    res = cli("report", sample("power_gemm"), "--markdown", "-", "-q", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "drag" not in res.stdout and not list(tmp_path.glob("*.svg"))


def test_trace_text_is_escaped() -> None:
    rep = report_of(sample("host_sync_mask"))
    evil = "<script>alert(1)</script>&\"'\x07.json.gz"
    rep = dataclasses.replace(rep, trace=dataclasses.replace(rep.trace, file_name=evil))
    for svg in (ledger_svg(rep), timeline_svg(rep)):
        assert svg is not None
        xml.dom.minidom.parseString(svg.encode())
        assert "<script>" not in svg and "&lt;script&gt;" in svg and "\x07" not in svg


def test_markdown_names_only_what_it_is_given() -> None:
    rep = report_of(sample("host_sync_mask"))
    assert "drag" not in render_markdown(rep)
    files = chart_files(Path("reports/x.md"))
    assert files["ledger"] == Path("reports/x.ledger.svg")
    names = [str(files[k]) for k in render_charts(rep)]
    assert "reports/x.ledger.svg" in render_markdown(rep, names)


def test_timeline_has_zoom_controls_and_no_external_references() -> None:
    import re

    from tracelens.render import render_html

    html = render_html(report_of(sample("power_gemm")))
    zoom = html[html.index('<div class="zoom"') :]
    for cls in ("z-from", "z-to", "z-go", "z-reset", "zsteps"):
        assert f'class="{cls}"' in zoom
    assert 'type="number"' in zoom and '<button type="button"' in zoom  # keyboard and touch
    for script in re.findall(r"<script[^>]*>(.*?)</script>", html, flags=re.S):
        assert not re.search(r"https?://|fetch\(|XMLHttpRequest|import\(|\bsrc=", script)


def test_roof_labels_keep_off_points() -> None:
    from tracelens.render.html import ROOF_LABEL_LINE_PCT, place_roof_labels

    # A point right under where the label would go (its roof at 20%): the label moves.
    dots = [(90.0, 16.0, 3.0)]
    ((top, _),) = place_roof_labels([(20.0, "bf16 989 TFLOP/s")], dots)
    assert not (top - 3.0 <= 16.0 <= top + ROOF_LABEL_LINE_PCT + 3.0)
    two = place_roof_labels([(20.0, "a"), (21.0, "b")], [])
    assert abs(two[0][0] - two[1][0]) >= 8.0
