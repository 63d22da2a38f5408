"""A question as the student sees it: asked at one frame, answered by the next.

``make(lesson, candidate)`` reads the answer from the fold (``table.FACTS``) and words the
prompt, the choices and the one sentence of why in both languages (paged/viz/text/exercises.toml,
or the lesson's own wording); ``grade`` says whether an answer is right; ``read_answer`` reads
the fold again, which is what a test plays answers against. Pure Python.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from paged.viz import ui_text
from paged.viz.exercises.facts import CELLS, CHOOSE, NUMBER, YESNO, Answer, name
from paged.viz.exercises.rules import Candidate
from paged.viz.exercises.table import FACTS
from paged.viz.fold.lesson_folder import LANGS
from paged.viz.fold.lesson_model import Lesson
from paged.viz.fold.reducer import PAGED


@dataclass(frozen=True)
class Question:
    """One generated question. ``frame`` is the lesson frame shown while it is asked; the
    answer is what ``side``'s frame ``frame + 1`` shows. ``choices`` are the values an answer
    may take (yes/no, request ids, swap/recompute; empty for numbers and cells), ``labels``
    their words by language; a cells answer lists blocks (``unit`` "block") or slots ("slot")
    of a grid of ``cells`` of them."""

    id: str
    fact: str
    side: str
    frame: int
    event: str
    form: str
    answer: Answer
    prompt: dict[str, str]
    why: dict[str, str]
    choices: tuple[str, ...] = ()
    labels: dict[str, tuple[str, ...]] = field(default_factory=dict)
    unit: str = ""
    cells: int = 0
    req: str = ""
    logical: int = -1

    def to_dict(self, lang: str) -> dict:
        """Plain data for one language (what the player's payload carries)."""
        return {
            "id": self.id,
            "frame": self.frame,
            "answer_frame": self.frame + 1,
            "side": self.side,
            "form": self.form,
            "fact": self.fact,
            "event": self.event,
            "unit": self.unit,
            "cells": self.cells,
            "prompt": self.prompt[lang],
            "choices": [
                {"value": v, "label": lb}
                for v, lb in zip(self.choices, self.labels.get(lang, ()), strict=True)
            ],
            "answer": list(self.answer) if isinstance(self.answer, tuple) else self.answer,
            "why": self.why[lang],
        }


def text() -> dict[str, dict]:
    return ui_text.load("exercises")


def prompt_values(lesson: Lesson, c: Candidate) -> dict[str, object]:
    """What a prompt may quote (a lesson's own wording too): the request's name, its prompt
    length and output bound, the logical block a question is about."""
    frames = lesson.side(c.side).frames
    view = frames[c.frame + 1].requests.get(c.req)
    return {
        "req": name(frames[c.frame + 1], c.req),
        "prompt": view.prompt_len if view else "?",
        "max_tokens": view.max_tokens if view else "?",
        "logical": c.logical,
    }


def make(lesson: Lesson, c: Candidate, n: int, wording: dict | None = None) -> Question | None:
    """The question ``c`` proposes, or None where the fold cannot answer it."""
    frames = lesson.side(c.side).frames
    seen, nxt = frames[c.frame], frames[c.frame + 1]
    fact = FACTS[c.fact]
    answer = fact.read(seen, nxt, c.params)
    if answer is None:
        return None
    t = text()
    key = f"q_{c.fact}"
    if c.fact == "admitted" and c.req not in seen.requests:
        key = "q_admitted_new"  # it arrives in this very step: the student has not seen it
    values = prompt_values(lesson, c)
    why_key, why_values = fact.why(seen, nxt, c.params)
    choices: tuple[str, ...] = ()
    labels: dict[str, tuple[str, ...]] = {}
    if fact.form == YESNO:
        choices = ("yes", "no")
    elif c.fact == "preempt_mode":
        choices = ("swap", "recompute")
    elif fact.form == CHOOSE:
        choices = tuple(seen.running)
        if answer not in choices:
            return None
    for lang in LANGS:
        words = t[lang]
        labels[lang] = tuple(
            words[v] if v in ("yes", "no", "swap", "recompute") else name(seen, v) for v in choices
        )
    paged = nxt.run.allocator == PAGED
    return Question(
        id=f"q{n}",
        fact=c.fact,
        side=c.side,
        frame=c.frame,
        event=c.event,
        form=fact.form,
        answer=answer,
        prompt={
            lang: ((wording or {}).get(lang) or t[lang][key]).format(**values) for lang in LANGS
        },
        why={lang: t[lang][why_key].format(**why_values) for lang in LANGS},
        choices=choices,
        labels=labels,
        unit=fact.unit,
        cells=(nxt.run.num_slots // nxt.run.block_size if paged else nxt.run.num_slots)
        if fact.form == CELLS
        else 0,
        req=c.req,
        logical=c.logical,
    )


def read_answer(lesson: Lesson, q: Question) -> Answer | None:
    """The question's answer as the fold of its next frame says it, read afresh."""
    frames = lesson.side(q.side).frames
    if not 0 <= q.frame < len(frames) - 1:
        return None
    params = {"req": q.req, "logical": q.logical}
    return FACTS[q.fact].read(frames[q.frame], frames[q.frame + 1], params)


def grade(q: Question, given: object) -> bool:
    """Whether ``given`` is the answer. Anything malformed (a string for a number, a cell list
    with junk in it) is simply wrong."""
    if q.form == CELLS:
        if not isinstance(given, (list, tuple, set, frozenset)):
            return False
        picked = set(given)
        return all(type(b) is int for b in picked) and picked == set(q.answer)  # type: ignore[arg-type]
    if q.form == NUMBER:
        return type(given) is int and given == q.answer
    return isinstance(given, str) and given == q.answer
