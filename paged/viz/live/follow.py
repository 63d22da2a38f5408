"""A live run's lesson, folded as its trace streams in: each tick costs what arrived since the
last one, not the whole stream.

``LiveLesson.lesson(finished)`` gives exactly what ``paged.viz.fold.lesson.build`` gives for the same
lines (cut at ``live_edge`` while the stream runs, whole once it has finished), tick after tick:

- lines are parsed and checked once (``paged.viz.live.stream.TraceStream``);
- each side's frames come from one ``reducer.fold`` kept open over the run's events, fed only
  the events past the previous cut;
- the scoreboard looks back knowing each final length (``summarize``): a step's hindsight
  account is final once every request holding memory in it has finished, so only the steps
  from the oldest one still open are accounted again.

A cut that moves back (a run that looked done steps again: only a hostile stream does that)
folds that side again from its start, so the answer stays exact. Pure Python, no torch.
"""

from __future__ import annotations

import bisect
import copy
from dataclasses import dataclass, field, replace

from paged.engine.core import events as E
from paged.engine.core.accounting import CATEGORIES, StepAccount, Tally
from paged.engine.trace.check import LIMITS, Limits, TraceError
from paged.engine.trace.header import RunHeader
from paged.engine.trace.io import Trace
from paged.viz.fold.keyframes import find_keyframes
from paged.viz.fold.lesson import SIDES, Lesson, LessonSpec, Side, Summary, pick_runs
from paged.viz.fold.reducer import ArenaState, Frame, fold, settle
from paged.viz.live.run import LiveRun
from paged.viz.live.stream import TraceStream
from paged.viz.player.live import LivePayload


@dataclass
class _Counts:
    """What ``live_edge`` asks of a run, counted once per event: its step ends (and where each
    one is), its finished requests, and its last event."""

    ends: list[int] = field(default_factory=list)  # index just past each step_end
    finished: int = 0
    stepped_last: bool = False  # whether its last event is a step end
    seen: int = 0

    def update(self, events: list[E.Event]) -> None:
        for j in range(self.seen, len(events)):
            match events[j]:
                case E.StepEnd():
                    self.ends.append(j + 1)
                case E.Finished():
                    self.finished += 1
        if len(events) > self.seen:
            self.stepped_last = bool(self.ends) and self.ends[-1] == len(events)
        self.seen = len(events)


def edge_cuts(counts: dict[str, _Counts], total: int) -> dict[str, int]:
    """How many events of each run ``live_edge`` keeps: every run still stepping is cut at the
    last step all of them have ended."""
    going = [
        len(c.ends)
        for c in counts.values()
        if not total or c.finished < total or not c.stepped_last
    ]
    if not going:
        return {n: c.seen for n, c in counts.items()}
    k = min(going)
    return {n: c.ends[k - 1] if len(c.ends) > k else c.seen for n, c in counts.items()}


