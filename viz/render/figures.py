"""Plotly figures: the arena grid, the metrics bar, the timeline, the scoreboard, and the whole
side-by-side frame as one 16:9 lecture figure.

Each panel has a ``*_parts`` builder that returns traces and shapes for any pair of axes, so the
app (one figure per panel) and ``side_by_side_figure`` (one figure, many panels) draw the same
thing. Light theme, large type; colours come from ``viz.render.style``. No Streamlit here.
"""

from __future__ import annotations

import html
import math
import re

import plotly.graph_objects as go

from engine.core.accounting import CATEGORIES, StepAccount
from viz.fold.lesson import Lesson, Summary
from viz.fold.narration import RenderedStep
from viz.fold.panels import finished_labels, label_starts, queue_entries, table_rows
from viz.fold.percent import percents
from viz.fold.reducer import CELL_CATEGORY, HOLE, INTERNAL, PAGED, Frame
from viz.render import to_scale
from viz.render.cpu_grid import tier_plotly, tier_rows
from viz.render.layout import HOVER_MAX_SLOTS, GridLayout, changed_runs
from viz.render.layout import grid_layout as grid_layout  # callers (tests) reach it through here
from viz.render.style import (
    CATEGORY_COLOURS,
    CATEGORY_MARKS,
    CHANGED,
    FREE_COLOUR,
    INK,
    MUTED,
    SIDE_COLOURS,
    SIDE_DASH,
    cell_colour,
    cell_ink,
    request_colour,
    words,
)
from viz.safe import plotly_text

FONT = dict(
    family="Inter, 'Noto Sans CJK SC', 'PingFang SC', 'Helvetica Neue', Arial, sans-serif",
    color=INK,
)
CELL_GAP_PX = 2

# --- the arena grid --------------------------------------------------------------------------


def arena_parts(
    frame: Frame, layout: GridLayout, lang: str = "en", xaxis: str = "x", yaxis: str = "y"
) -> tuple[list[dict], list[dict]]:
    """Traces and shapes that draw ``frame``'s arena on axes ``xaxis``/``yaxis``: one cell per
    slot coloured by owner and category, hatching on never-used slots, a cross on unusable
    holes, labels at the start of each block or run, outlines round what changed."""
    colours: dict[str, int] = {}
    z: list[list[int | None]] = [[None] * layout.cols for _ in range(layout.rows)]
    for slot, code in enumerate(frame.cells):
        x, y = layout.xy(slot)
        owner = frame.owners[slot]
        colour = cell_colour(code, frame.requests[owner].order if owner is not None else None)
        # Integer z on a stepped colour scale: small JSON, exact colours.
        z[y][x] = colours.setdefault(colour, len(colours))
    n = len(colours)
    scale = []
    for colour, i in colours.items():
        scale += [[i / n, colour], [(i + 1) / n, colour]]
    heat = dict(
        type="heatmap",
        z=z,
        zmin=-0.5,
        zmax=n - 0.5,
        colorscale=_stretch(scale, n),
        showscale=False,
        xgap=CELL_GAP_PX,
        ygap=CELL_GAP_PX,
        xaxis=xaxis,
        yaxis=yaxis,
    )
    if layout.scaled:  # shorter rows (viz/render/to_scale.py): the gap shrinks with them
        heat.update(y0=0, dy=layout.row_scale, ygap=CELL_GAP_PX * layout.row_scale)
    if frame.run.num_slots <= HOVER_MAX_SLOTS:  # past this, hover text outweighs the picture
        w, positions = words(lang), slot_positions(frame)
        heat["customdata"] = [
            [
                _hover(
                    frame,
                    y * layout.cols + x,
                    frame.cells[y * layout.cols + x],
                    frame.owners[y * layout.cols + x],
                    positions.get(y * layout.cols + x),
                    w,
                )
                if y * layout.cols + x < frame.run.num_slots
                else ""
                for x in range(layout.cols)
            ]
            for y in range(layout.rows)
        ]
        heat["hovertemplate"] = "%{customdata}<extra></extra>"
    else:
        heat["hoverinfo"] = "skip"
    traces = [heat, _labels_trace(frame, layout, xaxis, yaxis)]
    ref = dict(xref=xaxis, yref=yaxis)
    shapes = _hatch_shapes(frame, layout, ref) + _block_rules(layout, ref)
    shapes += _changed_shapes(frame, layout, ref)
    tier_traces, tier_shapes = tier_plotly(frame, layout, xaxis, yaxis, lang)  # swap's CPU tier
    return traces + tier_traces, shapes + tier_shapes


