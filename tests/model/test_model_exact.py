"""Our forward over the paged arena must reproduce HF token for token (greedy, fp32, CPU).

HF's greedy tokens are stored in tests/data/golden_hf.json (tests/data/make_golden.py writes
them); one prompt is still checked against a live HF ``generate``."""

from __future__ import annotations

import json
import random
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

from paged.engine.core.request import Batch, Request, SamplingParams, ScheduledSeq
from paged.engine.llm import LLM
from paged.engine.model.arena import KVArena
from paged.engine.model.loader import LoadedModel, extract_weights
from paged.engine.model.runner import ModelRunner
from paged.kernels import cpu

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time, in a land far away,",
    "1, 2, 3, 4,",
    "Translate to French: The cat sits on the mat.",
    "Q: What is the boiling point of water at sea level?\nA:",
    "Die Hauptstadt von Deutschland ist",
    "import numpy as np\n\nx = np.",
    "The",
    "<html>\n<head>\n<title>",
    "PagedAttention stores the key-value cache of each request in fixed-size blocks that need "
    "not be contiguous in memory, much like virtual memory pages in an operating system. This "
    "removes most of the fragmentation that contiguous preallocation causes, so that",
]
CHAT_PROMPT = "Write a haiku about the sea."
NEW_TOKENS = 48
GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden_hf.json"


def golden(case: str) -> dict:
    """HF's stored greedy tokens for ``case``; a missing file is a failure, not a skip."""
    return json.loads(GOLDEN.read_text(encoding="utf-8"))[case]


def all_prompt_ids(tok) -> list[list[int]]:
    """PROMPTS tokenized, then CHAT_PROMPT through the chat template."""
    ids = [tok.encode(p) for p in PROMPTS]
    chat = [{"role": "user", "content": CHAT_PROMPT}]
    ids.append(
        list(
            tok.apply_chat_template(
                chat, add_generation_prompt=True, tokenize=True, return_dict=False
            )
        )
    )
    return ids


@contextmanager
def eos_ignored(hf):
    # HF generate falls back to the model's own eos_token_id even when told None
    saved = hf.generation_config.eos_token_id
    hf.generation_config.eos_token_id = None
    try:
        yield
    finally:
        hf.generation_config.eos_token_id = saved


def hf_greedy(hf, ids: list[int], n: int) -> list[int]:
    x = torch.tensor([ids])
    with eos_ignored(hf), torch.inference_mode():
        out = hf.generate(
            x,
            attention_mask=torch.ones_like(x),
            max_new_tokens=n,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=0,
        )
    return out[0, len(ids) :].tolist()


@pytest.fixture(scope="module")
def prompt_ids(smollm):
    return all_prompt_ids(smollm.tokenizer)


@pytest.fixture(scope="module")
def paged_outputs(smollm, prompt_ids):
    llm = LLM(smollm, block_size=16, kv_budget_mb=64)
    return llm.generate(prompt_ids, SamplingParams(max_tokens=NEW_TOKENS, ignore_eos=True))


@pytest.mark.model
def test_greedy_paged_batch_matches_hf_generate_per_prompt(smollm, prompt_ids, paged_outputs):
    stored = golden("exact")
    assert stored["prompt_ids"] == prompt_ids, "golden_hf.json is stale: run make_golden.py"
    assert stored["new_tokens"] == NEW_TOKENS
    assert any(len(ids) > 32 for ids in prompt_ids), "some prompt must span several blocks"
    for ids, out, hf in zip(prompt_ids, paged_outputs, stored["hf_token_ids"], strict=True):
        assert out.prompt_token_ids == ids
        assert out.token_ids == hf, smollm.tokenizer.decode(ids)


@pytest.mark.model
def test_every_steps_backend_here_gives_hfs_greedy_tokens(smollm, prompt_ids, paged_outputs):
    """The default run takes the C steps where cpu.c builds; the torch steps, which run on a
    GPU, on another dtype or without a compiler, are held to the same tokens here too."""
    default = LLM(smollm, block_size=16, kv_budget_mb=64).runner.forward.steps.name
    assert default == ("cpu" if cpu.load() is not None else "torch")
    llm = LLM(smollm, block_size=16, kv_budget_mb=64, attention="torch")
    assert llm.runner.forward.steps.name == "torch"
    outs = llm.generate(prompt_ids, SamplingParams(max_tokens=NEW_TOKENS, ignore_eos=True))
    for ids, out, hf in zip(prompt_ids, outs, golden("exact")["hf_token_ids"], strict=True):
        assert out.token_ids == hf, smollm.tokenizer.decode(ids)


