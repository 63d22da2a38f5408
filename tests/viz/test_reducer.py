"""The viewer's fold against the engine's own accounting, and each lesson keyframe against what
its step says. Pure Python: no torch, no Streamlit."""

from __future__ import annotations

import math
from itertools import pairwise
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from paged.engine.core import events as E
from paged.engine.core.accounting import account
from paged.engine.trace.header import RunHeader
from paged.engine.trace.io import parse_lines, read
from paged.viz.fold.lesson import Lesson, build
from paged.viz.fold.lesson_folder import LANGS, load_spec, trace_path
from paged.viz.fold.narration import render_step
from paged.viz.fold.reducer import (
    HOLE,
    INTERNAL,
    PAGED,
    RESERVED,
    TOKEN,
    ArenaState,
    apply,
    fold,
    replay,
    replay_settled,
)
from tests.sinks import ListSink

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "paged" / "lessons" / "six-steps" / "trace.jsonl"


class Stream:
    """Builds a small event stream by hand, stamping step and seq as the engine's bus does."""

    def __init__(self) -> None:
        self.events: list[E.Event] = []
        self.step = 0

    def emit(self, cls, **fields) -> Stream:
        self.events.append(cls(step=self.step, seq=len(self.events), **fields))
        return self

    def end_step(self, running: int = 0, waiting: int = 0) -> Stream:
        self.emit(E.StepEnd, num_running=running, num_waiting=waiting)
        self.step += 1
        return self


def contiguous_fragmented() -> list[E.Event]:
    """A 40-slot arena: A [0,10) finishes (at the end of step 1, as the engine finishes a
    request after its last write), B [10,30) runs, C needs 15 in step 2 while 20 are free."""
    s = Stream()
    for req, start, n in (("A", 0, 10), ("B", 10, 20)):
        s.emit(E.RequestArrived, req=req, prompt_len=4, max_tokens=n - 3)
        s.emit(E.Admitted, req=req, num_tokens=4)
        s.emit(E.SlotsReserved, req=req, start=start, length=n)
        s.emit(
            E.TokensWritten, req=req, positions=(0, 1, 2, 3), slots=tuple(range(start, start + 4))
        )
    s.end_step(running=2)
    s.emit(E.TokensWritten, req="B", positions=(4,), slots=(14,))
    s.emit(E.ReservationReleased, req="A", start=0, length=10)
    s.emit(E.Finished, req="A", final_len=4, num_generated=1, reason="eos")
    s.end_step(running=1)
    s.emit(E.RequestArrived, req="C", prompt_len=12, max_tokens=4)
    s.emit(
        E.AdmissionBlocked,
        req="C",
        reason=E.BLOCKED_NO_HOLE,
        need_slots=15,
        free_slots=20,
        largest_hole=10,
    )
    s.emit(E.TokensWritten, req="B", positions=(5,), slots=(15,))
    s.end_step(running=1, waiting=1)
    return s.events


CONTIG = RunHeader("max", "contiguous", num_slots=40, block_size=4, policy="max")
PAGED_RUN = RunHeader("paged", PAGED, num_slots=32, block_size=4)


def paged_scattered() -> list[E.Event]:
    """Paging: A's logical blocks 0, 1 land on physical blocks 5 and 2."""
    s = Stream()
    s.emit(E.RequestArrived, req="A", prompt_len=5, max_tokens=3)
    s.emit(E.Admitted, req="A", num_tokens=5)
    s.emit(E.BlockAllocated, req="A", logical=0, physical=5)
    s.emit(E.BlockAllocated, req="A", logical=1, physical=2)
    s.emit(E.TokensWritten, req="A", positions=tuple(range(5)), slots=(20, 21, 22, 23, 8))
    s.end_step(running=1)
    s.emit(E.TokensWritten, req="A", positions=(5,), slots=(9,))
    s.end_step(running=1)
    return s.events


