"""Plotly figures for lectures: the whole side-by-side frame as one 16:9 figure, and the
scoreboard. ``paged.viz.export.lecture`` writes them as png/svg/pdf; the app draws the same frames as
SVG (``paged.viz.render.svg``).

Each panel has a ``*_parts`` builder that returns traces and shapes for any pair of axes
(``paged.viz.render.arena_plotly`` for the grid), so ``side_by_side_figure`` places many panels in one
figure. Light theme, large type; colours come from ``paged.viz.render.style``. No Streamlit here.
"""

from __future__ import annotations

import html
import re

import plotly.graph_objects as go

from paged.engine.core.accounting import CATEGORIES, StepAccount
from paged.viz.fold.lesson import Summary
from paged.viz.fold.narration import RenderedStep
from paged.viz.fold.panels import finished_labels, queue_entries, table_rows
from paged.viz.fold.percent import percents
from paged.viz.fold.reducer import PAGED, Frame
from paged.viz.render import to_scale
from paged.viz.render.arena_plotly import arena_axes, arena_parts, y_range
from paged.viz.render.cpu_grid import tier_rows
from paged.viz.render.style import (
    CATEGORY_COLOURS,
    CATEGORY_MARKS,
    CHANGED,
    FONT,
    INK,
    MUTED,
    SIDE_COLOURS,
    request_colour,
    words,
)
from paged.viz.safe import plotly_text

# --- metrics, scoreboard --------------------------------------------------------------------------


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
    ``room_px``. A plotly annotation never wraps: at a fixed size a long metrics line would run
    off the figure's edge (losing its last counts) or into the other half. Widths are estimated generously: 0.6 em a Latin character, 1 em any
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


LEGEND_CELL = 14  # px: a legend key, a grid cell at the figure's scale
LEGEND_Y = 0.30  # paper y of the legend's keys' bottom edge


def _legend_line(fig: go.Figure, lang: str) -> None:
    """The grid legend: each key a cell drawn as the grid draws it (its fill, the never-used
    stroke or the hole's cross in the category's ink, the changed outline round a free cell),
    then its words. Shapes in paper coordinates, from the figure's size in px."""
    w = words(lang)
    lay = fig.layout
    px_x = 1 / (lay.width - lay.margin.l - lay.margin.r)
    px_y = 1 / (lay.height - lay.margin.t - lay.margin.b)
    items = [
        ("token_states", "", w["token_states"]),
        ("reservation", "", w["reservation"]),
        ("internal", "stroke", w["internal"]),
        ("free", "", w["free"]),
        ("external", "cross", w["external"]),
        ("free", "changed", w["changed"]),
    ]
    shapes, x = [], 0.0
    y0, y1 = LEGEND_Y, LEGEND_Y + LEGEND_CELL * px_y
    for cat, mark, text in items:
        x0, x1 = x * px_x, (x + LEGEND_CELL) * px_x
        cell = dict(type="rect", xref="paper", yref="paper", x0=x0, x1=x1, y0=y0, y1=y1)
        shapes.append(dict(cell, fillcolor=CATEGORY_COLOURS[cat], line=dict(width=0)))
        # the grid's mark: 28 % of the cell either side of its middle
        dx, dy, cx, cy = 0.28 * (x1 - x0), 0.28 * (y1 - y0), (x0 + x1) / 2, (y0 + y1) / 2
        paths = {
            "stroke": [((cx - dx, cy - dy), (cx + dx, cy + dy))],
            "cross": [
                ((cx - dx, cy - dy), (cx + dx, cy + dy)),
                ((cx - dx, cy + dy), (cx + dx, cy - dy)),
            ],
        }.get(mark, [])
        if paths:
            d = "".join(f"M{a[0]:.5f},{a[1]:.5f}L{b[0]:.5f},{b[1]:.5f}" for a, b in paths)
            shapes.append(
                dict(
                    type="path",
                    xref="paper",
                    yref="paper",
                    path=d,
                    line=dict(color=CATEGORY_MARKS[cat], width=1.3),
                )
            )
        if mark == "changed":
            shapes.append(dict(cell, line=dict(color=CHANGED, width=2.2)))
        fig.add_annotation(
            x=x1 + 5 * px_x,
            y=(y0 + y1) / 2,
            xref="paper",
            yref="paper",
            xanchor="left",
            yanchor="middle",
            showarrow=False,
            text=plotly_text(text),
            font=dict(size=12, color=INK),
        )
        # the words' width at 12 px, a CJK character one em and others 0.6: never short
        x += LEGEND_CELL + 5 + 12 * sum(1.0 if ord(c) > 0x2E80 else 0.6 for c in text) + 18
    fig.layout.shapes = tuple(fig.layout.shapes) + tuple(shapes)


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