def _stretch(scale: list, n: int) -> list:
    """A stepped scale for integer z in [0, n): z = i maps to the band (i/n, (i+1)/n), which
    with zmin=-0.5, zmax=n-0.5 puts each integer in the middle of its own colour band."""
    if n == 0:
        return [[0, FREE_COLOUR], [1, FREE_COLOUR]]
    return scale if n > 1 else [[0, scale[0][1]], [1, scale[0][1]]]


def slot_positions(frame: Frame) -> dict[int, int]:
    pos = {}
    if frame.run.allocator == PAGED:
        bs = frame.run.block_size
        for table in frame.block_tables.values():
            for logical, phys in enumerate(table):
                for i in range(bs):
                    pos[phys * bs + i] = logical * bs + i
    else:
        for start, length in frame.reservations.values():
            for i in range(length):
                pos[start + i] = i
    return pos | frame.last_look  # a request that stopped this frame, shown one last time


def _hover(frame: Frame, slot: int, code: str, owner: str | None, pos: int | None, w: dict) -> str:
    cat = w[CELL_CATEGORY[code]]
    where = f"{w['slot']} {slot} · {w['block']} #{slot // frame.run.block_size}"
    if owner is None:
        return f"{where}<br>{cat}"
    name = frame.requests[owner].name
    who = plotly_text(name if name == owner else f"{name} ({owner})")
    return f"{where}<br>{who} · {w['pos']} {pos}<br>{cat}"


def _ys(y: int, layout: GridLayout) -> float:
    """Row ``y``'s centre on the axis: rows are ``row_scale`` tall when drawn to scale."""
    return y if not layout.scaled else y * layout.row_scale


def _labels_trace(frame: Frame, layout: GridLayout, xaxis: str, yaxis: str) -> dict:
    xs, ys, texts, colours = [], [], [], []
    t = to_scale.text_scale(layout)
    for slot, text, owner in label_starts(frame) if t is not None else []:
        x, y = layout.xy(slot)
        xs.append(x)
        ys.append(_ys(y, layout))
        texts.append(f"<b>{plotly_text(text)}</b>")
        colours.append(cell_ink(frame.cells[slot], frame.requests[owner].order))
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
            colour = cell_ink(code, frame.holder(slot).order)
            seg = f"M{x - d},{y + e}L{x + d},{y - e}"
        else:  # a small cross: free, yet nobody waiting can use it
            colour = cell_ink(code, None)
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


def arena_spec(
    frame: Frame, layout: GridLayout, lang: str = "en", height: int = 420, meta: object = None
) -> dict:
    """One side's arena as a plotly figure dict (what the app shows per column). ``meta`` is
    stored in ``layout.meta`` so a browser test can tell which frame is painted."""
    traces, shapes = arena_parts(frame, layout, lang)
    xa, ya = arena_axes(frame, layout)
    ya["range"] = y_range(layout, tier_rows(frame, layout))
    return {
        "data": traces,
        "layout": dict(
            shapes=shapes,
            xaxis=xa,
            yaxis=ya,
            height=height,
            meta=meta,
            margin=dict(l=34, r=4, t=4, b=4),
            paper_bgcolor="white",
            plot_bgcolor="white",
            font=FONT,
            showlegend=False,
            dragmode=False,
            hoverlabel=dict(bgcolor="white", font_size=12),
        ),
    }


class Prebuilt(go.Figure):
    """A figure dict built by this module, handed to ``st.plotly_chart`` as is.

    Streamlit validates every figure by rebuilding it through plotly's object model, which
    costs more than drawing a frame; our dicts are built from fixed templates (and validated
    by the tests through ``go.Figure``), so the app skips that. Only ``to_dict`` is used."""

    def __init__(self, spec: dict) -> None:
        # super().__init__ skipped on purpose: it builds plotly's object model, the cost avoided
        self.__dict__["_spec"] = spec

    def to_dict(self) -> dict:
        return self.__dict__["_spec"]


# --- metrics, timeline, scoreboard -----------------------------------------------------------


