"""Lecture figures (the PNG/SVG/PDF export): every line of text fits its half of the figure.

Drawn by plotly.js in the shared tab, at the figure's own 1280 x 720, with the fonts Chromium
(and so kaleido) has: what a PNG shows is what is measured here.
"""

from __future__ import annotations

import json

import pytest
from plotly.offline import get_plotlyjs

from paged.engine.trace import io as T
from paged.viz.fold.lesson import build
from paged.viz.fold.lesson_folder import load_spec, trace_path
from paged.viz.fold.narration import render_step
from paged.viz.render import figures
from paged.viz.render.style import words

MEASURE_JS = """([fig, word]) => Plotly.react('g', fig.data, fig.layout, {staticPlot: true})
  .then(() => {
    const lines = [...document.querySelectorAll('#g g.annotation')]
      .filter(a => a.textContent.includes(word) && a.textContent.includes('|'))
      .map(a => a.querySelector('text').getBoundingClientRect())
      .map(r => ({left: r.left, right: r.right}));
    return {lines, width: document.querySelector('#g svg.main-svg').getBoundingClientRect().width};
  })"""


def _metrics_lines(page, fig, lang: str) -> tuple[list[dict], float]:
    got = page.evaluate(MEASURE_JS, [json.loads(fig.to_json()), words(lang)["blocked_n"]])
    return sorted(got["lines"], key=lambda r: r["left"]), got["width"]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_each_sides_metrics_line_fits_its_half(page, lang):
    """fp8-twice's step 2 PNG lost the right side's blocked count off the figure's edge, and
    the left line ran into the gap between the halves: the line was as wide as its text."""
    page.set_content(
        f"<html><body style='margin:0'><script>{get_plotlyjs()}</script>"
        "<div id='g' style='width:1280px;height:720px'></div></body></html>"
    )
    for name in ("fp8-twice", "six-steps", "recompute-or-swap"):
        spec = load_spec(name)
        lesson = build(spec, T.read(trace_path(spec)))
        titles = (lesson.left.title[lang], lesson.right.title[lang])
        for k, kf in enumerate(lesson.keyframes):
            fig = figures.side_by_side_figure(
                lesson.left.at(kf),
                lesson.right.at(kf),
                render_step(lesson, k, lang),
                lang,
                titles,
            )
            (left, right), width = _metrics_lines(page, fig, lang)
            where = f"{name} step {k + 1} ({lang})"
            assert right["right"] <= width, f"{where}: the right line runs off the figure"
            assert left["right"] < right["left"], f"{where}: the left line runs into the right"
            # and it stays in its own half, the gap between the halves kept clear
            assert left["right"] <= width / 2, f"{where}: the left line crosses the middle"
