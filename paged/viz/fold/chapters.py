"""Chapters: named frame ranges that cover a whole run, each one true on every frame it spans.

A lesson step's narration quotes its keyframe, so its chapter is that keyframe alone. The frames
between keyframes are grouped by what holds on each of them (who is waiting on which side), so a
chapter title such as "The left makes requests wait; paging keeps going" is never shown on a
frame where it is false; where all that arrived runs, a lesson may name the frames after what
happens in its recording (a step's ``lead_in``). The step buttons and the timeline reach them;
PageUp / PageDown (a clicker) stop at the steps' keyframes only. Pure Python.
"""

from __future__ import annotations

from dataclasses import dataclass

from paged.viz.fold.captions import state_line, text
from paged.viz.fold.lesson import Lesson
from paged.viz.fold.narration import render_step
from paged.viz.fold.reducer import CONTIGUOUS, PAGED

STEP = "step"


@dataclass(frozen=True)
class Chapter:
    """Frames ``start`` .. ``end`` (inclusive). ``phase`` is ``step`` (a lesson step, ``step``
    its 0-based index) or a phase name (``left_waits``, ``running``, ...)."""

    start: int
    end: int
    phase: str
    step: int | None = None
    #: earlier steps whose keyframe is this one too (a lab scenario can put two on one frame):
    #: their narration comes first, so no step goes unsaid
    also: tuple[int, ...] = ()

    @property
    def steps(self) -> tuple[int, ...]:
        """Every step this chapter speaks for, in order."""
        return (*self.also, self.step) if self.step is not None else ()


def _waiting(lesson: Lesson, side: str, i: int) -> int:
    s = lesson.side(side)
    return 0 if i >= len(s.frames) else len(s.frames[i].waiting)


def phase(lesson: Lesson, i: int) -> str:
    """What holds on frame ``i``, as a phase name (see captions.toml ``phase_*``)."""
    sides = [lesson.side(s) for s in ("left", "right")]
    frames = [s.at(i) for s in sides]
    if all(i >= len(s.frames) - 1 for s in sides) and not any(f.running for f in frames):
        return "end"
    if not any(f.running for f in frames) and not any(
        v.status == "finished" for f in frames for v in f.requests.values()
    ):
        return "start"
    lw, rw = _waiting(lesson, "left", i) > 0, _waiting(lesson, "right", i) > 0
    if lw and rw:
        return "both_wait"
    if lw:
        return "left_waits"
    if rw:
        return "right_waits"
    return "running"


def chapters(lesson: Lesson) -> list[Chapter]:
    """The run cut into chapters, in order, covering frames 0 .. last without gaps."""
    at_key: dict[int, list[int]] = {}
    for k, kf in enumerate(lesson.keyframes):
        if kf is not None:
            at_key.setdefault(kf, []).append(k)  # two steps on one frame: both speak there
    out: list[Chapter] = []
    for i in range(lesson.num_frames):
        if i in at_key:
            *also, step = at_key[i]
            out.append(Chapter(i, i, STEP, step, tuple(also)))
            continue
        kind = phase(lesson, i)
        if out and out[-1].phase == kind:
            out[-1] = Chapter(out[-1].start, i, kind)
        else:
            out.append(Chapter(i, i, kind))
    return out


def title(lesson: Lesson, ch: Chapter, lang: str) -> str:
    if ch.phase == STEP and ch.steps:
        return " / ".join(f"{k + 1} · {lesson.spec.steps[k].title[lang]}" for k in ch.steps)
    lead_in = _lead_in(lesson, ch)
    if lead_in is not None:
        return lead_in[lang]
    t = text(lang)
    # "paging keeps going" is true only where the other side is the contiguous one: two paged
    # sides (bf16 against fp8) wait for blocks, not for a hole
    sides = (lesson.left.run.allocator, lesson.right.run.allocator)
    if ch.phase in ("left_waits", "right_waits") and sides != (CONTIGUOUS, PAGED):
        return t[f"phase_{ch.phase}_sides"]
    return t[f"phase_{ch.phase}"]


def _lead_in(lesson: Lesson, ch: Chapter) -> dict[str, str] | None:
    """The next step's ``lead_in`` for a chapter where all that arrived runs: "Everything that
    arrived is running" over a lesson's opening said nothing a lecturer could point at. Only over
    the lesson's own recording, which its author watched: an upload or the lab folded with the
    same steps may do something else in those frames, and keeps the phase's name."""
    if ch.phase != "running" or lesson.source != "lesson":
        return None
    ahead = [(kf, k) for k, kf in enumerate(lesson.keyframes) if kf is not None and kf > ch.end]
    if not ahead:
        return None
    return lesson.spec.steps[min(ahead)[1]].lead_in


def body(lesson: Lesson, ch: Chapter, i: int, lang: str) -> str:
    """The chapter's text on frame ``i``: the step's narration on its keyframe (each step's,
    in order, where two share it), else each side's state on this very frame."""
    if ch.phase == STEP and ch.steps:
        return "\n\n".join(render_step(lesson, k, lang).narration for k in ch.steps)
    t = text(lang)
    colon = ": " if lang == "en" else "："
    lines = []
    for side in ("left", "right"):
        s = lesson.side(side)
        state = t["ended"] if i >= len(s.frames) else state_line(s.frames[i], lang)
        lines.append(f"**{t[side]}**{colon}{state}")
    return "\n\n".join(lines)
