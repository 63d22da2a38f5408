"""The arena grid as inline SVG: what the app draws on every keypress.

Same cells, colours, marks and layout as ``figures.arena_parts`` (the lecture figures), but
plain SVG, and small: each row is drawn as runs of like cells (one ``<rect>`` per run, hatched
or crossed through a pattern), then one white path cuts the gaps between cells. A 1,024-slot
frame is a few kilobytes the browser paints in milliseconds, where a plotly heatmap spent most
of a keypress re-rendering. Each run has a tooltip. Pure strings; no Streamlit, no plotly.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from html import escape
from itertools import groupby

from paged.viz.fold.panels import label_starts
from paged.viz.fold.reducer import CELL_CATEGORY, HOLE, INTERNAL, PAGED, Frame
from paged.viz.render.cpu_grid import cpu_tier_svg, tier_height
from paged.viz.render.layout import HOVER_MAX_SLOTS, GridLayout, changed_runs
from paged.viz.render.style import (
    CATEGORY_COLOURS,
    CATEGORY_MARKS,
    CHANGED,
    MUTED,
    cell_colour,
    cell_ink,
    words,
)
from paged.viz.render.to_scale import text_scale

CELL = 20  # user units per cell (pitch)
GAP = 2  # white gap between cells
SEP = 5  # white rule between blocks that share a row
LABEL_W = 34  # room for the row labels on the left
NOTE_LINE = 15  # a line of the note under a grid drawn to scale
_ID_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")  # what may never reach an id attribute
_MARKED = re.compile(f"[{INTERNAL}{HOLE}]")  # cell codes drawn with a pattern


def _x(col: int) -> int:
    return LABEL_W + col * CELL


def _y(row: int, layout: GridLayout) -> float:
    # unscaled rows keep integer coordinates: the same bytes as before rows could be scaled
    return row * CELL if not layout.scaled else round(row * CELL * layout.row_scale, 2)


def _pitch(layout: GridLayout) -> float:
    """A row's height, gap included."""
    return CELL if not layout.scaled else round(CELL * layout.row_scale, 2)


def _h(layout: GridLayout) -> float:
    """A cell's drawn height: the gap shrinks with the row, so drawn area follows bytes."""
    return CELL - GAP if not layout.scaled else round((CELL - GAP) * layout.row_scale, 2)


def _row_gap(layout: GridLayout) -> float:
    return GAP if not layout.scaled else round(GAP * layout.row_scale, 2)


def _mid(row: int, layout: GridLayout, size: float) -> float:
    """Baseline that centres text of ``size`` in a scaled row."""
    return round(_y(row, layout) + _h(layout) / 2 + 0.36 * size, 2)


def arena_svg(
    frame: Frame,
    layout: GridLayout,
    lang: str = "en",
    meta: int | None = None,
    max_height_px: int = 430,
    uid: str = "",
    room_below: float = 0,
    note: Sequence[str] = (),
    overlay: str = "",
) -> str:
    """One side's arena as an ``<svg>`` that scales to its column (at most ``max_height_px``
    tall). ``meta`` lands in ``data-pk-frame`` so a browser test can tell what is painted;
    ``uid`` keeps pattern ids apart when several grids share a page: a caller-derived id
    (an index or a side), never a name from the trace; it defaults to the allocator kind.
    ``note``: lines under a grid drawn to scale (paged/viz/render/to_scale.py), saying what the scale is.
    ``overlay``: SVG drawn over everything (paged/viz/render/point.py: block marks and callouts)."""
    uid = _ID_UNSAFE.sub("", uid) or _ID_UNSAFE.sub("", frame.run.allocator) or "g"
    width = _x(layout.cols) - GAP
    height = grid_height(layout)
    defs, fills = _patterns(frame, layout, uid)
    body = [
        _runs(frame, layout, lang, fills),
        _gaps(layout),
        _owner_breaks(frame, layout),
        _row_labels(frame, layout),
        *_marks(frame, layout),
        cpu_tier_svg(frame, layout, height + GAP, LABEL_W, CELL, GAP, lang),  # "" without one
        _note(note, height + tier_height(frame, layout, CELL), width),
        overlay,
    ]
    # room_below: the other side's CPU tier (and note), so both sides are drawn at one scale
    height += max(room_under(frame, layout, note), room_below)
    tag = f" data-pk-frame='{meta}'" if meta is not None else ""
    # A margin of 3 units keeps the "changed" outline of an edge cell from being clipped.
    return (
        f"<svg class='pk-arena'{tag} viewBox='-1 -3 {width + 4} {height + 6}' "
        f"preserveAspectRatio='xMidYMin meet' style='width:100%;max-height:{max_height_px}px;"
        f"display:block' font-family='Inter, Helvetica, Arial, sans-serif'>"
        f"<defs>{defs}</defs>{''.join(body)}</svg>"
    )


