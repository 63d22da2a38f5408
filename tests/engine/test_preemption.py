"""Under memory pressure requests are preempted and recomputed, and nothing changes in the
output; the victim is always the most recently admitted request."""

from __future__ import annotations

from typing import Any

import pytest

from paged.engine.core import events as E
from paged.engine.core.accounting import Tally
from paged.engine.core.engine_core import EngineConfig, build_core
from paged.engine.core.request import Request, SamplingParams
from paged.engine.errors import InvalidConfigError, InvalidRequestError
from paged.engine.sim.simulate import EOS, FILLER, DryRunner
from paged.engine.sim.workload import DEMO_SUBJECTS
from tests.sinks import ListSink

# Every request crosses a block boundary while it grows (prompts of 7-8 tokens, blocks of 8;
# asserted below): at a quarter of the memory that alone preempts several times; more tokens
# only add steps.
NEW_TOKENS = 8
BLOCK = 8
GOLDEN_TOKENS = 16  # what tests/data/golden_hf.json holds per prompt (make_golden.py)


def prompt_ids(tok) -> list[list[int]]:
    return [tok.encode(f"Tell me three facts about {s}.") for s in DEMO_SUBJECTS]


def golden_tokens(tok) -> list[list[int]]:
    """HF's own greedy tokens for the demo prompts, ``NEW_TOKENS`` each, computed without any
    memory limit (stored: tests/data/golden_hf.json)."""
    from tests.model.test_model_exact import golden

    stored = golden("preemption")
    assert stored["prompt_ids"] == prompt_ids(tok) and stored["new_tokens"] >= NEW_TOKENS, (
        "golden_hf.json is stale: run tests/data/make_golden.py"
    )
    return [t[:NEW_TOKENS] for t in stored["hf_token_ids"]]


