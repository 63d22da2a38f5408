"""What a lecturer can point at on the arena grid, drawn by the server like the grid itself.

Two things go into a frame's SVG (``paged.viz.render.svg.arena_svg``'s ``overlay``):

- **block marks** (paging only): one invisible outline per physical block some block table
  holds, ``data-block`` its number. The player (paged/viz/player/pointing.js) outlines the blocks of
  the request in focus and aims its arrows at them; it never works out where a block is.
- **callouts**: the frame's key fact, outlined on the cells it is about, with its sentence in
  ``data-say`` (the player sets it beside the outline, in HTML, at a size the back row can
  read). Every number is an event's own field, and every place the fold's: the refusal's
  ``largest_hole`` outlined on the hole of that size, a copy-on-write's source and copy, the
  blocks a swap emptied or filled. Pure strings, like ``paged.viz.render.svg``.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape

from paged.engine.core import events as E
from paged.viz import ui_text
from paged.viz.fold.reducer import PAGED, Frame
from paged.viz.render import svg
from paged.viz.render.layout import GridLayout, changed_runs
from paged.viz.render.style import INK

TEXT = ui_text.load("point")  # paged/viz/text/point.toml
MAX_CALLOUTS = 3  # per grid: more sentences than this would cover the cells they explain


@dataclass(frozen=True)
class Callout:
    """A fact about frame cells: ``kind`` (hole, copied, swapped_out, swapped_in), the slots
    it is about (``(start, length)`` ranges) and the sentence that says it."""

    kind: str
    ranges: tuple[tuple[int, int], ...]
    say: str


def free_runs(frame: Frame) -> list[tuple[int, int]]:
    """Maximal runs of slots no request holds, as ``(start, length)``, in slot order."""
    out: list[tuple[int, int]] = []
    start = None
    for s, owner in enumerate(frame.owners):
        if owner is None and start is None:
            start = s
        elif owner is not None and start is not None:
            out.append((start, s - start))
            start = None
    if start is not None:
        out.append((start, len(frame.owners) - start))
    return out


def _name(frame: Frame, req: str) -> str:
    v = frame.requests.get(req)
    return v.name if v is not None else "?"


def _blocks(frame: Frame, blocks: list[int]) -> tuple[tuple[int, int], ...]:
    bs = frame.run.block_size
    n = frame.run.num_slots
    return tuple((b * bs, bs) for b in blocks if 0 <= b * bs < n)


def callouts(frame: Frame, lang: str = "en") -> list[Callout]:
    """The frame's key facts, in the order its events happened (at most MAX_CALLOUTS). A
    ``no_hole`` refusal is shown only where the frame has a hole of exactly the size the
    allocator reported, so the outline and the number cannot disagree."""
    t = TEXT.get(lang, TEXT["en"])
    out: list[Callout] = []
    refused = frame.blocked_by("no_hole") if frame.run.allocator != PAGED else None
    if refused is not None:
        hole = next((r for r in free_runs(frame) if r[1] == refused.largest_hole), None)
        if hole is not None:
            say = t["hole"].format(hole=refused.largest_hole, need=refused.need_slots)
            out.append(Callout("hole", (hole,), say))
    if frame.run.allocator == PAGED:
        for ev in frame.events:
            match ev:
                case E.BlockCopied():
                    say = t["copied"].format(req=_name(frame, ev.req), src=ev.src, dst=ev.dst)
                    out.append(Callout("copied", _blocks(frame, [ev.src, ev.dst]), say))
                case E.SwappedOut():
                    gpu = [d for d, _ in ev.block_map]
                    say = t["swapped_out"].format(req=_name(frame, ev.req), n=len(gpu))
                    out.append(Callout("swapped_out", _blocks(frame, gpu), say))
                case E.SwappedIn():
                    gpu = [d for _, d in ev.block_map]
                    say = t["swapped_in"].format(req=_name(frame, ev.req), n=len(gpu))
                    out.append(Callout("swapped_in", _blocks(frame, gpu), say))
    return [c for c in out if c.ranges][:MAX_CALLOUTS]


def _outline(ranges: tuple[tuple[int, int], ...], layout: GridLayout) -> str:
    """Path data round each row-run of the slots in ``ranges``."""
    slots = sorted({s for start, n in ranges for s in range(start, start + n)})
    # rows under one another with the same columns make one box: a hole of five full rows
    # is one outline, not five
    boxes: list[list[int]] = []  # [first row, last row, first column, last column]
    for row, c0, c1 in changed_runs(slots, layout):
        last = boxes[-1] if boxes else None
        if last is not None and last[1] == row - 1 and (last[2], last[3]) == (c0, c1):
            last[1] = row
        else:
            boxes.append([row, row, c0, c1])
    segs = []
    for r0, r1, c0, c1 in boxes:
        x0, y0, x1, _ = svg.cell_box(r0, c0, c1, layout)
        *_, y1 = svg.cell_box(r1, c0, c1, layout)
        segs.append(f"M{x0 - 2},{y0 - 2}H{x1 + 2}V{y1 + 2}H{x0 - 2}Z")
    return "".join(segs)


def block_marks(frame: Frame, layout: GridLayout) -> str:
    """An invisible outline per physical block in any block table (paging), for the player."""
    if frame.run.allocator != PAGED:
        return ""
    held = sorted({b for table in frame.block_tables.values() for b in table if b >= 0})
    bs = frame.run.block_size
    out = []
    for b in held:
        if b * bs >= frame.run.num_slots:
            continue
        col, row = layout.xy(b * bs)
        x0, y0, x1, y1 = svg.cell_box(row, col, col + bs - 1, layout)
        out.append(
            f"<rect data-block='{b}' x='{x0 - 1}' y='{y0 - 1}' width='{x1 - x0 + 2}' "
            f"height='{round(y1 - y0 + 2, 2)}'/>"
        )
    return f"<g class='pk-blocks' fill='none' pointer-events='none'>{''.join(out)}</g>"


def overlay(frame: Frame, layout: GridLayout, lang: str = "en") -> str:
    """Block marks and callouts for ``frame``'s grid ("" when it has neither)."""
    parts = [block_marks(frame, layout)]
    for c in callouts(frame, lang):
        parts.append(
            f"<g class='pk-callout' data-kind='{c.kind}' data-say='{escape(c.say)}' "
            f"pointer-events='none'><path d='{_outline(c.ranges, layout)}' fill='none' "
            f"stroke='{INK}' stroke-width='3' stroke-dasharray='6 3' "
            f"vector-effect='non-scaling-stroke'/><title>{escape(c.say)}</title></g>"
        )
    return "".join(parts)
