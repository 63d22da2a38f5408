"""The lesson player: every frame drawn once on the server, stepped in the browser.

``payload(lesson, lang)`` renders each frame with the app's one renderer (paged/viz/render/svg.py grids,
paged/viz/render/html.py strips and panels, paged/viz/fold/captions.py captions, paged/viz/fold/chapters.py chapter text), keeps
each distinct HTML piece once (neighbouring frames share most of theirs), and deflates the lot:
the six-step lesson is a few kilobytes, a 12.9k-event trace well under a megabyte. The browser
component (``paged/viz/player/player.js``) inflates it and swaps pieces on each key: no server round
trip per frame. JavaScript only places strings it was given; it draws nothing itself.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import html as _html
import json
import re
import zlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from paged.viz.fold import captions, chapters
from paged.viz.fold.lesson import Lesson
from paged.viz.player import point
from paged.viz.render import html, svg, to_scale
from paged.viz.render import point as point_marks
from paged.viz.render.style import CATEGORY_COLOURS, INK, MUTED, words

ASSETS = Path(__file__).resolve().parent
GRID_HEIGHT = 390
#: A frame record's pieces, in order; the payload says so (``slots``) and the player reads
#: each by its name, so the order is defined here only.
SLOTS = ("lm", "lg", "lp", "rm", "rg", "rp", "lc", "rc", "body", "step")
TL_W, TL_H, TL_PAD = 1000, 100, (0, 0, 6, 2)  # width, height, padding left/right/top/bottom


@dataclass
class Pieces:
    """Distinct strings, each stored once; frames refer to them by index."""

    items: list[str]
    index: dict[str, int]

    def add(self, s: str) -> int:
        n = self.index.get(s)
        if n is None:
            n = self.index[s] = len(self.items)
            self.items.append(s)
        return n


_CODE_SPAN = re.compile(r"(`+) (.*?) \1")  # as viz.safe writes them
_ESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])")  # CommonMark: backslash + ASCII punctuation
_KEPT = re.compile("\ue000(\\d+)\ue001")


def _restore(kept: list[str], m: re.Match[str]) -> str:
    return _html.escape(kept[int(m.group(1))])


def markdown(text: str) -> str:
    """The narration's small markdown (``**bold**``, ``*italic*``, blank-line paragraphs) as
    HTML; everything else is escaped. Values quoted from a trace arrive escaped for markdown
    by ``paged.viz.safe.md_text`` (``\\#``, code spans): they are shown as the literal text."""
    out = []
    for para in text.split("\n\n"):
        kept: list[str] = []

        def keep(literal: str, kept: list[str] = kept) -> str:
            kept.append(literal)
            return f"\ue000{len(kept) - 1}\ue001"

        para = para.replace("\ue000", "").replace("\ue001", "")  # ours alone
        raw = _CODE_SPAN.sub(lambda m: keep(m.group(2)), para.strip())
        raw = _ESCAPE.sub(lambda m: keep(m.group(1)), raw)
        p = _html.escape(raw)
        p = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", p)
        p = re.sub(r"\*(.+?)\*", r"<i>\1</i>", p)
        p = _KEPT.sub(functools.partial(_restore, kept), p)
        if p:
            out.append(f"<p>{p}</p>")
    return "".join(out)


def _grid(lesson: Lesson, side: str, i: int, lang: str) -> str:
    s = lesson.side(side)
    frame = s.at(i)
    if i >= len(s.frames):  # the run has ended: nothing changes any more
        frame = replace(frame, changed=frozenset())
    sides = ("left", "right")
    runs = (lesson.left.run, lesson.right.run)
    layouts = dict(zip(sides, to_scale.side_layouts(*runs), strict=True))
    notes = dict(zip(sides, to_scale.notes(*runs, lang), strict=True))  # none unless to scale
    # both sides as tall (grid, CPU tier, note), so both are drawn at one scale
    tall = max(
        svg.grid_height(layouts[s]) + svg.room_under(lesson.side(s).at(i), layouts[s], notes[s])
        for s in sides
    )
    below = tall - svg.grid_height(layouts[side])
    drawn = svg.arena_svg(
        frame,
        layouts[side],
        lang,
        meta=i,
        max_height_px=GRID_HEIGHT,
        room_below=below,
        note=notes[side],
        overlay=point_marks.overlay(frame, layouts[side], lang),
    )
    # A screen reader reads the table (the same numbers), not the grid's hundreds of labels.
    drawn = drawn.replace("<svg ", "<svg aria-hidden='true' ", 1)
    return drawn + html.numbers_table(frame, s.title[lang], i, lang)


def _panel(lesson: Lesson, side: str, i: int, lang: str) -> str:
    s = lesson.side(side)
    frame = s.at(i)
    out = html.tables_panel(frame, lang) + html.queue_panel(frame, lang)
    if i >= len(s.frames):
        out += (
            f"<div class='pk-dim pk-ended'>"
            f"{_html.escape(words(lang)['ended'].format(n=len(s.frames) - 1))}</div>"
        )
    return out


def _indicator(lesson: Lesson, i: int, lang: str) -> str:
    """The engine step on frame ``i`` of the runs still stepping: one number where they agree,
    else each, named. A run that has ended is left out (its caption and panel say it ended):
    "101/83" read as step 101 of 83, the left's step over the step the right had ended at."""
    w = words(lang)
    going = {
        side: lesson.side(side).at(i).step
        for side in ("left", "right")
        if i < len(lesson.side(side).frames)
    }
    steps = set(going.values())
    if len(steps) == 1:
        return f"{w['step']} {steps.pop()}"
    return w["step_sides"].format(**going)


def frame_parts(lesson: Lesson, i: int, lang: str) -> list[str]:
    """Frame ``i``'s pieces in ``SLOTS`` order, less ``body`` (the chapter's text, which depends
    on the chapter the frame falls in). They read only ``at(i)`` of each side and whether (and
    after how many frames) that side has ended."""
    left, right = lesson.left.at(i), lesson.right.at(i)
    lc, rc = captions.caption(lesson, i, lang)
    return [
        html.metrics_strip(left, lang),
        _grid(lesson, "left", i, lang),
        _panel(lesson, "left", i, lang),
        html.metrics_strip(right, lang),
        _grid(lesson, "right", i, lang),
        _panel(lesson, "right", i, lang),
        _html.escape(lc),
        _html.escape(rc),
        _indicator(lesson, i, lang),
    ]


BODY = SLOTS.index("body")


def frame_record(
    lesson: Lesson, i: int, lang: str, chapter: chapters.Chapter, pieces: Pieces | Deflating
) -> list[int]:
    """Frame ``i`` as indices into ``pieces``, in ``SLOTS`` order."""
    parts = frame_parts(lesson, i, lang)
    parts.insert(BODY, markdown(chapters.body(lesson, chapter, i, lang)))
    return [pieces.add(p) for p in parts]


def timeline_scale(n: int) -> tuple[Callable[[float], float], Callable[[float], float]]:
    """The timeline's x of frame ``i`` of ``n`` (its middle) and y of a share in [0, 1]."""
    top, bottom = TL_PAD[2], TL_PAD[3]
    ph = TL_H - top - bottom
    return (lambda i: TL_W * (i + 0.5) / n), (lambda share: top + ph * (1 - share))


def timeline_html(n: int, steps: list[tuple[int, str, int]], under: str, over: str) -> str:
    """The timeline around its curves: ``steps`` (frame, label, chapter index) marked by a
    dashed rule and numbered under the plot, ``under`` drawn below those rules and ``over``
    above them, the playhead the player moves, and the share axis."""
    x, y = timeline_scale(n)
    marks = "".join(
        f"<line x1='{x(i):.1f}' x2='{x(i):.1f}' y1='{y(1):g}' "
        f"y2='{y(0):g}' stroke='{MUTED}' stroke-dasharray='2 3' "
        f"vector-effect='non-scaling-stroke'/>"
        for i, _, _ in steps
    )
    svg_ = (
        f"<svg class='pk-tl-svg' viewBox='0 0 {TL_W} {TL_H}' preserveAspectRatio='none' "
        f"data-left='0' data-right='0' data-width='{TL_W}'>{under}{marks}{over}"
        f"<line class='pk-tl-head' x1='0' x2='0' y1='0' y2='{TL_H}' stroke='{INK}' "
        f"stroke-width='2' vector-effect='non-scaling-stroke'/></svg>"
    )
    ys = "".join(
        f"<span style='top:{100 * y(v) / TL_H:.2f}%'>{int(v * 100)}%</span>" for v in (0, 0.5, 1)
    )
    nums = "".join(
        f"<span data-chapter='{c}' style='left:{100 * x(i) / TL_W:.3f}%'>{k}</span>"
        for i, k, c in steps
    )
    return (
        f"<div class='pk-tl'><div class='pk-tl-y'>{ys}</div><div class='pk-tl-plot'>"
        f"{svg_}<div class='pk-tl-steps'>{nums}</div></div></div>"
    )


def timeline_svg(lesson: Lesson, chs: list[chapters.Chapter], lang: str) -> str:
    """Token-state share of each side per frame while its run lasts (right solid, left dashed,
    both in the token colour: the colour means the category, the dash the side), step numbers
    at keyframes.
    Drawn once; the player moves a playhead over it. The lines stretch with the width; the
    labels are HTML beside and under them, so text is never stretched."""
    n = max(1, lesson.num_frames)
    x, y = timeline_scale(n)

    lines = []
    for side, dash in (("left", "6 4"), ("right", "")):
        s = lesson.side(side)
        # the line ends with its run (an ended run holds nothing: no share to plot)
        pts = " ".join(
            f"{x(i):.1f},{y(f.account.share('token_states')):.1f}"
            for i, f in enumerate(s.frames[:n])
        )
        lines.append(
            f"<polyline points='{pts}' fill='none' "
            f"stroke='{CATEGORY_COLOURS['token_states']}' stroke-width='2' "
            f"stroke-dasharray='{dash}' vector-effect='non-scaling-stroke'/>"
        )
    rules = "".join(
        f"<line x1='0' x2='{TL_W}' y1='{y(v):.1f}' y2='{y(v):.1f}' stroke='#E3E7EC' "
        f"vector-effect='non-scaling-stroke'/>"
        for v in (0, 0.5, 1)
    )
    steps = [
        (c.start, "·".join(str(k + 1) for k in c.steps), n)
        for n, c in enumerate(chs)
        if c.phase == chapters.STEP
    ]
    return timeline_html(n, steps, rules, "".join(lines))


def scoreboard(lesson: Lesson, lang: str) -> str:
    """The final comparison, large: its result in one line, then both sides' whole-run
    shares, steps and concurrency."""
    t = captions.text(lang)
    cards = "".join(
        f"<div class='pk-score-side'>{html.side_title(lesson.side(s).title[lang], s)}"
        f"{html.scoreboard_card(lesson.side(s).summary, lang)}</div>"
        for s in ("left", "right")
    )
    return (
        f"<div class='pk-scoreboard'><div class='pk-score-title'>"
        f"{_html.escape(t['scoreboard_title'])}</div>"
        f"<p class='pk-score-head'>{_html.escape(captions.score_headline(lesson, lang))}</p>"
        f"<div class='pk-score-row'>{cards}</div></div>"
    )


def steps_nav(lesson: Lesson, chs: list[chapters.Chapter], lang: str) -> list[dict]:
    """One entry per lesson step for the step buttons: the chapter that shows it, or, for a
    step this trace never reaches, ``chapter`` None and the line saying so (the button is
    greyed and the step's narration is never shown)."""
    from paged.viz.fold.narration import render_step

    out = []
    for k, step in enumerate(lesson.spec.steps):
        kf = lesson.keyframes[k] if k < len(lesson.keyframes) else None
        n = None if kf is None else next(j for j, c in enumerate(chs) if c.start <= kf <= c.end)
        out.append(
            {
                "title": f"{k + 1} · {step.title[lang]}",
                "chapter": n,
                "absent": "" if n is not None else render_step(lesson, k, lang).narration,
            }
        )
    return out


class Deflating:
    """``Pieces`` that go straight into a zlib stream (RFC 1950) as they are first seen,
    remembered only by a digest: a maximal upload draws about 100 MB of distinct SVG and HTML,
    which held as strings (then once more as the JSON text, and once more encoded) tripled
    what drawing it cost. The stream inflates to what ``Pieces`` would have written."""

    def __init__(self) -> None:
        self._z = zlib.compressobj(6)
        self._out = [self._z.compress(b'{"pieces":[')]
        self._index: dict[bytes, int] = {}

    def add(self, s: str) -> int:
        raw = json.dumps(s).encode("utf-8")
        d = hashlib.blake2b(raw, digest_size=16).digest()
        n = self._index.get(d)
        if n is None:
            n = self._index[d] = len(self._index)
            self._out.append(self._z.compress(raw if n == 0 else b"," + raw))
        return n

    def close(self, frames: list[list[int]]) -> bytes:
        """The whole stream, with ``frames`` (records of indices) after the pieces."""
        tail = '],"frames":' + json.dumps(frames, separators=(",", ":")) + "}"
        self._out += [self._z.compress(tail.encode("utf-8")), self._z.flush()]
        return b"".join(self._out)


def payload(lesson: Lesson, lang: str) -> dict:
    """Everything the player needs for one lesson in one language (JSON-ready). The frames
    and their pieces travel deflated and base64-encoded in ``z``."""
    chs = chapters.chapters(lesson)
    pieces = Deflating()
    of_frame = {i: c for c in chs for i in range(c.start, c.end + 1)}
    frames = [frame_record(lesson, i, lang, of_frame[i], pieces) for i in range(lesson.num_frames)]
    return envelope(lesson, lang, chs, pieces.close(frames))


def envelope(lesson: Lesson, lang: str, chs: list[chapters.Chapter], z: bytes) -> dict:
    """The payload around its frames: ``z`` is the zlib stream of
    ``{"pieces": [...], "frames": [...]}`` (``payload`` deflates it whole; a live run's
    ``paged.viz.player.live.LivePayload`` adds only what is new)."""
    last_step = len(lesson.spec.steps) - 1
    score_step = (
        last_step
        if lesson.spec.steps and lesson.spec.steps[last_step].rule.get("frame") == "last"
        else None
    )
    t = captions.text(lang)
    # The trace these frames show, in any language: the player stays on its frame for the same
    # content in another language, or for more frames of a live run (no key: the lesson's
    # name), and opens a new one (the lab's next recording, another upload) on ``start``.
    content = lesson.key or lesson.spec.name
    return {
        # a live lesson's content changes with its frame count and once more when it ends
        "id": f"{content}:{lesson.num_frames}:{int(lesson.partial)}:{lang}",
        "content": content,
        "lesson": lesson.spec.name,
        "lang": lang,
        "num_frames": lesson.num_frames,
        "slots": list(SLOTS),
        "z": base64.b64encode(z).decode("ascii"),
        "chapters": [
            {
                "start": c.start,
                "end": c.end,
                "step": c.step,
                "title": chapters.title(lesson, c, lang),
                # the scoreboard hides the grids: not over another step's narration of them
                "score": c.step is not None and c.step == score_step and not c.also,
            }
            for c in chs
        ],
        "steps": steps_nav(lesson, chs, lang),
        **point.extras(lesson, lang, chs),
        "titles": {s: html.side_title(lesson.side(s).title[lang], s) for s in ("left", "right")},
        "legend": html.legend(lang),
        "timeline": timeline_svg(lesson, chs, lang),
        "timeline_caption": _html.escape(
            t["timeline"].format(left=lesson.left.title[lang], right=lesson.right.title[lang])
        ),
        "scoreboard": scoreboard(lesson, lang),
        "icon": "data:image/png;base64,"
        + base64.b64encode((ASSETS / "icon.png").read_bytes()).decode("ascii"),
        "text": {k: t[k] for k in TEXT_KEYS},
        "exercises": exercises_data(lesson, lang),
        "exercise_text": exercise_text(lang),
    }


def exercises_data(lesson: Lesson, lang: str) -> list:
    """The lesson's questions (``paged.viz.exercises``) as plain data, answers included: the
    offline player grades with no server. Every string is HTML-escaped, as every other string
    the player places is HTML: a request's name comes from the trace."""
    from paged.viz.exercises import questions

    runs = (lesson.left.run, lesson.right.run)
    layouts = dict(zip(("left", "right"), to_scale.side_layouts(*runs), strict=True))
    out = []
    for q in questions(lesson):
        d = escaped(q.to_dict(lang))
        if q.cells:  # where a click lands on that side's grid (a block spans its slots)
            geometry = svg.grid_geometry(layouts[q.side])
            d["grid"] = {**geometry, "per": layouts[q.side].block_size if q.unit == "block" else 1}
        out.append(d)
    return out


def exercise_text(lang: str) -> dict[str, str]:
    """The words of the player's exercise mode and of a class that answers together
    (paged/viz/text/exercises.toml ``ex_*``), escaped."""
    from paged.viz.exercises.question import text

    return {k: _html.escape(v) for k, v in text()[lang].items() if k.startswith("ex_")}


def escaped(v: Any) -> Any:
    if isinstance(v, str):
        return _html.escape(v, quote=True)
    if isinstance(v, list):
        return [escaped(x) for x in v]
    if isinstance(v, dict):
        return {k: escaped(x) for k, x in v.items()}
    return v


#: The player's UI strings a payload carries (the player's help table, its buttons, its hint)
TEXT_KEYS = (
    "left",
    "right",
    "frame_of",
    "play",
    "pause",
    "speed",
    "help_title",
    "help_close",
    "key_arrows",
    "key_pages",
    "key_home_end",
    "key_space",
    "key_speed",
    "key_f",
    "key_theme",
    "key_help",
    "key_timeline",
    "present_hint",
    "unpack_failed",
)


#: The player's front end, one file per job, in the order it is put on a page: one module, whose
#: files share its scope (no imports: the one-file export opens from file://, with no server to
#: fetch them). player.js comes last: it mixes the others' methods into its Player as it loads.
#: In Node each file is a CommonJS module of its own (tests/js).
SCRIPTS = (
    "stepping.js",
    "pointing.js",
    "console.js",
    "reading.js",
    "point.js",
    "page.js",
    "keys.js",
    "fit_rows.js",
    "fit_present.js",
    "link.js",
    "playing.js",
    "exercise.js",
    "follow.js",
    "asking.js",
    "player.js",
)
STYLES = ("player.css", "point.css", "exercise.css")


def script() -> str:
    """The player's JavaScript, one module: what the app's component and the one-file HTML
    export both load."""
    return "\n".join(asset(n) for n in SCRIPTS)


def styles() -> str:
    """The player's CSS, as ``script`` is its JavaScript."""
    return "\n".join(asset(n) for n in STYLES)


def asset(name: str) -> str:
    """A file of the player's front end (``player.js``, ``player.css``, ``player.html``), as
    text: the app's component and the one-file HTML export embed the same files."""
    return (ASSETS / name).read_text(encoding="utf-8")
