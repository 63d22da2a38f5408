"""What the shipped lessons show is what happened: categories under the accounting's one rule,
hatches only on requests that have stopped, and texts that say what the trace shows."""

from __future__ import annotations

import pytest

from engine.core import events as E
from engine.trace.io import read
from viz.fold.lesson import Lesson, build
from viz.fold.lesson_folder import available, load_spec, trace_path
from viz.fold.reducer import HOLE, INTERNAL


def _lesson(name: str) -> Lesson:
    spec = load_spec(name)
    return build(spec, read(trace_path(spec)))


@pytest.fixture(scope="module")
def six() -> Lesson:
    return _lesson("six-steps")


def test_six_steps_no_space_frames_show_free_slots_not_a_hole(six):
    """Frames 41-83 on the left: E needs 82 slots with only 60 free in total. No hole would help
    (compaction would not admit it either), so the 60 are free, as the metrics say."""
    frames = [six.left.at(i) for i in range(41, 84)]
    for f in frames:
        (b,) = f.blocked
        assert b.reason == E.BLOCKED_NO_SPACE and b.need_slots > b.free_slots
        assert f.account.external == 0 and f.count(HOLE) == 0
        assert f.account.free == b.free_slots > 0


def test_six_steps_no_hole_frame_shows_the_free_slots_as_external(six):
    hole = [f for f in six.left.frames if f.blocked_by(E.BLOCKED_NO_HOLE)]
    assert hole
    for f in hole:
        b = f.blocked_by(E.BLOCKED_NO_HOLE)
        assert f.account.external == f.count(HOLE) == b.free_slots and f.account.free == 0


@pytest.mark.parametrize("name", available())
def test_only_a_stopped_request_has_cells_hatched_never_filled(name):
    lesson = _lesson(name)
    for side in (lesson.left, lesson.right):
        for f in side.frames:
            stopped = {e.req for e in f.events if e.kind == E.Finished.kind}
            hatched = {f.owners[s] for s, c in enumerate(f.cells) if c == INTERNAL}
            assert hatched <= stopped, (name, side.run, f.index, hatched - stopped)
