"""The kernel lesson's exercises: predict the next frame of the walk. Every question is played
right and wrong against the next frame's ``attention_read``, read here with this test's own
code; an old or hostile trace still folds and gets safe questions; the payload carries them."""

from __future__ import annotations

import json
import math
import shutil

import pytest

from paged.engine.trace.io import read
from paged.viz.exercises import grade
from paged.viz.exercises.kernel import kernel_questions, read_answer
from paged.viz.fold.kernel.frames import fold_kernel, load_kernel_spec, pct
from paged.viz.fold.lesson_folder import LESSONS_DIR
from paged.viz.player.kernel import kernel_payload

NAME = "inside-the-kernel"


def _fold(folder=None, edit=None, tmp_path=None):
    spec = load_kernel_spec(NAME) if folder is None else load_kernel_spec(NAME, folder)
    path = spec.folder / spec.trace_file
    if edit is not None:
        lines = []
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
            obj = json.loads(line)
            edit(n, obj)
            lines.append(json.dumps(obj))
        path = tmp_path / "edited.jsonl"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return fold_kernel(spec, read(path))


@pytest.fixture(scope="module")
def lesson():
    return _fold()


def _truth(lesson, q):
    """What the next frame shows, read from its event's fields."""
    seen, nxt = lesson.frames[q.frame], lesson.frames[q.frame + 1]
    r = nxt.read
    if q.fact == "physical":
        assert nxt.logical == seen.logical + 1
        return r.physical[nxt.logical]
    if q.fact == "m_rises":
        t, h = nxt.logical, lesson.head
        return "yes" if r.tile_m[t][h] > r.tile_m[t - 1][h] else "no"
    if q.fact == "top_block":
        return max(range(len(r.mass)), key=lambda k: r.mass[k])
    if q.fact == "gqa_reads":
        assert nxt.stage == "gqa"
        return len(r.physical)
    assert q.fact == "splits" and nxt.stage == "split"
    return math.ceil(len(r.physical) / (r.split or len(r.physical)))


def _wrong(q, answer):
    return answer + 1 if q.form == "number" else next(c for c in q.choices if c != answer)


def test_the_kernel_lesson_asks_at_least_five_questions_in_both_languages(lesson):
    qs = kernel_questions(lesson)
    assert len(qs) >= 5
    assert {"physical", "m_rises", "top_block", "gqa_reads"} <= {q.fact for q in qs}
    for lang in ("en", "zh"):
        assert len({q.prompt[lang] for q in qs}) == len(qs)
        assert all(q.why[lang] for q in qs)


def test_the_tile_questions_are_not_all_answered_the_same(lesson):
    """The head followed is the one whose max rises most: a first-three pick would be all yes."""
    answers = {q.answer for q in kernel_questions(lesson) if q.fact == "m_rises"}
    assert answers == {"yes", "no"}


def test_every_question_is_right_and_wrong_against_the_next_frame(lesson):
    for q in kernel_questions(lesson):
        truth = _truth(lesson, q)
        assert read_answer(lesson, q) == truth, q.id
        assert grade(q, truth), q.id
        assert not grade(q, _wrong(q, truth)), q.id
        assert not grade(q, str(truth)) or q.form != "number"


def _quoted(lesson, q) -> str:
    nxt = lesson.frames[q.frame + 1]
    r = nxt.read
    if q.fact == "physical":
        return f"#{q.answer}"
    if q.fact == "m_rises":
        return f"{r.tile_m[nxt.logical][lesson.head]:.3f}"
    if q.fact == "top_block":
        return pct(max(r.mass))
    if q.fact == "gqa_reads":
        return str(len(r.physical) * len(r.heads))
    return str(len(r.physical))


def test_every_why_quotes_the_next_frames_own_numbers(lesson):
    for q in kernel_questions(lesson):
        for lang in ("en", "zh"):
            assert _quoted(lesson, q) in q.why[lang], (q.id, lang)


def test_a_question_without_a_next_frame_has_no_answer(lesson):
    q = kernel_questions(lesson)[0]
    past_end = type(q)(**{**q.__dict__, "frame": lesson.num_frames - 1})
    assert read_answer(lesson, past_end) is None


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_payload_carries_the_questions_for_exercise_mode(lesson, lang):
    p = kernel_payload(lesson, lang)
    qs = kernel_questions(lesson)
    assert [(d["id"], d["frame"], d["answer"]) for d in p["exercises"]] == [
        (q.id, q.frame, q.answer) for q in qs
    ]
    assert all(d["answer_frame"] == d["frame"] + 1 < p["num_frames"] for d in p["exercises"])
    assert p["exercise_text"]["ex_mode"] and p["text"]["left"] and p["text"]["right"]


def test_a_trace_older_than_the_kernels_record_still_gets_its_questions(tmp_path):
    """Reads without source and split: one split over the whole walk."""

    def strip(_n, obj):
        if obj.get("kind") == "attention_read":
            del obj["source"], obj["split"]

    past = _fold(edit=strip, tmp_path=tmp_path)
    qs = kernel_questions(past)
    assert len(qs) >= 5
    splits = [q for q in qs if q.fact == "splits"]
    assert [q.answer for q in splits] == [1]
    for q in qs:
        assert grade(q, _truth(past, q))


def test_a_hostile_request_id_stays_text_in_the_questions(tmp_path):
    evil = '<img src=x onerror="alert(1)">'
    root = tmp_path / "lessons"
    shutil.copytree(LESSONS_DIR / NAME, root / NAME)
    toml = root / NAME / "kernel.toml"
    toml.write_text(
        toml.read_text(encoding="utf-8").replace('request = "C"', f"request = {json.dumps(evil)}"),
        encoding="utf-8",
    )

    def rename(n, obj):
        if n and obj.get("req") == "C":
            obj["req"] = evil

    hostile = _fold(root, rename, tmp_path)
    text = json.dumps(kernel_payload(hostile, "en")["exercises"])
    assert "<img" not in text and "&lt;img" in text
