"""What a folded lesson holds: both sides' frames and scoreboards, and each step's keyframe.

Data only; ``paged.viz.fold.lesson`` builds it from a spec and a trace, ``paged.viz.fold.keyframes`` finds
the keyframes on it. Pure Python.
"""

from __future__ import annotations

from dataclasses import dataclass

from paged.engine.trace.header import RunHeader
from paged.viz.fold.lesson_folder import LessonSpec
from paged.viz.fold.reducer import Frame


@dataclass(frozen=True)
class Summary:
    """One run over its whole length: the scoreboard's numbers."""

    shares: dict[str, float]  # time-averaged share per accounting category
    #: the largest and the mean batch size: a request counts in every step it ran in, the one
    #: that made its last token too (StepAccount.batched), as simulate's mean_running does
    max_running: int
    mean_running: float
    steps: int
    finished: int
    preemptions: int


@dataclass(frozen=True)
class Side:
    run: RunHeader
    frames: list[Frame]
    title: dict[str, str]
    summary: Summary
    #: the arena as the run left it (reducer.settle), shown once it has ended; None: the last
    #: frame stays
    settled: Frame | None = None

    def at(self, i: int) -> Frame:
        """Frame ``i``; a run that ended earlier shows the arena as it left it: its last frame,
        less the memory that frame's finishing requests let go of."""
        if i >= len(self.frames) and self.settled is not None:
            return self.settled
        return self.frames[max(0, min(i, len(self.frames) - 1))]


@dataclass(frozen=True)
class Lesson:
    """A spec folded over a trace: both sides' frames and each step's keyframe (None when the
    trace never shows what the step's rule looks for)."""

    spec: LessonSpec
    left: Side
    right: Side
    keyframes: tuple[int | None, ...]
    source: str  # "lesson", a file name, or "live"
    key: str = ""  # content hash when cached (a stable cache key)
    origin: tuple[tuple[str, str], ...] = ()  # the trace header's model, device, created...
    #: A live run still going: its last frame is where the stream has got to, not the end, so
    #: no step keyed to "the last frame" (the scoreboard: "every request has finished") is shown.
    partial: bool = False

    @property
    def num_frames(self) -> int:
        return max(len(self.left.frames), len(self.right.frames))

    def side(self, name: str) -> Side:
        return self.left if name == "left" else self.right

    def clamp(self, i: int) -> int:
        return max(0, min(i, self.num_frames - 1))


@dataclass(frozen=True)
class Outline:
    """What a page needs of a lesson besides its drawn frames: an upload folded and drawn in a
    child process leaves the server only this and the drawing (``paged.viz.live.upload``), not the
    frames, which hold about 17 times the trace's bytes."""

    spec: LessonSpec
    source: str
    key: str
    origin: tuple[tuple[str, str], ...]
    num_frames: int
    partial: bool = False

    def clamp(self, i: int) -> int:
        return max(0, min(i, self.num_frames - 1))
