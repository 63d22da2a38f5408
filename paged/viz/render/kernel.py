"""The kernel lesson drawn: the arena grid (categories, the followed request's blocks, the one
being read, attention as heat), the kernel's tiles, and HTML panels of the block table and the
online softmax's state. Every number comes formatted from the frame's facts or its event
(``paged.viz.fold.kernel.frames``); nothing is computed here but geometry. Text from a trace (the
request id) is escaped."""

from __future__ import annotations

import html as _html
from pathlib import Path

from paged.viz import ui_text
from paged.viz.fold.kernel.frames import KernelFrame, KernelLesson, num, pct
from paged.viz.render.style import CATEGORY_COLOURS, INK, MUTED, cell_colour, stylesheet

# The arena's geometry in viewBox units, about one unit a pixel where presenter mode draws it
# (a side's full width at a 1280x720 projector, ~600 px): its labels at 16 units stay a 17 px
# line from the back row, and a block's strip holds "L5 · 12.3%".
COLS = 3  # blocks per row of the arena grid
CELL, CELL_H, LABEL, GAP, ROW_GAP = 10, 24, 30, 14, 6
FONT = 16  # every label of the arena and the tiles
HEAT_LOW, HEAT_HIGH = (243, 232, 251), (91, 26, 139)  # the heat scale: one hue, light to dark
WHITE = "#FFFFFF"
GREY = "#CBD2D9"  # any slot in a heat frame that is not the request's: heat is the only colour


def words(lang: str) -> dict[str, str]:
    return ui_text.load("kernel")[lang]


def heat_colour(share: float, top: float) -> str:
    t = 0.0 if top <= 0 else max(0.0, min(1.0, share / top))
    rgb = [round(a + (b - a) * t) for a, b in zip(HEAT_LOW, HEAT_HIGH, strict=True)]
    return "#{:02X}{:02X}{:02X}".format(*rgb)


def _luminance(colour: str) -> float:
    def one(c: int) -> float:
        v = c / 255
        return v / 12.92 if v <= 0.04045 else ((v + 0.055) / 1.055) ** 2.4

    r, g, b = (one(int(colour[k : k + 2], 16)) for k in (1, 3, 5))
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(a: str, b: str) -> float:
    """WCAG's contrast ratio of two ``#RRGGBB`` colours."""
    la, lb = _luminance(a), _luminance(b)
    return (max(la, lb) + 0.05) / (min(la, lb) + 0.05)


def ink_over(fills: list[str]) -> str:
    """White or ink, whichever reads better over every fill a label crosses: white on the pale
    reserved blue was 1.7:1, and on the heat scale's middle 3.2:1."""
    return max((WHITE, INK), key=lambda ink: min(contrast(ink, f) for f in fills))


def plate(x: float, y: float, width: float, fills: list[str]) -> tuple[str, str]:
    """A label's ink, and a white plate to write it on where neither ink nor white reaches
    WCAG AA's 4.5:1 over the fills it crosses (the heat scale's middle purples: 4.0:1 at best)."""
    ink = ink_over(fills)
    if min(contrast(ink, f) for f in fills) >= 4.5:
        return "", ink
    box = f"<rect x='{x - 2}' y='{y}' width='{width + 4:.0f}' height='{FONT + 4}' rx='3' fill='{WHITE}'/>"
    return box, INK


def _esc(s: object) -> str:
    return _html.escape(str(s), quote=True)


def _highlight(f: KernelFrame) -> int | None:
    """The physical block the frame points at: the logical block (chapter 1) or the tile."""
    if f.logical is None:
        return None
    return f.read.physical[f.logical]