def metrics_parts(
    account: StepAccount, lang: str, xaxis: str = "x", yaxis: str = "y", y: str = ""
) -> list[dict]:
    """A 100% stacked horizontal bar of the five accounting categories."""
    w = words(lang)
    shown = percents(account.shares())
    return [
        dict(
            type="bar",
            x=[100 * account.share(c)],
            y=[y],
            orientation="h",
            name=w[c],
            marker=dict(color=CATEGORY_COLOURS[c], line=dict(width=0)),
            text=[shown[c] if account.share(c) >= 0.07 else ""],
            textposition="inside",
            insidetextanchor="middle",
            textfont=dict(color=CATEGORY_MARKS[c], size=13),
            hovertemplate=f"{w[c]}: %{{x:.1f}}%<extra></extra>",
            xaxis=xaxis,
            yaxis=yaxis,
            showlegend=False,
        )
        for c in CATEGORIES
    ]


def timeline_spec(
    lesson: Lesson,
    current: int | None,
    lang: str = "en",
    titles: tuple = ("", ""),
    height: int = 210,
    margins: tuple[int, int] = (44, 10),
    legend: bool = True,
) -> dict:
    """Token-state share per frame for both sides, the lesson's keyframes marked 1..n and the
    current frame as a vertical rule (none when ``current`` is None: the app then draws its
    own playhead above a chart that never changes)."""
    w = words(lang)
    data = []
    for side, title in zip(("left", "right"), titles, strict=True):
        x, y = _share_series(lesson, side)
        data.append(
            dict(
                type="scatter",
                x=x,
                y=y,
                mode="lines",
                name=title,
                line=dict(color=CATEGORY_COLOURS["token_states"], width=2.5, dash=SIDE_DASH[side]),
                hovertemplate=f"{title}<br>{w['frame']} %{{x}}: %{{y:.0f}}%<extra></extra>",
            )
        )
    shapes = (
        []
        if current is None
        else [
            dict(
                type="line",
                x0=current,
                x1=current,
                y0=0,
                y1=1,
                yref="paper",
                line=dict(color=CHANGED, width=2),
            )
        ]
    )
    notes = [
        dict(
            x=kf,
            y=1.0,
            yref="paper",
            text=f"<b>{k + 1}</b>",
            showarrow=False,
            yanchor="bottom",
            font=dict(size=12, color="white"),
            bgcolor=MUTED,
            borderpad=2,
        )
        for k, kf in enumerate(lesson.keyframes)
        if kf is not None
    ]
    return {
        "data": data,
        "layout": dict(
            # Same data revision while only the current frame moves: Plotly.react then redraws
            # the rule instead of recomputing both series on every keypress.
            datarevision=f"{lesson.key}:{lesson.left.frames[-1].index}:{lesson.right.frames[-1].index}",
            uirevision=lesson.key or "live",
            # Fixed margins (no auto-expansion) keep the plot area where the app's playhead
            # expects it; the legend, when shown, sits inside the bottom margin.
            height=height,
            margin=dict(l=margins[0], r=margins[1], t=26, b=56 if legend else 30, autoexpand=False),
            shapes=shapes,
            annotations=notes,
            showlegend=legend,
            paper_bgcolor="white",
            plot_bgcolor="white",
            font=FONT,
            meta=current,
            dragmode=False,
            legend=dict(
                orientation="h", x=0, y=0, yref="container", yanchor="bottom", font=dict(size=12)
            ),
            xaxis=dict(
                range=[-0.5, lesson.num_frames - 0.5],
                fixedrange=True,
                showgrid=False,
                tickfont=dict(size=11),
            ),
            yaxis=dict(
                range=[0, 100],
                fixedrange=True,
                ticksuffix="%",
                gridcolor="#EEF0F3",
                tickfont=dict(size=11),
            ),
        ),
    }