@pytest.mark.model
def test_live_hf_generate_still_gives_the_stored_tokens(smollm_hf, prompt_ids, paged_outputs):
    """The one live HF call: the longest prompt (several blocks), so the stored ids stay honest
    for this transformers version."""
    i = max(range(len(prompt_ids)), key=lambda k: len(prompt_ids[k]))
    live = hf_greedy(smollm_hf.hf_model, prompt_ids[i], NEW_TOKENS)
    assert live == golden("exact")["hf_token_ids"][i]
    assert paged_outputs[i].token_ids == live


@pytest.mark.model
def test_contiguous_allocator_view_gives_the_same_tokens_as_paging(
    smollm, prompt_ids, paged_outputs
):
    llm = LLM(smollm, block_size=16, kv_budget_mb=64, allocator="max", max_model_len=128)
    outs = llm.generate(prompt_ids[:4], SamplingParams(max_tokens=16, ignore_eos=True))
    for paged, contiguous in zip(paged_outputs[:4], outs, strict=True):
        assert contiguous.token_ids == paged.token_ids[:16]


SAMPLED = 8  # tokens per sampled request: each step draws once per request; more only repeat it


@pytest.mark.model
def test_seeded_sampling_does_not_depend_on_batch_company(smollm, prompt_ids):
    llm = LLM(smollm, kv_budget_mb=32)
    p = SamplingParams(max_tokens=SAMPLED, temperature=0.9, top_p=0.95, seed=7)
    alone = llm.generate([PROMPTS[2]], p)[0].token_ids
    others = [SamplingParams(max_tokens=SAMPLED, temperature=1.0, seed=s) for s in (1, 2)]
    # a nucleus too small to hold more than the top token samples greedily: HF's stored ids
    # (in the crowd too: its company changes nothing, as the first request shows)
    one = SamplingParams(max_tokens=SAMPLED, temperature=1.5, top_p=1e-6, seed=3, ignore_eos=True)
    crowd = llm.generate(
        [PROMPTS[0], PROMPTS[2], PROMPTS[1], PROMPTS[2]], [others[0], p, others[1], one]
    )
    assert crowd[1].token_ids == alone
    stored = golden("exact")
    assert stored["prompt_ids"][2] == prompt_ids[2]
    greedy = stored["hf_token_ids"][2][:SAMPLED]
    assert alone != greedy  # seed 7 at temperature 0.9 leaves the greedy path: sampling happened
    assert crowd[3].token_ids == greedy


def tiny_model(seed: int = 0) -> LoadedModel:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=8,
        num_key_value_heads=2,
        max_position_embeddings=128,
        rope_theta=1000.0,
        initializer_range=0.3,
        tie_word_embeddings=True,
    )
    hf = LlamaForCausalLM(cfg).eval()
    return LoadedModel("tiny", extract_weights(hf), None, torch.device("cpu"), torch.float32, hf)


