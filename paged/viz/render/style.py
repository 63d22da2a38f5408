"""Colours and words shared by the app's HTML and the plotly figures (so an exported lecture
figure looks like the app). Pure data and tiny helpers; no Streamlit, no plotly."""

from __future__ import annotations

from pathlib import Path

from paged.viz import ui_text
from paged.viz.fold.reducer import CELL_CATEGORY

#: One meaning per colour. A colour on screen names an accounting category (the paper's Fig. 2),
#: in the grid, the metrics strip, the timeline and the scoreboard alike; requests have no colour
#: of their own (they are told apart by their labels, A0 / A1 / B0 ..., and the white rules
#: between blocks). Chosen so the five stay apart under deuteranopia (tests/viz/test_palette.py).
CATEGORY_COLOURS = {
    "token_states": "#2166AC",
    "reservation": "#A6CCEB",
    "internal": "#E69F00",
    "external": "#B2182B",
    "free": "#E7EAEE",
}
#: The mark drawn over a category's cells, and the ink of a label written on it: at least 4.5:1
#: against the fill (white on the orange is about 2.2:1, hard to read at a projector).
CATEGORY_MARKS = {
    "token_states": "white",
    "reservation": "#1F2933",
    "internal": "#1F2933",
    "external": "white",
    "free": "#1F2933",
}
FREE_COLOUR = CATEGORY_COLOURS["free"]
INK = "#1F2933"
MUTED = "#6B7785"
CHANGED = "#111827"
#: Requests are ink, whatever their rank (kept as a tuple for callers that index by rank).
REQUEST_COLOURS = (INK,)
#: Sides are told apart by position and title, and on timelines by the dash, not by hue.
SIDE_COLOURS = {"left": INK, "right": INK}
#: The plotly figures' type: one family with CJK fallbacks, so Chinese labels never go missing.
FONT = dict(
    family="Inter, 'Noto Sans CJK SC', 'PingFang SC', 'Helvetica Neue', Arial, sans-serif",
    color=INK,
)


def request_colour(order: int) -> str:
    return REQUEST_COLOURS[order % len(REQUEST_COLOURS)]


def cell_category(code: str) -> str:
    """The accounting category a grid cell shows: the reducer's own table, by which the frame's
    numbers count the same cells, so what is drawn and what is said cannot differ."""
    return CELL_CATEGORY[code]


def cell_colour(code: str) -> str:
    """The fill of one slot: its category's colour (the owner does not change it)."""
    return CATEGORY_COLOURS[cell_category(code)]


def cell_ink(code: str) -> str:
    """The colour of a mark or label drawn on a slot, readable on its fill."""
    return CATEGORY_MARKS[cell_category(code)]


TEXT = ui_text.load("style")  # paged/viz/text/style.toml


def words(lang: str) -> dict:
    return TEXT.get(lang, TEXT["en"])


def palette() -> dict[str, str]:
    """The colours a stylesheet names as ``var(--pk-NAME)`` (``stylesheet``)."""
    return {
        "ink": INK,
        "muted": MUTED,
        "changed": CHANGED,
        **{f"req-{i}": c for i, c in enumerate(REQUEST_COLOURS)},
    }


def stylesheet(path: Path, **values: str) -> str:
    """A stylesheet shipped beside the code (``*.css``), its ``var(--pk-NAME)`` palette names
    filled in with this module's colours (and ``values``' names with theirs: ``system_fonts``
    fills ``var(--pk-system-fonts)``): the CSS stays a CSS file, linted as one, and the pages
    and the server's SVG keep one palette. Other custom properties are left alone."""
    text = path.read_text(encoding="utf-8")
    named = {**palette(), **{k.replace("_", "-"): v for k, v in values.items()}}
    for name, value in named.items():
        text = text.replace(f"var(--pk-{name})", value)
    return text
