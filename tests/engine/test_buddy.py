"""Buddy placement, the paper's Orca baseline: power-of-two blocks split in halves and merge
back, checked against a brute-force model of which slots are taken after every operation."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from paged.engine.core import events as E
from paged.engine.core.allocators import ContiguousAllocator
from paged.engine.core.buddy import BuddyPlacement, next_pow2
from paged.engine.core.request import Request, SamplingParams
from paged.engine.errors import InvalidConfigError
from tests.sinks import ListSink


def test_arena_that_is_not_a_power_of_two_is_tiled_by_aligned_blocks_largest_first():
    b = BuddyPlacement(15_728)
    assert b.holes() == [
        (0, 8192),
        (8192, 4096),
        (12288, 2048),
        (14336, 1024),
        (15360, 256),
        (15616, 64),
        (15680, 32),
        (15712, 16),
    ]
    assert b.free_slots == 15_728 and b.max_run == 8192


def test_placing_one_slot_splits_a_block_into_halves_down_to_one():
    b = BuddyPlacement(16)
    assert b.place(1) == 0
    assert b.holes() == [(1, 1), (2, 2), (4, 4), (8, 8)]


def test_a_run_takes_the_next_power_of_two_and_leaves_the_rest_as_slack():
    b = BuddyPlacement(64)
    assert b.footprint(33) == 64 and b.footprint(32) == 32 and b.footprint(1) == 1
    assert b.place(17) == 0 and b.free_slots == 32  # 17 slots asked, a 32-slot block taken


def test_freeing_merges_buddies_back_into_the_whole_arena():
    b = BuddyPlacement(32)
    starts = [b.place(8) for _ in range(4)]
    assert starts == [0, 8, 16, 24] and b.largest_hole == 0
    b.free(8, 8)
    b.free(16, 8)  # 8 and 16 are neighbours but not buddies: no merge
    assert b.holes() == [(8, 8), (16, 8)]
    b.free(0, 8)
    b.free(24, 8)
    assert b.holes() == [(0, 32)]


def test_halves_never_merge_past_the_end_of_the_arena():
    b = BuddyPlacement(24)  # 16 + 8: the 8-block at 16 has no buddy inside the arena
    assert b.place(8) == 16
    b.free(16, 8)
    assert b.holes() == [(0, 16), (16, 8)]


@given(st.integers(0, 5000))
def test_next_pow2_is_the_smallest_power_of_two_not_below_n(n):
    p = next_pow2(n)
    assert p >= max(n, 1) and p & (p - 1) == 0 and (p == 1 or p // 2 < n)


class BuddyMachine(RuleBasedStateMachine):
    """A brute-force map of taken slots is the model; the free lists must agree with it."""

    @initialize(num_slots=st.integers(1, 100))
    def setup(self, num_slots):
        self.b = BuddyPlacement(num_slots)
        self.taken: dict[int, tuple[int, int]] = {}  # start -> (need, footprint)
        self.owner = [False] * num_slots

    @rule(need=st.integers(1, 64))
    def place(self, need):
        fits = self.b.footprint(need) <= self.b.largest_hole
        start = self.b.place(need)
        assert (start is not None) == fits
        if start is None:
            return
        size = self.b.footprint(need)
        assert start % size == 0, "a block sits at a multiple of its size"
        assert start + size <= len(self.owner)
        assert not any(self.owner[start : start + size]), "blocks never overlap"
        self.owner[start : start + size] = [True] * size
        self.taken[start] = (need, size)

    @precondition(lambda self: self.taken)
    @rule(data=st.data())
    def free(self, data):
        start = data.draw(st.sampled_from(sorted(self.taken)))
        need, size = self.taken.pop(start)
        self.b.free(start, need)
        self.owner[start : start + size] = [False] * size

    @invariant()
    def free_lists_are_exactly_the_untaken_slots(self):
        free = [False] * len(self.owner)
        for start, size in self.b.holes():
            assert start % size == 0
            assert not any(free[start : start + size]), "free blocks never overlap"
            free[start : start + size] = [True] * size
        assert free == [not t for t in self.owner]
        assert self.b.free_slots == self.owner.count(False)

    @invariant()
    def the_largest_hole_is_the_largest_free_block(self):
        # kept between places and frees (admission asks at every step): never stale
        assert self.b.largest_hole == max((size for _, size in self.b.holes()), default=0)

    @invariant()
    def no_two_free_buddies_are_left_unmerged(self):
        holes = set(self.b.holes())
        for start, size in holes:
            parent = min(start, start ^ size)
            if parent + 2 * size <= len(self.owner):
                assert (start ^ size, size) not in holes

    @invariant()
    def an_empty_arena_is_whole_again(self):
        if not self.taken:
            assert self.b.holes() == BuddyPlacement(len(self.owner)).holes()


TestBuddyPlacement = BuddyMachine.TestCase
TestBuddyPlacement.settings = settings(max_examples=80, stateful_step_count=60, deadline=None)


def _req(prompt: int, output: int, max_tokens: int = 200) -> Request:
    return Request(
        req_id="r",
        prompt_token_ids=[0] * prompt,
        params=SamplingParams(max_tokens=max_tokens),
        forced_output_len=output,
    )


def test_pow2_over_reserves_the_output_only_as_in_the_paper():
    # §6.1: a 25-token output reserves 32 output positions; the prompt is reserved exactly.
    alloc = ContiguousAllocator(64, 16, 1024, "pow2", E.EventBus())
    req = _req(prompt=100, output=26)  # 26 tokens sampled, 25 of them leave K/V behind
    assert req.true_final_len == 125
    assert alloc.reservation(req) == 100 + 32


def test_oracle_reserves_exactly_and_max_reserves_the_bound():
    bus = E.EventBus()
    req = _req(prompt=100, output=26)
    assert ContiguousAllocator(64, 16, 1024, "oracle", bus).reservation(req) == 125
    assert ContiguousAllocator(64, 16, 1024, "max", bus).reservation(req) == 100 + 200 - 1


def test_buddy_run_events_carry_the_run_and_the_slack_stays_outside_it():
    bus, sink = E.EventBus(), ListSink()
    bus.subscribe(sink)
    alloc = ContiguousAllocator(4, 16, 64, "oracle", bus, placement="buddy")
    req = _req(prompt=10, output=11)  # final length 20: a 32-slot block
    alloc.admit(req, 10)
    ev = sink.events[-1]
    assert (ev.kind, ev.start, ev.length) == ("slots_reserved", 0, 20)
    assert alloc.slack_slots == 12 and alloc.free_slots == 32
    alloc.release("r")
    assert alloc.slack_slots == 0 and alloc.holes == [(0, 64)]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(1, 30), st.integers(1, 30)), max_size=40))
def test_buddy_slack_is_the_rounding_of_exactly_the_runs_held_now(ops):
    # the slack is counted as runs come and go: it must equal a recount after every change
    alloc = ContiguousAllocator(16, 4, 64, "oracle", E.EventBus(), placement="buddy")
    held: list[str] = []
    for i, (release, prompt, output) in enumerate(ops):
        if release and held:
            alloc.release(held.pop(i % len(held)))
        else:
            req = dataclasses.replace(_req(prompt, output), req_id=f"r{i}")
            if alloc.check_admit(req, prompt) is None:
                alloc.admit(req, prompt)
                held.append(req.req_id)
        assert alloc.slack_slots == sum(next_pow2(n) - n for _, n in alloc.runs.values())


def test_buddy_refuses_a_request_no_block_can_hold_with_one_line():
    alloc = ContiguousAllocator(3, 16, 48, "max", E.EventBus(), placement="buddy")
    with pytest.raises(InvalidConfigError, match="largest buddy block"):
        alloc.slots_needed(_req(prompt=40, output=5, max_tokens=9))
