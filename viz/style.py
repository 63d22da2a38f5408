"""Colours and words shared by the app's HTML and the plotly figures (so an exported lecture
figure looks like the app). Pure data and tiny helpers; no Streamlit, no plotly."""
from __future__ import annotations

from viz import ui_text
from viz.reducer import HOLE, RESERVED, TOKEN

#: Request colours by arrival rank. Red is kept out: red means external fragmentation.
REQUEST_COLOURS = ("#3B76D0", "#E8871E", "#2A9D78", "#8D63C9", "#C9A227", "#2FA6C8",
                   "#A0522D", "#6F8F1F", "#C23B8C", "#5561C4", "#4D7F8F", "#B8734A")
FREE_COLOUR = "#ECEFF3"
HOLE_COLOUR = "#F4B9B2"
HOLE_MARK = "#C8322B"
INK = "#1F2933"
MUTED = "#6B7785"
CHANGED = "#111827"

#: Accounting categories (the paper's Fig. 2) in the metrics strip, timeline and scoreboard.
CATEGORY_COLOURS = {"token_states": "#2F8F5B", "reservation": "#F2C14E",
                    "internal": "#E07A3F", "external": "#D1453B", "free": "#D5DAE1"}
SIDE_COLOURS = {"left": "#B7642A", "right": "#2F62C8"}

#: How pale a request's colour gets for slots it holds but has not filled.
RESERVED_TINT = 0.58
INTERNAL_TINT = 0.84


def request_colour(order: int) -> str:
    return REQUEST_COLOURS[order % len(REQUEST_COLOURS)]


def tint(hex_colour: str, amount: float) -> str:
    """Mix ``hex_colour`` with white; ``amount`` 0 keeps it, 1 gives white."""
    r, g, b = (int(hex_colour[i:i + 2], 16) for i in (1, 3, 5))
    mix = [round(c + (255 - c) * amount) for c in (r, g, b)]
    return "#" + "".join(f"{c:02X}" for c in mix)


def cell_colour(code: str, order: int | None) -> str:
    """The fill of one slot: its owner's colour, paler the less it is used."""
    if order is None:
        return HOLE_COLOUR if code == HOLE else FREE_COLOUR
    base = request_colour(order)
    if code == TOKEN:
        return base
    return tint(base, RESERVED_TINT if code == RESERVED else INTERNAL_TINT)


TEXT = ui_text.load("style")  # viz/text/style.toml


def words(lang: str) -> dict:
    return TEXT.get(lang, TEXT["en"])