def arena_svg(lesson: KernelLesson, i: int, lang: str) -> str:
    """The arena at the frame's step, block by block: ``COLS`` blocks a row, each a strip of its
    slots. The request's blocks are outlined and carry their logical index; a block others hold
    too is outlined dashed; the block being read, thick. In heat frames only the request's
    blocks have colour: their share of attention."""
    f = lesson.frames[i]
    bs, n = lesson.block_size, lesson.num_blocks
    arena, read = f.arena, f.read
    heat = f.stage == "heat"
    top = max(read.mass) if heat else 0.0
    logical_of = {b: k for k, b in enumerate(read.physical)}
    # every other request's blocks, named as the other lessons name them (A0, B1, ...)
    held = {
        b: (r, k) for r, t in arena.block_tables.items() if r != read.req for k, b in enumerate(t)
    }
    shared = {
        b for r, t in arena.block_tables.items() if r != read.req for b in t if b in logical_of
    }
    bw = LABEL + bs * CELL
    rows = -(-n // COLS)
    width, height = COLS * (bw + GAP) - GAP, rows * (CELL_H + ROW_GAP) + 4
    hi = _highlight(f)
    out = []
    for b in range(n):
        x0 = (b % COLS) * (bw + GAP)
        y0 = 2 + (b // COLS) * (CELL_H + ROW_GAP)
        out.append(
            f"<text x='{x0 + LABEL - 4}' y='{y0 + CELL_H * 0.7:.1f}' text-anchor='end' "
            f"font-size='{FONT}' fill='{MUTED}'>{b}</text>"
        )
        k = logical_of.get(b)
        owner = read.req if k is not None else held.get(b, (None, 0))[0]
        req = f" data-req='{_esc(owner)}'" if owner is not None else ""
        fills = []
        for s in range(bs):
            code = arena.cells[b * bs + s]
            if heat:
                fill = (
                    heat_colour(read.mass[k], top)
                    if k is not None
                    else (CATEGORY_COLOURS["free"] if code == "F" else GREY)
                )
            else:
                fill = cell_colour(code)
            fills.append(fill)
            out.append(
                f"<rect x='{x0 + LABEL + s * CELL}' y='{y0}' width='{CELL - 1}' "
                f"height='{CELL_H}' fill='{fill}'{req}/>"
            )
        if k is None:
            if b in held and not heat:
                r, j = held[b]
                name = f"{r}{j}"
                wide = 0.62 * FONT * len(name)
                under = -(-round(wide + 4) // CELL)
                back, ink = plate(x0 + LABEL + 4, y0 + 2, wide, fills[:under])
                out.append(
                    back + f"<text x='{x0 + LABEL + 4}' y='{y0 + CELL_H * 0.72:.1f}' "
                    f"font-size='{FONT}' fill='{ink}'>{_esc(name)}</text>"
                )
            continue
        dash = " stroke-dasharray='5 3'" if b in shared else ""
        stroke = 4 if b == hi else 1.6
        out.append(
            f"<rect class='pk-k-block' data-physical='{b}' data-logical='{k}' "
            f"x='{x0 + LABEL - 1}' y='{y0 - 1}' width='{bs * CELL + 1}' height='{CELL_H + 2}' "
            f"fill='none' stroke='{INK}' stroke-width='{stroke}'{dash}/>"
        )
        label = f"L{k}" + (f" · {pct(read.mass[k])}" if heat else "")
        wide = 0.62 * FONT * len(label)
        under = -(-round(wide + 4) // CELL)  # the slots the label crosses
        back, ink = plate(x0 + LABEL + 4, y0 + 2, wide, fills[:under])
        out.append(
            back + f"<text x='{x0 + LABEL + 4}' y='{y0 + CELL_H * 0.72:.1f}' font-size='{FONT}' "
            f"font-weight='700' fill='{ink}'>{_esc(label)}</text>"
        )
    return (
        f"<svg class='pk-k-arena' viewBox='0 0 {width} {height}' width='100%' "
        f"role='img' aria-label='{_esc(_arena_label(lesson, i, lang))}' data-pk-frame='{i}'>"
        f"{''.join(out)}</svg>"
    )


def _arena_label(lesson: KernelLesson, i: int, lang: str) -> str:
    """What the arena shows, for a screen reader: the request's blocks, the one being read and
    their shares of attention (the block table beside it is the same numbers as a table)."""
    f, w = lesson.frames[i], words(lang)
    read, hi = f.read, _highlight(f)
    blocks = ", ".join(
        f"L{k} → {w['block'].format(n=b)} {pct(read.mass[k])}"
        + (f" ({w['legend_read']})" if b == hi else "")
        for k, b in enumerate(read.physical)
    )
    return f"{w['legend_req'].format(req=read.req)}: {blocks}"


def tiles_svg(lesson: KernelLesson, i: int, lang: str) -> str:
    """The kernel's side: the request's blocks in logical order as the tiles it walks, each
    with its physical block; what each tile holds for this frame (m and l so far, its share of
    attention, the split program it goes to), and the tile being read, thick."""
    f, w = lesson.frames[i], words(lang)
    read = f.read
    n = len(read.physical)
    tw, th, gap = 92, 52, 8  # six tiles across a side's ~600 px in presenter mode
    width = n * (tw + gap) - gap
    rows_h = 3 * 22
    define = [part.strip() for part in _definition(f, w).split("·") if part.strip()]
    height = th + 8 + rows_h + 22 * len(define) + (8 if define else 0)
    top = max(read.mass)
    out = []
    for t, b in enumerate(read.physical):
        x = t * (tw + gap)
        done = f.stage in ("final", "gqa", "split") or (f.stage == "tile" and t <= (f.logical or 0))
        fill = CATEGORY_COLOURS["reservation"] if done else CATEGORY_COLOURS["free"]
        if f.stage == "heat":
            fill = heat_colour(read.mass[t], top)
        stroke = 4 if f.logical == t and f.stage in ("table", "tile") else 1.4
        name, note = f"L{t} → {b}", _tile_note(f, t, w)
        out.append(
            f"<rect x='{x}' y='2' width='{tw}' height='{th}' rx='5' fill='{fill}' "
            f"stroke='{INK}' stroke-width='{stroke}'/>"
        )
        for text, base, bold in ((name, 22, " font-weight='700'"), (note, 44, "")):
            wide = min(tw - 8, 0.62 * FONT * len(text))
            back, ink = plate(x + (tw - wide) / 2, base - FONT, wide, [fill])
            out.append(
                back + f"<text x='{x + tw / 2}' y='{base}' text-anchor='middle' "
                f"font-size='{FONT}'{bold} fill='{ink}'>{_esc(text)}</text>"
            )
        for r, line in enumerate(_tile_lines(f, t, w, lesson.head)):
            out.append(
                f"<text x='{x + 4}' y='{th + 24 + r * 22}' font-size='{FONT}' fill='{INK}'>"
                f"{_esc(line)}</text>"
            )
    for r, line in enumerate(define):  # what m and l are, where a projector shows them
        out.append(
            f"<text class='pk-k-define' x='0' y='{th + 8 + rows_h + 18 + 22 * r}' "
            f"font-size='{FONT}' fill='{INK}'>{_esc(line)}</text>"
        )
    label = " · ".join(
        f"L{t} → {b}: {_tile_note(f, t, w)} {' '.join(_tile_lines(f, t, w, lesson.head))}".strip()
        for t, b in enumerate(read.physical)
    )
    label += "".join(f". {line}" for line in define)
    return (
        f"<svg class='pk-k-tiles' viewBox='0 0 {width} {height}' width='100%' role='img' "
        f"aria-label='{_esc(label)}' data-pk-frame='{i}'>{''.join(out)}</svg>"
    )


def _definition(f: KernelFrame, w: dict[str, str]) -> str:
    """Which (m, l) the tiles show on this frame, and what they are: the same boxes hold the
    running pair on the walk and each split's own pair on split-K's frame."""
    return {"tile": w["define_walk"], "final": w["define_final"], "split": w["define_split"]}.get(
        f.stage, ""
    )


def _tile_note(f: KernelFrame, t: int, w: dict[str, str]) -> str:
    if f.stage == "heat":
        return pct(f.read.mass[t])
    if f.stage == "split":  # the boxes hold each tile's own (m, l), whatever the splits
        return w["own_ml"]
    return w["tile"].format(n=t + 1)


def _tile_lines(f: KernelFrame, t: int, w: dict[str, str], h: int) -> list[str]:
    read = f.read
    if f.stage == "tile" and t > (f.logical or 0):
        return [w["before"]]
    if f.stage in ("tile", "final"):
        # the tile's own sum beside the running one: l here is l before times exp(m_old - m)
        # plus it, so the running l can be checked tile by tile
        own = [f"{w['own']} {num(read.part_l[t][h])}"] if f.stage == "tile" else []
        return [f"m {num(read.tile_m[t][h])}", f"l {num(read.tile_l[t][h])}", *own]
    if f.stage == "split":
        return [f"m {num(read.part_m[t][h])}", f"l {num(read.part_l[t][h])}"]
    if f.stage == "gqa":
        return [w["q_head"].format(n=h) for h in read.heads][:3]
    return []


def table_panel(lesson: KernelLesson, i: int, lang: str) -> str:
    """The request's block table: logical -> physical, shared or not, and (from the heat
    chapter on) this step's share of attention per block; the entry the frame points at is
    marked. Laid across, one column an entry: three or four rows under the arena, so a
    1280x580 projector shows the whole table under it (a row an entry ran off its foot)."""
    f, w = lesson.frames[i], words(lang)
    read = f.read
    shared = {b for r, t in f.arena.block_tables.items() if r != read.req for b in t}
    on = [" class='pk-k-on'" if f.logical == k else "" for k in range(len(read.physical))]

    def row(head: str, cells: list[str]) -> str:
        tds = "".join(f"<td{on[k]}>{c}</td>" for k, c in enumerate(cells))
        return f"<tr><th scope='row'>{_esc(head)}</th>{tds}</tr>"

    rows = [
        row(w["logical"], [str(k) for k in range(len(read.physical))]),
        row(w["physical"], [str(b) for b in read.physical]),
        row(w["shared"], ["✓" if b in shared else "" for b in read.physical]),
    ]
    if f.stage in ("heat", "gqa", "split"):  # from the chapter that explains it on
        rows.append(row(w["mass"], [pct(m) for m in read.mass]))
    return (
        f"<div class='pk-k-panel'><div class='pk-k-h'>"
        f"{_esc(w['table_title'].format(req=read.req))}</div>"
        f"<table class='pk-k-table pk-k-across'>{''.join(rows)}</table></div>"
    )


def source_line(lesson: KernelLesson, i: int, lang: str) -> str:
    """Who walked the tiles this frame shows, in one line: the kernel that ran, or the
    reference replaying it."""
    read, w = lesson.frames[i].read, words(lang)
    if read.source == "cpu":
        return w["source_cpu"].format(bs=lesson.block_size, split=read.split)
    return w["source_reference"]


def state_panel(lesson: KernelLesson, i: int, lang: str) -> str:
    """The online softmax's state for every query head of the group: after the tile being
    read, after all of them beside softmax over all scores at once, or split-K's merge; under
    its title, which kernel walked it."""
    f, w = lesson.frames[i], words(lang)
    read = f.read
    source = f"<div class='pk-k-src'>{_esc(source_line(lesson, i, lang))}</div>"
    head = f"<div class='pk-k-h'>{_esc(w['state_title'].format(layer=read.layer))}</div>{source}"
    # no state before the walk or in the heat chapter: no heading over nothing, but still who
    # walked the tiles
    alone = f"<div class='pk-k-panel'>{source}</div>"
    if f.stage in ("tile", "table"):
        t = f.logical or 0
        if f.stage == "table":
            return alone
        rows = "".join(
            f"<tr><td>{h}</td><td>{num(read.tile_m[t][g])}</td><td>{num(read.tile_l[t][g])}</td></tr>"
            for g, h in enumerate(read.heads)
        )
        cols = (w["head"], f"m ({w['running']})", f"l ({w['running']})")
    elif f.stage == "final":
        rows = "".join(
            f"<tr><td>{h}</td><td>{num(read.tile_m[-1][g])} / {num(read.full_m[g])}</td>"
            f"<td>{num(read.tile_l[-1][g])} / {num(read.full_l[g])}</td></tr>"
            for g, h in enumerate(read.heads)
        )
        cols = (
            w["head"],
            f"m ({w['walk']} / {w['all_at_once']})",
            f"l ({w['walk']} / {w['all_at_once']})",
        )
    elif f.stage == "split":
        rows = "".join(
            f"<tr><td>{h}</td><td>{num(read.merged_m[g])}</td><td>{num(read.merged_l[g])}</td></tr>"
            for g, h in enumerate(read.heads)
        )
        cols = (w["head"], f"m ({w['merged']})", f"l ({w['merged']})")
    elif f.stage == "gqa":
        rows = (
            f"<tr><td>{_esc(w['kv_head'].format(n=read.kv_head))}</td>"
            f"<td>{len(read.physical)}</td><td>{len(read.physical) * len(read.heads)}</td></tr>"
        )
        cols = ("", w["reads"], f"{w['reads']} × {len(read.heads)}")
    else:
        return alone
    th = "".join(f"<th>{_esc(c)}</th>" for c in cols)
    return (
        f"<div class='pk-k-panel'>{head}<table class='pk-k-table'><tr>{th}</tr>{rows}</table></div>"
    )


CSS_FILE = Path(__file__).resolve().parent / "kernel.css"


def legend(lang: str, req: str) -> str:
    w = words(lang)
    scale = "".join(
        f"<span style='display:inline-block;width:18px;height:14px;background:"
        f"{heat_colour(t / 4, 1)}'></span>"
        for t in range(5)
    )
    return (
        f"<style>{stylesheet(CSS_FILE)}</style><div class='pk-k-legend'>"
        f"<span style='border:2px solid {INK};padding:0 .4rem'>{_esc(w['legend_req'].format(req=req))}</span> "
        f"<span style='border:2px dashed {INK};padding:0 .4rem'>{_esc(w['shared'])}</span> "
        f"<span style='border:4px solid {INK};padding:0 .4rem'>{_esc(w['legend_read'])}</span> "
        f"{scale} {_esc(w['heat_legend'])}</div>"
    )


def figure_svg(lesson: KernelLesson, i: int, lang: str) -> str:
    """Frame ``i`` as one 16:9 SVG for slides: the chapter title, both captions, the arena and
    the kernel's tiles side by side."""
    from paged.viz.fold.kernel.frames import caption

    f = lesson.frames[i]
    left, right = caption(lesson, i, lang)
    title = lesson.spec.chapter_titles[f.chapter][lang]
    # top-aligned under the captions (an <svg> centres its drawing in the box by default)
    arena, tiles = (
        d.replace("<svg ", "<svg preserveAspectRatio='xMidYMin meet' ", 1)
        for d in (arena_svg(lesson, i, lang), tiles_svg(lesson, i, lang))
    )
    return (
        "<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 1280 720' width='1280' "
        f"height='720' font-family='sans-serif'><rect width='1280' height='720' fill='white'/>"
        f"<text x='24' y='44' font-size='30' font-weight='700' fill='{INK}'>{_esc(title)}</text>"
        f"<text x='24' y='86' font-size='19' fill='{INK}'>{_esc(left)}</text>"
        f"<text x='24' y='116' font-size='19' fill='{INK}'>{_esc(right)}</text>"
        f"<text x='24' y='704' font-size='16' fill='{MUTED}'>"
        f"{_esc(source_line(lesson, i, lang))}</text>"
        f"<svg x='24' y='150' width='600' height='520'>{arena}</svg>"
        f"<svg x='656' y='150' width='600' height='520'>{tiles}</svg></svg>\n"
    )
