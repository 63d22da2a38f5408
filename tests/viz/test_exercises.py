"""Exercises: every shipped lesson offers at least five generated questions in English and 中文,
and each one, played with its answer and with a wrong one against the fold of the next frame,
is graded right and wrong. The answers here are read from the frames by this file's own
reading of what each question asks, not by the module's readers."""

from __future__ import annotations

import functools
import json
import re

import pytest

from paged.engine.trace import io as T
from paged.viz.exercises import (
    FACTS,
    PickError,
    Question,
    check_pick,
    grade,
    questions,
    read_answer,
)
from paged.viz.fold.lesson import Lesson, build
from paged.viz.fold.lesson_folder import LessonError, available, load_spec, trace_path
from paged.viz.fold.reducer import TOKEN, Frame
from paged.viz.player import payload as player
from tests.hostile_traces import SIX_TRACE, hostile_trace_text

LESSONS = available()
CJK = re.compile(r"[\u4e00-\u9fff]")


@functools.cache
def lesson(name: str, source: str = "lesson") -> Lesson:
    spec = load_spec(name)
    return build(spec, T.read(trace_path(spec)), source=source)


def _shared(nxt: Frame, req: str) -> tuple[int, ...]:
    holders: dict[int, int] = {}
    for table in nxt.block_tables.values():
        for b in set(table):
            holders[b] = holders.get(b, 0) + 1
    return tuple(sorted(b for b in set(nxt.block_tables[req]) if holders[b] > 1))


def _newest_token_slot(nxt: Frame, req: str) -> tuple[int, ...]:
    start, length = nxt.reservations[req]
    written = [s for s in range(start, start + length) if nxt.cells[s] == TOKEN]
    return (max(written),)


def _copied_from(seen: Frame, nxt: Frame, req: str, logical: int) -> tuple[int, ...]:
    # the block it was about to write into: held at that place by another table, and already
    # holding K/V before the step (a copy made in this step was free then)
    bs = nxt.run.block_size
    others = {t[logical] for r, t in nxt.block_tables.items() if r != req and len(t) > logical}
    return tuple(sorted(b for b in others if seen.owners[b * bs] is not None))


def truth(seen: Frame, nxt: Frame, q: Question):
    """What the next frame shows, read plainly from its fields."""
    req = q.req
    view = nxt.requests[req]
    return {
        "admitted": lambda: "yes" if req in nxt.running or view.status == "finished" else "no",
        "external": lambda: nxt.account.external,
        "next_block": lambda: (nxt.block_tables[req][q.logical],),
        "next_slot": lambda: _newest_token_slot(nxt, req),
        "blocks_held": lambda: len(nxt.block_tables.get(req, ())),
        "shared": lambda: _shared(nxt, req),
        "copied": lambda: _copied_from(seen, nxt, req, q.logical),
        "preempted": lambda: next(
            r for r in seen.running if r not in nxt.running and nxt.requests[r].status != "finished"
        ),
        "preempt_mode": lambda: "swap" if view.cpu_blocks else "recompute",
        "cpu_blocks": lambda: view.cpu_blocks,
    }[q.fact]()


def wrong(q: Question):
    if q.choices:
        return next(c for c in q.choices if c != q.answer)
    if isinstance(q.answer, int):
        return q.answer + 1
    assert isinstance(q.answer, tuple)
    return tuple(sorted({(b + 1) % q.cells for b in q.answer} | {q.answer[0]}))


@pytest.mark.parametrize("name", LESSONS)
def test_every_lesson_offers_five_picked_questions_in_both_languages(name):
    qs = questions(lesson(name))
    assert len(qs) >= 5
    assert len(qs) == len(lesson(name).spec.exercises)  # every pick found its place
    assert len({q.id for q in qs}) == len(qs)
    for q in qs:
        for lang in ("en", "zh"):
            assert q.prompt[lang] and q.why[lang] and "{" not in q.prompt[lang] + q.why[lang]
            assert f"{q.frame + 1}" in q.why[lang]  # the answering frame's own numbers
        assert CJK.search(q.prompt["zh"]) and CJK.search(q.why["zh"])
        assert not CJK.search(q.prompt["en"] + q.why["en"])


@pytest.mark.parametrize("name", LESSONS)
def test_each_answer_is_what_the_next_frame_shows_and_a_wrong_one_is_graded_wrong(name):
    fresh = build(lesson(name).spec, T.read(trace_path(lesson(name).spec)))  # folded anew
    for q in questions(lesson(name)):
        frames = fresh.side(q.side).frames
        seen, nxt = frames[q.frame], frames[q.frame + 1]
        right = truth(seen, nxt, q)
        assert grade(q, right), (q.id, q.fact, q.answer, right)
        assert not grade(q, wrong(q)), (q.id, q.fact, q.answer)
        assert read_answer(fresh, q) == q.answer
        if q.form == "number" or q.form == "cells":
            shown = [q.answer] if isinstance(q.answer, int) else list(q.answer)
            assert all(str(v) in q.why["en"] for v in shown)  # the sentence says the answer


