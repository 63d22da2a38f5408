"""The kernel lesson's payload for the one player (``paged/viz/player/player.js``): the same
envelope as ``paged.viz.player.payload.payload``, with the arena on the left, the kernel on the
right, a caption for each, the chapter's narration, and a timeline of the first and the last
block's share of attention. The browser steps it with the same keys, chapters, presenter mode
and links as any lesson."""

from __future__ import annotations

import base64
import html as _html
import json
import zlib

from paged.viz.exercises.kernel import kernel_questions
from paged.viz.fold import captions
from paged.viz.fold.kernel.frames import CHAPTERS, KernelLesson, caption, narration
from paged.viz.player import point
from paged.viz.player.payload import (
    ASSETS,
    SLOTS,
    Pieces,
    escaped,
    exercise_text,
    markdown,
    timeline_html,
    timeline_scale,
)
from paged.viz.player.payload import TEXT_KEYS as payload_text_keys
from paged.viz.render import kernel as draw
from paged.viz.render.style import MUTED

#: The player's UI strings, the projector theme's too: the drawings are inked for white paper,
#: and the theme shows them on white cards (player.css)
TEXT_KEYS = payload_text_keys


def _strip(text: str) -> str:
    return (
        f"<div class='pk-k-strip' style='font-size:15px;color:{MUTED}'>{_html.escape(text)}</div>"
    )


def frame_parts(lesson: KernelLesson, i: int, lang: str) -> list[str]:
    """Frame ``i``'s pieces in the player's slot order (``SLOTS``)."""
    f, w = lesson.frames[i], draw.words(lang)
    left, right = caption(lesson, i, lang)
    table = " ".join(str(b) for b in f.read.physical)
    # the zoomed step, then a replay of every step (the counter said 28, then 3): each says
    # which it is and out of how many
    last = max(g.read.step for g in lesson.frames)
    if f.stage == "tile":
        step = w["frame_tile"].format(
            step=f.read.step, last=last, tile=(f.logical or 0) + 1, n=len(f.read.physical)
        )
    else:
        step = w["heat_step" if f.stage == "heat" else "step"].format(step=f.read.step, last=last)
    return [
        _strip(f"{f.read.req}: [{table}]"),
        draw.arena_svg(lesson, i, lang),
        draw.table_panel(lesson, i, lang),
        _strip(
            w["kv_head"].format(n=f.read.kv_head)
            + " · "
            + ", ".join(w["q_head"].format(n=h) for h in f.read.heads)
        ),
        draw.tiles_svg(lesson, i, lang),
        draw.state_panel(lesson, i, lang),
        _html.escape(left),
        _html.escape(right),
        markdown(narration(lesson, i, lang)),
        _html.escape(step),
    ]


def reading_page(lesson: KernelLesson, lang: str) -> str:
    """H's "how to read this screen" for the kernel lesson: its marks and heat scale, what its
    letters name, and its own panels, numbered on screen as the other lessons' are."""
    t, w = point.TEXT[lang], draw.words(lang)
    panels = [
        ("pk-chapter", t["read_chapter"]),
        ("pk-caption", t["read_captions"]),
        ("pk-lg", w["read_arena"]),
        ("pk-lp", w["read_table"]),
        ("pk-rm", w["read_heads"]),
        ("pk-rg", w["read_tiles"]),
        ("pk-rp", w["read_state"]),
        ("pk-body", t["read_body"]),
        ("pk-timeline", w["timeline"]),
    ]
    return (
        f"<div class='pk-read-card' role='document'><h3>{_html.escape(t['read_title'])}</h3>"
        f"{draw.legend(lang, lesson.zoom.req)}"
        f"<p class='pk-read-letters'>{_html.escape(w['read_letters'])}</p>"
        f"<p>{_html.escape(w['define_walk'])}</p>"
        f"<h4>{_html.escape(t['read_panels'])}</h4>" + point.panels_list(panels, t["read_close"])
    )


def timeline_svg(lesson: KernelLesson, lang: str) -> str:
    """The first block's share (solid) and the last block's (dashed) at each frame, chapter
    starts numbered; the player moves its playhead over it."""
    n = max(1, lesson.num_frames)
    x, y = timeline_scale(n)

    lines = []
    for which, dash in ((0, ""), (-1, "6 4")):
        pts = " ".join(
            f"{x(i):.1f},{y(f.read.mass[which]):.1f}" for i, f in enumerate(lesson.frames)
        )
        lines.append(
            f"<polyline points='{pts}' fill='none' stroke='{draw.heat_colour(1, 1)}' "
            f"stroke-width='2' stroke-dasharray='{dash}' vector-effect='non-scaling-stroke'/>"
        )
    starts = [lesson.chapter_range(c)[0] for c in CHAPTERS]
    steps = [(s, str(k + 1), k) for k, s in enumerate(starts)]
    return timeline_html(n, steps, "", "".join(lines))


def kernel_payload(lesson: KernelLesson, lang: str) -> dict:
    """Everything the player needs for the kernel lesson in one language (JSON-ready)."""
    pieces = Pieces([], {})
    frames = [
        [pieces.add(p) for p in frame_parts(lesson, i, lang)] for i in range(lesson.num_frames)
    ]
    body = json.dumps({"pieces": pieces.items, "frames": frames}, separators=(",", ":"))
    z = zlib.compress(body.encode("utf-8"), 6)
    spec = lesson.spec
    t = captions.text(lang)
    chapters = []
    for k, c in enumerate(CHAPTERS):
        start, end = lesson.chapter_range(c)
        chapters.append(
            {
                "start": start,
                "end": end,
                "step": k,
                "title": spec.chapter_titles[c][lang],
                "score": False,
            }
        )
    return {
        "id": f"{spec.name}:{lesson.num_frames}:0:{lang}",
        "content": spec.name,
        "lesson": spec.name,
        "lang": lang,
        "num_frames": lesson.num_frames,
        "slots": list(SLOTS),
        "z": base64.b64encode(z).decode("ascii"),
        "chapters": chapters,
        "steps": [
            {"title": f"{k + 1} · {ch['title']}", "chapter": k, "absent": ""}
            for k, ch in enumerate(chapters)
        ],
        "titles": {s: _html.escape(spec.side_titles[s][lang]) for s in ("left", "right")},
        "legend": draw.legend(lang, lesson.zoom.req),
        "timeline": timeline_svg(lesson, lang),
        "timeline_caption": _html.escape(draw.words(lang)["timeline"]),
        "scoreboard": "",
        "icon": "data:image/png;base64,"
        + base64.b64encode((ASSETS / "icon.png").read_bytes()).decode("ascii"),
        "text": {k: t[k] for k in TEXT_KEYS},
        # R, C and H as in every lesson: R points at A, B or C (their blocks carry data-req)
        "point": {k: point.TEXT[lang][k] for k in point.WORDS},
        "reading": reading_page(lesson, lang),
        # exercise mode as in every lesson: no cell questions, so no grid geometry to carry
        "exercises": [escaped(q.to_dict(lang)) for q in kernel_questions(lesson)],
        "exercise_text": exercise_text(lang),
    }
