"""Every frame's numbers as CSV, for a lecturer's own plots.

    python -m paged export --lesson six-steps --format csv --out DIR      # DIR/six-steps.csv
    python -m paged export --trace run.jsonl --format csv --out DIR      # DIR/run.csv

One row per run per frame, as the player shows that frame: frame ``i`` of a side is
``Side.at(i)``, so a run that ended earlier repeats the arena as it left it (``ended`` 1). The
frames know only what has happened (a request's unwritten slots are reservation until it
stops); the scoreboard's hindsight is not in here. Every number is read from the frame's own
account, whose category counts are the frame's cells counted: the CSV says whatever the grid
draws, and nothing here classifies a slot itself. The columns are listed in
docs/trace-format.md. Pure Python.
"""

from __future__ import annotations

import csv
import io
import re
from collections import Counter
from collections.abc import Iterator

from paged.viz import safe
from paged.viz.fold import chapters
from paged.viz.fold.kernel.frames import KernelLesson
from paged.viz.fold.lesson import Lesson
from paged.viz.fold.reducer import Frame

#: The first ten are the issue's contract, in this order; the rest follow.
COLUMNS = (
    "run",
    "frame",
    "step",
    "tokens",
    "reserved",
    "internal",
    "external",
    "free",
    "running",
    "waiting",
    "blocked",
    "batched",
    "swapped",
    "cpu_used",
    "cpu_blocks",
    "shared",
    "saved",
    "slots",
    "side",
    "allocator",
    "ended",
    "chapter",
    "lesson_step",
    "refused",
    "events",
)
#: Which account field each count column reads (StepAccount's own names).
ACCOUNT_FIELDS = {
    "tokens": "token_states",
    "reserved": "reservation",
    "internal": "internal",
    "external": "external",
    "free": "free",
    "running": "running",
    "waiting": "waiting",
    "blocked": "blocked",
    "batched": "batched",
    "swapped": "swapped",
    "cpu_used": "cpu_used",
    "cpu_blocks": "cpu_blocks",
    "shared": "shared",
    "saved": "saved",
    "slots": "num_slots",
}
SIDES = ("left", "right")
#: A spreadsheet runs a cell that starts with one of these as a formula (the full-width forms
#: too: some spreadsheets fold them to ASCII), and a spreadsheet that splits on ``;``, ``,``,
#: tab or ``|`` while ignoring quotes starts a cell after each of those. Characters it may skip
#: first (spaces, a byte-order mark, zero-width ones) do not make such a start harmless.
_FORMULA = "=+\\-@\uff1d\uff0b\uff0d\uff20\t\r"
_CELL_START = re.compile("(^|[,;\t|])([\\s\ufeff\u200b-\u200d\u2060]*)(?=[" + _FORMULA + "])")


def neutral(text: str) -> str:
    """``text`` with a ``'`` at each place a spreadsheet could start a cell that runs a formula:
    the start, and after every common separator. Applied twice it changes nothing more."""
    return _CELL_START.sub(lambda m: m.group(1) + "'" + m.group(2), text)


def text_cell(value: object) -> str:
    """Untrusted text as one harmless cell: one line, bounded, never read as a formula."""
    return neutral(safe.one_line(value))


def _events(frame: Frame) -> str:
    """The frame's events by kind, in the order each kind first happened: ``kind:count``."""
    return ";".join(f"{k}:{n}" for k, n in Counter(e.kind for e in frame.events).items())


def _refused(frame: Frame) -> str:
    """Who was refused admission this step, and the reason the event gives."""
    return ";".join(
        f"{text_cell(frame.requests[b.req].name if b.req in frame.requests else b.req)}:"
        f"{text_cell(b.reason)}"
        for b in frame.blocked
    )


def _row(run: str, i: int, frame: Frame, side: str, allocator: str) -> dict[str, object]:
    row: dict[str, object] = {"run": text_cell(run), "frame": i, "step": frame.step}
    row.update({col: getattr(frame.account, f) for col, f in ACCOUNT_FIELDS.items()})
    row.update(side=side, allocator=text_cell(allocator))
    return row


def kernel_rows(lesson: KernelLesson, lang: str = "en") -> Iterator[dict[str, object]]:
    """A kernel lesson's one run: one row per frame, the arena that frame draws (the frames
    of one zoomed decode step repeat its arena)."""
    order = {c: k for k, c in enumerate(dict.fromkeys(f.chapter for f in lesson.frames))}
    for i, f in enumerate(lesson.frames):
        row = _row(lesson.spec.run, i, f.arena, "left", "paged")
        row.update(
            ended=0,
            chapter=lesson.spec.chapter_titles[f.chapter][lang],
            lesson_step=order[f.chapter] + 1,
            refused=_refused(f.arena),
            events=_events(f.arena),
        )
        yield row


def rows(lesson: Lesson | KernelLesson, lang: str = "en") -> Iterator[dict[str, object]]:
    """The rows in frame order, the left run's row before the right's on each frame."""
    if isinstance(lesson, KernelLesson):
        yield from kernel_rows(lesson, lang)
        return
    of_frame = {}
    for c in chapters.chapters(lesson):
        title = chapters.title(lesson, c, lang)
        step = "·".join(str(k + 1) for k in c.steps)
        for i in range(c.start, c.end + 1):
            of_frame[i] = (title, step)
    for i in range(lesson.num_frames):
        title, step = of_frame[i]
        for side in SIDES:
            s = lesson.side(side)
            frame = s.at(i)
            ended = i >= len(s.frames)
            row = _row(s.run.name, i, frame, side, s.run.allocator)
            row.update(
                ended=int(ended),
                chapter=title,
                lesson_step=step,
                # an ended run takes no step: the frame it repeats had these, not this one
                refused="" if ended else _refused(frame),
                events="" if ended else _events(frame),
            )
            yield row


def csv_text(lesson: Lesson | KernelLesson, lang: str = "en") -> str:
    """The whole table as CSV text (a header row, then ``rows``), ``\\n`` line ends."""
    out = io.StringIO()
    # every text cell quoted, so a separator inside one never splits it; numbers bare
    w = csv.DictWriter(out, fieldnames=COLUMNS, lineterminator="\n", quoting=csv.QUOTE_NONNUMERIC)
    w.writeheader()
    w.writerows(
        {k: neutral(v) if isinstance(v, str) else v for k, v in row.items()}
        for row in rows(lesson, lang)
    )
    return out.getvalue()
