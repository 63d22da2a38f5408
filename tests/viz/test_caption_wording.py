"""Captions read side by side on one screen, in both languages: a count agrees with its noun, one
event is said with one verb, and a count of blocks never reads like a block's number."""

from __future__ import annotations

import re

import pytest

from paged.engine.core import events as E
from paged.engine.trace.io import read
from paged.viz.fold import captions
from paged.viz.fold.lesson import Lesson, build
from paged.viz.fold.lesson_folder import available, load_spec, trace_path


@pytest.fixture(scope="module", params=available())
def lesson(request) -> Lesson:
    spec = load_spec(request.param)
    return build(spec, read(trace_path(spec)))


def _frames(lesson: Lesson):
    for side in (lesson.left, lesson.right):
        yield from side.frames


def _writers(f) -> int:
    return len({e.req for e in E.of_kind(f.events, E.TokensWritten)})


def test_one_running_request_is_not_said_to_write_one_token_each(lesson):
    """'1 running, one token each' read wrong beside '3 running, one token each'."""
    seen = set()
    for f in _frames(lesson):
        en, zh = captions.side_phrases(f, "en"), captions.side_phrases(f, "zh")
        decode = [p for p in en if " running, one token" in p]
        if not decode:
            continue
        n = _writers(f)
        seen.add(n == 1)
        [p] = decode
        assert p.startswith(f"{n} running, one token"), p
        assert ("one token each" in p) == (n > 1), p
        [z] = [p for p in zh if "个请求在运行" in p]
        assert ("各写" in z) == (n > 1), z
    if lesson.spec.name == "six-steps":
        assert seen == {True, False}  # it has frames with one writer and frames with several


def test_a_request_that_finishes_is_said_to_finish_whether_or_not_it_left_slots_unfilled(lesson):
    """'D finishes with ...' and 'B stops with ...' named one event, Finished, two ways; the
    never-filled slots are what differs, and the rest of the phrase says that."""
    said = 0
    for f in _frames(lesson):
        for lang, verb in (("en", " finishes with "), ("zh", " 结束，共 ")):
            phrases = captions.side_phrases(f, lang)
            for e in E.of_kind(f.events, E.Finished):
                name = f.requests[e.req].name
                mine = [p for p in phrases if p.startswith(name + " ")]
                assert any(p.startswith(name + verb) for p in mine), (f.index, lang, mine)
                said += 1
            assert not any(" stops with " in p or " 停下，" in p for p in phrases)
    assert said > 0


SHARED_COUNT = re.compile(r"\((\d+) blocks? shared\)")
SHARED_ID = re.compile(r"block #(\d+) \(shared\)")


def test_a_shared_count_and_a_shared_block_number_cannot_be_mistaken(lesson):
    """Parallel sampling said '(2 shared)' (two blocks) on the frame that said 'shared block
    #2' (block number 2): a count now says 'blocks shared', a number says 'block #n (shared)'."""
    counts = ids = 0
    for f in _frames(lesson):
        for p in captions.side_phrases(f, "en"):
            assert not re.search(r"\(\d+ shared\)|shared block #", p), p
            counts += len(SHARED_COUNT.findall(p))
            for m in SHARED_ID.finditer(p):
                ids += 1
                copied = [e for e in E.of_kind(f.events, E.BlockCopied) if e.src == int(m[1])]
                assert copied, p  # the number is the copied block's, read from its event
        for p in captions.side_phrases(f, "zh"):
            assert not re.search(r"（\d+ 个共享）|共享的物理块", p), p
    if lesson.spec.name == "parallel-sampling":
        assert counts > 0 and ids > 0
