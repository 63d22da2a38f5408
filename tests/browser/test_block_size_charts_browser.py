"""The block-size page's charts drawn by plotly.js in Chromium, at the width the page's chart
column has: no label is drawn smaller than 12 px (a "6%" squeezed into its sliver was 6.8)."""

from __future__ import annotations

import json

import pytest
from plotly.offline import get_plotlyjs

from paged.viz.app import block_size as P
from paged.viz.fold import sweep

#: Each drawn text's size in px (labels, ticks, legend, titles): its font size times the scale
#: plotly shrank it by. A label hidden for want of room is scaled to 0: not drawn, not counted.
SIZES_JS = """(fig) => Plotly.react('g', fig.data, fig.layout, {staticPlot: true}).then(() =>
  [...document.querySelectorAll('#g text')]
    .filter((t) => t.textContent.trim() !== '' && t.getBBox().height > 0)
    .filter((t) => t.getBoundingClientRect().height > 0)
    .map((t) => ({
      text: t.textContent,
      px: parseFloat(getComputedStyle(t).fontSize)
        * t.getBoundingClientRect().height / t.getBBox().height,
    })))"""


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("width", [460, 700])
def test_no_chart_label_is_smaller_than_12_px(page, lang, width):
    page.set_content(
        f"<html><body style='margin:0'><script>{get_plotlyjs()}</script>"
        f"<div id='g' style='width:{width}px'></div></body></html>"
    )
    results = sweep.load_results(sweep.load_spec("block-size"))
    for chart in (P.composition_figure, P.tradeoff_figure, P.long_table_figure, P.tail_figure):
        fig = chart(results, lang)
        fig.update_layout(width=width)
        labels = page.evaluate(SIZES_JS, json.loads(fig.to_json()))
        assert labels, chart.__name__
        small = [(t["text"], round(t["px"], 1)) for t in labels if t["px"] < P.LABEL_PX - 0.05]
        assert small == [], f"{chart.__name__} at {width} px ({lang})"