class _Hindsight:
    """One run's scoreboard shares (``summarize``: ``account(..., hindsight=True,
    show_finishing=True)``, time-averaged) kept current as events arrive. ``base`` has folded
    the steps whose accounts can no longer change; each call accounts again only from there."""

    def __init__(self, run: RunHeader) -> None:
        self.run = run
        self.final: dict[str, int] = {}  # final lengths told by events[:seen]
        self.settled: dict[str, list[float]] = {c: [] for c in CATEGORIES}  # each step's share
        self.base = Tally(
            num_slots=run.num_slots,
            block_size=run.block_size,
            final_lens=self.final,
            num_cpu_blocks=run.num_cpu_blocks,
            show_finishing=True,
        )
        self.base_pos = 0
        self.seen = 0

    def shares(self, events: list[E.Event], done: int, tail: list[E.Event]) -> dict[str, float]:
        """The time-averaged hindsight shares of ``events[:done] + tail``, where ``done`` ends
        at a step end and ``tail`` holds no step end: the same sums, in the same order, as
        ``time_averaged_shares``, over shares kept from the steps that can no longer change.
        A final length the tail tells counts back too, but settles nothing: the tail may be
        cut off again by the next tick."""
        if done < self.seen:
            self.__init__(self.run)  # type: ignore[misc]
        for ev in E.of_kind(events[self.seen : done], E.Finished):
            self.final[ev.req] = ev.final_len
        self.seen = done
        told = {ev.req: ev.final_len for ev in E.of_kind(tail, E.Finished)}
        fresh = self._accounts(events, done, {**self.final, **told} if told else self.final)
        steps = len(self.settled["free"]) + len(fresh)
        if not steps:
            return {c: 0.0 for c in CATEGORIES}
        return {c: sum(self.settled[c] + [a.share(c) for a in fresh]) / steps for c in CATEGORIES}

    def _accounts(
        self, events: list[E.Event], done: int, final: dict[str, int]
    ) -> list[StepAccount]:
        """The accounts of the steps after ``base`` up to ``done``; those whose holders all
        have a final length (and every one before them) move into ``settled``."""
        work = copy.deepcopy(self.base)
        work.final_lens = final  # a final length learned later counts back
        fresh: list[StepAccount] = []
        settling = True
        for j in range(self.base_pos, done):
            ev = events[j]
            work.apply(ev)
            match ev:
                case E.StepEnd():
                    fresh.append(work.close_step(ev.step))
                case _:
                    continue
            settling = settling and all(r in self.final for r in work.held)
            if settling:
                self._settle(events, j + 1)
                for c, share in fresh.pop().shares().items():
                    self.settled[c].append(share)
        return fresh

    def _settle(self, events: list[E.Event], upto: int) -> None:
        for ev in events[self.base_pos : upto]:
            self.base.apply(ev)
            match ev:
                case E.StepEnd():
                    self.base.close_step(ev.step)
        self.base_pos = upto


class _SideFold:
    """One run folded up to a cut of its events: frames, the arena as it was left, and the
    scoreboard. The fold stops at the cut's last step end; what follows it (a step still
    being written) is kept apart, as the live edge may cut it off again next tick."""

    def __init__(self, run: RunHeader) -> None:
        self.run = run
        self.state = ArenaState.empty(run)
        self.frames: list[Frame] = []
        self.pos = 0  # events folded: up to a step end
        self.tail: list[E.Event] = []  # the cut's events after it
        self.finished = self.preemptions = 0
        self.max_batch = self.sum_batch = 0
        self.hindsight = _Hindsight(run)
        self._settled: tuple[int, Frame | None] = (-1, None)

    def advance(self, events: list[E.Event], ends: list[int], cut: int) -> None:
        """Fold ``events[:cut]``; ``ends`` lists the index just past each step end."""
        k = bisect.bisect_right(ends, cut)
        done = ends[k - 1] if k else 0
        if done < self.pos:
            self.__init__(self.run)  # type: ignore[misc]
        self.finished += E.count_of(events[self.pos : done], E.Finished)
        self.preemptions += E.count_of(events[self.pos : done], E.Preempted)
        for frame in fold(events[self.pos : done], self.run, self.state):
            self.frames.append(frame)
            self.max_batch = max(self.max_batch, frame.account.batched)
            self.sum_batch += frame.account.batched
        self.pos, self.tail = done, events[done:cut]

    def _settle(self) -> Frame | None:
        if self.tail:  # a step under way: settle keeps the last frame
            return self.frames[-1]
        if self._settled[0] != self.pos:
            self._settled = (self.pos, settle(self.state))
        return self._settled[1]

    def side(self, events: list[E.Event], title: dict[str, str]) -> Side:
        """This run's side of the lesson: what ``paged.viz.fold.lesson`` builds from the cut."""
        if not self.frames:
            raise TraceError(f"run {self.run.name!r} has no finished engine step yet")
        summary = Summary(
            shares=self.hindsight.shares(events, self.pos, self.tail),
            max_running=self.max_batch,
            mean_running=self.sum_batch / len(self.frames),
            steps=len(self.frames),
            finished=self.finished + E.count_of(self.tail, E.Finished),
            preemptions=self.preemptions + E.count_of(self.tail, E.Preempted),
        )
        return Side(self.run, list(self.frames), title, summary, self._settle())