def test_the_lessons_ask_every_kind_of_question_and_about_every_kind_of_event():
    asked = [q for name in LESSONS for q in questions(lesson(name))]
    assert {q.form for q in asked} == {"yesno", "choose", "number", "cells"}
    assert {q.fact for q in asked} == set(FACTS)
    events = {q.event for q in asked}
    assert {"admitted", "admission_blocked", "block_allocated", "block_copied"} <= events
    assert {"block_shared", "preempted", "swapped_out"} <= events
    # the same request asked both ways: refused now, admitted once it fits
    answers = {(q.fact, q.answer) for q in asked}
    assert ("admitted", "yes") in answers and ("admitted", "no") in answers
    assert ("preempt_mode", "swap") in answers and ("preempt_mode", "recompute") in answers


def test_generation_is_deterministic():
    for name in LESSONS:
        spec = load_spec(name)
        a = questions(build(spec, T.read(trace_path(spec))))
        b = questions(build(spec, T.read(trace_path(spec))))
        assert [q.to_dict("zh") for q in a] == [q.to_dict("zh") for q in b]
        assert a == b


def test_an_uploaded_trace_gets_generated_questions_of_several_kinds():
    upload = lesson("recompute-or-swap", source="mine.jsonl")  # not the lesson's own: no picks
    qs = questions(upload)
    assert len(qs) > len(upload.spec.exercises)
    assert {"admitted", "next_block", "preempted", "preempt_mode", "cpu_blocks"} <= {
        q.fact for q in qs
    }
    for q in qs:
        assert grade(q, read_answer(upload, q)) and not grade(q, wrong(q))


def test_a_hostile_trace_gets_questions_whose_text_is_escaped_in_the_payload():
    trace = T.loads(hostile_trace_text(SIX_TRACE))
    hostile = build(load_spec("six-steps"), trace, source="hostile.jsonl")
    data = player.exercises_data(hostile, "en")
    assert len(data) >= 5
    text = json.dumps(data)
    assert "<svg" not in text and "<img" not in text and "&lt;" in text


def test_the_payload_carries_each_question_with_its_answer_in_its_language():
    six = lesson("six-steps")
    data = player.payload(six, "zh")["exercises"]
    qs = questions(six)
    assert [d["id"] for d in data] == [q.id for q in qs]
    for d, q in zip(data, qs, strict=True):
        assert d["prompt"] == q.prompt["zh"] and d["answer_frame"] == d["frame"] + 1
        assert d["answer"] == (list(q.answer) if isinstance(q.answer, tuple) else q.answer)
        assert [c["value"] for c in d["choices"]] == list(q.choices)
    json.dumps(data)


@pytest.mark.parametrize(
    "given", ["3", 3.0, None, [], [True], ["#1"], {"a": 1}, "yes ", -1, 10**30]
)
def test_a_malformed_answer_is_simply_wrong(given):
    for q in questions(lesson("parallel-sampling")):
        assert not grade(q, given)


@pytest.mark.parametrize(
    ("pick", "says"),
    [
        ({"ask": "nonsense"}, "ask = 'nonsense'"),
        ({"ask": "admitted", "colour": "red"}, "unknown key 'colour'"),
        ({"ask": "admitted", "nth": 0}, "nth"),
        ({"ask": "admitted", "prompt": {"en": "{req.__class__}", "zh": "x"}}, "quotes"),
        ({"ask": "admitted", "prompt": {"en": "Will {req} run?"}}, "en and zh"),
    ],
)
def test_a_bad_pick_in_lesson_toml_is_one_line(pick, says):
    with pytest.raises(PickError, match=re.escape(says)) as info:
        check_pick(pick, "lessons/x/lesson.toml")
    assert "\n" not in str(info.value)


def test_a_lesson_whose_picks_are_unusable_is_refused_when_it_loads(tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    toml = (load_spec("six-steps").folder / "lesson.toml").read_text(encoding="utf-8")
    (folder / "lesson.toml").write_text(toml + '\n[[exercises]]\nask = ["x"]\n', encoding="utf-8")
    with pytest.raises(LessonError, match="ask = ") as info:
        load_spec("mine", tmp_path)
    assert "\n" not in str(info.value)
    top = "exercises = [1]\n"  # a top-level key: before the first table
    (folder / "lesson.toml").write_text(top + toml.split("[[exercises]]")[0], encoding="utf-8")
    with pytest.raises(LessonError, match=r"\[\[exercises\]\] tables"):
        load_spec("mine", tmp_path)
