"""Sharing must not change a single token: greedy fp32 outputs with and without prefix caching,
and ``n`` seeded samples against separate runs with those seeds, with room to spare and under
memory pressure (preemption of requests that hold shared blocks).

"Without" is HF's own greedy ids, stored by tests/data/make_golden.py (test_model_exact holds
the engine without caching to them); the CLI test below still runs both settings side by side."""

from __future__ import annotations

import pytest

from paged.engine.core.request import SamplingParams
from paged.engine.llm import LLM

SYSTEM = (
    "You are a helpful assistant for an operating systems course. Answer in one short "
    "paragraph, plainly, and say so when you are not sure. "
)
QUESTIONS = [
    "What is a page table?",
    "Why does fragmentation waste memory?",
    "What does a TLB cache?",
    "When is copy-on-write used?",
]
UNRELATED = [
    "The capital of France is",
    "def fibonacci(n):",
    "1, 2, 3, 4,",
    "Once upon a time, in a land far away,",
]
GREEDY = SamplingParams(max_tokens=8, ignore_eos=True)


NEW_TOKENS = 20  # what the golden HF ids hold for the shared-prefix prompts (make_golden.py)
# Under pressure: blocks of 8, so that 8 new tokens already carry every 34-37 token prompt past
# a block boundary (a growing request must then preempt another); more tokens only add steps.
PRESSURE_BLOCK = 8


def shared_prefix_prompts() -> list[str]:
    """The shared-prefix workload: one system prompt, four questions."""
    return [SYSTEM + q for q in QUESTIONS]


def _tokens(model, prompts, caching, num_blocks, params=GREEDY, block_size=16):
    llm = LLM(
        model,
        num_blocks=num_blocks,
        block_size=block_size,
        enable_prefix_caching=caching,
        progress=False,
    )
    out = llm.generate(prompts, params)
    return [o.token_ids for o in out], llm


