"""A lesson: a ``LessonSpec`` (``paged.viz.fold.lesson_folder``) folded over a trace.

Both sides' frames, each run's scoreboard, and each step's keyframe (``paged.viz.fold.keyframes``);
the narration is filled from these by ``paged.viz.fold.narration``. Pure Python.
"""

from __future__ import annotations

from dataclasses import replace

from paged.engine.core import events as E
from paged.engine.core.accounting import account, time_averaged_shares
from paged.engine.trace.io import Trace, TraceError
from paged.viz.fold.keyframes import find_keyframes
from paged.viz.fold.lesson_folder import SIDES, LessonSpec
from paged.viz.fold.lesson_model import Lesson, Side, Summary
from paged.viz.fold.reducer import CONTIGUOUS, PAGED, Frame, replay_settled


def build(spec: LessonSpec, trace: Trace, source: str = "lesson", partial: bool = False) -> Lesson:
    """Fold both sides and find the keyframes. A trace whose run names differ from the spec's
    (an uploaded file) puts its contiguous run left and its paged run right. A stream still
    running (``partial``; cut with ``live_edge``) folds to the first frames of its finished
    trace: no frame reads ahead."""
    runs = pick_runs(spec, trace)
    sides = {side: _side(trace, runs[side], spec.side_titles[side]) for side in SIDES}
    origin = trace.info.origin()
    lesson = Lesson(spec, sides["left"], sides["right"], (), source, origin=origin, partial=partial)
    return replace(lesson, keyframes=find_keyframes(lesson))


def live_edge(trace: Trace) -> Trace:
    """A stream's trace cut at the last step every run still stepping has ended. The recorder
    steps its runs in lockstep and writes each run's step in turn, so a stream read between two
    runs' lines held one side a step ahead: the newest frame showed the other side's previous
    frame, labelled as ended, and differed from the finished trace's frame. A run is done when
    every request the header's scenario names (with its samples) has finished and that step has
    ended."""
    total = trace.info.requests_named
    steps = {n: E.count_of(evs, E.StepEnd) for n, evs in trace.runs.items()}
    going = [
        steps[n]
        for n, evs in trace.runs.items()
        if not total  # no scenario to count by: treat as still stepping
        or E.count_of(evs, E.Finished) < total
        or not any(E.of_kind(evs[-1:], E.StepEnd))  # its last request finished, its step not
    ]
    if not going:
        return trace
    k = min(going)
    runs = {}
    for n, evs in trace.runs.items():
        seen, cut = 0, len(evs)
        for j, e in enumerate(evs):
            match e:
                case E.StepEnd():
                    seen += 1
                    if seen == k:
                        cut = j + 1
                        break
        runs[n] = evs[:cut] if steps[n] > k else evs
    return Trace(trace.header, runs)


def pick_runs(spec: LessonSpec, trace: Trace) -> dict[str, str]:
    names = trace.run_names
    if all(spec.runs[s] in names for s in SIDES):
        return dict(spec.runs)
    kinds = {n: trace.run_header(n).allocator for n in names}
    left = next((n for n in names if kinds[n] == CONTIGUOUS), None)
    right = next((n for n in names if kinds[n] == PAGED), None)
    if left is None or right is None:
        raise TraceError(
            "this trace needs one contiguous run and one paged run to compare "
            f"(it has {', '.join(f'{n} ({kinds[n]})' for n in names)})"
        )
    return {"left": left, "right": right}


def _side(trace: Trace, run: str, title: dict) -> Side:
    info = trace.run_header(run)
    events = trace.runs[run]
    frames, settled = replay_settled(events, info)
    if not frames:
        raise TraceError(f"run {run!r} has no finished engine step yet")
    return Side(info, frames, title, summarize(frames, events), settled)


def summarize(frames: list[Frame], events: list[E.Event]) -> Summary:
    """The scoreboard. Its shares look back over every step knowing each final length the
    events tell (the frames could not know them yet), so what a request held and never filled
    counts as internal on every step it was held, as the paper's Fig. 2 counts it."""
    accounts = [f.account for f in frames]
    run = frames[0].run
    looking_back = account(
        events,
        run.num_slots,
        run.block_size,
        run.num_cpu_blocks,
        hindsight=True,
        show_finishing=True,
    )
    return Summary(
        shares=time_averaged_shares(looking_back),
        max_running=max(a.batched for a in accounts),
        mean_running=sum(a.batched for a in accounts) / len(accounts),
        steps=len(frames),
        finished=E.count_of(events, E.Finished),
        preemptions=E.count_of(events, E.Preempted),
    )
