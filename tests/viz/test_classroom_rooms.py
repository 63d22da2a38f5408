"""A class that answers together (paged/viz/classroom/rooms.py): only the lecturer's key moves
the frame or reveals, a follower answers only the question asked now and only with an answer of
its form, and the lecturer's distribution counts each follower once."""

from __future__ import annotations

import functools

import pytest

from paged.engine.trace import io as T
from paged.viz.classroom.rooms import CODE_RE, MAX_FOLLOWERS, MAX_ROOMS, ClassError, Rooms
from paged.viz.fold.lesson import build
from paged.viz.fold.lesson_folder import load_spec, trace_path
from paged.viz.player.payload import exercises_data


@functools.cache
def _six():
    spec = load_spec("six-steps")
    lesson = build(spec, T.read(trace_path(spec)))
    return lesson.num_frames, exercises_data(lesson, "en")


def _room():
    n, qs = _six()
    return Rooms().open("six-steps", "en", n, qs)


def _q(room, form):
    return next(q for q in room.questions.values() if q["form"] == form)


def test_a_room_is_named_by_a_short_code_and_found_in_any_case():
    rooms = Rooms()
    n, qs = _six()
    room = rooms.open("six-steps", "en", n, qs)
    assert CODE_RE.fullmatch(room.code) and not set("0O1IL") & set(room.code)
    assert rooms.get(room.code.lower()) is room
    for bad in ["", "ZZZZZ", "../x", None, 5, room.code + "A"]:
        with pytest.raises(ClassError) as e:
            rooms.get(bad)
        assert e.value.status == 404


def test_only_the_lecturers_key_moves_the_frame_or_reveals():
    room = _room()
    token = room.join()
    for key in [token, "", None, room.key[:-1], room.key + "x"]:
        with pytest.raises(ClassError) as e:
            room.go(key, 7)
        assert e.value.status == 403
    assert room.frame == 0 and room.version == 0
    room.go(room.key, 7)
    assert room.frame == 7 and room.version == 1 and room.state()["asking"] == room.asking()
    with pytest.raises(ClassError):
        room.reveal(token, room.asking()[0])
    for frame in [-1, room.num_frames, 3.0, "3", True, None]:
        with pytest.raises(ClassError):
            room.go(room.key, frame)
    assert room.frame == 7


def test_a_follower_answers_only_the_question_asked_now_and_only_until_revealed():
    room = _room()
    q = _q(room, "number")
    token = room.join()
    with pytest.raises(ClassError):  # not asked at frame 0
        room.answer(token, q["id"], q["answer"])
    room.go(room.key, q["frame"])
    with pytest.raises(ClassError):
        room.answer("someone-else", q["id"], q["answer"])
    room.answer(token, q["id"], q["answer"] + 1)
    room.answer(token, q["id"], q["answer"])  # a second answer replaces the first
    assert room.tally(room.key, q["id"])["bars"] == [[q["answer"], 1]]
    room.reveal(room.key, q["id"])
    assert q["id"] in room.state()["revealed"]
    with pytest.raises(ClassError):
        room.answer(token, q["id"], 0)


@pytest.mark.parametrize("form", ["yesno", "number", "cells"])
def test_a_hostile_answer_is_refused_in_one_line_and_counts_for_nothing(form):
    room = _room()
    q = _q(room, form)
    room.go(room.key, q["frame"])
    token = room.join()
    hostile = ["<img src=x>", None, {"a": 1}, 10**30, 2.5, True, [-1], [q["cells"] or 1], [0, 0]]
    hostile += [list(range(q["cells"] + 1)), "yes " if form == "yesno" else "yes"]
    for value in hostile:
        with pytest.raises(ClassError) as e:
            room.answer(token, q["id"], value)
        assert "\n" not in str(e.value)
    assert room.tally(room.key, q["id"])["n"] == 0


def test_the_distribution_is_a_bar_per_choice_and_a_count_per_cell():
    room = _room()
    yes, cells = _q(room, "yesno"), _q(room, "cells")
    room.go(room.key, yes["frame"])
    tokens = [room.join() for _ in range(5)]
    for t, v in zip(tokens, ["yes", "yes", "no", "yes", "no"], strict=True):
        room.answer(t, yes["id"], v)
    assert room.tally(room.key, yes["id"])["bars"] == [["yes", 3], ["no", 2]]
    room.go(room.key, cells["frame"])
    for t, v in zip(tokens, [[0], [0, 1], [1], [], [cells["cells"] - 1]], strict=True):
        room.answer(t, cells["id"], v)
    counts = room.tally(room.key, cells["id"])["cells"]
    assert len(counts) == cells["cells"] and counts[:2] == [2, 2] and counts[-1] == 1
    assert sum(counts) == 5
    with pytest.raises(ClassError):
        room.tally(tokens[0], cells["id"])


def test_a_room_holds_a_bounded_class_and_a_server_a_bounded_number_of_rooms():
    room = _room()
    for _ in range(MAX_FOLLOWERS):
        room.join()
    with pytest.raises(ClassError) as e:
        room.join()
    assert e.value.status == 429
    rooms = Rooms()
    n, qs = _six()
    for _ in range(MAX_ROOMS):
        rooms.open("six-steps", "en", n, qs)
    with pytest.raises(ClassError):
        rooms.open("six-steps", "en", n, qs)
