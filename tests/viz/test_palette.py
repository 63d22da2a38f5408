"""One meaning per colour, and colour-blind safe: the five accounting categories stay apart for a
viewer with deuteranopia, and the grid never paints a category with another one's colour."""

from __future__ import annotations

import itertools
import math
import re

import pytest

from paged.engine.trace.io import read
from paged.viz.fold.lesson import Lesson, build
from paged.viz.fold.lesson_folder import load_spec, trace_path
from paged.viz.fold.reducer import CELL_CATEGORY
from paged.viz.render import figures, html, style, svg
from paged.viz.render.layout import grid_layout
from paged.viz.render.style import CATEGORY_COLOURS, REQUEST_COLOURS, cell_colour

# Machado, Oliveira & Fernandes (2009), deuteranomaly at severity 1.0, on linear RGB.
DEUTERANOPIA = (
    (0.367322, 0.860646, -0.227968),
    (0.280085, 0.672501, 0.047413),
    (-0.011820, 0.042940, 0.968881),
)
MIN_DELTA_E = 20.0  # CIE76 distance; ~2.3 is a just-noticeable difference


def _linear(hex_colour: str) -> tuple[float, ...]:
    def one(c: int) -> float:
        v = c / 255
        return v / 12.92 if v <= 0.04045 else ((v + 0.055) / 1.055) ** 2.4

    return tuple(one(int(hex_colour[i : i + 2], 16)) for i in (1, 3, 5))