def test_preallocation_blocks_request_despite_enough_free_slots():
    frames = replay(contiguous_fragmented(), CONTIG)
    last = frames[-1]
    blocked = last.blocked_by(E.BLOCKED_NO_HOLE)
    assert blocked is not None and blocked.req == "C"
    assert blocked.free_slots >= blocked.need_slots > blocked.largest_hole
    assert last.count(HOLE) == blocked.free_slots  # every free slot is unusable
    assert last.cells[:10] == HOLE * 10  # A's old run is a hole between runs
    assert last.waiting == ("C",) and last.running == ("B",)


def test_unwritten_slots_are_reserved_until_the_request_stops_then_never_filled_once():
    first, second, third = replay(contiguous_fragmented(), CONTIG)
    # Before A stops nobody knows it will: its unwritten slots are reserved, as B's are.
    assert first.cells[0:10] == TOKEN * 4 + RESERVED * 6
    assert first.cells[10:30] == TOKEN * 4 + RESERVED * 16
    # The step A stops in shows its run one last time: the 6 slots it never filled, hatched.
    assert second.cells[0:10] == TOKEN * 4 + INTERNAL * 6
    assert second.owners[0:10] == ("A",) * 10
    assert (second.account.token_states, second.account.internal) == (4 + 5, 6)
    assert second.cells[10:30] == TOKEN * 5 + RESERVED * 15
    # From the next frame on its run is free like any other slot.
    assert third.owners[0:10] == (None,) * 10 and third.account.internal == 0


def test_no_frame_reads_a_final_length_before_its_finished_event():
    """A stream cut before A's finish folds to the same first frame as the whole trace."""
    events = contiguous_fragmented()
    cut = next(i for i, e in enumerate(events) if e.kind == E.StepEnd.kind) + 1
    assert replay(events[:cut], CONTIG)[0] == replay(events, CONTIG)[0]


def test_paged_block_table_maps_logical_to_physical_anywhere():
    frames = replay(paged_scattered(), PAGED_RUN)
    f = frames[0]
    assert f.block_tables == {"A": (5, 2)}
    assert f.owners[20] == "A" and f.owners[8] == "A"
    assert f.cells[20:24] == TOKEN * 4 and f.cells[8] == TOKEN
    assert f.changed == frozenset(range(20, 24)) | frozenset(range(8, 12))
    assert frames[1].changed == frozenset({9})


def test_paging_hatches_a_slot_past_the_bound_at_once_and_the_rest_as_the_request_stops():
    events = paged_scattered()  # A: 6 tokens in blocks 5 and 2 (bound 5 + 3 - 1 = 7 slots)
    s = Stream()
    s.step, s.events = events[-1].step + 1, list(events)
    s.emit(E.TokensWritten, req="A", positions=(6,), slots=(10,))
    s.emit(E.BlockFreed, req="A", physical=2, ref_count=0)
    s.emit(E.BlockFreed, req="A", physical=5, ref_count=0)
    s.emit(E.Finished, req="A", final_len=7, num_generated=3, reason="length")
    s.end_step()
    s.end_step()
    running, stopping, after = replay(s.events, PAGED_RUN)[1:]
    # bound 7 in 8 held slots: the eighth, past the bound, is never filled from the start;
    # the seventh is reserved until A stops and its final length says
    assert running.cells[8:12] == TOKEN * 2 + RESERVED + INTERNAL
    assert running.account.internal == 1 and running.account.reservation == 1
    assert stopping.cells[8:12] == TOKEN * 3 + INTERNAL and stopping.cells[20:24] == TOKEN * 4
    assert stopping.owners[8] == "A" and stopping.account.internal == 1
    assert stopping.last_look[8] == 4  # drawn (and labelled) as A's logical block 1
    assert after.owners == (None,) * 32 and after.account.free == 32


def test_apply_is_pure_and_agrees_with_the_in_place_fold():
    events = paged_scattered()
    state = ArenaState.empty(PAGED_RUN)
    before = (list(state.owners), dict(state.block_tables))
    after = apply(state, events[2])
    assert (state.owners, state.block_tables) == before
    assert after.block_tables == {"A": [5]}
    frames = []
    for ev in events:
        state = apply(state, ev)
        if ev.kind == E.StepEnd.kind:
            frames.append(state.last_frame)
    assert [f.cells for f in frames] == [f.cells for f in fold(events, PAGED_RUN)]