def cell_box(row: int, c0: int, c1: int, layout: GridLayout) -> tuple[float, float, float, float]:
    """``(x0, y0, x1, y1)`` of the cells ``c0`` .. ``c1`` of ``row``, as drawn (gaps outside)."""
    y = _y(row, layout)
    return _x(c0), y, _x(c1) + CELL - GAP, round(y + _h(layout), 2)


def grid_geometry(layout: GridLayout) -> dict[str, float]:
    """Where slot ``s`` is drawn, as numbers a browser maps a click with: column ``s % cols``
    starts at ``x0 + col * cell``, row ``s // cols`` at ``row * pitch`` (user units)."""
    return {"x0": LABEL_W, "cell": CELL, "pitch": _pitch(layout), "gap": GAP, "cols": layout.cols}


def grid_height(layout: GridLayout) -> float:
    """The grid's drawn height, its CPU tier and note left out."""
    return layout.rows * _pitch(layout) - GAP  # a full gap under a scaled row too: sides alike


def room_under(frame: Frame, layout: GridLayout, note: Sequence[str] = ()) -> float:
    """Height a grid needs under its last row: the CPU tier, then the note (0 for neither)."""
    return tier_height(frame, layout, CELL) + (len(note) * NOTE_LINE + 6 if note else 0)


def _note(lines: Sequence[str], top: float, width: float) -> str:
    """The scale note, one text line each under the whole grid, labels included; squeezed to
    the grid's width where a line would run past it."""
    out = []
    for k, line in enumerate(lines):
        est = sum(10 if ord(ch) > 0x2E80 else 5.6 for ch in line)  # font-size 10
        fit = f" textLength='{width}' lengthAdjust='spacingAndGlyphs'" if est > width else ""
        out.append(
            f"<text x='0' y='{round(top + 6 + (k + 1) * NOTE_LINE - 4, 2)}' font-size='10' "
            f"fill='{MUTED}'{fit}>{escape(line)}</text>"
        )
    return f"<g class='pk-scale'>{''.join(out)}</g>" if out else ""


def _mark(kind: str, c: float, mid: float, d: float, e: float) -> str:
    """A marked cell's stroke (never-used slots) or cross (unusable holes), round its middle."""
    if kind == "stroke":
        return f"M{c - d:.1f},{mid + e:.1f}L{c + d:.1f},{mid - e:.1f}"
    return (
        f"M{c - d:.1f},{mid - e:.1f}L{c + d:.1f},{mid + e:.1f}M{c - d:.1f},{mid + e:.1f}"
        f"L{c + d:.1f},{mid - e:.1f}"
    )


def swatch(category: str, changed: bool = False) -> str:
    """One grid cell of ``category`` as a small inline SVG, drawn as the grid draws it (fill,
    mark and ink; with ``changed``, the frame's outline round a free cell): the legend's key."""
    s = CELL - GAP
    code = {"internal": INTERNAL, "external": HOLE}.get(category)
    fill, ink = CATEGORY_COLOURS[category], CATEGORY_MARKS[category]
    mark = ""
    if code is not None:
        kind = "stroke" if code == INTERNAL else "cross"
        mark = f"<path d='{_mark(kind, s / 2, s / 2, s * 0.28, s * 0.28)}' stroke='{ink}' stroke-width='1.3'/>"
    outline = (
        f"<rect x='1.1' y='1.1' width='{s - 2.2}' height='{s - 2.2}' fill='none' "
        f"stroke='{CHANGED}' stroke-width='2.2'/>"
        if changed
        else ""
    )
    return (
        f"<svg class='cell' viewBox='0 0 {s} {s}' width='15' height='15' aria-hidden='true'>"
        f"<rect width='{s}' height='{s}' fill='{fill}'/>{mark}{outline}</svg>"
    )


