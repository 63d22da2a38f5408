"""FP8 KV blocks: the arena's byte arithmetic (same budget, twice bf16's blocks, matching the
capacity calculator), the engine's float8 paths agreeing with the reference, and a sanity bound
on accuracy (the full measurement is bench/fp8_accuracy.py)."""

from __future__ import annotations

import pytest
import torch

from paged.engine.engine_args import EngineArgs
from paged.engine.errors import InvalidConfigError
from paged.engine.model.arena import MIB, KVArena, blocks_for_budget, bytes_per_block
from paged.engine.model.weights import ModelConfig
from paged.engine.sim.capacity import preset
from paged.kernels.fp8 import quantize, resolve_kv_dtype

SHAPE = preset("smollm2-135m")
SMOL = ModelConfig(
    num_layers=SHAPE.num_layers,
    hidden_size=576,
    num_heads=9,
    num_kv_heads=SHAPE.num_kv_heads,
    head_dim=SHAPE.head_dim,
    vocab_size=49152,
    rms_norm_eps=1e-5,
    max_position_embeddings=8192,
    eos_token_id=2,
)
FP8 = [torch.float8_e4m3fn, torch.float8_e5m2]


@pytest.mark.parametrize("fp8", FP8)
@pytest.mark.parametrize("block_size", [1, 16, 32])
def test_a_float8_block_is_half_a_bf16_block_and_a_quarter_of_fp32(fp8, block_size):
    b8 = bytes_per_block(SMOL, block_size, fp8)
    assert 2 * b8 == bytes_per_block(SMOL, block_size, torch.bfloat16)
    assert 4 * b8 == bytes_per_block(SMOL, block_size, torch.float32)


@pytest.mark.parametrize("fp8", FP8)
@pytest.mark.parametrize("bf16_blocks", [1, 7, 100, 1234])
def test_equal_budget_holds_exactly_twice_the_bf16_blocks(fp8, bf16_blocks):
    # a budget that bf16 fills exactly: fp8 fills it exactly too, with twice the blocks
    budget = bf16_blocks * bytes_per_block(SMOL, 16, torch.bfloat16) / MIB
    n16 = blocks_for_budget(SMOL, 16, torch.bfloat16, budget)
    assert n16 == bf16_blocks
    assert blocks_for_budget(SMOL, 16, fp8, budget) == 2 * n16
    if bf16_blocks % 2 == 0:  # fp32 blocks are two bf16 blocks' bytes
        assert blocks_for_budget(SMOL, 16, fp8, budget) == 4 * blocks_for_budget(
            SMOL, 16, torch.float32, budget
        )


@pytest.mark.parametrize("budget_mb", [1, 3.5, 64, 512])
def test_any_budget_gives_fp8_twice_or_twice_plus_one_the_bf16_blocks(budget_mb):
    # bf16 may leave half a block of bytes unused: fp8 fits one more block there
    n16 = blocks_for_budget(SMOL, 16, torch.bfloat16, budget_mb)
    assert blocks_for_budget(SMOL, 16, torch.float8_e4m3fn, budget_mb) in (2 * n16, 2 * n16 + 1)


@pytest.mark.parametrize(
    "name,dtype",
    [("fp8", torch.float8_e4m3fn), ("bf16", torch.bfloat16), ("float32", torch.float32)],
)
def test_capacity_calculator_figures_equal_what_the_arena_gets(name, dtype):
    shape = preset("smollm2-135m", name)
    for block_size in (1, 16, 64):
        assert shape.bytes_per_block(block_size) == bytes_per_block(SMOL, block_size, dtype)
        budget = 64 * MIB
        assert budget // shape.bytes_per_block(block_size) == blocks_for_budget(
            SMOL, block_size, dtype, 64
        )
    arena = KVArena(SMOL, blocks_for_budget(SMOL, 16, dtype, 1), 16, dtype=dtype)
    assert arena.nbytes == arena.num_blocks * shape.bytes_per_block(16) <= MIB


