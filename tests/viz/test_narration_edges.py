"""Narration at the edges of a step: a request that stops in the very step it is admitted in
(its first token is its last) reserves and lets go of its memory inside one frame. The frame
still draws that memory, and the caption quotes it; the step's narration must say the same."""

from __future__ import annotations

from paged.engine.core import events as E
from paged.engine.trace.io import read
from paged.viz.fold import captions
from paged.viz.fold.lesson import Lesson, build
from paged.viz.fold.lesson_folder import load_spec, trace_path
from paged.viz.fold.narration import render_step
from paged.viz.live import lab as S

TITLES = {"en": "lab", "zh": "lab"}
SIDES = {"left": {"en": "left", "zh": "左"}, "right": {"en": "right", "zh": "右"}}


def _lesson(*requests: S.LabRequest, num_blocks: int = 12) -> Lesson:
    lab = S.Lab(requests, num_blocks=num_blocks, block_size=8, max_model_len=64, policy="max")
    assert S.check(lab) == []
    return S.lesson_for(lab, S.record_dry(lab), SIDES, TITLES)


def _released(lesson: Lesson, i: int, req: str) -> int:
    return next(
        e.length
        for e in lesson.left.frames[i].events
        if isinstance(e, E.ReservationReleased) and e.req == req
    )


def test_a_request_that_stops_as_it_is_admitted_is_said_to_release_the_run_it_held():
    lesson = _lesson(
        S.LabRequest("A", "why is the sky blue tell me about rain", 20, 0),
        S.LabRequest("B", "tell me two lines", 12, 2, stop_after=1),
    )
    k = 3  # "A short request finishes": B stops after its first token, as it is admitted
    kf = lesson.keyframes[k]
    held = _released(lesson, kf, "B")
    never = lesson.left.frames[kf].never_filled("B")
    assert held > never > 0
    left_caption = captions.caption(lesson, kf, "en")[0]
    assert f"{never} of its {held} slots were never filled" in left_caption
    en = render_step(lesson, k, "en").narration
    assert f"Of the **{held} slots** its run held, **{never}** were never filled" in en
    zh = render_step(lesson, k, "zh").narration
    assert f"**{held} 个槽位**，其中 **{never} 个**从未写入" in zh


def test_a_request_admitted_and_finished_in_one_step_is_not_said_to_wait():
    lesson = _lesson(S.LabRequest("Z", "answer", 1, 0))  # one token: done as admitted
    k = 0  # "A request arrives"
    kf = lesson.keyframes[k]
    left_caption, right_caption = captions.caption(lesson, kf, "en")
    assert "Z admitted into the hole at slot 0" in left_caption
    en = render_step(lesson, k, "en").narration
    assert "sets aside one unbroken run of **1 slots**" in en
    assert "Z waits" not in en
    # the right's table as the grid draws it this frame, not "-"
    assert "block table: 0→\\#0." in en
    assert "Z 只能等待" not in render_step(lesson, k, "zh").narration


def test_the_right_is_not_said_to_free_blocks_in_a_step_where_its_request_does_not_stop():
    # B waits on the left behind A's reservation and runs at once on the right: it stops
    # early on both sides, in different steps
    lesson = _lesson(
        S.LabRequest("A", "why is the sky blue", 40, 0),
        S.LabRequest("B", "tell me two lines", 20, 1, stop_after=2),
        S.LabRequest("C", "rain", 20, 1),
        num_blocks=8,
    )
    k = 3  # "A short request finishes", keyed to the left's frame
    kf = lesson.keyframes[k]
    right_stop = next(
        i
        for i, f in enumerate(lesson.right.frames)
        if any(isinstance(e, E.Finished) and e.req == "B" for e in f.events)
    )
    assert right_stop != kf
    en = render_step(lesson, k, "en").narration
    assert "its blocks simply go back to the free pool" in en
    assert "here B finishes in a different step" in en
    assert "在这边是在另一步结束的" in render_step(lesson, k, "zh").narration


def test_the_six_step_lesson_still_frees_the_right_in_the_same_step():
    spec = load_spec("six-steps")
    lesson = build(spec, read(trace_path(spec)))
    en = render_step(lesson, 3, "en").narration
    assert "**Right:** its blocks simply go back to the free pool" in en
    assert "different step" not in en


def test_two_steps_on_one_frame_both_speak_there_over_the_grids():
    """A lab scenario whose early finish happens on the last frame: step 4 and the scoreboard
    step share it. Both must speak there: were the later step to take the frame, step 4's
    narration would be shown nowhere (its button would open the scoreboard, which hides the
    grids that narration is about)."""
    from paged.viz.fold import chapters
    from paged.viz.player import payload as player

    lesson = _lesson(
        S.LabRequest("A", "why is the sky blue", 40, 0),
        S.LabRequest("B", "tell me two lines", 20, 1, stop_after=2),
        num_blocks=8,
    )
    last = lesson.num_frames - 1
    assert lesson.keyframes[3] == lesson.keyframes[5] == last, lesson.keyframes
    chs = chapters.chapters(lesson)
    ch = next(c for c in chs if c.start <= last <= c.end)
    assert ch.steps == (3, 5)
    for lang in ("en", "zh"):
        body = chapters.body(lesson, ch, last, lang)
        four, six = (render_step(lesson, k, lang).narration for k in (3, 5))
        assert body.index(four) < body.index(six)
        title = chapters.title(lesson, ch, lang)
        assert title.startswith("4 · ") and " / 6 · " in title
    data = player.payload(lesson, "en")
    shared = next(c for c in data["chapters"] if c["start"] == last)
    assert shared["step"] == 5 and not shared["score"]  # the grids stay up
    assert [s["chapter"] for s in data["steps"]][3] == [s["chapter"] for s in data["steps"]][5]
    assert ">4·6</span>" in data["timeline"]