def _patterns(frame: Frame, layout: GridLayout, uid: str) -> tuple[str, dict[str, str]]:
    """Tiles for marked cells: a stroke for never-used slots (one per owner colour), a cross for
    unusable holes. Keyed by fill colour; the pitch matches the grid, so tiles line up."""
    s, d = CELL - GAP, (CELL - GAP) * 0.28
    c = s / 2
    h, e = _h(layout), _h(layout) * 0.28  # a scaled row's tile is squashed, marks with it
    mid = h / 2
    defs, fills = [], {}
    wanted: dict[str, tuple[str, str]] = {}
    for m in _MARKED.finditer(frame.cells):  # the marked slots only, in slot order
        code = m.group()
        kind = "stroke" if code == INTERNAL else "cross"
        wanted.setdefault(cell_colour(code), (kind, cell_ink(code)))
        if len(wanted) == 2:  # both patterns found: the rest of the arena adds none
            break
    for n, (fill, (kind, ink)) in enumerate(wanted.items()):
        pid = f"pk-{uid}-{n}"
        mark = _mark(kind, c, mid, d, e)
        defs.append(
            f"<pattern id='{pid}' x='{LABEL_W}' y='0' width='{CELL}' height='{_pitch(layout)}' "
            f"patternUnits='userSpaceOnUse'><rect width='{s}' height='{h}' "
            f"fill='{fill}'/><path d='{mark}' stroke='{ink}' stroke-width='1.3'/>"
            f"</pattern>"
        )
        fills[fill] = f"url(#{pid})"
    return "".join(defs), fills


def _runs(frame: Frame, layout: GridLayout, lang: str, fills: dict[str, str]) -> str:
    """Each row as runs of cells with the same owner and category: one rect per run, with a
    tooltip while the arena is small (past that, tooltips would outweigh the picture)."""
    w = words(lang) if frame.run.num_slots <= HOVER_MAX_SLOTS else None
    out = []
    owners, cells = frame.owners, frame.cells  # locals: this loop visits every slot
    for row in range(layout.rows):
        start = row * layout.cols
        end = min(start + layout.cols, frame.run.num_slots)
        s = start
        for _, like in groupby(zip(owners[start:end], cells[start:end], strict=True)):
            e = s + len(list(like))
            out.append(_run_rect(frame, layout, s, e, fills, w))
            s = e
    return "".join(out)


def _run_rect(
    frame: Frame, layout: GridLayout, s: int, e: int, fills: dict[str, str], w: dict | None
) -> str:
    owner, code = frame.owners[s], frame.cells[s]
    fill = cell_colour(code)
    col, row = layout.xy(s)
    # whose cells these are: the player lights a request up everywhere it appears
    who_attr = f" data-req='{escape(owner)}'" if owner is not None else ""
    rect = (
        f"<rect x='{_x(col)}' y='{_y(row, layout)}' width='{(e - s) * CELL - GAP}' "
        f"height='{_h(layout)}' fill='{fills.get(fill, fill)}'{who_attr}"
    )
    if w is None:
        return rect + "/>"
    who = f"{frame.requests[owner].name} · " if owner is not None else ""
    slots = f"{w['slot']} {s}" if e - s == 1 else f"{w['slot']} {s}–{e - 1}"
    return f"{rect}><title>{escape(who)}{slots} · {escape(w[CELL_CATEGORY[code]])}</title></rect>"


