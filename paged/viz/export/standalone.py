"""One lesson as one self-contained HTML file: the app's player, offline.

``page(lesson)`` writes the player's own HTML, CSS and JavaScript (paged/viz/player/, the same files
the Streamlit component loads: one implementation) into a single page, with each language's
payload (viz.player.payload.payload) as inline JSON. Opened from ``file://`` it makes no request at
all: the icon is a data: URL, fonts are the system's, and the frames are inflated with the
browser's own DecompressionStream. The player keeps ``#frame=N&lang=zh&present=1`` in the
hash (a file has no server for query parameters), and a hash opens that frame. ``&still=1``
(read once, as the page opens) shows no transient hint: the animation export photographs
the page so, and its frames must not depend on how long the photographing took.
"""

from __future__ import annotations

import html as _html
import json
from pathlib import Path

from paged.viz import ui_text
from paged.viz.fold.kernel.frames import KernelLesson, KernelSpec
from paged.viz.fold.lesson import Lesson
from paged.viz.fold.lesson_folder import LessonSpec
from paged.viz.player import payload
from paged.viz.player.kernel import kernel_payload
from paged.viz.render import html
from paged.viz.render.style import stylesheet

LANGS = ("en", "zh")
SYSTEM_FONTS = (
    'system-ui, -apple-system, "Segoe UI", Roboto, "Noto Sans", "Helvetica Neue", '
    'Arial, "PingFang SC", "Hiragino Sans GB", "Microsoft YaHei", '
    '"Noto Sans CJK SC", sans-serif'
)


HERE = Path(__file__).resolve().parent
#: The page's own look, and its start: it mounts the player (player.js keeps the hash).
PAGE_CSS, BOOT_JS = HERE / "standalone.css", HERE / "standalone.js"

LANG_NAMES = {"en": "English", "zh": "中文"}


def _script_json(obj: object) -> str:
    """JSON safe inside <script>: no ``</`` can close the element early, no ``<!--``."""
    return (
        json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
        .replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def _home_link(home: str | None, text: dict) -> str:
    if home is None:
        return ""
    label = " · ".join(text[lg]["home"] for lg in LANGS)
    return f"<a class='pk-sa-home' href='{_html.escape(home)}'>← {_html.escape(label)}</a>"


def page(
    lesson: Lesson | KernelLesson,
    langs: tuple[str, ...] = LANGS,
    payloads: dict[str, dict] | None = None,
    home: str | None = None,
) -> str:
    """The whole lesson as one HTML document (str). ``payloads`` may hand in payloads already
    drawn (the app caches them); missing languages are drawn here. ``home``: a relative link
    to the course's index (the course pack's pages), shown in the page's head."""
    drawn = dict(payloads or {})
    for lg in langs:
        if lg not in drawn:
            drawn[lg] = (
                kernel_payload(lesson, lg)
                if isinstance(lesson, KernelLesson)
                else payload.payload(lesson, lg)
            )
    return drawn_page(lesson.spec, drawn, langs, home)


def drawn_page(
    spec: LessonSpec | KernelSpec,
    drawn: dict[str, dict],
    langs: tuple[str, ...] = LANGS,
    home: str | None = None,
) -> str:
    """``page`` from payloads drawn elsewhere (one per language in ``langs``): what the app
    writes for an upload, whose frames it does not hold."""
    text = ui_text.load("standalone")
    data = {
        "langs": list(langs),
        "payloads": {lg: drawn[lg] for lg in langs},
        "titles": {lg: spec.title[lg] for lg in langs},
        "notes": {lg: text[lg]["made"] for lg in langs},
    }
    icon = drawn[langs[0]]["icon"]
    css = payload.styles() + html.css() + stylesheet(PAGE_CSS, system_fonts=SYSTEM_FONTS)
    # the player's files and the start, one module: inline, so file:// fetches nothing
    js = payload.script() + BOOT_JS.read_text(encoding="utf-8")
    buttons = "".join(
        f"<button type='button' data-lang='{lg}'>{LANG_NAMES[lg]}</button>" for lg in langs
    )
    first = langs[0]
    return (
        "<!doctype html>\n"
        f"<html lang='{'zh-Hans' if first == 'zh' else 'en'}'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{_html.escape(spec.title[first])}</title>"
        f"<link rel='icon' href='{icon}'>"
        f"<style>{css}</style></head><body>"
        "<div class='pk-sa'><div class='pk-sa-head'>"
        f"<h1 id='pk-sa-title'>{_html.escape(spec.title[first])}</h1>"
        + _home_link(home, text)
        + f"<div class='pk-sa-lang' aria-label='{_html.escape(text[first]['switch'])}'>"
        f"{buttons}</div></div>"
        f"<div id='pk-sa-player'>{payload.asset('player.html')}</div>"
        "<div class='pk-sa-note' id='pk-sa-note'></div></div>"
        f"<script type='application/json' id='pk-data'>{_script_json(data)}</script>"
        f"<script type='module'>{js}</script>"
        "</body></html>\n"
    )
