"""The arena grid as plotly traces and shapes, for any pair of axes: what the lecture figure
(``paged.viz.render.figures``) draws for each side. Same cells, colours, marks and layout as the app's
SVG grid (``paged.viz.render.svg``). No Streamlit here.
"""

from __future__ import annotations

import math

from paged.viz.fold.panels import label_starts
from paged.viz.fold.reducer import HOLE, INTERNAL, PAGED, Frame
from paged.viz.render import to_scale
from paged.viz.render.cpu_grid import tier_plotly
from paged.viz.render.layout import GridLayout, changed_runs
from paged.viz.render.style import CHANGED, FONT, MUTED, cell_colour, cell_ink
from paged.viz.safe import plotly_text

#: The white gap between two cells, as a share of a cell (2 px at the usual 20 px cell).
CELL_GAP = 0.1
CELLS = "cells"  # the name of the shapes that draw the cells


def arena_parts(
    frame: Frame, layout: GridLayout, lang: str = "en", xaxis: str = "x", yaxis: str = "y"
) -> tuple[list[dict], list[dict]]:
    """Traces and shapes that draw ``frame``'s arena on axes ``xaxis``/``yaxis``: one cell per
    slot coloured by owner and category, hatching on never-used slots, a cross on unusable
    holes, labels at the start of each block or run, outlines round what changed. Every cell
    is a vector shape: a heatmap would be exported as one bitmap, blurred on a slide."""
    ref = dict(xref=xaxis, yref=yaxis)
    traces = [_labels_trace(frame, layout, xaxis, yaxis)]
    shapes = _cell_shapes(frame, layout, ref) + _hatch_shapes(frame, layout, ref)
    shapes += _block_rules(layout, ref) + _changed_shapes(frame, layout, ref)
    tier_traces, tier_shapes = tier_plotly(frame, layout, xaxis, yaxis, lang)  # swap's CPU tier
    return traces + tier_traces, shapes + tier_shapes


def _cell_shapes(frame: Frame, layout: GridLayout, ref: dict) -> list[dict]:
    """One filled path per colour, a closed square per slot, ``CELL_GAP`` of a cell apart; in
    scaled rows the square is as much shorter as its row, so drawn area follows bytes."""
    by_colour: dict[str, list[str]] = {}
    h = (1 - CELL_GAP) / 2
    e = h * layout.row_scale
    for slot, code in enumerate(frame.cells):
        x, row = layout.xy(slot)
        y = _ys(row, layout)
        by_colour.setdefault(cell_colour(code), []).append(
            f"M{x - h:g},{y - e:g}H{x + h:g}V{y + e:g}H{x - h:g}Z"
        )
    return [
        dict(
            type="path",
            name=CELLS,
            path="".join(cells),
            fillcolor=colour,
            line=dict(width=0),
            layer="below",  # under the labels
            **ref,
        )
        for colour, cells in by_colour.items()
    ]


def _ys(y: int, layout: GridLayout) -> float:
    """Row ``y``'s centre on the axis: rows are ``row_scale`` tall when drawn to scale."""
    return y if not layout.scaled else y * layout.row_scale


def _labels_trace(frame: Frame, layout: GridLayout, xaxis: str, yaxis: str) -> dict:
    xs, ys, texts, colours = [], [], [], []
    t = to_scale.text_scale(layout)
    for slot, text, _ in label_starts(frame) if t is not None else []:
        x, y = layout.xy(slot)
        xs.append(x)
        ys.append(_ys(y, layout))
        texts.append(f"<b>{plotly_text(text)}</b>")
        colours.append(cell_ink(frame.cells[slot]))
    return dict(
        type="scatter",
        x=xs,
        y=ys,
        text=texts,
        mode="text",
        hoverinfo="skip",
        textfont=dict(
            size=11 if t in (1.0, None) else round(11 * t, 1), color=colours, family=FONT["family"]
        ),
        xaxis=xaxis,
        yaxis=yaxis,
        showlegend=False,
    )


