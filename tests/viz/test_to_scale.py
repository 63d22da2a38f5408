"""Drawn area follows bytes (paged/viz/render/to_scale.py). The fp8 lesson's two arenas hold the same bytes
(bf16 left, fp8 right, twice the blocks), so on screen they must cover the same area: in the
app's SVG grids and in the lecture figure. Other ratios come from a copy of the six-step
lesson's trace (two runs of equal slots) whose header gives each run a block size in bytes;
the frames are the recorded ones."""

from __future__ import annotations

import functools
import json
import re
from fractions import Fraction

import pytest

from paged.engine.trace import io as T
from paged.engine.trace.header import RunHeader
from paged.viz.fold.lesson import Lesson, build
from paged.viz.fold.lesson_folder import load_spec, trace_path
from paged.viz.player import payload as player
from paged.viz.render import figures, point, svg, to_scale
from paged.viz.render.cpu_grid import tier_height
from paged.viz.render.layout import grid_layout

_RECT = re.compile(r"<rect x='[\d.]+' y='[\d.]+' width='([\d.]+)' height='([\d.]+)'")
_VIEWBOX = re.compile(r"viewBox='([^']+)'")


BLOCK = 368640  # a bf16 block of the model, in bytes: the synthetic traces' reference


@functools.cache
def _lesson(name: str = "fp8-twice", right_bytes: float | None = None) -> Lesson:
    """The lesson as recorded; with ``right_bytes``, its header says the left run's blocks
    hold BLOCK bytes and the right run's that share of it (0: the right's header is silent)."""
    spec = load_spec(name)
    text = trace_path(spec).read_text(encoding="utf-8")
    if right_bytes is not None:
        head, rest = text.split("\n", 1)
        header = json.loads(head)
        left, right = (r["config"] for r in header["runs"])
        left["block_bytes"], right["block_bytes"] = BLOCK, int(BLOCK * right_bytes)
        text = json.dumps(header) + "\n" + rest
    return build(spec, T.loads(text))


def _case(right_bytes: float | None) -> Lesson:
    """The recorded fp8 lesson (None), else a synthetic ratio on the six-step lesson."""
    return _lesson() if right_bytes is None else _lesson("six-steps", right_bytes)


def _arena_bytes(run: RunHeader) -> float:
    return run.num_slots * run.block_bytes / run.block_size


def _svg_area(drawn: str) -> float:
    """Area of the slot cells in an arena SVG: each run rect holds (width + gap) / pitch cells;
    a cell's drawn area is its width without the gap times the rect's height."""
    area = 0.0
    for w, h in _RECT.findall(drawn.split("</defs>", 1)[1]):
        cells = (float(w) + svg.GAP) / svg.CELL
        area += round(cells) * (svg.CELL - svg.GAP) * float(h)
    return area


# right_bytes: the right's block bytes as a share of the left's (None: the recorded 1/2)
CASES = [None, 0.25, 0.75, 2.0]


@pytest.mark.parametrize("right_bytes", CASES)
def test_svg_grids_cover_areas_in_the_ratio_of_their_arena_bytes(right_bytes):
    lesson = _case(right_bytes)
    i = lesson.keyframes[0]
    left, right = (player._grid(lesson, s, i, "en") for s in ("left", "right"))
    # one viewBox on both sides: in two equal columns both are drawn at one scale
    boxes = [[float(v) for v in _VIEWBOX.search(d).group(1).split()] for d in (left, right)]
    assert boxes[0] == boxes[1]
    want = _arena_bytes(lesson.right.run) / _arena_bytes(lesson.left.run)
    assert _svg_area(right) / _svg_area(left) == pytest.approx(want)
    if right_bytes is None:  # the recorded lesson: the same bytes, the same area
        assert _svg_area(right) == pytest.approx(_svg_area(left))


_SQUARE = re.compile(r"M([-\d.e]+),([-\d.e]+)H([-\d.e]+)V([-\d.e]+)H[-\d.e]+Z")


def _plotly_cells(fig, n: int) -> tuple[float, float]:
    """(drawn area of the n-th side's cells in px, px per axis unit) of a lecture figure."""
    xa = fig.layout[f"xaxis{'' if n == 0 else 3}"]
    ya = fig.layout[f"yaxis{'' if n == 0 else 3}"]
    m = fig.layout.margin
    plot_w, plot_h = fig.layout.width - m.l - m.r, fig.layout.height - m.t - m.b
    # square units (scaleanchor): the tighter of the two axes sets the scale
    ppu = min(
        (xa.domain[1] - xa.domain[0]) * plot_w / abs(xa.range[1] - xa.range[0]),
        (ya.domain[1] - ya.domain[0]) * plot_h / abs(ya.range[1] - ya.range[0]),
    )
    xref = "x" if n == 0 else "x3"
    paths = [s.path for s in fig.layout.shapes if s.name == "cells" and s.xref == xref]
    squares = [[float(v) for v in sq] for p in paths for sq in _SQUARE.findall(p)]
    assert squares, "no cells drawn"
    return sum(abs(x1 - x0) * abs(y1 - y0) for x0, y0, x1, y1 in squares) * ppu**2, ppu


@pytest.mark.parametrize("right_bytes", [None, 0.25, 0.75])
def test_lecture_figure_cells_cover_areas_in_the_ratio_of_their_arena_bytes(right_bytes):
    lesson = _case(right_bytes)
    i = lesson.keyframes[0]
    fig = figures.side_by_side_figure(lesson.left.at(i), lesson.right.at(i), None, "en")
    (left, l_ppu), (right, r_ppu) = _plotly_cells(fig, 0), _plotly_cells(fig, 1)
    assert l_ppu == pytest.approx(r_ppu)  # one scale on both sides
    want = _arena_bytes(lesson.right.run) / _arena_bytes(lesson.left.run)
    assert right / left == pytest.approx(want)


