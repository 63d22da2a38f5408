"""The last frame of a lesson: a headline that says the result with the scoreboard's own numbers,
and an engine-step counter that never reads as a step past its total."""

from __future__ import annotations

import re

import pytest

from paged.engine.core import events as E
from paged.engine.trace.io import read
from paged.viz.fold.lesson import Lesson, build
from paged.viz.fold.lesson_folder import available, load_spec, trace_path
from paged.viz.player import payload

HEAD = re.compile(r"<p class='pk-score-head'>([^<]+)</p>")
# a card's big numbers (most at once, mean, steps) and its token-states row, in card order
CARD_STEPS = re.compile(r"<div><b>(\d+)</b>[^<]*</div></div></div>")
CARD_TOKENS = re.compile(r"<span style='flex:1'>[^<]+</span><b>([\d.]+%)</b>")


@pytest.fixture(scope="module", params=available())
def lesson(request) -> Lesson:
    spec = load_spec(request.param)
    return build(spec, read(trace_path(spec)))


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_scoreboard_opens_with_its_result_in_the_cards_own_numbers(lesson, lang):
    board = payload.scoreboard(lesson, lang)
    [head] = HEAD.findall(board)
    cards = board.split("<div class='pk-score-side'>")[1:]
    assert len(cards) == 2
    for side, card in zip((lesson.left, lesson.right), cards, strict=True):
        [steps] = CARD_STEPS.findall(card)
        tokens = CARD_TOKENS.findall(card)[0]  # token states: the first category row
        assert int(steps) == len(side.frames)  # every engine step of the run is a frame
        assert re.search(rf"(?<![\d.]){steps}(?![\d%])", head) and tokens in head, (steps, head)
        finished = E.count_of([e for f in side.frames for e in f.events], E.Finished)
        assert re.search(rf"(?<![\d.]){finished}(?![\d%])", head), (finished, head)
    if lang == "en":
        left, right = (len(s.frames) for s in (lesson.left, lesson.right))
        assert f"the right in {right} engine steps, the left in {left}" in head


def _counter(lesson: Lesson, i: int) -> str:
    return payload.frame_parts(lesson, i, "en")[-1]


def test_the_step_counter_after_one_run_has_ended_counts_the_run_still_going():
    """six-steps' paged run ends at step 83, its contiguous one at 101: the last frame said
    'engine step 101/83', a counter past its total. The ended side's caption says it ended."""
    spec = load_spec("six-steps")
    lesson = build(spec, read(trace_path(spec)))
    last, right_end = lesson.num_frames - 1, len(lesson.right.frames) - 1
    assert right_end < last
    assert _counter(lesson, right_end) == f"engine step {lesson.right.frames[-1].step}"
    for i in (right_end + 1, last):
        assert _counter(lesson, i) == f"engine step {lesson.left.frames[i].step}"
        assert payload.frame_parts(lesson, i, "zh")[-1] == f"引擎步 {lesson.left.frames[i].step}"