def _hatch_shapes(frame: Frame, layout: GridLayout, ref: dict) -> list[dict]:
    by_colour: dict[str, list[str]] = {}
    for slot, code in enumerate(frame.cells):
        if code not in (INTERNAL, HOLE):
            continue
        x, row = layout.xy(slot)
        d = 0.28
        y, e = _ys(row, layout), d * layout.row_scale if layout.scaled else d
        if code == INTERNAL:  # one diagonal stroke: held, never to be filled
            colour = cell_ink(code)
            seg = f"M{x - d},{y + e}L{x + d},{y - e}"
        else:  # a small cross: free, yet nobody waiting can use it
            colour = cell_ink(code)
            seg = f"M{x - d},{y - e}L{x + d},{y + e}M{x - d},{y + e}L{x + d},{y - e}"
        by_colour.setdefault(colour, []).append(seg)
    return [
        dict(type="path", path="".join(segs), line=dict(color=c, width=1.4), layer="above", **ref)
        for c, segs in by_colour.items()
    ]


def _block_rules(layout: GridLayout, ref: dict) -> list[dict]:
    """White gutters between blocks that share a row, so block boundaries read at a glance."""
    per_row = layout.cols // layout.block_size
    if per_row < 2:
        return []
    top, bottom = _y_edges(layout)
    path = "".join(f"M{k * layout.block_size - 0.5},{top}V{bottom}" for k in range(1, per_row))
    return [dict(type="path", path=path, line=dict(color="white", width=4), layer="above", **ref)]


def _changed_shapes(frame: Frame, layout: GridLayout, ref: dict) -> list[dict]:
    if not frame.changed:
        return []
    segs = []
    half = 0.5 * layout.row_scale if layout.scaled else 0.5
    for row, x0, x1 in changed_runs(sorted(frame.changed), layout):
        y = _ys(row, layout)
        segs.append(f"M{x0 - 0.5},{y - half}H{x1 + 0.5}V{y + half}H{x0 - 0.5}Z")
    return [
        dict(
            type="path",
            path="".join(segs),
            line=dict(color=CHANGED, width=2.2),
            layer="above",
            **ref,
        )
    ]


def _y_edges(layout: GridLayout, rows: float | None = None) -> tuple[float, float]:
    """The grid's top and bottom edges on its y axis (``rows`` of the layout's height)."""
    rows = layout.rows if rows is None else rows
    if not layout.scaled:
        return -0.5, rows - 0.5
    return -0.5 * layout.row_scale, (rows - 0.5) * layout.row_scale


def y_range(layout: GridLayout, tier: float, rows: float | None = None) -> list[float]:
    """The y axis range of a grid (row 0 on top) with ``tier`` rows under it for a CPU tier;
    ``rows`` (in full-height rows) gives two sides drawn to scale one common height."""
    top, bottom = _y_edges(layout, None if rows is None else rows / layout.row_scale)
    return [bottom + tier, top]


def arena_axes(frame: Frame, layout: GridLayout, anchor: str = "x") -> tuple[dict, dict]:
    """x and y axis settings: square cells, row 0 on top, rows labelled by first block (paging)
    or first slot (contiguous)."""
    paged = frame.run.allocator == PAGED
    per_row = layout.cols // layout.block_size
    ticks = list(range(math.ceil(frame.run.num_slots / layout.cols)))  # a smaller arena: fewer
    text = [f"#{r * per_row}" if paged else str(r * layout.cols) for r in ticks]
    step = max(1, math.ceil(layout.rows / 24))
    if layout.scaled:  # short rows: tick labels no closer than about a full row
        step = max(step, math.ceil(0.5 / layout.row_scale))
    xa = dict(
        range=[-0.5, layout.cols - 0.5],
        showgrid=False,
        zeroline=False,
        showticklabels=False,
        ticks="",
        fixedrange=True,
        constrain="domain",
    )
    ya = dict(
        range=[layout.rows - 0.5, -0.5],
        showgrid=False,
        zeroline=False,
        tickvals=[_ys(r, layout) for r in ticks[::step]],
        ticktext=text[::step],
        ticks="",
        fixedrange=True,
        tickfont=dict(size=10 if not layout.scaled else 9, color=MUTED),
        scaleanchor=anchor,
        scaleratio=1,
        constrain="domain",
    )
    return xa, ya