def _lab(rgb: tuple[float, ...]) -> tuple[float, float, float]:
    r, g, b = rgb
    x = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047
    y = 0.2126 * r + 0.7152 * g + 0.0722 * b
    z = (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883

    def f(t: float) -> float:
        return t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116

    return 116 * f(y) - 16, 500 * (f(x) - f(y)), 200 * (f(y) - f(z))


def _deuteranope(hex_colour: str) -> tuple[float, ...]:
    rgb = _linear(hex_colour)
    return tuple(
        min(1.0, max(0.0, sum(m * c for m, c in zip(row, rgb, strict=True))))
        for row in DEUTERANOPIA
    )


def test_the_simulation_is_not_the_identity():
    """Red and green, far apart for most viewers, come close under the simulation."""
    red, green = "#D62728", "#2CA02C"
    normal = math.dist(_lab(_linear(red)), _lab(_linear(green)))
    simulated = math.dist(_lab(_deuteranope(red)), _lab(_deuteranope(green)))
    assert simulated < normal / 2


@pytest.mark.parametrize("a,b", itertools.combinations(CATEGORY_COLOURS, 2))
def test_categories_stay_apart_under_deuteranopia(a, b):
    ca, cb = CATEGORY_COLOURS[a], CATEGORY_COLOURS[b]
    assert math.dist(_lab(_linear(ca)), _lab(_linear(cb))) >= MIN_DELTA_E
    assert math.dist(_lab(_deuteranope(ca)), _lab(_deuteranope(cb))) >= MIN_DELTA_E, (a, b)


def test_requests_never_wear_a_category_colour():
    assert not set(REQUEST_COLOURS) & set(CATEGORY_COLOURS.values())


def test_every_cell_is_painted_with_its_categorys_colour():
    for code, category in CELL_CATEGORY.items():
        assert cell_colour(code) == CATEGORY_COLOURS[category]


def test_one_screen_uses_each_colour_for_one_category():
    """On a real frame, every fill in the grid, the strip and the legend is a category colour
    (or neutral ink, grey text, white), and each category colour is used for that category only."""
    lesson = _six_steps()
    layout = grid_layout(lesson.right.run.num_slots, lesson.right.run.block_size)
    allowed = {c.upper() for c in CATEGORY_COLOURS.values()} | {
        "#1F2933",
        "#111827",
        "#6B7785",
        "WHITE",
    }
    for i in (lesson.keyframes[4], lesson.num_frames // 2):
        for side in (lesson.left, lesson.right):
            page = (
                svg.arena_svg(side.at(i), layout) + html.metrics_strip(side.at(i)) + html.legend()
            )
            fills = {f.upper() for f in re.findall(r"fill='(#[0-9A-Fa-f]{6}|white)'", page)}
            assert fills <= allowed, fills - allowed


def _six_steps() -> Lesson:
    spec = load_spec("six-steps")
    return build(spec, read(trace_path(spec)))  # a shipped trace: missing is a failure


def _hued(colours: set[str]) -> set[str]:
    """Colours with a hue (CIELAB chroma over 12) that are no category's: the categories own
    the hues, so anything else beside them is grey or ink."""
    cats = {c.upper() for c in CATEGORY_COLOURS.values()}
    return {c for c in colours - cats if math.hypot(*_lab(_linear(c))[1:]) > 12}


def test_the_lecture_figures_legend_paints_each_category_as_the_grid_does():
    """The exported figure's legend drew "free" darker (#C9CED6) than the grid's free cells,
    and its keys were glyphs (▨, ☒) in the category's colour on white: not the grid's cells,
    which are the colour with a stroke or a cross in the category's ink. Each key is now a
    cell of the category's fill, marked as the grid marks it, just left of its words."""
    lesson = _six_steps()
    i = lesson.keyframes[3]
    fig = figures.side_by_side_figure(lesson.left.at(i), lesson.right.at(i), None, "en")
    words = style.words("en")
    shapes = list(fig.layout.shapes)
    for cat, marks in (
        ("token_states", 0),
        ("reservation", 0),
        ("internal", 1),
        ("free", 0),
        ("external", 2),
    ):
        [ann] = [a for a in fig.layout.annotations if a.text == words[cat]]
        [key] = [
            r
            for r in shapes
            if r.type == "rect"
            and r.fillcolor == CATEGORY_COLOURS[cat]
            and r.xref == "paper"
            and 0 < ann.x - r.x1 < 0.01
            and r.y0 <= ann.y <= r.y1
        ]
        inked = [
            p
            for p in shapes
            if p.type == "path"
            and p.line.color == style.CATEGORY_MARKS[cat]
            and all(key.x0 < float(v) < key.x1 for v in re.findall(r"[ML]([\d.]+),", p.path))
        ]
        assert sum(p.path.count("M") for p in inked) == marks, (cat, inked)
    [ann] = [a for a in fig.layout.annotations if a.text == words["changed"]]
    assert any(
        r.type == "rect" and r.line.color == style.CHANGED and 0 < ann.x - r.x1 < 0.01
        for r in shapes
    )


def test_a_chart_beside_the_categories_does_not_borrow_their_look():
    """The paper page's concurrency bars ("ours") were #2F62C8, a blue a reader cannot tell
    from the token-state blue of Fig. 2 on the same page."""
    from paged.engine.core.accounting import CATEGORIES
    from paged.engine.sim import paper
    from paged.viz.app import paper as P
    from paged.viz.paper import results as R

    rows = [
        R.PolicyRow(p, {c: 0.2 for c in CATEGORIES}, 0.0, m, 1, 0)
        for p, m in zip(paper.POLICIES, (5.0, 7.5, 10.0, 20.0), strict=True)
    ]
    fig = P.concurrency_figure(rows)
    colours = {str(t.marker.color).upper() for t in fig.data}
    assert len(colours) == 2 and not _hued(colours), colours


def test_the_capacity_chart_uses_no_hue_of_its_own():
    """Its bars were red and green: the hole's red with a second meaning, and a pair a
    red-green colour-blind viewer cannot tell apart."""
    from paged.engine.sim.capacity import concurrency, preset
    from paged.viz.app import capacity as capacity_page

    c = concurrency(preset("llama-2-70b"), 40 * 2**30, 8192, 3000, 16)
    fig = capacity_page.concurrency_figure(c, capacity_page.TEXT["en"])
    colours = {str(x).upper() for x in fig.data[0].marker.color}
    assert len(colours) == 2 and not _hued(colours), colours


def _trace_colours(trace) -> set[str]:
    found = [getattr(trace, "marker", None), getattr(trace, "line", None)]
    colours = {str(x.color).upper() for x in found if x is not None and x.color is not None}
    if getattr(trace, "fillcolor", None):
        colours.add(str(trace.fillcolor).upper())
    return colours


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_block_size_charts_give_each_category_colour_one_quantity(lang):
    """The block-size page's trade-off chart drew "reserved + never used" in the orange that
    the composition chart beside it, and the whole app, gives to never-used slots alone: a
    category colour on its charts plots that category's share (or, in the tail chart, its
    slots) under that category's name, and no other hue appears."""
    from paged.viz.app import block_size as P
    from paged.viz.fold import sweep

    results = sweep.load_results(sweep.load_spec("block-size"))
    words = style.words(lang)
    by_colour = {c.upper(): cat for cat, c in CATEGORY_COLOURS.items()}
    for fig in (P.composition_figure(results, lang), P.tradeoff_figure(results, lang)):
        for trace in fig.data:
            colours = _trace_colours(trace)
            assert not _hued(colours), (trace.name, colours)
            for cat in {by_colour[c] for c in colours if c in by_colour}:
                assert trace.name == words[cat], (trace.name, cat)
                share = [100 * r.held_shares[cat] for r in results]
                assert list(trace.y) == pytest.approx(share), (trace.name, cat)
    internal = CATEGORY_COLOURS["internal"].upper()
    for fig in (P.tail_figure(results, lang), P.long_table_figure(results, lang)):
        for trace in fig.data:
            colours = _trace_colours(trace)
            assert not _hued(colours), (trace.name, colours)
            if internal in colours:  # the never-used tail, wherever the share has one
                assert [y > 0 for y in trace.y] == [r.held_shares["internal"] > 0 for r in results]


def test_the_block_size_bars_label_each_category_as_the_grid_does():
    """Its composition bars wrote every share in white, on the pale reserved blue too, where
    the grid writes ink: "9%" on it was barely legible on a projector."""
    from paged.viz.app import block_size as P
    from paged.viz.fold import sweep

    results = sweep.load_results(sweep.load_spec("block-size"))
    by_colour = {c.upper(): cat for cat, c in CATEGORY_COLOURS.items()}
    labelled = set()
    for trace in P.composition_figure(results).data:
        cat = by_colour[str(trace.marker.color).upper()]
        if any(trace.text):
            labelled.add(cat)
            assert trace.textfont.color == style.CATEGORY_MARKS[cat], cat
    assert "reservation" in labelled  # the shipped traces do label a reserved segment


def _relative_luminance(colour: str) -> float:
    named = {"white": "#FFFFFF", "black": "#000000"}
    r, g, b = _linear(named.get(colour, colour))
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


@pytest.mark.parametrize("category", sorted(style.CATEGORY_COLOURS))
def test_what_is_written_on_a_category_is_readable_at_a_projector(category):
    """A cell's mark and a bar's share label are drawn in ``CATEGORY_MARKS`` on the category's
    fill: at least WCAG AA's 4.5:1 for text. White on the internal orange was about 2.2:1."""
    fill = _relative_luminance(style.CATEGORY_COLOURS[category])
    ink = _relative_luminance(style.CATEGORY_MARKS[category])
    ratio = (max(fill, ink) + 0.05) / (min(fill, ink) + 0.05)
    assert ratio >= 4.5, f"{style.CATEGORY_MARKS[category]} on {category}: {ratio:.1f}:1"


def test_every_share_label_is_written_in_its_categorys_ink():
    """The strip above each grid, the scoreboard (card and lecture figure), the step figures'
    share bars and the paper page's bars wrote every share in white, on the pale reserved
    blue too: "23%" there could not be read at a projector. Each now takes the grid's ink."""
    from paged.viz.app import paper as paper_page
    from paged.viz.paper import results as R

    lesson = _six_steps()
    by_colour = {c.upper(): cat for cat, c in CATEGORY_COLOURS.items()}
    i = lesson.keyframes[3]
    left, right = lesson.left.summary, lesson.right.summary
    figs = [
        figures.scoreboard_figure(left, right, ("L", "R")),
        figures.scoreboard_lecture_figure(left, right, None),
        figures.side_by_side_figure(lesson.left.at(i), lesson.right.at(i), None),
        paper_page.fig2_figure(list(R.load_shipped()[R.SimConfig()].rows.values())),
    ]
    labelled = set()
    for fig in figs:
        for trace in fig.data:
            if trace.type != "bar" or not any(t for t in (trace.text or ()) if t):
                continue
            colour = trace.marker.color
            cat = by_colour[str(colour).upper()]
            labelled.add(cat)
            assert trace.textfont.color == style.CATEGORY_MARKS[cat], (fig.layout.title, cat)
    cards = html.metrics_strip(lesson.left.at(i)) + html.scoreboard_card(left)
    for fill, ink, text in re.findall(r"background:(#\w{6});color:([^']+)'>([^<]*)<", cards):
        if text:
            labelled.add(by_colour[fill.upper()])
            assert ink == style.CATEGORY_MARKS[by_colour[fill.upper()]], (fill, text)
    assert "reservation" in labelled  # the shipped data do label a reserved segment


def test_the_legends_keys_are_cells_drawn_as_the_grid_draws_them():
    """The legend's never-used and hole keys were CSS stripes across the whole square, and
    the changed key a white box: not what the grid draws (a short stroke or a cross in the
    category's ink, on its fill; an outline round a cell). Each marked key is now the grid's
    own tile: the same fill, the same mark path, the same ink."""
    lesson = _six_steps()
    side = lesson.left
    layout = grid_layout(side.run.num_slots, lesson.right.run.block_size)
    tiles = {}
    for f in side.frames:
        drawn = svg.arena_svg(f, layout)
        for fill, d, ink in re.findall(
            r"<pattern [^>]*><rect [^>]*fill='([^']+)'/><path d='([^']+)' stroke='([^']+)'", drawn
        ):
            tiles[fill] = (d, ink)
    keys = re.findall(
        r"<svg class='cell'[^>]*><rect [^>]*fill='([^']+)'/>(?:<path d='([^']+)' stroke='([^']+)')?",
        html.legend(),
    )
    marked = {fill: (d, ink) for fill, d, ink in keys if d}
    assert {CATEGORY_COLOURS["internal"], CATEGORY_COLOURS["external"]} <= set(tiles)
    assert marked == tiles
    assert {fill for fill, _, _ in keys} == set(CATEGORY_COLOURS.values())
    assert "stroke='#111827' stroke-width='2.2'" in html.legend()  # the changed outline
