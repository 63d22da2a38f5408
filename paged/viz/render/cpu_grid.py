"""The CPU tier under the device arena: a second, smaller grid of whole blocks.

Swap preemption copies a request's blocks, one by one, to free CPU blocks; they come back later
into whatever device blocks are free. A CPU block holds the same ``block_size`` tokens as a
device block, but here it is drawn as one box (the tier is only ever read or written whole
blocks at a time), labelled with its owner and logical index as the device grid labels its
blocks, filled in the token-state colour (it holds written K/V) or the free colour.

A run without a CPU tier draws nothing here, so its grid is exactly what it was before.
Pure strings, like ``paged.viz.render.svg``.
"""

from __future__ import annotations

from html import escape

from paged.engine.core import events as E
from paged.viz.fold.reducer import FREE, TOKEN, Frame
from paged.viz.render.layout import GridLayout
from paged.viz.render.style import CHANGED, MUTED, cell_colour, cell_ink, words
from paged.viz.safe import plotly_text

BOX_CELLS = 2  # a CPU block is drawn two device cells wide: room for a label like "A12"
HEAD = 26  # room above the tier for its title line


def cpu_owners(frame: Frame) -> list[tuple[str, int] | None]:
    """For each CPU block: ``(request id, logical block)`` when it holds a swapped-out
    request's K/V, else None."""
    owners: list[tuple[str, int] | None] = [None] * frame.run.num_cpu_blocks
    for req, table in frame.cpu_tables.items():
        for logical, cpu in enumerate(table):
            if 0 <= cpu < len(owners):
                owners[cpu] = (req, logical)
    return owners


def moved_cpu_blocks(frame: Frame) -> set[int]:
    """CPU blocks written (swap out) or given back (swap in) in this frame."""
    out: set[int] = set()
    for ev in frame.events:
        match ev:
            case E.SwappedOut():
                out.update(c for _, c in ev.block_map)
            case E.SwappedIn():
                out.update(c for c, _ in ev.block_map)
    return out


def tier_height(frame: Frame, layout: GridLayout, cell: int) -> int:
    """Extra height the tier needs under a grid of ``cell``-unit cells (0 without a tier)."""
    n = frame.run.num_cpu_blocks
    if n <= 0:
        return 0
    per_row = max(1, layout.cols // BOX_CELLS)
    return HEAD + -(-n // per_row) * cell


def cpu_tier_svg(
    frame: Frame, layout: GridLayout, top: float, x0: int, cell: int, gap: int, lang: str = "en"
) -> str:
    """The tier's boxes from height ``top`` down, starting at ``x0`` (the grid's first column),
    with its title line; "" when the run has no CPU tier."""
    n = frame.run.num_cpu_blocks
    if n <= 0:
        return ""
    w = words(lang)
    owners = cpu_owners(frame)
    used = sum(1 for o in owners if o is not None)
    per_row = max(1, layout.cols // BOX_CELLS)
    width = BOX_CELLS * cell - gap
    moved = moved_cpu_blocks(frame)
    out = [
        f"<text x='{x0}' y='{top + HEAD - 9}' font-size='11' font-weight='700' "
        f"fill='{MUTED}'>{escape(w['cpu_tier'].format(used=used, total=n))}</text>"
    ]
    for b, owner in enumerate(owners):
        row, col = divmod(b, per_row)
        x, y = x0 + col * BOX_CELLS * cell, top + HEAD + row * cell
        code = TOKEN if owner is not None else FREE
        name = f"{frame.requests[owner[0]].name}{owner[1]}" if owner is not None else ""
        tip = f"{w['cpu_block']} c{b}" + (f" · {name}" if name else f" · {w['free']}")
        out.append(
            f"<rect x='{x}' y='{y}' width='{width}' height='{cell - gap}' rx='3' "
            f"fill='{cell_colour(code)}'><title>{escape(tip)}</title></rect>"
        )
        if name:
            out.append(
                f"<text x='{x + width / 2}' y='{y + 13}' font-size='9' font-weight='700' "
                f"text-anchor='middle' fill='{cell_ink(code)}' "
                f"pointer-events='none'>{escape(name)}</text>"
            )
        if b in moved:
            out.append(
                f"<rect x='{x - 1}' y='{y - 1}' width='{width + 2}' height='{cell - gap + 2}' "
                f"rx='3' fill='none' stroke='{CHANGED}' stroke-width='2.2' "
                f"pointer-events='none'/>"
            )
    return f"<g class='pk-cpu'>{''.join(out)}</g>"


# --- the lecture figures (plotly dicts; no plotly import needed) ------------------------------

TIER_GAP_ROWS = 1.2  # white space between the arena's last row and the tier's first


def tier_rows(frame: Frame, layout: GridLayout) -> float:
    """Rows (in grid cells) the tier adds under the arena in a figure; 0 without a tier."""
    n = frame.run.num_cpu_blocks
    if n <= 0:
        return 0.0
    return TIER_GAP_ROWS + -(-n // max(1, layout.cols // BOX_CELLS))


def tier_plotly(
    frame: Frame, layout: GridLayout, xaxis: str, yaxis: str, lang: str = "en"
) -> tuple[list[dict], list[dict]]:
    """The tier as plotly shapes (one box per CPU block) and one text trace (owners' labels
    and the tier's title), on the arena's own axes, under its last row."""
    n = frame.run.num_cpu_blocks
    if n <= 0:
        return [], []
    owners = cpu_owners(frame)
    per_row = max(1, layout.cols // BOX_CELLS)
    bottom = layout.rows - 0.5 if not layout.scaled else (layout.rows - 0.5) * layout.row_scale
    top = bottom + TIER_GAP_ROWS
    ref = dict(xref=xaxis, yref=yaxis)
    moved = moved_cpu_blocks(frame)
    shapes, xs, ys, texts, inks = [], [], [], [], []
    for b, owner in enumerate(owners):
        row, col = divmod(b, per_row)
        x0, y0 = col * BOX_CELLS - 0.45, top + row + 0.05
        code = TOKEN if owner is not None else FREE
        edge = dict(color=CHANGED, width=2.2) if b in moved else dict(width=0)
        shapes.append(
            dict(
                type="rect",
                x0=x0,
                x1=x0 + BOX_CELLS - 0.1,
                y0=y0,
                y1=y0 + 0.9,
                fillcolor=cell_colour(code),
                line=edge,
                layer="below",  # under the labels (the arena's cells never reach these rows)
                **ref,
            )
        )
        if owner is not None:
            xs.append(x0 + (BOX_CELLS - 0.1) / 2)
            ys.append(y0 + 0.45)
            texts.append(f"<b>{plotly_text(frame.requests[owner[0]].name)}{owner[1]}</b>")
            inks.append(cell_ink(code))
    used = sum(1 for o in owners if o is not None)
    title = plotly_text(words(lang)["cpu_tier"].format(used=used, total=n))
    xs.append(-0.45)
    ys.append(top - 0.45)
    texts.append(title)
    inks.append(MUTED)
    trace = dict(
        type="scatter",
        x=xs,
        y=ys,
        text=texts,
        mode="text",
        textposition=["middle center"] * (len(xs) - 1) + ["middle right"],
        hoverinfo="skip",
        textfont=dict(size=10, color=inks),
        xaxis=xaxis,
        yaxis=yaxis,
        showlegend=False,
    )
    return [trace], shapes
