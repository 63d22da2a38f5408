"""Swap preemption and the CPU tier: the bookkeeping (a Hypothesis machine over both tiers),
traces that validate and fold, hostile swap events refused, and blocks that come back bit for
bit. The real-model acceptance runs are in ``test_swap_outputs_match_*`` (marked model)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import torch
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from paged.engine.core import events as E
from paged.engine.core.accounting import Tally, account
from paged.engine.core.engine_core import EngineConfig, build_core
from paged.engine.core.request import Batch, Request, SamplingParams
from paged.engine.core.swap import SwappingPagedAllocator
from paged.engine.engine_args import EngineArgs
from paged.engine.errors import InvalidConfigError
from paged.engine.model.arena import KVArena
from paged.engine.model.cpu_tier import CpuKVStore
from paged.engine.sim.simulate import EOS, DryRunner
from paged.engine.trace import io as T
from paged.engine.trace.header import RunHeader
from paged.engine.trace.schema import TraceError
from paged.kernels.fp8 import quantize
from paged.viz.fold.reducer import replay
from tests.engine.free_queue import free_ids
from tests.kernels.test_fp8 import SMOL

NUM_BLOCKS, NUM_CPU, BLOCK = 10, 8, 4
ROOT = Path(__file__).resolve().parents[2]


# --- the bookkeeping, over both tiers ---------------------------------------------------------


class TwoTierMachine(RuleBasedStateMachine):
    """Random admit / grow / finish / swap-out / swap-in. After every rule: each device block is
    in the free list or in exactly one table, each CPU block likewise, nothing leaked."""

    @initialize()
    def setup(self):
        self.bus = E.EventBus()
        self.alloc = SwappingPagedAllocator(NUM_BLOCKS, BLOCK, self.bus, NUM_CPU)
        self.running: dict[str, Request] = {}
        self.swapped: dict[str, tuple[Request, int]] = {}  # and its token count
        self.tokens: dict[str, int] = {}
        self.n = 0

    @rule(prompt=st.integers(1, 14))
    def admit(self, prompt):
        req = Request(f"q{self.n}", [0] * prompt, SamplingParams(max_tokens=30))
        self.n += 1
        if self.alloc.check_admit(req, prompt) is None:
            self.alloc.admit(req, prompt)
            self.running[req.req_id], self.tokens[req.req_id] = req, prompt

    @precondition(lambda self: self.running)
    @rule(data=st.data(), extra=st.integers(1, 6))
    def grow(self, data, extra):
        rid = data.draw(st.sampled_from(sorted(self.running)))
        if self.alloc.grow(self.running[rid], self.tokens[rid] + extra):
            self.tokens[rid] += extra

    @precondition(lambda self: self.running)
    @rule(data=st.data())
    def finish(self, data):
        rid = data.draw(st.sampled_from(sorted(self.running)))
        self.alloc.release(rid)
        del self.running[rid], self.tokens[rid]

    @precondition(lambda self: self.running)
    @rule(data=st.data())
    def swap_out(self, data):
        rid = data.draw(st.sampled_from(sorted(self.running)))
        table = self.alloc.block_table(rid)
        fits = len(table) <= self.alloc.free_cpu_blocks
        pairs = self.alloc.swap_out(rid)
        assert (pairs is not None) == fits
        if pairs is not None:
            assert [d for d, _ in pairs] == table
            self.swapped[rid] = (self.running.pop(rid), self.tokens.pop(rid))

    @precondition(lambda self: self.swapped)
    @rule(data=st.data(), extra=st.integers(0, 1))
    def swap_in(self, data, extra):
        rid = data.draw(st.sampled_from(sorted(self.swapped)))
        req, tokens = self.swapped[rid]
        cpu = [b.block_id for b in self.alloc.cpu_tables[rid]]
        if self.alloc.check_admit(req, tokens + extra) is not None:
            return
        self.alloc.admit(req, tokens + extra)
        _, inn = self.alloc.take_swaps()
        assert [c for c, _ in inn[-len(cpu) :]] == cpu  # the same CPU blocks, in order
        assert [d for _, d in inn[-len(cpu) :]] == self.alloc.block_table(rid)[: len(cpu)]
        del self.swapped[rid]
        self.running[rid], self.tokens[rid] = req, tokens + extra

    @invariant()
    def every_block_in_exactly_one_place(self):
        if not hasattr(self, "alloc"):
            return
        a = self.alloc
        for pool, tables, n in (
            (a.pool, a.tables, NUM_BLOCKS),
            (a.cpu_pool, a.cpu_tables, NUM_CPU),
        ):
            held = [b.block_id for t in tables.values() for b in t]
            free = free_ids(pool)
            assert sorted(held + free) == list(range(n))  # none leaked, none twice
        assert set(a.tables) == set(self.running)
        assert set(a.cpu_tables) == set(self.swapped)
        for rid, n in self.tokens.items():
            assert len(a.tables[rid]) == -(-n // BLOCK)


TestTwoTiers = TwoTierMachine.TestCase
TestTwoTiers.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)


# --- dry runs: traces that validate and fold --------------------------------------------------


def _prompt(i: int, prefix: bool) -> list[int]:
    """Without ``prefix`` every prompt is sevens; with it, even requests share a two-block
    prefix and odd ones share nothing with anyone."""
    if not prefix:
        return [7] * (5 + 3 * i)
    head = [1, 2, 3, 4, 5, 6, 7, 8] if i % 2 == 0 else [100 + 10 * i + k for k in range(8)]
    return head + [200 + i] * (1 + 3 * i)


def _dry_run(
    mode: str, num_cpu: int, num_blocks: int = 12, prefix: bool = False
) -> tuple[str, list]:
    cfg = EngineConfig(
        "paged",
        num_blocks,
        BLOCK,
        64,
        preemption_mode=mode,
        num_cpu_blocks=num_cpu,
        enable_prefix_caching=prefix,
    )
    core = build_core(cfg, DryRunner(), EOS)
    reqs = [
        core.add_request(
            Request(
                f"r{i}",
                _prompt(i, prefix),
                SamplingParams(max_tokens=24),
                forced_output_len=14 + 2 * i,
            )
        )
        for i in range(6)
    ]
    buf = io.StringIO()
    header = T.make_header(
        [RunHeader.from_engine("paged", cfg, BLOCK)],
        model="none",
        device="none",
    )
    writer = T.TraceWriter(buf, header)
    core.bus.subscribe(writer.sink("paged"))
    core.run_to_completion()
    writer.close()
    return buf.getvalue(), reqs


def test_dry_swap_run_writes_a_trace_that_validates_and_folds():
    text, reqs = _dry_run("swap", NUM_CPU)
    tr = T.loads(text)  # full replay of both tiers' invariants
    kinds = [e.kind for e in tr.runs["paged"]]
    assert kinds.count("swapped_out") > 0
    assert kinds.count("swapped_in") == kinds.count("swapped_out")
    assert all(r.finish_reason == "eos" for r in reqs)
    accts = account(tr.runs["paged"], 12 * BLOCK, BLOCK, NUM_CPU)
    assert max(a.cpu_used for a in accts) > 0 and accts[-1].cpu_used == 0
    assert all(a.cpu_used <= a.cpu_blocks == NUM_CPU for a in accts)
    # while a request is parked on the CPU tier, its tokens are counted nowhere in the arena
    outs = [e for e in tr.runs["paged"] if e.kind == "swapped_out"]
    assert all(len(e.block_map) >= 1 for e in outs)


def _slots_holding_kv(events: list[E.Event], bs: int) -> list[int]:
    """Per step, the arena slots that hold K/V, folded apart from paged.engine.core.accounting: per block,
    the most tokens any holder wrote into it (a swapped-in request's come back in order)."""
    tables: dict[str, list[int]] = {}
    filled: dict[str, int] = {}
    parked: dict[str, int] = {}
    out = []
    for ev in events:
        if isinstance(ev, (E.BlockAllocated, E.BlockShared)):
            tables.setdefault(ev.req, []).append(ev.physical)
            filled[ev.req] = filled.get(ev.req, 0) + getattr(ev, "num_tokens", 0)
        elif isinstance(ev, E.BlockCopied):
            tables[ev.req][ev.logical] = ev.dst
        elif isinstance(ev, E.BlockFreed):
            tables[ev.req].remove(ev.physical)
        elif isinstance(ev, E.TokensWritten):
            filled[ev.req] = filled.get(ev.req, 0) + len(ev.slots)
        elif isinstance(ev, E.SwappedOut):
            parked[ev.req] = filled.pop(ev.req, 0)
        elif isinstance(ev, E.SwappedIn):
            filled[ev.req] = parked.pop(ev.req)
        elif isinstance(ev, (E.Preempted, E.Finished)):
            filled.pop(ev.req, None)
        elif isinstance(ev, E.StepEnd):
            held: dict[int, int] = {}
            for r, table in tables.items():
                for i, b in enumerate(table):
                    held[b] = max(held.get(b, 0), min(bs, max(0, filled.get(r, 0) - i * bs)))
            out.append(sum(held.values()))
    return out


FORK_AFTER_SWAP_IN = """
title = "B.1 forks B.0's blocks in the step B.0 comes back from the CPU tier"
[arena]
num_blocks = 5
block_size = 2
max_model_len = 10
[[runs]]
label = "swap"
preemption_mode = "swap"
[[requests]]
id = "A"
prompt_len = 4
max_tokens = 2
ignore_eos = true
[[requests]]
id = "B"
prompt_len = 6
max_tokens = 5
ignore_eos = true
n = 2
"""


def test_blocks_copied_back_from_the_cpu_tier_count_as_holding_tokens(tmp_path):
    # the fold once forgot it: a swapped-in request finished with all its slots counted as
    # never filled, and a block shared right after its swap-in counted its tokens twice
    from paged.engine.trace import scenario
    from paged.engine.trace.recorder import record

    (tmp_path / "fork.toml").write_text(FORK_AFTER_SWAP_IN)
    buf = io.StringIO()
    record(scenario.load(tmp_path / "fork.toml"), None, buf, forward="skip")
    fork = T.loads(buf.getvalue())
    shipped = T.read(ROOT / "paged" / "lessons" / "recompute-or-swap" / "trace.jsonl")
    swapped_in = 0
    for tr in (fork, shipped):
        for run in tr.header["runs"]:
            cfg, events = run["config"], tr.runs[run["name"]]
            bs, cpu = cfg["block_size"], cfg.get("num_cpu_blocks", 0)
            accts = account(events, cfg["num_slots"], bs, cpu, hindsight=False)
            assert [a.token_states for a in accts] == _slots_holding_kv(events, bs)
            swapped_in += sum(isinstance(ev, E.SwappedIn) for ev in events)
    assert swapped_in >= 3
    # and each request finishes with only its last block's tail never filled, swapped or not
    [cfg] = [r["config"] for r in shipped.header["runs"] if r["name"] == "swap"]
    bs = cfg["block_size"]
    tally = Tally(cfg["num_slots"], bs, show_finishing=True)
    for ev in shipped.runs["swap"]:
        tally.apply(ev)
        if isinstance(ev, E.Finished):
            blocks = -(-ev.final_len // bs)
            assert tally.finishing[ev.req] == (ev.final_len, blocks * bs - ev.final_len)
        elif isinstance(ev, E.StepEnd):
            tally.close_step(ev.step)


def test_a_full_cpu_tier_falls_back_to_recompute_and_says_so():
    text, reqs = _dry_run("swap", 1)
    kinds = [e.kind for e in T.loads(text).runs["paged"]]
    assert kinds.count("swap_fallback") > 0
    assert all(r.finish_reason == "eos" for r in reqs)


def test_with_prefix_caching_only_unshared_requests_swap():
    """A request holding a cached (shared) block is preempted by recompute, and says why;
    one whose blocks are its own still swaps. The replay checks both against its ref counts."""
    text, reqs = _dry_run("swap", NUM_CPU, num_blocks=14, prefix=True)
    events = T.loads(text).runs["paged"]  # full replay: ref counts, sharing, both tiers
    fallbacks = [e for e in events if e.kind == "swap_fallback"]
    assert any(e.reason == E.SWAP_FALLBACK_SHARED for e in fallbacks)
    assert any(e.kind == "swapped_out" for e in events)
    assert all(r.finish_reason == "eos" for r in reqs)
    accts = account(events, 14 * BLOCK, BLOCK, NUM_CPU)  # both tallies in one fold
    assert max(a.shared for a in accts) > 0 and max(a.cpu_used for a in accts) > 0
    assert accts[-1].cpu_used == 0
    frames = replay(events, RunHeader("paged", "paged", 14 * BLOCK, BLOCK, num_cpu_blocks=NUM_CPU))
    assert len(frames) == len(accts)  # the viewer folds it too
    _, recompute = _dry_run("recompute", 0, num_blocks=14, prefix=True)
    assert [r.output_token_ids for r in reqs] == [r.output_token_ids for r in recompute]


def test_a_fallback_blaming_sharing_for_a_private_request_is_refused():
    text, _ = _dry_run("swap", 1)

    def blame_sharing(d):
        d["reason"] = E.SWAP_FALLBACK_SHARED

    with pytest.raises(TraceError, match="shares none"):
        T.loads(_tamper(text, "swap_fallback", blame_sharing))


def test_recompute_and_swap_finish_the_same_requests_in_the_same_lengths():
    _, swap = _dry_run("swap", NUM_CPU)
    _, recompute = _dry_run("recompute", 0)
    assert [r.output_token_ids for r in swap] == [r.output_token_ids for r in recompute]
    assert sum(r.num_preemptions for r in recompute) > 0


def _tamper(text: str, kind: str, fn) -> str:
    import json

    lines = text.splitlines()
    for i, line in enumerate(lines):
        obj = json.loads(line)
        if obj.get("kind") == kind:
            fn(obj)
            lines[i] = json.dumps(obj)
            break
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    "kind,fn,msg",
    [
        (
            "swapped_in",
            lambda o: o["block_map"][0].__setitem__(0, 7 - o["block_map"][0][0] % 7),
            "CPU blocks",
        ),
        ("swapped_out", lambda o: o["block_map"][0].__setitem__(1, 999), "not free"),
        ("swapped_out", lambda o: o["block_map"].pop(), "table"),
        ("swapped_in", lambda o: o.__setitem__("block_map", [[1, 2, 3]]), "pairs"),
    ],
)
def test_hostile_swap_events_are_refused_in_one_line(kind, fn, msg):
    text, _ = _dry_run("swap", NUM_CPU)
    with pytest.raises(TraceError, match=msg) as e:
        T.loads(_tamper(text, kind, fn))
    assert "\n" not in str(e.value)


def test_swap_needs_paging_and_a_sane_size():
    with pytest.raises(InvalidConfigError, match="paged"):
        EngineArgs(allocator="max", preemption_mode="swap")
    with pytest.raises(InvalidConfigError, match="preemption mode"):
        EngineArgs(preemption_mode="evict")
    with pytest.raises(InvalidConfigError, match="swap space"):
        EngineArgs(preemption_mode="swap", swap_space_mb=-1)
    with pytest.raises(InvalidConfigError, match="CPU tier cannot hold -1 blocks"):
        EngineArgs(preemption_mode="swap", num_cpu_blocks=-1)
    with pytest.raises(InvalidConfigError, match="CPU blocks apply only to swap preemption"):
        EngineArgs(num_cpu_blocks=4)
    with pytest.raises(InvalidConfigError, match="not both"):
        EngineArgs(preemption_mode="swap", num_cpu_blocks=4, swap_space_mb=1)


# --- the bytes: out and back, bit for bit ------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float8_e4m3fn])
def test_blocks_swapped_out_and_in_come_back_bit_for_bit_in_other_blocks(dtype):
    arena = KVArena(SMOL, 6, BLOCK, dtype=dtype)
    g = torch.Generator().manual_seed(0)
    for t in arena.k + arena.v:
        t.copy_(quantize(torch.randn(t.shape, generator=g), dtype))
    store = CpuKVStore(arena, 4)
    mine = [4, 1, 3]  # a request's table
    before = [
        (k[mine].view(torch.uint8).clone(), v[mine].view(torch.uint8).clone())
        for k, v in zip(arena.k, arena.v, strict=True)
    ]
    store.swap_out([(4, 2), (1, 0), (3, 3)])
    for t in arena.k + arena.v:  # someone else overwrites the arena
        t.view(torch.uint8).fill_(0x55)
    store.swap_in([(2, 5), (0, 0), (3, 2)])  # back into other physical blocks
    for (k0, v0), k, v in zip(before, arena.k, arena.v, strict=True):
        assert torch.equal(k[[5, 0, 2]].view(torch.uint8), k0)
        assert torch.equal(v[[5, 0, 2]].view(torch.uint8), v0)
    assert store.bytes_out == store.bytes_in == 3 * store.block_bytes
    assert store.block_bytes == 2 * SMOL.num_layers * BLOCK * 3 * 64 * arena.k[0].element_size()


def test_the_runner_moves_blocks_before_the_forward():
    from paged.engine.model.runner import ModelRunner
    from tests.model.test_model_exact import tiny_model

    model = tiny_model()
    arena = KVArena(model.config, 8, BLOCK)
    runner = ModelRunner(model, arena, "torch", cpu_tier=CpuKVStore(arena, 4))
    arena.k[0][3].fill_(2.5)
    assert runner.execute(Batch([], BLOCK, swap_out=[(3, 1)])) == []
    arena.k[0][3].zero_()
    runner.execute(Batch([], BLOCK, swap_in=[(1, 6)]))
    assert bool((arena.k[0][6] == 2.5).all())


# --- the real model: swap changes where K/V waits, never what is generated ---------------------


def quarter_of_need(prompts: list[list[int]], new_tokens: int, block_size: int) -> int:
    """A quarter of the blocks the prompts need together at full length (at least the largest
    one's, so every request can still run alone)."""
    need = [-(-(len(p) + new_tokens) // block_size) for p in prompts]
    return max(sum(need) // 4, max(need))


@pytest.mark.model
def test_swap_outputs_match_ample_memory_and_recompute(smollm):
    # test_preemption's workload (16 short prompts, NEW_TOKENS each, a quarter of the memory
    # they need), preempting by swap. Its recompute run is held to the same stored ids there
    # (test_quarter_of_the_needed_kv_memory_preempts_yet_every_output_is_unchanged): running it
    # here too would repeat that check, and cost its steps again on another xdist worker
    from tests.engine.test_preemption import (
        NEW_TOKENS,
        golden_tokens,
        prompt_ids,
        quarter_memory_run,
    )

    ids = prompt_ids(smollm.tokenizer)
    # the ample-memory run's tokens: HF's own greedy ids, stored, made with no memory limit
    ample = golden_tokens(smollm.tokenizer)
    outs, llm, kinds = quarter_memory_run(smollm, "swap")
    assert llm.arena.num_blocks == quarter_of_need(ids, NEW_TOKENS, llm.arena.block_size)
    assert llm.num_preemptions > 0
    assert kinds.count("swapped_out") > 0 and kinds.count("swap_fallback") == 0
    assert llm.runner.cpu_tier.bytes_in == llm.runner.cpu_tier.bytes_out > 0
    assert [o.token_ids for o in outs] == ample


@pytest.mark.parametrize(
    "args, words",
    [
        (["hello", "--allocator", "max", "--preemption-mode", "swap"], ["paged", "recompute only"]),
        (["hello", "--preemption-mode", "swap", "--swap-space-mb", "nan"], ["swap space"]),
        (["hello", "--preemption-mode", "swap", "--swap-space-mb", "-5"], ["swap space"]),
    ],
)
def test_cli_refuses_bad_swap_settings_in_one_line_before_loading(args, words, monkeypatch):
    import paged.engine.llm
    from tests.engine.test_bad_input import assert_one_error_line, run_cli

    def boom(*a, **k):
        raise AssertionError("the model was loaded before the input was checked")

    monkeypatch.setattr(paged.engine.llm, "load_model", boom)
    proc = run_cli(*args)
    assert proc.returncode == 2
    assert_one_error_line(proc.stderr, *words)


def test_llm_refuses_bad_swap_and_dtype_settings_before_loading(monkeypatch):
    import paged.engine.llm
    from paged.engine.llm import LLM

    monkeypatch.setattr(paged.engine.llm, "load_model", lambda *a, **k: pytest.fail("loaded"))
    for kwargs, words in [
        ({"preemption_mode": "swap", "allocator": "pow2"}, "paged"),
        ({"preemption_mode": "later"}, "preemption mode"),
        ({"kv_cache_dtype": "fp4"}, "KV cache dtype"),
        ({"preemption_mode": "swap", "swap_space_mb": True}, "swap space"),
    ]:
        with pytest.raises(InvalidConfigError, match=words):
            LLM("/never/loaded", **kwargs)
