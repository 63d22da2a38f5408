"""Hypothesis stateful tests: thousands of random allocate / grow / free / preempt operations
against the block pool and both allocators, checking their bookkeeping after every step."""

from collections import Counter
from itertools import pairwise

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from paged.engine.core import events as E
from paged.engine.core.allocators import ContiguousAllocator, PagedAllocator
from paged.engine.core.request import Request, SamplingParams
from tests.engine.free_queue import free_ids
from tests.sinks import ListSink

NUM_BLOCKS, BLOCK = 12, 4


def _req(i: int, prompt: int, max_tokens: int) -> Request:
    return Request(
        req_id=f"q{i}", prompt_token_ids=[0] * prompt, params=SamplingParams(max_tokens=max_tokens)
    )


class PagedMachine(RuleBasedStateMachine):
    """Models each request's token count; the allocator must hold exactly enough blocks."""

    @initialize()
    def setup(self):
        self.bus = E.EventBus()
        self.sink = ListSink()
        self.bus.subscribe(self.sink)
        self.alloc = PagedAllocator(NUM_BLOCKS, BLOCK, self.bus)
        self.tokens: dict[str, int] = {}
        self.reqs: dict[str, Request] = {}
        self.n = 0

    @rule(prompt=st.integers(1, 20))
    def admit(self, prompt):
        req = _req(self.n, prompt, 30)
        self.n += 1
        if self.alloc.check_admit(req, prompt) is None:
            self.alloc.admit(req, prompt)
            self.reqs[req.req_id], self.tokens[req.req_id] = req, prompt
        else:
            assert -(-prompt // BLOCK) > self.alloc.pool.num_free

    @precondition(lambda self: self.tokens)
    @rule(data=st.data(), extra=st.integers(1, 6))
    def grow(self, data, extra):
        rid = data.draw(st.sampled_from(sorted(self.tokens)))
        want = self.tokens[rid] + extra
        self.reqs[rid].num_computed = self.tokens[rid]  # what it holds is computed: no CoW
        before = len(self.alloc.tables[rid])
        if self.alloc.grow(self.reqs[rid], want):
            self.tokens[rid] = want
        else:  # refused growth changes nothing
            assert len(self.alloc.tables[rid]) == before

    @precondition(lambda self: self.tokens)
    @rule(data=st.data())
    def free(self, data):
        rid = data.draw(st.sampled_from(sorted(self.tokens)))
        self.alloc.release(rid)
        del self.tokens[rid], self.reqs[rid]

    @precondition(lambda self: self.tokens)
    @rule()
    def preempt_newest(self):
        rid = max(self.tokens, key=lambda r: int(r[1:]))
        self.alloc.release(rid)
        del self.tokens[rid], self.reqs[rid]

    @precondition(lambda self: self.tokens)
    @rule(data=st.data())
    def share_a_block(self, data):
        """Prefix sharing: another table references a block; its ref count must say so."""
        src, dst = (data.draw(st.sampled_from(sorted(self.tokens))) for _ in range(2))
        block = self.alloc.tables[src][0]
        if block in self.alloc.tables[dst]:
            return
        self.alloc.pool.share(block)
        self.alloc.tables[dst].append(block)
        self.tokens[dst] = len(self.alloc.tables[dst]) * BLOCK

    @invariant()
    def tables_hold_exactly_enough_blocks(self):
        for rid, n in self.tokens.items():
            assert len(self.alloc.tables[rid]) == -(-n // BLOCK)

    @invariant()
    def ref_counts_match_tables(self):
        refs = Counter(b.block_id for t in self.alloc.tables.values() for b in t)
        for b in self.alloc.pool.blocks:
            assert b.ref_count == refs.get(b.block_id, 0)

    @invariant()
    def free_list_is_exactly_the_unreferenced_blocks(self):
        free = free_ids(self.alloc.pool)
        assert len(free) == len(set(free)), "a block is in the free list twice"
        in_use = {b.block_id for t in self.alloc.tables.values() for b in t}
        assert set(free) | in_use == set(range(NUM_BLOCKS))
        assert not set(free) & in_use, "a block is both free and in a table"

    @invariant()
    def slot_mapping_in_one_call_is_the_slots_one_by_one(self):
        for rid, n in self.tokens.items():
            assert self.alloc.slots(rid, 0, n) == [self.alloc.slot(rid, p) for p in range(n)]
            assert self.alloc.slots(rid, n - 1, n) == [self.alloc.slot(rid, n - 1)]

    @invariant()
    def events_replay_to_the_same_block_tables(self):
        tables: dict[str, list[int]] = {}
        for ev in self.sink.events:
            if ev.kind == "block_allocated":
                tables.setdefault(ev.req, []).append(ev.physical)
            elif ev.kind == "block_copied":  # copy-on-write: the writer's table moves to dst
                table = tables.setdefault(ev.req, [])
                if ev.src in table:
                    table[table.index(ev.src)] = ev.dst
                else:  # the source was shared by hand: no event ever put it in this table
                    table.append(ev.dst)
            elif ev.kind == "block_freed" and ev.physical in tables.get(ev.req, ()):
                tables[ev.req].remove(ev.physical)  # (a hand-shared block has no alloc event)
                if not tables[ev.req]:
                    del tables[ev.req]
        allocated = {r: [b.block_id for b in t] for r, t in self.alloc.tables.items()}
        for rid, ids in tables.items():  # shared blocks were added by hand, not via events
            assert ids == [i for i in allocated[rid] if i in ids]


class ContiguousMachine(RuleBasedStateMachine):
    """Runs never overlap, never leave the arena, and holes plus runs tile the arena."""

    @initialize(policy=st.sampled_from(["max", "pow2", "oracle"]))
    def setup(self, policy):
        self.alloc = ContiguousAllocator(NUM_BLOCKS, BLOCK, 24, policy, E.EventBus())
        self.reqs: dict[str, Request] = {}
        self.n = 0

    @rule(prompt=st.integers(1, 12), max_tokens=st.integers(1, 12))
    def admit(self, prompt, max_tokens):
        req = _req(self.n, prompt, max_tokens)
        self.n += 1
        refusal = self.alloc.check_admit(req, prompt)
        if refusal is None:
            self.alloc.admit(req, prompt)
            self.reqs[req.req_id] = req
        elif refusal.reason == E.BLOCKED_NO_HOLE:
            assert refusal.largest_hole < refusal.need_slots <= refusal.free_slots

    @precondition(lambda self: self.reqs)
    @rule(data=st.data())
    def free(self, data):
        rid = data.draw(st.sampled_from(sorted(self.reqs)))
        self.alloc.release(rid)
        del self.reqs[rid]

    @invariant()
    def runs_and_holes_tile_the_arena(self):
        pieces = sorted([tuple(h) for h in self.alloc.holes] + list(self.alloc.runs.values()))
        pos = 0
        for start, length in pieces:
            assert start == pos and length > 0
            pos += length
        assert pos == NUM_BLOCKS * BLOCK

    @invariant()
    def slot_mapping_in_one_call_is_the_slots_one_by_one(self):
        for rid, (_, n) in self.alloc.runs.items():
            assert self.alloc.slots(rid, 0, n) == [self.alloc.slot(rid, p) for p in range(n)]
            assert self.alloc.slots(rid, 1, 2) == [self.alloc.slot(rid, 1)]

    @invariant()
    def holes_are_merged(self):
        holes = self.alloc.holes
        for (s1, l1), (s2, _) in pairwise(holes):
            assert s1 + l1 < s2


TestPagedAllocator = PagedMachine.TestCase
TestPagedAllocator.settings = settings(max_examples=60, stateful_step_count=60, deadline=None)
TestContiguousAllocator = ContiguousMachine.TestCase
TestContiguousAllocator.settings = settings(max_examples=60, stateful_step_count=60, deadline=None)


def test_token_ids_slices_prompt_then_output_like_the_whole_list():
    # the scheduler reads a step's tokens through this instead of building prompt + output
    for p_len in range(4):
        for o_len in range(4):
            req = Request("r", list(range(10, 10 + p_len)), SamplingParams())
            req.output_token_ids = list(range(50, 50 + o_len))
            whole = req.all_token_ids
            for start in range(p_len + o_len + 2):
                for end in range(start, p_len + o_len + 3):
                    assert req.token_ids(start, end) == whole[start:end], (p_len, o_len)
