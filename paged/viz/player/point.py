"""The player's pointing aids, as data for ``paged/viz/player/point.js``: the keyframes a clicker
visits, the presenter console's and the keys' words, and the "how to read this screen" page.

Everything here is drawn on the server, like the frames: the page only places it. Pure Python.
"""

from __future__ import annotations

from html import escape

from paged.viz import ui_text
from paged.viz.fold import chapters
from paged.viz.fold.lesson import Lesson
from paged.viz.render import html
from paged.viz.render.style import INK

TEXT = ui_text.load("point")  # paged/viz/text/point.toml

#: The panels the reading page names, by the id of the box that holds them (player.html),
#: in reading order; a box not on screen (presenter mode hides some) gets no number.
PANELS = (
    ("pk-chapter", "read_chapter"),
    ("pk-caption", "read_captions"),
    ("pk-lg", "read_left"),
    ("pk-rg", "read_right"),
    ("pk-lm", "read_strip"),
    ("pk-lp", "read_tables"),
    ("pk-rp", "read_queue"),
    ("pk-legend", "read_legend"),
    ("pk-body", "read_body"),
    ("pk-timeline", "read_timeline"),
)


def keyframes(lesson: Lesson) -> list[int]:
    """The frames a clicker stops at: each lesson step's keyframe (paged/viz/fold/keyframes.py), once,
    in order; steps this run never reaches have none."""
    return sorted({k for k in lesson.keyframes if k is not None and k < lesson.num_frames})


#: The words point.js says: the keys' help lines, the presenter console's
WORDS = (
    "key_focus",
    "key_console",
    "key_read",
    "console_title",
    "console_now",
    "console_next",
    "console_none",
    "console_clock",
    "console_since",
    "console_alone",
)


def panels_list(panels: list[tuple[str, str]], close: str) -> str:
    """The reading page's numbered panels (box id, what it shows) and its closing line; the
    player puts each number on its panel."""
    items = "".join(
        f"<li data-panel='{box}'><b>{n}</b> {escape(text)}</li>"
        for n, (box, text) in enumerate(panels, start=1)
    )
    return f"<ol class='pk-read-panels'>{items}</ol><p class='pk-dim'>{escape(close)}</p></div>"


def reading_page(lang: str) -> str:
    """The "how to read this screen" page: every colour with its swatch drawn as the grid
    draws it (the legend's own), the marks the player adds, then the panels, numbered; the
    player puts each number on its panel."""
    t = TEXT[lang]
    marks = [
        (f"border:3px solid {INK};background:white;opacity:1", t["read_focus"]),
        (f"border:3px dashed {INK};background:white", t["read_callout"]),
    ]
    extra = "".join(
        f"<span><span class='cell' style='{style}'></span>{escape(text)}</span>"
        for style, text in marks
    )
    return (
        f"<div class='pk-read-card' role='document'><h3>{escape(t['read_title'])}</h3>"
        f"<h4>{escape(t['read_colours'])}</h4>{html.legend(lang)}"
        f"<div class='pk-legend pk-read-marks'>{extra}</div>"
        f"<p class='pk-read-letters'>{escape(t['read_letters'])}</p>"
        f"<h4>{escape(t['read_panels'])}</h4>"
        + panels_list([(box, t[key]) for box, key in PANELS], t["read_close"])
    )


def extras(lesson: Lesson, lang: str, chs: list[chapters.Chapter]) -> dict:
    """What ``point.js`` needs beside the frames (JSON-ready): keyframes with their titles,
    its words, and the reading page."""
    t = TEXT[lang]
    kfs = keyframes(lesson)
    return {
        "keyframes": [
            {
                "frame": k,
                "title": next(
                    chapters.title(lesson, c, lang) for c in chs if c.start <= k <= c.end
                ),
            }
            for k in kfs
        ],
        "point": {k: t[k] for k in WORDS},
        "reading": reading_page(lang),
    }