def test_kv_cache_dtype_names_are_checked_before_a_model_loads():
    assert EngineArgs(kv_cache_dtype="fp8_e5m2").kv_cache_dtype == "fp8_e5m2"
    with pytest.raises(InvalidConfigError, match="KV cache dtype"):
        EngineArgs(kv_cache_dtype="fp4")
    assert resolve_kv_dtype("auto", torch.bfloat16) == torch.bfloat16
    assert resolve_kv_dtype("fp8_e4m3", torch.float32) == torch.float8_e4m3fn


def test_quantize_saturates_instead_of_making_nan():
    x = torch.tensor([1e6, -1e6, 0.3, float("inf")])
    q = quantize(x, torch.float8_e4m3fn, 1.0).float()
    big = torch.finfo(torch.float8_e4m3fn).max
    assert q.tolist()[:2] == [big, -big] and torch.isfinite(q).all()
    assert abs(q[2].item() - 0.3) < 0.3 / 8
    assert x[0].item() == 1e6 and x[3].item() == float("inf"), "the input was clamped in place"


@pytest.mark.parametrize("backend", ["torch", "cpu"])
@pytest.mark.parametrize("fp8", FP8)
def test_torch_backend_matches_reference_on_a_float8_arena(fp8, backend):
    # "cpu" takes the torch way for a float8 arena: its kernel reads float32 only
    from paged.engine.model.attention import Attention
    from paged.kernels.cpu import load
    from tests.model.test_model_exact import attention_case

    if backend == "cpu" and load() is None:
        pytest.skip("no CPU kernels here")
    outs = []
    for name in ("reference", backend):
        (q, k, v), k_cache, v_cache, meta, block = attention_case()
        k_cache, v_cache = quantize(k_cache, fp8, 0.5), quantize(v_cache, fp8, 2.0)
        attn = Attention(name, torch.device("cpu"), 0.25, 0.5, 2.0)
        attn.prepare(meta, block)
        outs.append((attn(q, k, v, k_cache, v_cache, meta), k_cache, v_cache))
    (ref, rk, rv), (got, gk, gv) = outs
    assert torch.equal(gk.view(torch.uint8), rk.view(torch.uint8))
    assert torch.equal(gv.view(torch.uint8), rv.view(torch.uint8))
    torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)


@pytest.mark.model
def test_fp8_arena_agrees_with_full_precision_on_most_tokens(smollm):
    from paged.engine.llm import LLM
    from paged.engine.model.kv_accuracy import measure
    from tests.model.test_model_exact import PROMPTS, golden

    # full precision's greedy tokens on these prompts are HF's, stored (test_model_exact holds
    # the engine to them): the reference need not be generated again
    stored = golden("exact")
    prompts = [smollm.tokenizer.encode(p) for p in PROMPTS[:3]]
    assert stored["prompt_ids"][:3] == prompts, "golden_hf.json is stale: run make_golden.py"
    reference = stored["hf_token_ids"][:3]
    full = LLM(smollm, kv_budget_mb=16, attention="torch", progress=False)
    # the ruler first: full precision agrees with that reference everywhere (4 tokens show it)
    itself = measure(full, full, prompts, 4, reference=reference)
    assert itself.top1_agreement == 1.0 and itself.mean_common_prefix == 4
    fp8 = LLM(smollm, kv_budget_mb=16, attention="torch", kv_cache_dtype="fp8_e4m3", progress=False)
    assert fp8.arena.dtype == torch.float8_e4m3fn
    n = full.arena.num_blocks  # fp32 weights; float8 fits 4x in the same MiB,
    assert 4 * n <= fp8.arena.num_blocks < 4 * (n + 1)  # and maybe some of fp32's leftover
    acc = measure(full, fp8, prompts, 16, reference=reference)
    assert acc.top1_agreement >= 0.9, acc