@pytest.mark.parametrize("right_bytes", [None, 0.25, 2.0])
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_smaller_side_says_its_scale_with_numbers_from_the_header(right_bytes, lang):
    lesson = _case(right_bytes)
    runs = {"left": lesson.left.run, "right": lesson.right.run}
    per_slot = {s: r.block_bytes / r.block_size for s, r in runs.items()}
    small = min(per_slot, key=per_slot.__getitem__)
    big = "right" if small == "left" else "left"
    drawn = {s: player._grid(lesson, s, 0, lang) for s in runs}
    note = re.search(r"<g class='pk-scale'>(.*?)</g>", drawn[small]).group(1)
    assert str(Fraction(int(per_slot[small]), int(per_slot[big]))) in note
    for s in runs:
        assert f"{per_slot[s] / 1024:g} KiB" in note
    assert "pk-scale" not in drawn[big]
    fig = figures.side_by_side_figure(lesson.left.at(0), lesson.right.at(0), None, lang)
    texts = " ".join(a.text for a in fig.layout.annotations)
    assert str(Fraction(int(per_slot[small]), int(per_slot[big]))) in texts


def test_rows_too_short_for_text_drop_it_and_keep_their_row_labels_apart():
    lesson = _case(0.25)  # right rows a quarter as tall
    drawn = player._grid(lesson, "right", lesson.keyframes[0], "en")
    assert "font-weight='700'" not in drawn  # no owner names squeezed into the cells
    labels = re.findall(r"<text x='29' y='([\d.]+)' font-size='([\d.]+)'", drawn)
    ys, size = [float(y) for y, _ in labels], max(float(f) for _, f in labels)
    assert len(ys) > 1 and min(b - a for a, b in zip(ys, ys[1:], strict=False)) >= size


# a name on the grid: its row's middle, left edge, room down and across (svg.py), and text
_NAME = re.compile(
    r"class='pk-nm' data-cy='([\d.]+)' data-x0='([\d.]+)' data-h='([\d.]+)' "
    r"data-room='([\d.]+)'[^>]*>([^<]+)</text>"
)


def test_half_height_rows_name_every_block_where_the_next_rows_names_are_not():
    """fp8's rows are half as tall as a legible name (12 px at 1280x720 is about 13 units, a
    row 9): every block a request holds is named, and the names of neighbouring rows take
    different stretches of the row, so a name standing over its row meets none of theirs."""
    lesson = _case(None)
    i = lesson.keyframes[1]
    right = lesson.right.at(i)
    drawn = player._grid(lesson, "right", i, "en")
    names = {m[4]: [float(v) for v in m[:4]] for m in _NAME.findall(drawn)}
    held = {
        f"{right.requests[r].name}{k}" for r, t in right.block_tables.items() for k in range(len(t))
    }
    assert len(held) >= 12 and set(names) == held
    pitch = svg.CELL * 0.5
    for a, (cy, x0, h, room) in names.items():
        # room down the player (fit_present.js nameFits) shows a 13-unit name in: 12 px
        assert h / 0.9 >= 1.1 * 13 and h > pitch, (a, h)
        for b, (cy2, x2, _, room2) in names.items():
            if a != b and abs(cy2 - cy) < 2.5 * pitch:  # neighbours, or two rows apart
                assert x0 + room <= x2 or x2 + room2 <= x0, (a, b)


@pytest.mark.parametrize(
    ("name", "right_bytes"),
    [("six-steps", 1.0), ("six-steps", 0.0), ("six-steps", None), ("recompute-or-swap", None)],
)
def test_equal_or_unknown_bytes_draw_exactly_the_square_grid(name, right_bytes):
    """Where the header says nothing (0) or both slots weigh the same, the player draws what
    the square-cell layout always drew (bench/render_digest.py checks every lesson)."""
    lesson = _lesson(name, right_bytes)
    i = lesson.keyframes[1]
    layout = grid_layout(lesson.right.run.num_slots, lesson.right.run.block_size)
    assert to_scale.side_layouts(lesson.left.run, lesson.right.run) == (layout, layout)
    tier = max(tier_height(lesson.side(s).at(i), layout, svg.CELL) for s in ("left", "right"))
    for side in ("left", "right"):
        frame = lesson.side(side).at(i)
        before = svg.arena_svg(
            frame,
            layout,
            "en",
            meta=i,
            max_height_px=390,
            room_below=tier,
            overlay=point.overlay(frame, layout, "en"),
        )
        got = player._grid(lesson, side, i, "en")
        # the same drawing, hidden from a screen reader, which reads its numbers' table
        drawing = got[: got.index("</svg><table class='pk-sr'>") + len("</svg>")]
        assert drawing == before.replace("<svg ", "<svg aria-hidden='true' ", 1)


@pytest.mark.parametrize("right_bytes", [1 / BLOCK, 1 / 17, 17.0, 92160.0])
def test_slots_too_far_apart_in_bytes_draw_the_square_grid_on_every_frame(right_bytes):
    """A header may claim slots of 1 byte beside slots of 90 KiB (the engine never writes
    that): the pair is drawn unscaled, every frame, instead of rows too thin to draw."""
    lesson = _lesson("six-steps", right_bytes)
    layout = grid_layout(lesson.right.run.num_slots, lesson.right.run.block_size)
    assert to_scale.side_layouts(lesson.left.run, lesson.right.run) == (layout, layout)
    assert to_scale.notes(lesson.left.run, lesson.right.run) == ([], [])
    for i in range(lesson.num_frames):
        for side in ("left", "right"):
            assert "<svg" in player._grid(lesson, side, i, "en")
