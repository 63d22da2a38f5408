"""Narration stays true for any scenario: 200 random lab scenarios, each recorded as
a dry run, narrated by the six-step lesson. Every number shown on every frame is that frame's
(the check of tests/viz/test_captions.py), every claim a step makes holds at its keyframe, and a
step whose event never happens is greyed and never narrated."""

from __future__ import annotations

import random
import re

import pytest

from paged.engine.core import events as E
from paged.viz.fold import chapters
from paged.viz.fold.keyframes import matches, rule_event
from paged.viz.fold.lesson import Lesson
from paged.viz.fold.narration import render_step
from paged.viz.live import lab as S
from paged.viz.player import payload as player

N_SCENARIOS = 200
WORDS = (
    "the",
    "memory",
    "page",
    "block",
    "table",
    "kernel",
    "answer",
    "quickly",
    "why",
    "is",
    "sky",
    "blue",
    "tell",
    "me",
    "about",
    "rain",
    "two",
    "lines",
    "cache",
    "token",
)
TITLES = {"en": "lab", "zh": "lab"}
SIDES = {"left": {"en": "left", "zh": "左"}, "right": {"en": "right", "zh": "右"}}


def random_lab(rng: random.Random) -> S.Lab:
    """A scenario the lab accepts: random sizes, then the arena grown until it is valid."""
    n = rng.randint(1, 5)
    ids = rng.sample(["A", "B", "C", "D", "E", "F", "x1", "Req", "long", "Z9", "q", "WW"], n)
    reqs = []
    for rid in ids:
        prompt = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 25)))
        max_tokens = rng.randint(1, 60)
        stop = rng.randint(1, max_tokens - 1) if max_tokens > 1 and rng.random() < 0.4 else None
        reqs.append(S.LabRequest(rid, prompt, max_tokens, rng.randint(0, 12), stop))
    bs = rng.choice((1, 2, 4, 8, 16))
    lab = S.Lab(
        tuple(reqs),
        num_blocks=rng.randint(1, 40),
        block_size=bs,
        max_model_len=rng.randint(8, 200),
        policy=rng.choice(S.POLICIES),
    )
    longest = max(S.prompt_tokens(r.prompt) for r in reqs)
    mml = max(lab.max_model_len, longest + 1)
    blocks = max(lab.num_blocks, -(-mml // bs))
    while blocks * bs > S.MAX_SLOTS:
        blocks -= 1
    lab = S.Lab(lab.requests, blocks, bs, min(mml, blocks * bs), lab.policy)
    assert S.check(lab) == [], S.check(lab)
    return lab


def _hole_between(lesson: Lesson, i: int, req: str) -> bool:
    before = lesson.left.frames[i - 1].reservations.get(req) if i > 0 else None
    live = lesson.left.at(i).reservations
    if before is None or req in live:
        return False
    lo, hi = before[0], before[0] + before[1]
    return any(s + n <= lo for s, n in live.values()) and any(s >= hi for s, n in live.values())


def _claims_hold(lesson: Lesson, lab: S.Lab) -> None:
    """The claims of each shown step, checked against the frames themselves (English)."""
    by_id = {r.id: r for r in lab.requests}
    for k, kf in enumerate(lesson.keyframes):
        if kf is None:
            continue
        step = render_step(lesson, k, "en")
        assert step.missing == (), (k, step.missing)
        text = step.narration
        rule = lesson.spec.steps[k].rule
        ev = rule_event(lesson, kf, rule) if "event" in rule else None
        req = ev.req if isinstance(ev, E.RequestEvent) else None
        if rule.get("event") == "admitted":
            # held at the frame's end, or reserved and released in it (stopped as admitted)
            held = req in lesson.left.at(kf).reservations or any(
                e.kind == "slots_reserved" and e.req == req for e in lesson.left.at(kf).events
            )
            assert ("sets aside one unbroken run" in text) == held, (kf, text)
        if rule.get("event") == "finished":
            assert ev.reason == "eos" and ev.num_generated < by_id[req].max_tokens, (ev, text)
            assert f"**{req}** finishes early" in text
            assert ("a hole opens *between*" in text) == _hole_between(lesson, kf, req)
            never = lesson.left.at(kf).never_filled(req)  # hatched only now, as it stops
            assert ("were never filled" in text) == (never > 0), (kf, text)
            assert not never or f"**{never}** were never filled" in text
        if rule.get("event") == "admission_blocked":
            assert ev.free_slots >= ev.need_slots > ev.largest_hole, ev  # "which is enough"
            right = lesson.right.at(kf)
            # holds blocks at the frame's end, or ran in it and stopped (its blocks still drawn)
            running = bool(right.block_tables.get(req)) or (
                kf < len(lesson.right.frames)
                and any(e.kind == "finished" and e.req == req for e in right.events)
            )
            assert ("is already running here" in text) == running, (kf, text)
        if rule.get("frame") == "last":
            ls, rs = lesson.left.summary.steps, lesson.right.summary.steps
            m = re.search(r"in \*\*(\d+)\*\* steps instead of \*\*(\d+)\*\*", text)
            assert (m is not None) == (rs < ls), text
            if m:
                assert (int(m.group(1)), int(m.group(2))) == (rs, ls)
            assert ("both sides finished the same work" in text) == (rs == ls)


def _absent_steps_are_greyed(lesson: Lesson) -> None:
    chs = chapters.chapters(lesson)
    nav = player.steps_nav(lesson, chs, "en")
    for k, kf in enumerate(lesson.keyframes):
        if kf is not None:
            assert nav[k]["chapter"] is not None
            assert k in chs[nav[k]["chapter"]].steps  # its button opens its own narration
            continue
        rule = lesson.spec.steps[k].rule
        assert not any(matches(lesson, i, rule) for i in range(lesson.num_frames)), k
        assert nav[k]["chapter"] is None and nav[k]["absent"]  # greyed, says why
        assert all(k not in c.steps for c in chs)  # never narrated


@pytest.mark.parametrize("batch", range(4))
def test_random_scenarios_are_narrated_truthfully(batch):
    import test_captions as numbers  # tests/ is on sys.path under pytest

    rng = random.Random(1200 + batch)
    seen_absent, seen_early = 0, 0
    for _ in range(N_SCENARIOS // 4):
        lab = random_lab(rng)
        lesson = S.lesson_for(lab, S.record_dry(lab), SIDES, TITLES)
        for lang in ("en", "zh"):
            numbers._check(lesson, lang)
        _claims_hold(lesson, lab)
        _absent_steps_are_greyed(lesson)
        seen_absent += sum(kf is None for kf in lesson.keyframes)
        seen_early += lesson.keyframes[3] is not None
    assert seen_absent and seen_early  # the sample covers both kinds of scenario