def _share_series(lesson: Lesson, side: str, points: int = 600) -> tuple[list[int], list[float]]:
    """Token-state share per frame; a long run keeps each stretch's min and max, so the line
    keeps its peaks at a fraction of the points (it is re-sent on every keypress)."""
    frames = lesson.side(side).frames
    xs, ys = (
        [f.index for f in frames],
        [round(100 * f.account.share("token_states"), 2) for f in frames],
    )
    if len(xs) <= points:
        return xs, ys
    step = math.ceil(len(xs) / (points // 2))
    out_x, out_y = [], []
    for a in range(0, len(xs), step):
        chunk = range(a, min(a + step, len(xs)))
        lo, hi = min(chunk, key=ys.__getitem__), max(chunk, key=ys.__getitem__)
        for k in sorted({lo, hi}):
            out_x.append(xs[k])
            out_y.append(ys[k])
    return out_x, out_y


def scoreboard_figure(
    left: Summary,
    right: Summary,
    titles: tuple[str, str],
    lang: str = "en",
    height: int = 230,
    meta: object = None,
) -> go.Figure:
    """Each run's time-averaged category shares as a 100% bar, with its concurrency beside."""
    w = words(lang)
    fig = go.Figure()
    names = [
        f"<b>{t}</b><br><span style='font-size:12px;color:{MUTED}'>"
        f"{w['max_running']}: {s.max_running} · {w['steps']}: {s.steps}</span>"
        for t, s in zip(titles, (left, right), strict=True)
    ]
    shown = [percents(s.shares) for s in (left, right)]
    for c in CATEGORIES:
        vals = [100 * s.shares[c] for s in (left, right)]
        fig.add_bar(
            y=names,
            x=vals,
            orientation="h",
            name=w[c],
            marker=dict(color=CATEGORY_COLOURS[c]),
            text=[p[c] if v >= 4 else "" for p, v in zip(shown, vals, strict=True)],
            textposition="inside",
            textfont=dict(color=CATEGORY_MARKS[c], size=14),
            hovertemplate=f"{w[c]}: %{{x:.1f}}%<extra></extra>",
        )
    fig.update_layout(
        barmode="stack",
        height=height,
        paper_bgcolor="white",
        meta=meta,
        plot_bgcolor="white",
        font=FONT,
        margin=dict(l=10, r=10, t=10, b=10),
        legend=dict(orientation="h", x=0, y=-0.12, font=dict(size=12), traceorder="normal"),
        xaxis=dict(range=[0, 100], visible=False, fixedrange=True),
        yaxis=dict(autorange="reversed", fixedrange=True, automargin=True, tickfont=dict(size=14)),
        dragmode=False,
    )
    return fig


# --- the whole frame, for lectures -----------------------------------------------------------


def side_by_side_figure(
    left: Frame,
    right: Frame,
    step: RenderedStep | None,
    lang: str = "en",
    titles: tuple[str, str] = ("", ""),
    width: int = 1280,
    height: int = 720,
) -> go.Figure:
    """One frame of the lesson as a single 16:9 figure: both arenas at the same scale, their
    metrics bars, block tables or reservations, queues, a legend and the step's narration.
    Everything is placed in paper coordinates, so it scales with ``width`` x ``height``."""
    layouts = to_scale.side_layouts(left.run, right.run)
    notes = to_scale.notes(left.run, right.run, lang)
    # drawn to scale: one height for both sides (in full-height rows), so one scale for both
    scaled = any(lay.scaled for lay in layouts)
    common = to_scale.drawn_rows((left.run, right.run), layouts) if scaled else None
    tier = max(tier_rows(f, lay) for f, lay in zip((left, right), layouts, strict=True))
    fig = go.Figure()
    axes: dict[str, dict] = {}
    halves = {"left": (0.0, 0.485), "right": (0.515, 1.0)}
    for n, (side, frame) in enumerate((("left", left), ("right", right))):
        x0, x1 = halves[side]
        layout = layouts[n]
        gx, gy, mx, my = (
            _axis(2 * n + 1, "x"),
            _axis(2 * n + 1, "y"),
            _axis(2 * n + 2, "x"),
            _axis(2 * n + 2, "y"),
        )
        traces, shapes = arena_parts(frame, layout, lang, gx, gy)
        fig.add_traces(traces + metrics_parts(frame.account, lang, mx, my))
        fig.layout.shapes = tuple(fig.layout.shapes) + tuple(shapes)
        xa, ya = arena_axes(frame, layout, anchor=gx)
        ya["range"] = y_range(layout, tier, common)
        axes[_layout_key(gx)] = {**xa, "domain": [x0, x0 + 0.56 * (x1 - x0)], "anchor": gy}
        axes[_layout_key(gy)] = {**ya, "domain": [0.35, 0.86], "anchor": gx}
        axes[_layout_key(mx)] = dict(
            domain=[x0, x1], range=[0, 100], visible=False, fixedrange=True, anchor=my
        )
        axes[_layout_key(my)] = dict(domain=[0.935, 0.965], visible=False, anchor=mx)
        title = f"<b style='color:{SIDE_COLOURS[side]}'>{titles[n]}</b>"
        _paper_text(fig, x0, 0.975, title, dict(size=17), yanchor="bottom")
        line = _metrics_line(frame, lang)
        size = fitted_size(line, (x1 - x0) * (width - sum(LECTURE_MARGIN_X)), 11)
        _paper_text(fig, x0, 0.928, line, dict(size=size, color=MUTED))
        _side_text(fig, frame, x0 + 0.59 * (x1 - x0), lang)
        if notes[n]:  # drawn to scale: say so, above the grid
            lines = "<br>".join(plotly_text(line) for line in notes[n])
            _paper_text(fig, x0, 0.903, lines, dict(size=11, color=MUTED), align="left")
    fig.update_layout(
        **axes,
        barmode="stack",
        width=width,
        height=height,
        paper_bgcolor="white",
        plot_bgcolor="white",
        font=FONT,
        showlegend=False,
        margin=dict(l=LECTURE_MARGIN_X[0], r=LECTURE_MARGIN_X[1], t=64, b=12),
    )
    _legend_line(fig, lang)
    _header_and_narration(fig, step, lang)
    return fig


def scoreboard_lecture_figure(
    left: Summary,
    right: Summary,
    step: RenderedStep | None,
    lang: str = "en",
    titles: tuple[str, str] = ("", ""),
    width: int = 1280,
    height: int = 720,
) -> go.Figure:
    """The scoreboard step as a 16:9 lecture figure: both runs' time-averaged shares as large
    100% bars (the on-screen scoreboard, enlarged) under the step's title and narration."""
    fig = scoreboard_figure(left, right, titles, lang, height=height)
    fig.update_traces(textfont_size=22)
    # Fixed domains: an automatic margin for the long run titles would shift "paper" x=0 and
    # push the narration, which is placed in paper coordinates, off the right edge.
    fig.update_layout(
        width=width,
        height=height,
        margin=dict(l=28, r=28, t=64, b=12),
        xaxis=dict(domain=[0.36, 1.0]),
        yaxis=dict(domain=[0.42, 0.88], tickfont=dict(size=18), automargin=False),
        legend=dict(orientation="h", x=0, y=0.36, yanchor="top", font=dict(size=16)),
    )
    _header_and_narration(fig, step, lang)
    return fig


#: The lecture figure's left and right margins, in px at its nominal width.
LECTURE_MARGIN_X = (28, 16)


def fitted_size(text: str, room_px: float, size: float) -> float:
    """The font size, at most ``size``, at which ``text`` (plotly's HTML subset) fits in
    ``room_px``. A plotly annotation never wraps: at a fixed size a side's metrics line ran off
    the figure's edge (the right side's blocked count was lost from fp8-twice's step 2) or
    into the other half. Widths are estimated generously: 0.6 em a Latin character, 1 em any
    other (CJK, the colour squares)."""
    plain = html.unescape(re.sub(r"<[^>]+>", "", text))
    ems = sum(0.6 if c.isascii() else 1.0 for c in plain)
    return min(size, room_px / ems) if ems else size


def _metrics_line(frame: Frame, lang: str) -> str:
    w, a = words(lang), frame.account
    shown = percents(a.shares())
    shares = " · ".join(
        f"<span style='color:{CATEGORY_COLOURS[c]}'>■</span> {w['cat_short'][c]} {shown[c]}"
        for c in CATEGORIES
    )
    return (
        f"{shares}   |   {w['running_n']} {a.running} · {w['waiting_n']} {a.waiting}"
        f" · {w['blocked_n']} {a.blocked}"
    )


def _axis(n: int, letter: str) -> str:
    """Plotly's trace-side axis names: x, x2, x3, ..."""
    return letter if n == 1 else f"{letter}{n}"


def _layout_key(axis: str) -> str:
    """Trace-side axis name to its layout key: x -> xaxis, y3 -> yaxis3."""
    return f"{axis[0]}axis{axis[1:]}"


def _paper_text(
    fig: go.Figure, x: float, y: float, text: str, font: dict, yanchor: str = "top", **kw
) -> None:
    """A line of text placed on the paper (not on an axis), left-aligned at ``x``."""
    fig.add_annotation(
        x=x,
        xref="paper",
        yref="paper",
        y=y,
        xanchor="left",
        yanchor=yanchor,
        showarrow=False,
        font=font,
        text=text,
        **kw,
    )


def _side_text(fig: go.Figure, frame: Frame, x0: float, lang: str) -> None:
    """Block tables or reservations, then the queue, as one text block beside the grid."""
    w = words(lang)
    paged = frame.run.allocator == PAGED
    lines = [f"<b>{w['block_tables'] if paged else w['reservations']}</b>"]
    rows = table_rows(frame)
    for row in rows[:10]:
        if row.run is not None:
            body = f"[{row.run[0]}, {row.run[0] + row.run[1]})  {row.filled}/{row.run[1]}"
        else:
            body = "  ".join(
                f"<b>{m.logical}→#{m.physical}</b>" if m.new else f"{m.logical}→#{m.physical}"
                for m in row.mappings[:6]
            )
            body += " …" if len(row.mappings) > 6 else ""
        lines.append(
            f"<b style='color:{request_colour(row.order)}'>{plotly_text(row.label)}</b>  {body}"
        )
    if not rows:
        lines.append(f"<span style='color:{MUTED}'>{w['none']}</span>")
    lines += ["", f"<b>{w['queue']}</b>"]
    for e in queue_entries(frame, lang):
        lines.append(
            f"<b style='color:{request_colour(e.order)}'>{plotly_text(e.label)}</b> {w[e.state]}"
        )
        if e.why:
            lines += [
                f"<span style='color:{INK}'>{plotly_text(part)}</span>"
                for part in _hard_wrap(e.why, 36).split("<br>")
            ]
    done = finished_labels(frame)
    if done:
        lines.append(
            f"<span style='color:{MUTED}'>{w['finished']}: "
            f"{plotly_text(', '.join(done), 400)}</span>"
        )
    fig.add_annotation(
        x=x0,
        y=0.86,
        xref="paper",
        yref="paper",
        xanchor="left",
        yanchor="top",
        align="left",
        showarrow=False,
        text="<br>".join(lines),
        font=dict(size=12),
    )


def _legend_line(fig: go.Figure, lang: str) -> None:
    """The grid legend in words and coloured squares (a figure cannot borrow the app's CSS)."""
    w = words(lang)
    c = CATEGORY_COLOURS
    items = [
        (c["token_states"], "■", w["token_states"]),
        (c["reservation"], "■", w["reservation"]),
        (c["internal"], "▨", w["internal"]),
        (c["free"], "■", w["free"]),
        (c["external"], "☒", w["external"]),
        (CHANGED, "□", w["changed"]),
    ]
    text = "    ".join(f"<span style='color:{c}'>{g}</span> {t}" for c, g, t in items)
    fig.add_annotation(
        x=0,
        y=0.30,
        xref="paper",
        yref="paper",
        xanchor="left",
        yanchor="bottom",
        showarrow=False,
        text=text,
        font=dict(size=12, color=INK),
    )


def _header_and_narration(fig: go.Figure, step: RenderedStep | None, lang: str) -> None:
    if step is None:
        return
    fig.update_layout(
        title=dict(
            text=f"<b>{step.number}. {step.title}</b>",
            x=0.012,
            y=0.97,
            xanchor="left",
            yanchor="top",
            yref="container",
            font=dict(size=24, color=INK),
        )
    )
    fig.add_annotation(
        x=0,
        y=0.27,
        xref="paper",
        yref="paper",
        xanchor="left",
        yanchor="top",
        align="left",
        showarrow=False,
        font=dict(size=14),
        text=_wrap_markdown(step.narration, 150),
    )


def _wrap_markdown(text: str, width: int) -> str:
    """Narration markdown to plotly's small HTML subset: bold, paragraphs, hard wraps."""
    out = []
    for para in text.split("\n\n"):
        para = re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", html.escape(para, quote=False))
        para = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", para)
        para = re.sub(r"\*(.+?)\*", r"<i>\1</i>", para)
        out.append(_hard_wrap(para, width))
    return "<br><br>".join(out)


_TOKENS = re.compile(
    r"<[^>]+>|[\u2e80-\u9fff\u3000-\u303f\uff00-\uffef]|"
    r"[^\s<\u2e80-\u9fff\u3000-\u303f\uff00-\uffef]+|\s+"
)


def _hard_wrap(text: str, width: int) -> str:
    """Break ``text`` into lines of at most ``width`` columns (a CJK character is two, a tag
    none): latin text breaks at spaces, Chinese between any two characters."""
    lines, cur, used = [], "", 0
    for tok in _TOKENS.findall(text):
        if tok.startswith("<"):
            cur += tok
            continue
        if tok.isspace():
            if used:
                cur, used = cur + " ", used + 1
            continue
        w = len(tok) * (2 if _TOKENS.match(tok) and tok[0] >= "\u2e80" else 1)
        if used + w > width and used:
            lines.append(cur.rstrip())
            cur, used = "", 0
        cur, used = cur + tok, used + w
    lines.append(cur.rstrip())
    return "<br>".join(lines)
