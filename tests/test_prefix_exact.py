"""Sharing must not change a single token: greedy fp32 outputs with and without prefix caching,
and ``n`` seeded samples against separate runs with those seeds, with room to spare and under
memory pressure (preemption of requests that hold shared blocks)."""

from __future__ import annotations

import pytest

from engine.llm import LLM
from engine.request import SamplingParams

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


def _tokens(model, prompts, caching, num_blocks, params=GREEDY):
    llm = LLM(
        model, num_blocks=num_blocks, block_size=16, enable_prefix_caching=caching, progress=False
    )
    out = llm.generate(prompts, params)
    return [o.token_ids for o in out], llm


def _tight(model, prompts, max_tokens) -> int:
    """One block more than the longest request needs alone: the others must wait, and a
    request growing past a block boundary preempts another."""
    longest = max(len(model.tokenizer.encode(p)) for p in prompts)
    return -(-(longest + max_tokens - 1) // 16) + 1


@pytest.mark.parametrize("pressure", [False, True])
def test_greedy_tokens_are_the_same_with_prefix_caching(smollm, pressure):
    prompts = [SYSTEM + q for q in QUESTIONS]
    params = SamplingParams(max_tokens=20, ignore_eos=True) if pressure else GREEDY
    num_blocks = _tight(smollm, prompts, 20) if pressure else 64
    plain, _ = _tokens(smollm, prompts, False, num_blocks, params)
    cached, llm = _tokens(smollm, prompts, True, num_blocks, params)
    assert cached == plain
    ids = [llm.tokenizer.encode(p) for p in prompts]
    common = next(i for i, col in enumerate(zip(*ids, strict=False)) if len(set(col)) > 1)
    assert common >= 16  # the system prompt fills at least one block: there is something to hit
    assert llm.prefix_cache_hit_tokens >= 3 * (common // 16 * 16)
    if pressure:
        assert llm.num_preemptions > 0


def test_prompts_without_a_shared_prefix_are_unchanged(smollm):
    plain, _ = _tokens(smollm, UNRELATED, False, 64)
    cached, llm = _tokens(smollm, UNRELATED, True, 64)
    assert cached == plain and llm.prefix_cache_hit_tokens == 0


@pytest.mark.parametrize("pressure", [False, True])
def test_n_seeded_samples_equal_separate_runs(smollm, pressure):
    prompt = SYSTEM + QUESTIONS[0]
    num_blocks = _tight(smollm, [prompt], 20) if pressure else 64

    def params(seed, n=1):
        return SamplingParams(max_tokens=20, temperature=0.9, seed=seed, n=n, ignore_eos=True)

    together, llm = _tokens(smollm, [prompt], False, num_blocks, params(11, n=3))
    alone = [_tokens(smollm, [prompt], False, 64, params(11 + k))[0][0] for k in range(3)]
    assert together == alone
    assert len(set(map(tuple, alone))) > 1  # the seeds do differ: the test can fail
    if pressure:
        assert llm.num_preemptions > 0
    else:  # each later sample shared all but the last prompt token
        assert llm.prefix_cache_hit_tokens == 2 * (len(llm.tokenizer.encode(prompt)) - 1)


def test_generate_json_reports_prefill_and_cache_hits(smollm, monkeypatch, capsys):
    import json

    import engine.llm
    from engine import cli

    monkeypatch.setattr(engine.llm, "load_model", lambda *a, **k: smollm)
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
