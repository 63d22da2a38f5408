"""A lecturer stepping through a lesson reads a chapter title on every frame: between the steps,
where nothing waits, it says what happens in the lesson's recording ("Four requests arrive and
fill the arena"), not the bare "Everything that arrived is running"."""

from __future__ import annotations

import pytest

from paged.engine.trace.io import read
from paged.viz.fold import captions, chapters
from paged.viz.fold.lesson import Lesson, build
from paged.viz.fold.lesson_folder import available, load_spec, trace_path

LANGS = ("en", "zh")


def _lesson(name: str, source: str = "lesson") -> Lesson:
    spec = load_spec(name)
    return build(spec, read(trace_path(spec)), source=source)


def _titles(lesson: Lesson, lang: str) -> list[str]:
    """The chapter title shown on each frame, in frame order."""
    return [
        chapters.title(lesson, c, lang)
        for c in chapters.chapters(lesson)
        for _ in range(c.start, c.end + 1)
    ]


@pytest.mark.parametrize("name", available())
def test_no_frame_of_a_lessons_recording_sits_under_a_title_that_says_nothing(name):
    lesson = _lesson(name)
    for lang in LANGS:
        bare = captions.text(lang)["phase_running"]
        shown = _titles(lesson, lang)
        assert len(shown) == lesson.num_frames
        assert bare not in shown, (lang, [i for i, t in enumerate(shown) if t == bare])


def test_six_steps_names_the_frame_between_its_first_two_steps_in_both_languages():
    # frame 1: B is admitted between "1 · A request arrives" and "2 · More requests"
    lesson = _lesson("six-steps")
    en, zh = (_titles(lesson, lang)[1] for lang in LANGS)
    assert lesson.keyframes[:2] == (0, 2)
    assert en == "A second request joins" and zh == "第二个请求加入"


def test_recompute_or_swap_names_its_opening_before_the_arena_runs_out():
    """Frames 0-33 were an unnamed preamble: PageDown leaves frame 0 for the first step's
    keyframe, so frame 0's title is all a lecturer reads of them."""
    lesson = _lesson("recompute-or-swap")
    first = lesson.keyframes[0]
    assert first is not None and first > 0
    [opening] = [c for c in chapters.chapters(lesson) if c.start == 0]
    assert (opening.end, opening.phase) == (first - 1, "running")
    assert chapters.title(lesson, opening, "en") == "Four requests arrive and fill the arena"
    assert chapters.title(lesson, opening, "zh") == "四个请求陆续到达，渐渐占满显存池"


def test_an_upload_folded_with_a_lessons_steps_keeps_the_phase_names():
    """A lesson's names describe its own recording; another trace under the same steps may do
    something else between them, so it keeps the names that hold by construction."""
    lesson = _lesson("recompute-or-swap", source="upload.jsonl")
    [opening] = [c for c in chapters.chapters(lesson) if c.start == 0]
    for lang in LANGS:
        assert chapters.title(lesson, opening, lang) == captions.text(lang)["phase_running"]