class LiveLesson:
    """A lesson over a trace that is still arriving. Feed it text or whole lines; ``lesson``
    folds what is new."""

    def __init__(self, spec: LessonSpec, limits: Limits = LIMITS) -> None:
        self.spec = spec
        self.stream = TraceStream(limits)
        self._counts: dict[str, _Counts] = {}
        self._sides: dict[str, _SideFold] = {}
        self._last: tuple[int, bool, Lesson | None] = (-1, False, None)

    def feed(self, text: str) -> None:
        """See ``TraceStream.feed``; raises TraceError."""
        self.stream.feed(text)

    def feed_lines(self, lines: list[str]) -> None:
        """See ``TraceStream.feed_lines``; raises TraceError."""
        self.stream.feed_lines(lines)

    def lesson(self, finished: bool = False) -> Lesson | None:
        """What has arrived, folded: ``build(spec, live_edge(trace), partial=True)`` of the lines
        so far, or with ``finished`` (the stream is complete and must end with its end line)
        ``build(spec, trace)``. None until every run has ended a step. The same Lesson object
        while nothing new has arrived. Raises TraceError (one line) for a corrupt stream."""
        trace = self.stream.trace(finished)
        if trace is None:
            return None
        if self._last[:2] == (self.stream.lines, finished):
            return self._last[2]
        for name, events in trace.runs.items():
            self._counts.setdefault(name, _Counts()).update(events)
        lesson = None
        if all(c.ends for c in self._counts.values()):
            lesson = self._fold(trace, finished)
        self._last = (self.stream.lines, finished, lesson)
        return lesson

    def _fold(self, trace: Trace, finished: bool) -> Lesson:
        if finished:
            cuts = {n: c.seen for n, c in self._counts.items()}
        else:
            cuts = edge_cuts(self._counts, trace.info.requests_named)
        runs = pick_runs(self.spec, trace)
        sides = {}
        for side in SIDES:
            name = runs[side]
            if side not in self._sides or self._sides[side].run.name != name:
                self._sides[side] = _SideFold(trace.run_header(name))
            fold_ = self._sides[side]
            fold_.advance(trace.runs[name], self._counts[name].ends, cuts[name])
            sides[side] = fold_.side(trace.runs[name], self.spec.side_titles[side])
        origin = trace.info.origin()
        lesson = Lesson(
            self.spec,
            sides["left"],
            sides["right"],
            (),
            "live",
            origin=origin,
            partial=not finished,
        )
        return replace(lesson, keyframes=find_keyframes(lesson))


class LiveView:
    """A ``LiveRun`` shown as a lesson: each call reads only the lines that arrived since the
    last one. Keep one per run (the page keeps it in its session)."""

    def __init__(self, run: LiveRun, spec: LessonSpec) -> None:
        self.run = run
        self.spec = spec
        self.fold = LiveLesson(spec)
        self._payloads: dict[str, LivePayload] = {}

    def lesson(self) -> Lesson | None:
        """The run's lesson so far (see ``LiveLesson.lesson``); the finished trace once the
        child has exited cleanly. Raises TraceError (one line) for a corrupt stream."""
        finished = self.run.done and self.run.returncode == 0  # first: then every line is in
        self.fold.feed_lines(self.run.lines_since(self.fold.stream.lines))
        return self.fold.lesson(finished)

    def payload(self, lesson: Lesson, lang: str) -> dict:
        """The player's payload for ``lesson`` in ``lang``, drawing only what is new."""
        return self._payloads.setdefault(lang, LivePayload(lang)).update(lesson)