def _gaps(layout: GridLayout) -> str:
    """White lines between the cells of a run, wider between blocks sharing a row."""
    height = layout.rows * _pitch(layout)
    thin = "".join(
        f"M{_x(k) - GAP / 2},0V{height}" for k in range(1, layout.cols) if k % layout.block_size
    )
    out = f"<path d='{thin}' stroke='white' stroke-width='{GAP}'/>"
    wide = "".join(
        f"M{_x(k) - GAP / 2},0V{height}"
        for k in range(layout.block_size, layout.cols, layout.block_size)
    )
    if wide:
        out += f"<path d='{wide}' stroke='white' stroke-width='{SEP}'/>"
    return out


def _owner_breaks(frame: Frame, layout: GridLayout) -> str:
    """A wide white rule where one request's run meets another's inside a row: requests have
    no colour of their own, so this (with the labels) tells where one ends."""
    segs = []
    owners = frame.owners
    # every slot is visited: test the owners first, place only the few that differ
    n = frame.run.num_slots
    for s, a, b in zip(range(1, n), owners[: n - 1], owners[1:n], strict=True):
        if a is None or b is None or a == b:
            continue
        col, row = layout.xy(s)
        if col % layout.block_size:
            segs.append(f"M{_x(col) - GAP / 2},{_y(row, layout)}v{_h(layout)}")
    if not segs:
        return ""
    return f"<path d='{''.join(segs)}' stroke='white' stroke-width='{SEP + 1}'/>"


