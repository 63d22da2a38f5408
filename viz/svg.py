"""The arena grid as inline SVG: what the app draws on every keypress.

Same cells, colours, marks and layout as ``figures.arena_parts`` (the lecture figures), but
plain SVG: the browser paints a 1,024-slot frame in a few milliseconds, where a plotly heatmap
spends most of a keypress's budget re-rendering. Each cell carries a ``<title>`` tooltip while
the arena is small enough for that to be cheap. Pure strings; no Streamlit, no plotly.
"""
from __future__ import annotations

from html import escape

from viz.figures import HOVER_MAX_SLOTS, GridLayout, changed_runs, slot_positions
from viz.reducer import HOLE, INTERNAL, PAGED, TOKEN, Frame
from viz.style import CHANGED, HOLE_MARK, MUTED, cell_colour, request_colour, words

CELL = 20            # user units per cell
GAP = 2              # white gap between cells
GUTTER = 6           # extra gap between blocks that share a row
LABEL_W = 34         # room for the row labels on the left
_CATEGORY = {"T": "token_states", "R": "reservation", "I": "internal", "F": "free",
             "H": "external"}


def _x(layout: GridLayout, col: int) -> float:
    return LABEL_W + col * CELL + (col // layout.block_size) * GUTTER


def _y(row: int) -> float:
    return row * CELL


def arena_svg(frame: Frame, layout: GridLayout, lang: str = "en", meta: int | None = None,
              max_height_px: int = 430) -> str:
    """One side's arena as an ``<svg>`` that scales to its column (at most ``max_height_px``
    tall). ``meta`` lands in ``data-pk-frame`` so a browser test can tell what is painted."""
    per_row = layout.cols // layout.block_size
    width = _x(layout, layout.cols - 1) + CELL
    height = layout.rows * CELL
    parts = [_cells(frame, layout, lang), _row_labels(frame, layout, per_row),
             _marks(frame, layout), _names(frame, layout), _changed(frame, layout)]
    tag = f" data-pk-frame='{meta}'" if meta is not None else ""
    return (f"<svg class='pk-arena'{tag} viewBox='0 0 {width} {height}' "
            f"preserveAspectRatio='xMidYMin meet' style='width:100%;max-height:{max_height_px}px;"
            f"display:block' role='img' font-family='Inter, Helvetica, Arial, sans-serif'>"
            f"{''.join(parts)}</svg>")


def _cells(frame: Frame, layout: GridLayout, lang: str) -> str:
    tips = frame.run.num_slots <= HOVER_MAX_SLOTS
    w = words(lang)
    pos = slot_positions(frame) if tips else {}
    out = []
    size = CELL - GAP
    for slot, code in enumerate(frame.cells):
        col, row = layout.xy(slot)
        owner = frame.owners[slot]
        fill = cell_colour(code, frame.requests[owner].order if owner is not None else None)
        rect = (f"<rect x='{_x(layout, col)}' y='{_y(row)}' width='{size}' height='{size}' "
                f"rx='2' fill='{fill}'")
        if tips:
            who = (f"{frame.requests[owner].name} · {w['pos']} {pos.get(slot)} · "
                   if owner is not None else "")
            rect += (f"><title>{w['slot']} {slot} · {w['block']} "
                     f"#{slot // frame.run.block_size}\n{escape(who)}{w[_CATEGORY[code]]}"
                     f"</title></rect>")
        else:
            rect += "/>"
        out.append(rect)
    return "".join(out)


def _row_labels(frame: Frame, layout: GridLayout, per_row: int) -> str:
    paged = frame.run.allocator == PAGED
    step = max(1, -(-layout.rows // 24))
    out = []
    for r in range(0, layout.rows, step):
        text = f"#{r * per_row}" if paged else str(r * layout.cols)
        out.append(f"<text x='{LABEL_W - 5}' y='{_y(r) + CELL / 2 + 3}' font-size='10' "
                   f"text-anchor='end' fill='{MUTED}'>{text}</text>")
    return "".join(out)


def _marks(frame: Frame, layout: GridLayout) -> str:
    """A diagonal stroke on never-used slots, a cross on unusable holes (as in the figures)."""
    by_colour: dict[str, list[str]] = {}
    d = (CELL - GAP) * 0.28
    for slot, code in enumerate(frame.cells):
        if code not in (INTERNAL, HOLE):
            continue
        col, row = layout.xy(slot)
        cx, cy = _x(layout, col) + (CELL - GAP) / 2, _y(row) + (CELL - GAP) / 2
        if code == INTERNAL:
            colour = request_colour(frame.requests[frame.owners[slot]].order)
            seg = f"M{cx - d:.1f},{cy + d:.1f}L{cx + d:.1f},{cy - d:.1f}"
        else:
            colour = HOLE_MARK
            seg = (f"M{cx - d:.1f},{cy - d:.1f}L{cx + d:.1f},{cy + d:.1f}"
                   f"M{cx - d:.1f},{cy + d:.1f}L{cx + d:.1f},{cy - d:.1f}")
        by_colour.setdefault(colour, []).append(seg)
    return "".join(f"<path d='{''.join(segs)}' stroke='{c}' stroke-width='1.3' fill='none'/>"
                   for c, segs in by_colour.items())


def _names(frame: Frame, layout: GridLayout) -> str:
    """The owner's name at the start of each block (with its logical index) or run."""
    if frame.run.allocator == PAGED:
        bs = frame.run.block_size
        starts = [(phys * bs, f"{frame.requests[r].name}{i}", r)
                  for r, t in frame.block_tables.items() for i, phys in enumerate(t)]
    else:
        starts = [(start, frame.requests[r].name, r)
                  for r, (start, _) in frame.reservations.items()]
    out = []
    for slot, text, owner in starts:
        col, row = layout.xy(slot)
        colour = "white" if frame.cells[slot] == TOKEN else request_colour(
            frame.requests[owner].order)
        size = 9 if len(text) > 2 else 10
        out.append(f"<text x='{_x(layout, col) + (CELL - GAP) / 2}' y='{_y(row) + 13}' "
                   f"font-size='{size}' font-weight='700' text-anchor='middle' fill='{colour}'>"
                   f"{escape(text)}</text>")
    return "".join(out)


def _changed(frame: Frame, layout: GridLayout) -> str:
    if not frame.changed:
        return ""
    segs = []
    for row, c0, c1 in changed_runs(sorted(frame.changed), layout):
        x0, x1 = _x(layout, c0) - 1, _x(layout, c1) + CELL - GAP + 1
        y0, y1 = _y(row) - 1, _y(row) + CELL - GAP + 1
        segs.append(f"M{x0},{y0}H{x1}V{y1}H{x0}Z")
    return (f"<path d='{''.join(segs)}' stroke='{CHANGED}' stroke-width='2.2' fill='none' "
            f"stroke-linejoin='round'/>")
