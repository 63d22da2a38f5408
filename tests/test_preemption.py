"""Under memory pressure requests are preempted and recomputed, and nothing changes in the output."""
from __future__ import annotations

import pytest

from engine.arena import bytes_per_block
from engine.llm import LLM
from engine.request import SamplingParams

SUBJECTS = ["the moon", "bread", "rivers", "chess", "volcanoes", "jazz", "bees", "glass",
            "trains", "salt", "owls", "paper", "rain", "clocks", "copper", "tea"]
NEW_TOKENS = 32
BLOCK = 16


@pytest.mark.model
def test_quarter_of_the_needed_kv_memory_preempts_yet_every_output_is_unchanged(smollm):
    tok = smollm.tokenizer
    prompts = [f"Tell me three facts about {s}." for s in SUBJECTS]
    need_blocks = sum(-(-(len(tok.encode(p)) + NEW_TOKENS) // BLOCK) for p in prompts)
    mib = bytes_per_block(smollm.config, BLOCK, smollm.dtype) / 2**20
    params = SamplingParams(max_tokens=NEW_TOKENS, ignore_eos=True)

    ample = LLM(smollm, block_size=BLOCK, kv_budget_mb=2 * need_blocks * mib)
    reference = ample.generate(prompts, params)
    assert ample.num_preemptions == 0

    tight = LLM(smollm, block_size=BLOCK, kv_budget_mb=need_blocks * mib / 4)
    assert tight.arena.num_blocks <= need_blocks // 4
    squeezed = tight.generate(prompts, params)

    assert tight.num_preemptions > 0
    assert sum(o.num_preemptions for o in squeezed) == tight.num_preemptions
    for ref, out in zip(reference, squeezed, strict=True):
        assert out.finish_reason == "length"
        assert out.token_ids == ref.token_ids, out.prompt
