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

from paged.viz import ui_text
from paged.viz.fold.kernel.frames import KernelLesson, KernelSpec
from paged.viz.fold.lesson import Lesson
from paged.viz.fold.lesson_folder import LessonSpec
from paged.viz.player import payload
from paged.viz.player.kernel import kernel_payload
from paged.viz.render import html

LANGS = ("en", "zh")
SYSTEM_FONTS = (
    'system-ui, -apple-system, "Segoe UI", Roboto, "Noto Sans", "Helvetica Neue", '
    'Arial, "PingFang SC", "Hiragino Sans GB", "Microsoft YaHei", '
    '"Noto Sans CJK SC", sans-serif'
)

PAGE_CSS = f"""
html, body {{ margin: 0; background: white; }}
*, *::before, *::after {{ box-sizing: border-box; }}
/* as in the app: a hidden side yields to the scoreboard */
[hidden] {{ display: none !important; }}
body {{ font-family: {SYSTEM_FONTS}; color: #1F2933; font-size: 16px; }}
.pk-sa {{ max-width: 1600px; margin: 0 auto; padding: .8rem 1.4rem 2rem 1.4rem; }}
.pk-sa-head {{ display: flex; align-items: baseline; gap: 1rem; flex-wrap: wrap;
  margin-bottom: .6rem; }}
.pk-sa-head h1 {{ font-size: 1.5rem; margin: 0; flex: 1 1 auto; }}
.pk-sa-lang button {{ font: inherit; font-size: 14px; border: 1px solid #d0d5dd;
  border-radius: .45rem; background: white; padding: .2rem .7rem; cursor: pointer; }}
.pk-sa-lang button.on {{ background: #1F2933; color: white; border-color: #1F2933; }}
.pk-sa-home {{ font-size: 14px; color: #2F62C8; }}
.pk-sa-note {{ font-size: 13px; color: #6B7785; margin-top: 1rem; }}
"""

# Reads the hash once, mounts the player with that frame's language, and swaps payloads on
# the language buttons; the player itself (player.js, above) keeps the hash up to date.
BOOT_JS = """
const PK = JSON.parse(document.getElementById("pk-data").textContent);
const hash = new URLSearchParams(location.hash.replace(/^#/, ""));
// the languages this file holds: not any key an object answers to ("constructor", "__proto__")
const known = (l) => PK.langs.includes(l);
let lang = known(hash.get("lang")) ? hash.get("lang") : PK.langs[0];
// a frame is digits, as the app reads it (parseInt took "1e3" as 1 and "3.9" as 3)
const frameOf = (s) => (/^[0-9]+$/.test(s || "") ? Number(s) : NaN);
const start = frameOf(hash.get("frame")) || 0;
const present = hash.get("present") === "1";
// still=1: the frames are being photographed (an animation export): no transient hint
const still = hash.get("still") === "1";
function show(l) {
  lang = l;
  document.documentElement.lang = l === "zh" ? "zh-Hans" : "en";
  document.title = PK.titles[l];
  document.getElementById("pk-sa-title").textContent = PK.titles[l];
  document.getElementById("pk-sa-note").textContent = PK.notes[l];
  document.querySelectorAll(".pk-sa-lang button").forEach((b) =>
    b.classList.toggle("on", b.dataset.lang === l));
  mountPlayer({ data: { ...PK.payloads[l], start, present, still, follow: false,
                        standalone: true, home_lang: PK.langs[0] },
                parentElement: document.getElementById("pk-sa-player") });
}
document.querySelectorAll(".pk-sa-lang button").forEach((b) => {
  b.onclick = () => { show(b.dataset.lang); b.blur(); };
});
window.addEventListener("hashchange", () => {
  const h = new URLSearchParams(location.hash.replace(/^#/, ""));
  const l = h.get("lang") || PK.langs[0];
  const f = frameOf(h.get("frame"));
  const p = window.pkPlayer;
  // the frame first: another language loads asynchronously and keeps the frame shown then
  if (p && !Number.isNaN(f)) p.go(f);
  if (known(l) && l !== lang) show(l);
  // a hash that names a frame also says the mode (the player writes present=1 when on)
  const pr = h.get("present") === "1";
  if (p && !Number.isNaN(f) && p.present !== pr) p.setPresent(pr);
});
show(lang);
"""

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
    css = payload.styles() + html.CSS.replace("<style>", "").replace("</style>", "") + PAGE_CSS
    js = payload.script() + BOOT_JS
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