def grows_past_a_block(prompt_len: int, new_tokens: int, block_size: int) -> bool:
    """Whether a request's last token lands in a block its prompt did not reach (its growth
    needs a block on the way: where memory is short, that is what preempts)."""
    return -(-prompt_len // block_size) < -(-(prompt_len + new_tokens - 1) // block_size)


_RUNS: dict[tuple[int, str], tuple[list, Any, list[str]]] = {}


def quarter_memory_run(model, mode: str = "recompute") -> tuple[list, Any, list[str]]:
    """The demo prompts, greedy, ``NEW_TOKENS`` each, in a quarter of the KV memory they need
    together, preempting by ``mode``: (outputs, the LLM, the kinds of its events). Made once per
    process and mode; test_swap makes its swap run here, on the very same memory."""
    from paged.engine.llm import LLM

    key = (id(model), mode)
    if key not in _RUNS:
        ids = prompt_ids(model.tokenizer)
        assert all(grows_past_a_block(len(p), NEW_TOKENS, BLOCK) for p in ids), (
            "every request must grow past a block boundary"
        )
        need_blocks = sum(-(-(len(p) + NEW_TOKENS) // BLOCK) for p in ids)
        events = ListSink()
        llm = LLM(
            model,
            block_size=BLOCK,
            num_blocks=need_blocks // 4,
            preemption_mode=mode,
            trace=events,
            progress=False,
        )
        outs = llm.generate(ids, SamplingParams(max_tokens=NEW_TOKENS, ignore_eos=True))
        _RUNS[key] = (outs, llm, [e.kind for e in events.events])
    return _RUNS[key]


@pytest.mark.model
def test_quarter_of_the_needed_kv_memory_preempts_yet_every_output_is_unchanged(smollm):
    squeezed, tight, _ = quarter_memory_run(smollm)

    assert tight.num_preemptions > 0
    assert sum(o.num_preemptions for o in squeezed) == tight.num_preemptions
    for hf, out in zip(golden_tokens(smollm.tokenizer), squeezed, strict=True):
        assert out.finish_reason == "length"
        assert out.token_ids == hf  # HF's own greedy tokens, computed without any preemption


def test_the_most_recently_admitted_request_is_preempted_first():
    """Dry run (no model): six requests grow in a small paged arena until memory runs out.
    At every preemption the victim must be the last of the running batch in admission order."""
    tally = Tally(num_slots=12 * 4, block_size=4)
    victims: list[tuple[str, list[str]]] = []

    def watch(ev: E.Event) -> None:
        if isinstance(ev, E.Preempted):
            victims.append((ev.req, list(tally.running)))  # the batch just before this event
        tally.apply(ev)
        if isinstance(ev, E.StepEnd):
            tally.close_step(ev.step)

    bus = E.EventBus()
    bus.subscribe(watch)
    core = build_core(
        EngineConfig("paged", num_blocks=12, block_size=4, max_model_len=64), DryRunner(), EOS, bus
    )
    for i in range(6):
        core.add_request(
            Request(
                f"r{i}",
                [FILLER] * 3,
                SamplingParams(max_tokens=20),
                arrival_step=i,
                forced_output_len=20,
            )
        )
    core.run_to_completion()
    assert len(victims) >= 2
    assert any(len(batch) > 2 for _, batch in victims)  # a choice among several was made
    for victim, batch in victims:
        assert victim == batch[-1], f"preempted {victim}, not the newest of {batch}"


@pytest.mark.parametrize("policy", ["oracle", "pow2"])
def test_a_run_that_outgrows_a_short_final_length_gives_way_itself_once(policy):
    # A's hint says 6 tokens but it writes 13: freeing B's and C's runs cannot lengthen A's, yet
    # they were evicted first, and A came back one slot longer each time (21 preemptions)
    core = build_core(EngineConfig(policy, 64, 1, 64), DryRunner(), EOS)
    preempted: list[str] = []
    runs: dict[str, list[int]] = {}
    core.bus.subscribe(lambda ev: preempted.append(ev.req) if ev.kind == "preempted" else None)
    core.bus.subscribe(
        lambda ev: (
            runs.setdefault(ev.req, []).append(ev.length) if ev.kind == "slots_reserved" else None
        )
    )
    a = Request(
        "A", [0] * 4, SamplingParams(max_tokens=20), forced_output_len=10, known_final_len=6
    )
    others = [
        Request(r, [0] * 4, SamplingParams(max_tokens=20), forced_output_len=20) for r in "BC"
    ]
    for r in (a, *others):
        core.add_request(r)
    core.run_to_completion()
    assert preempted == ["A"]
    assert runs["A"][-1] == 4 + 20 - 1  # back at the max policy's length: it fits to the end
    assert len(a.output_token_ids) == 10 and all(len(r.output_token_ids) == 20 for r in others)


def test_a_token_budget_is_used_as_given():
    """max_num_batched_tokens is not raised to max(max_model_len, 2048), which would make any
    value up to that do nothing. Four 20-token prompts: 45 admits two per step, None all."""

    def first_step_sizes(budget: int | None) -> list[int]:
        config = EngineConfig("paged", 64, 16, 256, max_num_batched_tokens=budget)
        core = build_core(config, DryRunner(), EOS)
        for i in range(4):
            p = SamplingParams(max_tokens=3, ignore_eos=True)
            core.add_request(Request(f"r{i}", [FILLER] * 20, p, forced_output_len=3))
        sizes = []
        while core.has_unfinished():
            before = core.scheduler.running[:]
            core.step()
            sizes.append(
                len(set(r.req_id for r in core.scheduler.running) - {r.req_id for r in before})
            )
        return sizes

    assert first_step_sizes(None)[0] == 4
    assert first_step_sizes(45)[:2] == [2, 2]
    assert first_step_sizes(1)[:4] == [1, 1, 1, 1]  # one prompt a step always runs


@pytest.mark.parametrize("policy", ["oracle", "pow2"])
def test_a_dry_run_oracle_knows_that_a_request_ignoring_eos_runs_to_its_bound(policy):
    """A dry run's output_len is where the stand-in emits EOS; with ignore_eos the request runs
    on to max_tokens. Told output_len, the oracle would reserve 14 slots for A, which writes
    them, is preempted and asks for its 69-slot bound, more than the 64-slot arena: `record`
    would loop forever. The oracle knows 69 and add_request refuses A up front; B (fits)
    finishes at its bound with no preemption."""
    core = build_core(EngineConfig(policy, 4, 16, 128), DryRunner(), EOS)
    big = SamplingParams(max_tokens=60, ignore_eos=True)
    with pytest.raises(InvalidConfigError, match="needs (69|74) KV slots"):
        core.add_request(Request("A", [FILLER] * 10, big, forced_output_len=5))
    b = Request(
        "B", [FILLER] * 10, SamplingParams(max_tokens=30, ignore_eos=True), forced_output_len=5
    )
    assert b.true_final_len == 10 + 30 - 1
    core.add_request(b)
    for _ in range(100):
        if not core.has_unfinished():
            break
        core.step()
    assert not core.has_unfinished() and core.num_preemptions == 0
    assert len(b.output_token_ids) == 30


@pytest.mark.parametrize("placement", ["first-fit", "buddy"])
@pytest.mark.parametrize("policy", ["oracle", "pow2"])
def test_a_run_that_outgrows_its_hint_comes_back_in_at_most_the_whole_arena(policy, placement):
    """A is told 14 slots (a probe run that stopped sooner) but writes 29. Preempted, it must
    not ask for the max policy's 69 slots, more than the 64-slot arena, and wait forever: it
    comes back in the longest run the arena can place, which holds its 29."""
    core = build_core(EngineConfig(policy, 4, 16, 128, placement=placement), DryRunner(), EOS)
    a = Request(
        "A", [0] * 10, SamplingParams(max_tokens=60), forced_output_len=20, known_final_len=14
    )
    core.add_request(a)
    for _ in range(200):
        if not core.has_unfinished():
            break
        core.step()
    assert not core.has_unfinished(), "A never came back"
    assert len(a.output_token_ids) == 20 and core.num_preemptions == 1


@pytest.mark.parametrize("policy", ["oracle", "pow2"])
def test_a_request_that_outgrows_the_whole_arena_is_an_error_not_an_endless_wait(policy):
    """Told 14 slots, A writes 69 (prompt 10, 60 tokens): more than the 64-slot arena holds.
    Preempted past its hint and again once it fills the whole arena, it would wait for a run
    no arena has while the engine steps forever with nothing running: the step that finds it
    so raises one line."""
    core = build_core(EngineConfig(policy, 4, 16, 128), DryRunner(), EOS)
    a = Request(
        "A", [0] * 10, SamplingParams(max_tokens=60), forced_output_len=60, known_final_len=14
    )
    core.add_request(a)
    with pytest.raises(InvalidRequestError, match="request A can never run again: .* 64"):
        for _ in range(500):
            core.step()
    assert core.num_preemptions == 2
