"""A lesson's exercises as a printable worksheet with an answer key, one per language.

Markdown: it prints as it is from any editor or ``lp`` (no browser, no Chromium, no fonts beyond
the terminal's), reads the same on paper as on screen, and pandoc or any forge turns it into
a PDF or a page where that is wanted. Each question shows the arena as the student would see
it at that frame, in text (who holds which block or slot, the block tables, the queue), then
the question and a line to answer on; the key at the end gives each answer and its one
sentence of why with the next frame's numbers. Text from a trace (request names) is escaped
for markdown, and the pictures sit in code fences longer than any backtick run in them.
Pure Python.
"""

from __future__ import annotations

import re

from paged.viz import safe
from paged.viz.exercises import Question, questions
from paged.viz.exercises.facts import BLOCK, CELLS, CHOOSE, NUMBER, name, table_text
from paged.viz.exercises.question import text
from paged.viz.fold.lesson_model import Lesson
from paged.viz.fold.reducer import FREE, HOLE, PAGED, TOKEN, Frame

PER_ROW = 8  # blocks per line of a block map: fits an A4 page in a monospaced font
_MARKUP = re.compile(r"([\\`*_\[\]<>!$~|{}&])")


def _md(s: object) -> str:
    """Trace text made literal in markdown (one line; every mark that opens markup escaped).
    None of the worksheet's own words use these marks, so they print unchanged."""
    return _MARKUP.sub(r"\\\1", safe.one_line(s))


def worksheet(lesson: Lesson, lang: str) -> str:
    """The worksheet in ``lang``: every question the lesson offers, then the answer key."""
    t = text()[lang]
    qs = questions(lesson)
    out = [f"# {_md(t['ws_title'].format(lesson=lesson.spec.title[lang]))}", "", t["ws_intro"], ""]
    for n, q in enumerate(qs, start=1):
        out += _question(lesson, q, n, lang, t)
    out += [f"## {t['ws_key']}", ""]
    for n, q in enumerate(qs, start=1):
        line = t["ws_key_line"].format(n=n, answer=_answer(q, lang), why=_md(q.why[lang]))
        out += [line, ""]
    out += ["---", "", t["ws_made"], ""]
    return "\n".join(out)


def _question(lesson: Lesson, q: Question, n: int, lang: str, t: dict) -> list[str]:
    side = lesson.side(q.side)
    seen = side.frames[q.frame]
    where = t["ws_at"].format(side=side.title[lang], frame=q.frame, step=seen.step)
    out = [f"## {t['ws_question'].format(n=n)}", "", f"*{_md(where)}*", ""]
    out += _picture(seen, t)
    out += [f"**{_md(q.prompt[lang])}**", ""]
    if q.form == CHOOSE:
        out += [t["ws_answer_choose"], ""]
        out += [f"- [ ] {_md(label)}" for label in q.labels[lang]]
    elif q.form == NUMBER:
        out.append(t["ws_answer_number"])
    elif q.form == CELLS:
        key = "ws_answer_block" if q.unit == BLOCK else "ws_answer_slot"
        out.append(t[key].format(last=q.cells - 1))
    else:
        out.append(t["ws_answer_yesno"])
    return [*out, "", "---", ""]


def _picture(frame: Frame, t: dict) -> list[str]:
    """The frame in text: its blocks (paging) or runs (contiguous), tables, queue, CPU tier."""
    if frame.run.allocator == PAGED:
        lines = [t["ws_block_map"], *_block_map(frame), "", t["ws_tables"]]
        lines += [f"  {name(frame, r)}: {table_text(b)}" for r, b in frame.block_tables.items()]
    else:
        lines = [t["ws_slot_map"], *_slot_map(frame, t)]
    if frame.cpu_tables:
        cpu = "; ".join(
            f"{name(frame, r)}: {table_text(b, 'c')}" for r, b in frame.cpu_tables.items()
        )
        lines += [t["ws_cpu"].format(tables=cpu)]
    queue = t["ws_queue"].format(
        running=", ".join(name(frame, r) for r in frame.running) or "-",
        waiting=", ".join(name(frame, r) for r in frame.waiting) or "-",
    )
    lines = [safe.one_line(x) if x.strip() else "" for x in [*lines, "", queue]]
    fence = "`" * max(3, 1 + max((len(r) for x in lines for r in re.findall("`+", x)), default=0))
    return [fence + "text", *lines, fence, ""]


def _block_map(frame: Frame) -> list[str]:
    bs = frame.run.block_size
    holders: dict[int, list[str]] = {}
    for r, table in frame.block_tables.items():
        for b in dict.fromkeys(table):
            holders.setdefault(b, []).append(name(frame, r))
    cells = []
    for b in range(frame.run.num_slots // bs):
        who = "+".join(holders.get(b, ())) or (
            "·" if frame.owners[b * bs] is None else name(frame, frame.owners[b * bs] or "")
        )
        cells.append(f"#{b:<3}{who:<6}")
    return ["  " + " ".join(cells[i : i + PER_ROW]).rstrip() for i in range(0, len(cells), PER_ROW)]


def _slot_map(frame: Frame, t: dict) -> list[str]:
    """One line per stretch of the arena: a request's run (and how much of it is written) or
    a free stretch."""
    out, start = [], 0
    cells, owners = frame.cells, frame.owners
    for i in range(1, len(cells) + 1):
        if (
            i < len(cells)
            and owners[i] == owners[start]
            and (cells[i] in (FREE, HOLE)) == (cells[start] in (FREE, HOLE))
        ):
            continue
        owner, span = owners[start], {"first": start, "last": i - 1, "n": i - start}
        if owner is None:
            out.append("  " + t["ws_free_run"].format(**span))
        else:
            written = cells[start:i].count(TOKEN)
            out.append("  " + t["ws_run"].format(who=name(frame, owner), written=written, **span))
        start = i
    return out


def _answer(q: Question, lang: str) -> str:
    if q.choices:
        return _md(dict(zip(q.choices, q.labels[lang], strict=True))[str(q.answer)])
    if isinstance(q.answer, tuple):
        return ", ".join(f"#{b}" if q.unit == BLOCK else str(b) for b in q.answer)
    return str(q.answer)
