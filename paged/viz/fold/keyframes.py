"""Where each lesson step is shown: its keyframe, found by a rule over frames.

A step finds its keyframe by a *rule*, never by a frame number, so re-recording the trace (or
opening another trace of the same scenario) moves the keyframes with the events. Rule keys (all
optional, all must hold): ``side`` (left / right / any), ``event`` (an event kind that happened
in the frame) with ``match`` (fields it must have) and ``during_decode`` (its request was
admitted in an earlier frame), ``min_running`` (requests running on ``side``),
``frame = "last"``. A rule searches after the previous step's keyframe unless ``after = false``.
Pure Python.
"""

from __future__ import annotations

from paged.engine.core import events as E
from paged.viz.fold.lesson_folder import SIDES
from paged.viz.fold.lesson_model import Lesson, Side
from paged.viz.fold.reducer import Frame


def find_keyframes(lesson: Lesson) -> tuple[int | None, ...]:
    """Each step's keyframe: the first match after the previous step's keyframe; a step whose
    event happened only earlier (another scenario than the one the lesson was written for)
    takes its first match on a frame no other step holds, then any match. None means the
    event never happens in this run, so the step's ``absent`` text is true."""
    out: list[int | None] = []
    prev = -1
    for step in lesson.spec.steps:
        start = prev + 1 if step.rule.get("after", True) else max(prev, 0)
        kf = next(
            (i for i in range(start, lesson.num_frames) if matches(lesson, i, step.rule)), None
        )
        if kf is None:
            hits = [i for i in range(lesson.num_frames) if matches(lesson, i, step.rule)]
            kf = next((i for i in hits if i not in out), hits[0] if hits else None)
        out.append(kf)
        if kf is not None:
            prev = max(prev, kf)
    return tuple(out)


def matches(lesson: Lesson, i: int, rule: dict) -> bool:
    """Whether frame ``i`` satisfies ``rule`` on the side (or either side) it names."""
    if rule.get("frame") == "last":
        return not lesson.partial and i == lesson.num_frames - 1
    return any(_side_matches(lesson.side(s), i, rule) for s in _sides(rule))


def rule_event(lesson: Lesson, i: int, rule: dict) -> E.Event | None:
    """The event of frame ``i`` the rule's event clauses pick (left side first when the rule
    allows either); None when the rule names no event or the frame has none that fits."""
    if "event" not in rule:
        return None
    for s in _sides(rule):
        side = lesson.side(s)
        if i < len(side.frames):
            ev = matching_event(side, i, rule)
            if ev is not None:
                return ev
    return None


def matching_event(side: Side, i: int, rule: dict) -> E.Event | None:
    """The first event of frame ``i`` on ``side`` that satisfies the rule's event clauses."""
    frame = side.frames[i]
    want = rule.get("match", {})
    kind = E.EVENT_TYPES.get(rule["event"])
    for ev in () if kind is None else E.of_kind(frame.events, kind):
        if any(getattr(ev, k, None) != v for k, v in want.items()):
            continue
        if rule.get("during_decode") and _admitted_in(frame, ev):
            continue
        return ev
    return None


def _sides(rule: dict) -> tuple[str, ...]:
    return SIDES if rule.get("side", "any") == "any" else (rule["side"],)


def _side_matches(side: Side, i: int, rule: dict) -> bool:
    if i >= len(side.frames):
        return False  # this run has ended: nothing happens on its side any more
    frame = side.frames[i]
    if "min_running" in rule and len(frame.running) < rule["min_running"]:
        return False
    return "event" not in rule or matching_event(side, i, rule) is not None


def _admitted_in(frame: Frame, ev: E.Event) -> bool:
    match ev:
        case E.RequestEvent(req=req):
            return any(e.req == req for e in E.of_kind(frame.events, E.Admitted))
        case _:
            return False