def _check_against_accounting(events, run: RunHeader) -> None:
    frames = replay(events, run)
    accounts = account(events, run.num_slots, run.block_size, hindsight=False, show_finishing=True)
    assert len(frames) == len(accounts)
    for f, a in zip(frames, accounts, strict=True):
        assert f.account == a
        assert (
            f.count(TOKEN),
            f.count(RESERVED),
            f.count(INTERNAL),
            f.count(HOLE),
            f.count("F"),
        ) == (a.token_states, a.reservation, a.internal, a.external, a.free)


@pytest.mark.parametrize("run", ["max", "paged"])
def test_replaying_the_shipped_trace_reproduces_accounting_at_every_step(run):
    trace = read(TRACE)
    _check_against_accounting(trace.runs[run], trace.run_header(run))


def test_paging_wastes_less_than_one_block_per_request_at_every_frame():
    trace = read(TRACE)
    info = trace.run_header("paged")
    for f in replay(trace.runs["paged"], info):
        for req, table in f.block_tables.items():
            v = f.requests[req]
            assert len(table) * info.block_size - max(v.filled, 1) < info.block_size


@settings(max_examples=25, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 40), st.integers(1, 40), st.integers(0, 6)), min_size=1, max_size=7
    ),
    st.sampled_from(["max", "pow2", "oracle", "paged"]),
)
def test_any_dry_run_folds_to_the_engines_accounting(items, policy):
    from paged.engine.sim.simulate import build_requests, run_policy
    from paged.engine.sim.workload import WorkItem

    work = [WorkItem(i, o) for i, o, _ in items]
    reqs = build_requests(work, max_model_len=96, arrivals=[a for _, _, a in items])
    sink = ListSink()
    run_policy(policy, reqs, num_blocks=12, block_size=8, max_model_len=96, sinks=(sink,))
    kind = PAGED if policy == "paged" else "contiguous"
    _check_against_accounting(sink.events, RunHeader(policy, kind, num_slots=96, block_size=8))