def _tight(model, prompts, max_tokens, block_size=PRESSURE_BLOCK) -> int:
    """One block more than the longest request needs alone: the others must wait, and a
    request growing past a block boundary preempts another (asserted: each request does)."""
    lens = [len(model.tokenizer.encode(p)) for p in prompts]
    from tests.engine.test_preemption import grows_past_a_block

    assert all(grows_past_a_block(n, max_tokens, block_size) for n in lens), (
        "every request must grow past a block boundary"
    )
    return -(-(max(lens) + max_tokens - 1) // block_size) + 1


def _without_caching(model, case: str, prompts: list[str], n: int) -> list[list[int]]:
    """The tokens without prefix caching: HF's own greedy ids, stored (tests/data/golden_hf.json;
    test_model_exact holds the engine to them with caching off)."""
    from tests.model.test_model_exact import golden

    stored = golden(case)
    ids = [model.tokenizer.encode(p) for p in prompts]
    rows = {tuple(p): t for p, t in zip(stored["prompt_ids"], stored["hf_token_ids"], strict=True)}
    assert all(tuple(p) in rows for p in ids) and stored["new_tokens"] >= n, (
        "golden_hf.json is stale: run tests/data/make_golden.py"
    )
    return [rows[tuple(p)][:n] for p in ids]


@pytest.mark.parametrize("pressure", [False, True])
def test_greedy_tokens_are_the_same_with_prefix_caching(smollm, pressure):
    prompts = shared_prefix_prompts()
    bs = PRESSURE_BLOCK if pressure else 16
    num_blocks = _tight(smollm, prompts, GREEDY.max_tokens) if pressure else 64
    cached, llm = _tokens(smollm, prompts, True, num_blocks, GREEDY, bs)
    assert cached == _without_caching(smollm, "prefix", prompts, GREEDY.max_tokens)
    ids = [llm.tokenizer.encode(p) for p in prompts]
    common = next(i for i, col in enumerate(zip(*ids, strict=False)) if len(set(col)) > 1)
    assert common >= 16  # the system prompt fills at least one block: there is something to hit
    assert llm.prefix_cache_hit_tokens >= 3 * (common // bs * bs)
    if pressure:
        assert llm.num_preemptions > 0


def test_prompts_without_a_shared_prefix_are_unchanged(smollm):
    cached, llm = _tokens(smollm, UNRELATED, True, 64)
    assert cached == _without_caching(smollm, "exact", UNRELATED, GREEDY.max_tokens)
    assert llm.prefix_cache_hit_tokens == 0


# The chat-like answer opens with six template tokens every seed agrees on; twelve leave room
# for the seeds to part (asserted)
SEEDED_TOKENS = 12


def _seeded(seed: int, n: int = 1) -> SamplingParams:
    return SamplingParams(
        max_tokens=SEEDED_TOKENS, temperature=0.9, seed=seed, n=n, ignore_eos=True
    )


@pytest.fixture(scope="module")
def separate_runs(smollm) -> list[list[int]]:
    """The first question as three independent requests seeded 11, 12 and 13, room to spare,
    nothing shared. One batch: a seeded sample does not depend on its batch company
    (test_model_exact.test_seeded_sampling_does_not_depend_on_batch_company)."""
    prompt = SYSTEM + QUESTIONS[0]
    return _tokens(smollm, [prompt] * 3, False, 64, [_seeded(11 + k) for k in range(3)])[0]


@pytest.mark.parametrize("pressure", [False, True])
def test_n_seeded_samples_equal_separate_runs(smollm, separate_runs, pressure):
    prompt = SYSTEM + QUESTIONS[0]
    bs = PRESSURE_BLOCK if pressure else 16
    num_blocks = _tight(smollm, [prompt], SEEDED_TOKENS) if pressure else 64
    together, llm = _tokens(smollm, [prompt], False, num_blocks, _seeded(11, n=3), bs)
    assert together == separate_runs
    assert len(set(map(tuple, separate_runs))) > 1  # the seeds do differ: the test can fail
    if pressure:
        assert llm.num_preemptions > 0
    else:  # each later sample shared all but the last prompt token
        assert llm.prefix_cache_hit_tokens == 2 * (len(llm.tokenizer.encode(prompt)) - 1)


def test_generate_json_reports_prefill_and_cache_hits(smollm, monkeypatch, capsys):
    import json

    import paged.engine.llm
    from paged.engine.cli import main as cli

    monkeypatch.setattr(paged.engine.llm, "load_model", lambda *a, **k: smollm)
    prompts = [SYSTEM + q for q in QUESTIONS[:2]]
    runs = {}
    for flag in ("--enable-prefix-caching", "--no-enable-prefix-caching"):
        assert (
            cli.main(
                [
                    "generate",
                    *prompts,
                    "--max-tokens",
                    "4",
                    "--ignore-eos",
                    "--json",
                    "--num-blocks",
                    "32",
                    flag,
                ]
            )
            == 0
        )
        rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        runs[flag] = rows
        summary = rows[-1]["summary"]
        total = sum(len(r["prompt_token_ids"]) for r in rows[:-1])
        assert summary["prefill_tokens_computed"] + summary["prefix_cache_hit_tokens"] == total
    on, off = runs["--enable-prefix-caching"], runs["--no-enable-prefix-caching"]
    assert on[-1]["summary"]["prefix_cache_hit_tokens"] > 0
    assert off[-1]["summary"]["prefix_cache_hit_tokens"] == 0
    assert [r["token_ids"] for r in on[:-1]] == [r["token_ids"] for r in off[:-1]]
    assert (
        cli.main(
            [
                "generate",
                prompts[0],
                "--max-tokens",
                "3",
                "--json",
                "--n",
                "2",
                "--temperature",
                "0.8",
                "--seed",
                "1",
            ]
        )
        == 0
    )
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["sample_index"] for r in rows[:-1]] == [0, 1]