def _row_labels(frame: Frame, layout: GridLayout) -> str:
    paged = frame.run.allocator == PAGED
    per_row = layout.cols // layout.block_size
    step = max(1, -(-layout.rows // 24))
    size: float = 10
    if layout.scaled:  # shorter rows: smaller labels, and no closer than a label's height
        size = round(min(10.0, max(7.0, 0.85 * _pitch(layout))), 1)
        step = max(step, math.ceil((size + 1) / _pitch(layout)))

    def y(r: int) -> float:
        return _y(r, layout) + CELL / 2 + 2 if not layout.scaled else _mid(r, layout, size)

    return "".join(
        f"<text x='{LABEL_W - 5}' y='{y(r)}' font-size='{size}' text-anchor='end' "
        f"fill='{MUTED}' class='pk-rl' data-cy='{_y(r, layout) + _h(layout) / 2}'>"
        f"{f'#{r * per_row}' if paged else r * layout.cols}</text>"
        for r in range(0, -(-frame.run.num_slots // layout.cols), step)  # its own rows only
    )


def _marks(frame: Frame, layout: GridLayout) -> list[str]:
    """The names, the ref counts and the changed outline, in the order they are painted: a
    name taller than its row (rows drawn to scale) over the outline, else under it."""
    labels = [_names(frame, layout), _ref_counts(frame, layout)]
    changed = _changed(frame, layout)
    return [changed, *labels] if layout.scaled else [*labels, changed]


def _names(frame: Frame, layout: GridLayout) -> str:
    """The owner's name at the start of each block (with its logical index) or run; in rows
    too short for legible text, none (the block tables beside the grid still say)."""
    t = text_scale(layout)
    if t is None:
        return ""
    out = []
    for slot, text, owner in label_starts(frame):
        col, row = layout.xy(slot)
        y = _y(row, layout) + 13 if not layout.scaled else _mid(row, layout, 10 * t)
        if frame.run.allocator == PAGED:
            span = frame.run.block_size
        elif owner in frame.reservations:
            span = frame.reservations[owner][1]
        else:  # a request that stopped this frame: its slots still on the grid
            span = frame.owners.count(owner)
        cells = max(1, min(span, layout.cols - col))
        col, cells, high = _stagger(row, col, cells, layout)
        room = cells * CELL - GAP - 3
        code = frame.cells[row * layout.cols + col]
        # a name taller than its row is edged in its own cell's colour where it stands over
        # the rows above and below (their cells, the gaps, the changed outline)
        halo = (
            f"stroke='{cell_colour(code)}' stroke-width='3' paint-order='stroke' "
            if high > _h(layout)
            else ""
        )
        # where the player may grow the name for a projector (fit_present.js fitGridText): the
        # row's middle, the name's left edge, and its room across and down
        fit = f"class='pk-nm' data-cy='{_y(row, layout) + _h(layout) / 2}' data-x0='{_x(col)}' "
        head = (
            fit
            + f"data-h='{high}' data-room='{room}' y='{y}' font-weight='700' "
            + f"fill='{cell_ink(code)}' {halo}pointer-events='none'"
        )
        if len(text) <= 2:
            out.append(
                f"<text x='{_x(col) + (CELL - GAP) / 2}' {head} font-size='{_size(10, t)}' "
                f"text-anchor='middle'>{escape(text)}</text>"
            )
            continue
        # A longer name (ids of up to 4 characters, plus a block index) is shown whole: it
        # starts at its first cell and runs over the owner's next cells in the row; with no
        # such room it is narrowed to fit its one cell.
        size = max(min(6.0, 9.0 * t), min(9.0 * t, room / (0.62 * len(text))))
        fit = (
            f" textLength='{room}' lengthAdjust='spacingAndGlyphs'"
            if 0.62 * size * len(text) > room
            else ""
        )
        out.append(
            f"<text x='{_x(col) + 1.5}' {head} font-size='{size:.1f}'{fit}>{escape(text)}</text>"
        )
    return "".join(out)


def _stagger(row: int, col: int, cells: int, layout: GridLayout) -> tuple[int, int, float]:
    """Where a name sits in its owner's cells of ``row``: ``(column, cells across, height)``.

    A row drawn shorter than a full cell (an fp8 arena beside a bf16 one) is shorter than a
    name of legible size (12 px at 1280x720 is about 13 units, such a row 9). So the names of
    three rows running take turns along the block: the first, second and third part of it.
    A name then stands over its row into its neighbours' where their names are not, and names
    at one place along the block are three rows apart: room enough for the player's size."""
    if not layout.scaled or cells < 3:
        return col, cells, _h(layout)
    part = cells // 3
    return col + (row % 3) * part, part, round(3 * _pitch(layout) - _row_gap(layout), 2)


def _size(base: int, t: float) -> str:
    return str(base) if t == 1.0 else f"{base * t:.1f}"


def ref_counts(frame: Frame) -> dict[int, int]:
    """Physical blocks in more than one block table (prefix sharing, parallel samples), with
    how many tables point at each."""
    counts: dict[int, int] = {}
    for table in frame.block_tables.values():
        for b in table:
            if b >= 0:
                counts[b] = counts.get(b, 0) + 1
    return {b: n for b, n in counts.items() if n > 1}


def _ref_counts(frame: Frame, layout: GridLayout) -> str:
    """A shared block's ref count, "x3", in its last cell: one physical block, three tables."""
    t = text_scale(layout)
    if frame.run.allocator != PAGED or t is None:
        return ""
    out = []
    bs = frame.run.block_size
    for b, n in sorted(ref_counts(frame).items()):
        col, row = layout.xy(b * bs + bs - 1)
        y = _y(row, layout) + 13 if not layout.scaled else _mid(row, layout, 9 * t)
        out.append(
            f"<text x='{_x(col) + (CELL - GAP) / 2}' y='{y}' font-size='{_size(9, t)}' "
            f"font-weight='700' text-anchor='middle' fill='{CHANGED}' class='pk-rc' "
            f"data-cy='{_y(row, layout) + _h(layout) / 2}' data-x0='{_x(col)}' "
            f"data-h='{_h(layout)}' pointer-events='none'>\u00d7{int(n)}</text>"
        )
    return "".join(out)


def _changed(frame: Frame, layout: GridLayout) -> str:
    if not frame.changed:
        return ""
    segs = []
    # half the gap round the cells: outlines of two changed rows meet in the gap between them
    edge = 1 if not layout.scaled else _row_gap(layout) / 2
    for row, c0, c1 in changed_runs(sorted(frame.changed), layout):
        x0, x1 = _x(c0) - 1, _x(c1) + CELL - GAP + 1
        y0, y1 = _y(row, layout) - edge, _y(row, layout) + _h(layout) + edge
        segs.append(f"M{x0},{y0}H{x1}V{y1}H{x0}Z")
    return (
        f"<path d='{''.join(segs)}' stroke='{CHANGED}' stroke-width='2.2' fill='none' "
        f"stroke-linejoin='round' pointer-events='none'/>"
    )
