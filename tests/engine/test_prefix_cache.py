"""Prefix caching and copy-on-write without a model: chained hashes, the LRU pool (a Hypothesis
state machine), and dry engine runs whose traces must pass the full trace check and whose
accounting must count each shared slot once."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from paged.engine.core import events as E
from paged.engine.core.accounting import CATEGORIES, account
from paged.engine.core.block_pool import BlockPool
from paged.engine.core.engine_core import EngineConfig, build_core
from paged.engine.core.prefix_hash import ROOT_HASH, block_hash
from paged.engine.core.request import Request, SamplingParams
from paged.engine.sim.simulate import EOS, DryRunner
from paged.engine.trace import io as trace_mod
from paged.engine.trace.header import RunHeader
from paged.engine.trace.io import TraceWriter, make_header
from tests.engine.free_queue import free_ids
from tests.sinks import ListSink

ROOT = Path(__file__).resolve().parents[2]


# --- hashes --------------------------------------------------------------------------------


TWO_BLOCKS = "block_hash(block_hash(ROOT_HASH, range(1000, 1016)), range(1016, 1032))"


def test_chained_block_hashes_agree_across_processes():
    code = f"from paged.engine.core.prefix_hash import ROOT_HASH, block_hash; print({TWO_BLOCKS})"
    env = dict(os.environ, PYTHONHASHSEED="12345", PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True, cwd=ROOT
    ).stdout.strip()
    assert out == block_hash(block_hash(ROOT_HASH, range(1000, 1016)), range(1016, 1032))


def test_a_block_hash_names_its_whole_prefix():
    block = [5, 6, 7, 8]
    assert block_hash(ROOT_HASH, block) != block_hash(block_hash(ROOT_HASH, [1, 2, 3, 4]), block)
    assert block_hash(ROOT_HASH, [1, 2]) != block_hash(ROOT_HASH, [2, 1])


# --- the pool ------------------------------------------------------------------------------


def test_a_freed_cached_block_stays_hittable_until_it_is_reused():
    evicted = []
    pool = BlockPool(3, on_evict=lambda b, h: evicted.append((b.block_id, h)))
    a = pool.allocate()
    assert pool.cache(a, "h")
    pool.release(a)
    assert pool.lookup("h") is a and a.block_hash == "h"
    pool.share(a)  # taken back from the middle of the free queue
    assert a.ref_count == 1 and pool.num_free == 2
    pool.release(a)
    first, second = pool.allocate(), pool.allocate()  # never-cached blocks go first (LRU)
    assert a not in (first, second) and not evicted
    assert pool.allocate() is a and evicted == [(a.block_id, "h")]
    assert pool.lookup("h") is None and a.block_hash is None


def test_the_same_content_is_cached_once():
    pool = BlockPool(2)
    a, b = pool.allocate(), pool.allocate()
    assert pool.cache(a, "h") and not pool.cache(b, "h")
    assert pool.lookup("h") is a and b.block_hash is None


NUM_BLOCKS = 8


class PoolMachine(RuleBasedStateMachine):
    """Holders take blocks fresh, cache them, share them (held or cached-free), copy them on
    write and drop them; the pool must keep exact ref counts, leak nothing, and never hand out
    a block someone holds."""

    @initialize()
    def setup(self):
        self.evicted: list[str] = []
        self.pool = BlockPool(NUM_BLOCKS, on_evict=lambda b, h: self.evicted.append(h))
        self.holders: dict[int, list] = {}  # holder id -> blocks it references
        self.n = 0
        self.next_hash = 0

    def _holder(self, data):
        return data.draw(st.sampled_from(sorted(self.holders)))

    @precondition(lambda self: self.pool.num_free > 0)
    @rule()
    def allocate(self):
        before = {id(b) for bs in self.holders.values() for b in bs}
        block = self.pool.allocate()
        assert id(block) not in before, "a referenced block was handed out"
        assert block.ref_count == 1 and block.block_hash is None
        self.holders[self.n] = [block]
        self.n += 1

    @precondition(lambda self: self.holders)
    @rule(data=st.data())
    def cache_one(self, data):
        block = data.draw(st.sampled_from(self.holders[self._holder(data)]))
        h = f"h{self.next_hash}"
        self.next_hash += 1
        assert self.pool.cache(block, h) == (block.block_hash == h)

    @precondition(lambda self: self.pool.cached)
    @rule(data=st.data())
    def hit(self, data):
        h = data.draw(st.sampled_from(sorted(self.pool.cached)))
        block = self.pool.lookup(h)
        self.pool.share(block)
        self.holders[self.n] = [block]
        self.n += 1

    @precondition(lambda self: self.holders)
    @rule(data=st.data())
    def share_into(self, data):
        src, dst = self._holder(data), self._holder(data)
        block = data.draw(st.sampled_from(self.holders[src]))
        if block in self.holders[dst]:
            return
        self.pool.share(block)
        self.holders[dst].append(block)

    @precondition(
        lambda self: (
            self.pool.num_free > 0
            and any(b.ref_count > 1 for bs in self.holders.values() for b in bs)
        )
    )
    @rule(data=st.data())
    def copy_on_write(self, data):
        owner, i = data.draw(
            st.sampled_from(
                sorted(
                    (h, i)
                    for h, bs in self.holders.items()
                    for i, b in enumerate(bs)
                    if b.ref_count > 1
                )
            )
        )
        src = self.holders[owner][i]
        refs = src.ref_count
        dst = self.pool.allocate()
        assert dst is not src and dst.ref_count == 1
        assert self.pool.release(src) == refs - 1
        self.holders[owner][i] = dst

    @precondition(lambda self: self.holders)
    @rule(data=st.data())
    def drop(self, data):
        for block in self.holders.pop(self._holder(data)):
            self.pool.release(block)

    @invariant()
    def ref_counts_are_exact(self):
        refs = Counter(id(b) for bs in self.holders.values() for b in bs)
        for b in self.pool.blocks:
            assert b.ref_count == refs.get(id(b), 0)

    @invariant()
    def no_leak_and_the_free_queue_is_the_unreferenced_blocks(self):
        free = free_ids(self.pool)
        assert len(free) == len(set(free)) == self.pool.num_free
        held = {b.block_id for bs in self.holders.values() for b in bs}
        assert set(free) == set(range(NUM_BLOCKS)) - held

    @invariant()
    def the_hash_map_is_exactly_the_blocks_with_hashes(self):
        assert {h: b.block_id for h, b in self.pool.cached.items()} == {
            b.block_hash: b.block_id for b in self.pool.blocks if b.block_hash is not None
        }
        assert not set(self.evicted) & set(self.pool.cached)


TestPoolMachine = PoolMachine.TestCase
TestPoolMachine.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)


# --- dry engine runs -----------------------------------------------------------------------

SYSTEM = list(range(100, 140))  # a 40-token shared prompt prefix


def _run(allocator: str, reqs: list[Request], num_blocks: int, caching: bool, block_size=8):
    config = EngineConfig(allocator, num_blocks, block_size, 256, enable_prefix_caching=caching)
    core = build_core(config, DryRunner(), EOS)
    for r in reqs:
        core.add_request(r)
    out = io.StringIO()
    writer = TraceWriter(
        out,
        make_header(
            [RunHeader.from_engine(allocator, config, core.allocator.view_block_size)],
            model="none",
            device="none",
        ),
    )
    sink = ListSink()
    core.bus.subscribe(writer.sink(allocator))
    core.bus.subscribe(sink)
    core.run_to_completion()
    writer.close()
    trace_mod.loads(out.getvalue())  # the full check: raises TraceError on any violation
    return core, sink.events, config


def _chat(n: int, out_len: int = 6, arrive_every: int = 0) -> list[Request]:
    return [
        Request(
            f"r{i}",
            SYSTEM + [200 + i, 300 + i, 400],
            SamplingParams(max_tokens=12),
            arrival_step=i * arrive_every,
            forced_output_len=out_len,
        )
        for i in range(n)
    ]


def _shares_add_up(events, config):
    accts = account(events, config.num_slots, config.block_size)
    for a in accts:
        assert sum(getattr(a, c) for c in CATEGORIES) == a.num_slots
        assert min(getattr(a, c) for c in CATEGORIES) >= 0
    return accts


@pytest.mark.parametrize("arrive_every", [0, 2])
def test_a_shared_prompt_is_computed_once(arrive_every):
    plain, ev0, _ = _run("paged", _chat(6, arrive_every=arrive_every), 64, caching=False)
    cached, ev1, config = _run("paged", _chat(6, arrive_every=arrive_every), 64, caching=True)
    hits = [e for e in ev1 if isinstance(e, E.CacheHit)]
    assert len(hits) == 5 and all(e.tokens_saved == 40 for e in hits)
    assert (
        cached.prefix_cache_hit_tokens
        == 5 * 40
        == plain.prefill_tokens_computed - cached.prefill_tokens_computed
    )
    stored = [e for e in ev1 if isinstance(e, E.BlockStored)]
    assert stored[0].parent_block_hash == ROOT_HASH and stored[0].token_ids == tuple(SYSTEM[:8])
    assert all(
        b.parent_block_hash == a.block_hash for a, b in zip(stored[:4], stored[1:5], strict=True)
    )
    accts = _shares_add_up(ev1, config)
    assert max(a.shared for a in accts) == 40  # the five system-prompt blocks
    # all at once, six tables point at them: the five extra holders are spared 5 x 40 slots;
    # one every two steps, a request finishes (6 steps) when its fourth successor arrives
    assert max(a.saved for a in accts) == (5 if arrive_every == 0 else 2) * 40
    held_plain = [a.num_slots - a.free for a in _shares_add_up(ev0, config)]
    held_cached = [a.num_slots - a.free for a in accts]
    assert max(held_cached) < max(held_plain)


def test_contiguous_runs_never_share():
    core, events, config = _run("max", _chat(4), 64, caching=True)
    assert core.prefix_cache_hit_tokens == 0
    assert not any(isinstance(e, (E.BlockShared, E.CacheHit, E.BlockStored)) for e in events)


def test_preempted_requests_holding_shared_blocks_leave_the_others_intact():
    core, events, config = _run("paged", _chat(8, out_len=30), 14, caching=True)
    assert core.num_preemptions > 0
    assert any(isinstance(e, E.CacheHit) for e in events)
    assert all(r.finish_reason is not None for r in core.scheduler._by_id.values())
    _shares_add_up(events, config)
    # the pool ends empty and consistent: no block is referenced, nothing leaked
    pool = core.allocator.pool
    assert pool.num_free == pool.num_blocks and all(b.ref_count == 0 for b in pool.blocks)


def _samples(n: int, prompt_len: int, out_len: int = 10) -> list[Request]:
    prompt = list(range(500, 500 + prompt_len))
    return [
        Request(
            f"s.{k}",
            list(prompt),
            SamplingParams(max_tokens=16, temperature=1.0, seed=3 + k),
            forced_output_len=out_len,
            parent_id="s.0" if k else None,
        )
        for k in range(n)
    ]


@pytest.mark.parametrize("caching", [False, True])
def test_parallel_samples_share_the_prompt_and_copy_on_write(caching):
    core, events, config = _run("paged", _samples(3, 21), 64, caching=caching)
    shared = [e for e in events if isinstance(e, E.BlockShared)]
    copies = [e for e in events if isinstance(e, E.BlockCopied)]
    # 20 shared tokens = blocks 0, 1 full and block 2 with 4 tokens; each sibling shares all 3
    assert sorted((e.req, e.logical, e.num_tokens) for e in shared) == [
        ("s.1", 0, 8),
        ("s.1", 1, 8),
        ("s.1", 2, 4),
        ("s.2", 0, 8),
        ("s.2", 1, 8),
        ("s.2", 2, 4),
    ]
    # the partly filled block 2 is written by all three: two copies, the last writer keeps it
    assert len(copies) == 2 and {c.src for c in copies} == {shared[2].physical}
    assert core.prefill_tokens_computed == 21 + 1 + 1
    _shares_add_up(events, config)


def test_samples_fork_at_a_block_boundary_without_copying():
    core, events, _ = _run("paged", _samples(3, 17), 64, caching=False)
    assert not any(isinstance(e, E.BlockCopied) for e in events)
    assert sum(isinstance(e, E.BlockShared) for e in events) == 4


def test_parallel_samples_under_memory_pressure():
    core, events, config = _run("paged", _samples(4, 21, out_len=40), 12, caching=True)
    assert core.num_preemptions > 0
    assert all(r.finish_reason for r in core.scheduler._by_id.values())
    _shares_add_up(events, config)


# --- the viewer's fold ---------------------------------------------------------------------


@pytest.mark.parametrize("case", ["chat", "samples", "pressure"])
def test_the_viewer_draws_each_shared_slot_once(case):
    from paged.viz.fold.reducer import HOLE, INTERNAL, PAGED, RESERVED, TOKEN, replay
    from paged.viz.render.layout import grid_layout
    from paged.viz.render.svg import arena_svg, ref_counts

    reqs, blocks = {
        "chat": (_chat(6), 64),
        "samples": (_samples(3, 21), 64),
        "pressure": (_chat(8, out_len=30), 14),
    }[case]
    _, events, config = _run("paged", reqs, blocks, caching=True)
    run = RunHeader("paged", PAGED, num_slots=config.num_slots, block_size=config.block_size)
    frames = replay(events, run)
    accts = account(
        events, config.num_slots, config.block_size, hindsight=False, show_finishing=True
    )
    for f, a in zip(frames, accts, strict=True):
        assert (
            f.count(TOKEN),
            f.count(RESERVED),
            f.count(INTERNAL),
            f.count(HOLE),
            f.count("F"),
        ) == (a.token_states, a.reservation, a.internal, a.external, a.free)
        refs = ref_counts(f)
        assert sum(n - 1 for n in refs.values()) * config.block_size == a.saved
    shared = max(frames, key=lambda f: f.account.saved)
    svg = arena_svg(shared, grid_layout(config.num_slots, config.block_size))
    assert f"\u00d7{max(ref_counts(shared).values())}" in svg


@pytest.mark.parametrize(
    "args, words",
    [
        (["hi", "--n", "0"], ["n must be"]),
        (["hi", "--n", "2", "--seed", str(2**64 - 1)], ["seed + n - 1"]),
    ],
)
def test_bad_sample_counts_are_one_line_before_any_model_loads(args, words):
    from tests.engine.test_bad_input import assert_one_error_line, run_cli

    res = run_cli(*args)
    assert res.returncode == 2
    assert_one_error_line(res.stderr, *words)


def test_a_scenario_may_ask_for_samples_and_prefix_caching(tmp_path):
    from paged.engine.trace import scenario
    from paged.engine.trace.recorder import build_requests

    f = tmp_path / "s.toml"
    f.write_text(
        "[arena]\nnum_blocks = 8\nenable_prefix_caching = true\n"
        '[[requests]]\nid = "S"\nprompt_len = 20\nmax_tokens = 4\nn = 3\n'
        "temperature = 0.5\nseed = 4\n"
    )
    sc = scenario.load(f)
    assert sc.enable_prefix_caching
    reqs = build_requests(sc)
    assert [(r.req_id, r.params.seed, r.parent_id) for r in reqs] == [
        ("S.0", 4, None),
        ("S.1", 5, "S.0"),
        ("S.2", 6, "S.0"),
    ]
    f.write_text(
        "[arena]\nnum_blocks = 8\nenable_prefix_caching = 1\n"
        "[[requests]]\nprompt_len = 20\nmax_tokens = 4\n"
    )
    with pytest.raises(Exception, match="enable_prefix_caching must be true or false"):
        scenario.load(f)


def test_a_scenario_whose_samples_a_trace_cannot_hold_is_refused_on_load(tmp_path):
    """scenario.load counted [[requests]] tables, not the n samples each becomes: 17 requests of
    256 samples loaded, and record wrote a 4,352-request run that trace.read then refused
    ("run holds more than 4096 requests")."""
    from paged.engine.errors import InvalidConfigError
    from paged.engine.trace import scenario
    from paged.engine.trace.schema import LIMITS

    f = tmp_path / "s.toml"
    one = '[[requests]]\nid = "R{}"\nprompt_len = 2\nmax_tokens = 1\nn = 256\n'
    many = LIMITS.max_requests // 256
    f.write_text("[arena]\nnum_blocks = 8\n" + "".join(one.format(i) for i in range(many)))
    assert len(scenario.load(f).requests) == many  # exactly the limit: fine
    f.write_text("[arena]\nnum_blocks = 8\n" + "".join(one.format(i) for i in range(many + 1)))
    with pytest.raises(InvalidConfigError, match="more than a trace may hold") as info:
        scenario.load(f)
    assert "\n" not in str(info.value)


def test_a_refusal_counts_the_cached_blocks_it_would_take_back_from_the_free_ones():
    # A leaves 2 cached blocks nobody holds; C's prompt hits both, but taking them back empties
    # the free queue as a fresh block would: the refusal must not say "needs 2 slots, 4 free"
    core = build_core(EngineConfig("paged", 4, 2, 8, enable_prefix_caching=True), DryRunner(), EOS)
    refusals: list[E.AdmissionBlocked] = []
    core.bus.subscribe(
        lambda ev: refusals.append(ev) if isinstance(ev, E.AdmissionBlocked) else None
    )
    core.add_request(
        Request("A", [5, 5, 5, 5, 6], SamplingParams(max_tokens=1), forced_output_len=1)
    )
    core.add_request(
        Request("B", [7] * 3, SamplingParams(max_tokens=2), forced_output_len=2, arrival_step=1)
    )
    core.add_request(
        Request(
            "C",
            [5, 5, 5, 5, 6, 6],
            SamplingParams(max_tokens=1),
            forced_output_len=1,
            arrival_step=1,
        )
    )
    core.run_to_completion()
    assert refusals and all(r.req == "C" for r in refusals)
    assert all(r.need_slots == 3 * 2 > r.free_slots for r in refusals)  # 2 cached + 1 fresh