def test_mixed_prefill_decode_batch_on_shuffled_blocks_matches_hf_argmax():
    model = tiny_model()
    rng = random.Random(0)
    block = 4
    arena = KVArena(model.config, 32, block)
    runner = ModelRunner(model, arena, "torch")
    physical = list(range(32))
    rng.shuffle(physical)  # no request owns neighbouring blocks
    tables = {r: physical[8 * i : 8 * i + 8] for i, r in enumerate("abc")}
    seqs = {
        r: [rng.randrange(512) for _ in range(n)] for r, n in zip("abc", (13, 5, 7), strict=True)
    }

    def sched(r: str, start: int) -> ScheduledSeq:
        pos = list(range(start, len(seqs[r])))
        slots = [tables[r][p // block] * block + p % block for p in pos]
        req = Request(r, seqs[r], SamplingParams())
        return ScheduledSeq(req, seqs[r][start:], pos, slots, tables[r], len(seqs[r]))

    def expected(r: str) -> int:
        with torch.inference_mode():
            return int(model.hf_model(torch.tensor([seqs[r]])).logits[0, -1].argmax())

    first = runner.execute(Batch([sched("a", 0), sched("b", 0)], block))
    assert first == [expected("a"), expected("b")]
    for r in "ab":
        seqs[r].append(rng.randrange(512))
    # decode, prefill and decode interleaved in one step, as the scheduler may hand them over
    second = runner.execute(Batch([sched("a", 13), sched("c", 0), sched("b", 5)], block))
    assert second == [expected("a"), expected("c"), expected("b")]


def attention_case(seed: int = 0):
    """A mixed step on a shuffled arena: two prefills (one fresh, one after 6 cached tokens)
    and three decodes with context lengths that are not multiples of the block size."""
    from paged.engine.model.attention import AttentionMetadata

    g = torch.Generator().manual_seed(seed)
    block, hq, hkv, d = 4, 8, 2, 16
    k_cache = torch.randn(24, block, hkv, d, generator=g)
    v_cache = torch.randn(24, block, hkv, d, generator=g)
    tables = torch.randperm(24, generator=g).view(6, 4).int()
    new = [5, 3, 1, 1, 1]  # tokens fed this step per sequence
    ctx = [5, 9, 7, 13, 2]
    slots = []
    for row, n, c in zip(tables.tolist()[: len(new)], new, ctx, strict=True):  # row 6: unused
        slots += [row[p // block] * block + p % block for p in range(c - n, c)]
    t = sum(new)
    meta = AttentionMetadata(
        slot_mapping=torch.tensor(slots),
        num_prefill_tokens=8,
        prefill_block_tables=tables[:2],
        query_start_loc=torch.tensor([0, 5, 8], dtype=torch.int32),
        prefill_context_lens=torch.tensor(ctx[:2], dtype=torch.int32),
        decode_block_tables=tables[2:5],
        decode_context_lens=torch.tensor(ctx[2:], dtype=torch.int32),
    )
    qkv = [torch.randn(t, h, d, generator=g) for h in (hq, hkv, hkv)]
    return qkv, k_cache, v_cache, meta, block


def test_planned_torch_attention_is_bit_identical_to_the_reference():
    from paged.engine.model.attention import Attention

    outs = []
    for backend in ("reference", "torch"):
        (q, k, v), k_cache, v_cache, meta, block = attention_case()
        attn = Attention(backend, torch.device("cpu"), 0.25)
        attn.prepare(meta, block)
        outs.append((attn(q, k, v, k_cache, v_cache, meta), k_cache, v_cache))
    (ref, rk, rv), (got, gk, gv) = outs
    assert torch.equal(got, ref)
    assert torch.equal(gk, rk) and torch.equal(gv, rv)


@pytest.mark.parametrize("row_positions", [None, 0])
def test_cpu_attention_matches_the_reference_on_a_mixed_step_and_a_prefill_only_step(
    row_positions, monkeypatch
):
    # by default every prefill, fresh or behind cached tokens, goes through the kernel one
    # query row per token; with no row budget both fall back to SDPA
    import dataclasses

    from paged.engine.model.attention import Attention
    from paged.engine.model.attention_torch import CpuAttention
    from paged.kernels.cpu import load

    if load() is None:
        pytest.skip("no CPU kernels here")
    if row_positions is not None:
        monkeypatch.setattr(CpuAttention, "MAX_ROW_POSITIONS", row_positions)
    for prefill_only in (False, True):
        outs = []
        for backend in ("reference", "cpu"):
            (q, k, v), k_cache, v_cache, meta, block = attention_case()
            if prefill_only:  # the two prefills alone: one fresh, one behind 6 cached tokens
                n = meta.num_prefill_tokens
                q, k, v = q[:n], k[:n], v[:n]
                meta = dataclasses.replace(
                    meta,
                    slot_mapping=meta.slot_mapping[:n],
                    decode_block_tables=None,
                    decode_context_lens=None,
                )
            attn = Attention(backend, torch.device("cpu"), 0.25)
            attn.prepare(meta, block)
            outs.append((attn(q, k, v, k_cache, v_cache, meta), k_cache, v_cache))
        (ref, rk, rv), (got, gk, gv) = outs
        torch.testing.assert_close(got, ref, rtol=1e-5, atol=2e-6)
        assert torch.equal(gk, rk) and torch.equal(gv, rv)


TRITON_CHECK = """
import sys, torch
sys.path.insert(0, "tests/model")
from test_model_exact import attention_case
from paged.engine.model.attention import Attention
outs = []
for backend in ("reference", "triton"):
    (q, k, v), k_cache, v_cache, meta, block = attention_case()
    attn = Attention(backend, torch.device("cpu"), 0.25)
    attn.prepare(meta, block)
    outs.append(attn(q, k, v, k_cache, v_cache, meta))
print((outs[0] - outs[1]).abs().max().item())
"""


def test_triton_backend_is_wired_to_the_kernels_with_the_reference_signatures():
    # The interpreter must be chosen before triton is first imported: use a fresh process.
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", TRITON_CHECK],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert float(proc.stdout.strip().splitlines()[-1]) < 1e-4