def test_a_live_stream_ends_with_the_frames_of_its_replay():
    """Folding a stream as it arrives and replaying the finished trace give the same frames:
    every frame of a partial fold is already the replay's, and the complete stream's is the
    replay, frame by frame."""
    lines = TRACE.read_text(encoding="utf-8").splitlines(keepends=True)
    spec = load_spec("six-steps")
    replayed = build(spec, read(TRACE))
    for cut in (len(lines) // 3, 2 * len(lines) // 3):
        partial = build(spec, parse_lines(lines[:cut], require_end=False))
        assert 0 < partial.num_frames <= replayed.num_frames
        for side in ("left", "right"):  # no frame reads ahead: a prefix, frame for frame
            got = partial.side(side).frames
            assert got == replayed.side(side).frames[: len(got)]
    live = build(spec, parse_lines(lines, require_end=True), source="live")
    for side in ("left", "right"):
        assert live.side(side).frames == replayed.side(side).frames
    assert live.keyframes == replayed.keyframes


# --- a run that has ended shows the arena as it left it ---------------------------------------


def test_a_run_that_ended_shows_its_last_finishers_memory_free_not_held():
    """A finishes in step 1 and is drawn there one last time; after the run, its slots are free
    and Tally counts them so, while B, still running when the stream stops, keeps its own."""
    events = contiguous_fragmented()[:-4]  # up to A's finish: B still holds [10, 30)
    frames, settled = replay_settled(events, CONTIG)
    last = frames[-1]
    assert [last.owners[s] for s in (0, 9)] == ["A", "A"]  # the last look
    assert settled is not None and (settled.step, settled.index) == (last.step, last.index)
    assert settled.owners[:10] == (None,) * 10 and settled.cells[:10] == "F" * 10
    assert settled.owners[10:30] == ("B",) * 20 and settled.cells[10:30] == last.cells[10:30]
    assert settled.changed == frozenset(range(10))
    acct = settled.account
    assert acct.token_states == last.account.token_states - 4
    assert acct.internal == last.account.internal - 6
    assert acct.free == last.account.free + 10 and settled.events == ()


def test_a_run_cut_inside_a_step_keeps_its_last_frame():
    events = contiguous_fragmented()[:-2]  # C has arrived; step 2 never ended
    frames, settled = replay_settled(events, CONTIG)
    assert settled is frames[-1]


def test_the_ended_side_of_a_lesson_holds_nothing_and_its_timeline_stops(lesson):
    from paged.viz.player import payload as player

    short = min((lesson.left, lesson.right), key=lambda s: len(s.frames))
    n = len(short.frames)
    assert n < lesson.num_frames, "six-steps: one side must end first"
    assert short.frames[-1].last_look, "its last frame shows a finishing request"
    for i in (n, lesson.num_frames - 1):
        after = short.at(i)
        assert set(after.cells) == {"F"} and after.block_tables == {} and not after.running
        assert after.account.free == after.account.num_slots
    assert short.at(n - 1) is short.frames[-1]
    svg = player.timeline_svg(lesson, [], "en")
    points = [len(p.split("'")[0].split()) for p in svg.split("points='")[1:]]
    assert sorted(points) == sorted(len(s.frames) for s in (lesson.left, lesson.right))


# --- the six keyframes show what their steps say -----------------------------------------------


@pytest.fixture(scope="module")
def lesson() -> Lesson:
    return build(load_spec("six-steps"), read(TRACE))


def _at(lesson, k):
    i = lesson.keyframes[k]
    assert i is not None, f"step {k + 1} has no keyframe in the shipped trace"
    return i, lesson.left.at(i), lesson.right.at(i)


def test_keyframes_are_found_in_order(lesson):
    kfs = lesson.keyframes
    assert None not in kfs and list(kfs) == sorted(set(kfs))
    assert kfs[-1] == lesson.num_frames - 1


def test_step1_prealloc_reserves_max_len_while_paging_takes_prompt_blocks(lesson):
    i, left, right = _at(lesson, 0)
    req = next(e.req for e in right.events if e.kind == E.Admitted.kind)
    view = right.requests[req]
    assert len(right.block_tables[req]) == math.ceil(view.prompt_len / right.run.block_size)
    start, length = left.reservations[req]
    assert length == view.prompt_len + view.max_tokens - 1 > view.prompt_len


def test_step2_contiguous_runs_stack_up(lesson):
    i, left, right = _at(lesson, 1)
    runs = sorted(left.reservations.values())
    assert len(runs) >= 3
    assert all(a[0] + a[1] == b[0] for a, b in pairwise(runs))  # back to back
    assert len(right.block_tables) == len(runs)


def test_step3_paging_grows_by_a_block_only_when_the_last_is_full(lesson):
    i, left, right = _at(lesson, 2)
    grown = [e for e in right.events if e.kind == E.BlockAllocated.kind]
    assert grown
    for ev in grown:
        v = right.requests[ev.req]
        assert ev.logical * right.run.block_size == v.filled - 1  # its first slot, just written
        assert ev.logical > 0
    table = right.block_tables[grown[0].req]
    assert any(b != a + 1 for a, b in pairwise(table))  # logical != physical order
    assert left.account.reservation > 0  # waste creeping on the left


def test_step4_short_request_shows_what_it_never_filled_then_leaves_a_hole(lesson):
    i, left, right = _at(lesson, 3)
    fin = next(e for e in left.events if e.kind == E.Finished.kind)
    done, (start, length) = fin.req, lesson.left.at(i - 1).reservations[fin.req]
    assert done not in left.reservations and done not in right.block_tables
    # its last frame: the run as it held it, the slots it never filled hatched
    assert left.owners[start : start + length] == (done,) * length
    never = length - fin.final_len
    assert (
        never > 0 and left.cells[start : start + length] == TOKEN * fin.final_len + INTERNAL * never
    )
    after = lesson.left.at(i + 1)
    assert done not in after.owners
    runs = sorted(after.reservations.values())
    gaps = [b[0] - (a[0] + a[1]) for a, b in pairwise(runs)]
    assert any(g > 0 for g in gaps)  # a hole between live runs
    assert done not in lesson.right.at(i + 1).owners


def test_never_filled_cells_show_only_in_the_frame_their_request_stops(lesson):
    """No hindsight: until a request's finished event nobody knows it will stop early."""
    for side in (lesson.left, lesson.right):
        seen = set()
        for f in side.frames:
            stopped = {e.req for e in f.events if e.kind == E.Finished.kind}
            hatched = {f.owners[s] for s, c in enumerate(f.cells) if c == INTERNAL}
            if side is lesson.left:
                assert hatched <= stopped, (f.index, hatched, stopped)
            seen |= hatched & stopped
        if side is lesson.left:  # the lesson's point: more than one request stops early there
            assert len(seen) >= 2, seen


def test_step5_large_request_waits_left_despite_free_space_and_runs_right(lesson):
    i, left, right = _at(lesson, 4)
    blocked = left.blocked_by(E.BLOCKED_NO_HOLE)
    assert blocked is not None
    assert blocked.free_slots >= blocked.need_slots > blocked.largest_hole
    assert left.count(HOLE) + left.count("F") >= blocked.need_slots
    assert left.account.external == blocked.free_slots
    assert blocked.req in right.running and blocked.req in right.block_tables


def test_step6_scoreboard_favours_paging(lesson):
    left, right = lesson.left.summary, lesson.right.summary
    assert right.shares["token_states"] > left.shares["token_states"]
    assert right.max_running > left.max_running
    assert right.steps < left.steps


def test_scoreboard_batch_sizes_count_a_request_in_the_step_it_finishes(lesson):
    """A request that makes its last token in a step was in that step's batch (the paper's
    Fig. 13 counts it; simulate's mean_running does): the scoreboard's mean and peak are the
    requests each frame's step wrote K/V for, not only those still running at its end."""
    for side in (lesson.left, lesson.right):
        batches = [
            len({ev.req for ev in f.events if isinstance(ev, E.TokensWritten)}) for f in side.frames
        ]
        assert side.summary.mean_running == pytest.approx(sum(batches) / len(batches))
        assert side.summary.max_running == max(batches)
        assert any(b > len(f.running) for b, f in zip(batches, side.frames, strict=True))


def test_every_narration_placeholder_is_filled(lesson):
    for k in range(len(lesson.spec.steps)):
        for lang in LANGS:
            step = render_step(lesson, k, lang)
            assert step.missing == (), (k, lang, step.missing)
            assert "{" not in step.narration


def test_a_short_id_with_unprintable_characters_is_shown_by_its_arrival_letter():
    """Short ids are shown as they are, unless they hold what a reader cannot see: a bidi
    override reversed every caption quoting the id, a zero-width space made a second "A"."""
    from paged.viz.fold import captions
    from paged.viz.fold.reducer import display_name

    assert display_name("A", 0) == "A" and display_name("r7", 6) == "r7"
    assert display_name("\u202eD", 3) == "D" and display_name("A\u200b", 5) == "F"
    assert display_name("A\n", 0) == "A" and display_name(" B", 1) == "B"
    text = (trace_path(load_spec("six-steps"))).read_text(encoding="utf-8")
    hostile = text.replace('"req":"D"', '"req":"\\u202eD"')
    assert hostile != text
    lesson = build(load_spec("six-steps"), parse_lines(hostile.splitlines()))
    shown = [captions.caption(lesson, i, "en") for i in range(lesson.num_frames)]
    assert not any("\u202e" in left + right for left, right in shown)
    assert any("D waits" in left for left, _ in shown)


def test_the_step_indicator_names_each_side_where_their_steps_differ(lesson):
    """It sorted the two sides' engine steps by value, so "27/51" could be either side's; a
    bare "101/83" then read as step 101 of 83. Two runs still stepping at different steps (a
    trace may number them so) are each named, left first."""
    from dataclasses import replace

    from paged.viz.player import payload as player

    ahead = replace(lesson.right, frames=[replace(f, step=f.step + 7) for f in lesson.right.frames])
    shifted = replace(lesson, right=ahead)
    left = lesson.left.at(3).step
    assert player._indicator(shifted, 3, "en") == f"engine step: left {left}, right {left + 7}"
    assert player._indicator(shifted, 3, "zh") == f"引擎步：左 {left}，右 {left + 7}"
    assert player._indicator(lesson, 3, "en") == f"engine step {left}"
