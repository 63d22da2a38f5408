"""Exercises: predict, then see. Questions generated from a lesson's own frames.

``questions(lesson)`` is what a lesson offers: rules per event kind (``rules``) say where
something instructive happens next, facts (``facts``, ``sharing``) read each answer from the
fold of the next frame, and ``question`` words it in English and 中文 with one sentence of why
quoting that frame's numbers. A lesson's ``[[exercises]]`` picks, orders and words them::

    [[exercises]]
    ask = "admitted"              # a fact: table.FACTS
    side = "left"                 # optional: left / right
    event = "admission_blocked"   # optional: the kind of event that makes it true
    req = "D"                     # optional: the request's id in the trace
    nth = 1                       # optional: the nth such place (1 = the first)
    prompt = { en = "...{req}...", zh = "..." }   # optional: {req} {prompt} {max_tokens} {logical}

An uploaded or recorded trace (``lesson.source`` not "lesson") gets the generated questions,
a few of each fact. Deterministic; pure Python, no Streamlit, no torch.
"""

from __future__ import annotations

from paged.viz.exercises.picks import PickError, check_pick, wording
from paged.viz.exercises.question import Question, grade, make, read_answer
from paged.viz.exercises.rules import Candidate, candidates
from paged.viz.exercises.table import FACTS
from paged.viz.fold.lesson_model import Lesson

__all__ = ["FACTS", "PickError", "Question", "check_pick", "grade", "questions", "read_answer"]

PER_FACT = 3  # generated questions of one fact on one side, when the lesson picks none
MAX_QUESTIONS = 40  # per lesson: a worksheet's worth, and a bounded payload for any upload


def questions(lesson: Lesson) -> list[Question]:
    """The questions ``lesson`` offers, in the order it asks them."""
    cands = candidates(lesson)
    picks = lesson.spec.exercises if lesson.source == "lesson" else ()
    if picks:
        return _picked(lesson, cands, picks)
    out: list[Question] = []
    per: dict[tuple[str, str], int] = {}
    for n, c in enumerate(cands):
        if per.get((c.fact, c.side), 0) >= PER_FACT or len(out) >= MAX_QUESTIONS:
            continue
        q = make(lesson, c, n)
        if q is not None:
            out.append(q)
            per[c.fact, c.side] = per.get((c.fact, c.side), 0) + 1
    return out


def _picked(lesson: Lesson, cands: list[Candidate], picks: tuple[dict, ...]) -> list[Question]:
    where = f"lessons/{lesson.spec.name}/lesson.toml"
    out = []
    for pick in picks[:MAX_QUESTIONS]:
        check_pick(pick, where)
        nth = pick.get("nth", 1)
        found = 0
        for n, c in enumerate(cands):
            if not _matches(c, pick):
                continue
            q = make(lesson, c, n, wording(pick))
            if q is None:
                continue
            found += 1
            if found == nth:
                out.append(q)
                break
    return out


def _matches(c: Candidate, pick: dict) -> bool:
    return (
        c.fact == pick["ask"]
        and pick.get("side", c.side) == c.side
        and pick.get("event", c.event) == c.event
        and pick.get("req", c.req) == c.req
    )
