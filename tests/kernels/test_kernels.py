"""The Triton kernels agree with the torch reference, run on CPU through Triton's interpreter.

The interpreter must be chosen before the first ``import triton`` of the process. On a CPU-only
machine this module chooses it when it is first; otherwise (another module imported Triton first,
or a GPU is present and other tests want compiled kernels) the checks here are skipped in-process
and rerun once in a fresh interpreter process, so they always run exactly once.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import torch

if "triton" not in sys.modules and not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"  # the only way kernels run here; nobody else loses

import pytest

from paged.kernels import reference as ref
from paged.kernels.copy_blocks import copy_blocks
from paged.kernels.fp8 import quantize
from paged.kernels.launch import interpreter_active
from paged.kernels.paged_attention import (
    decode_attention,
    paged_decode_attention,
    paged_prefill_attention,
    pick_splits,
)
from paged.kernels.store_kv import store_kv

ROOT = Path(__file__).resolve().parents[2]
IN_PROCESS = interpreter_active()
interpreted = pytest.mark.skipif(
    not IN_PROCESS,
    reason="triton was imported without "
    "TRITON_INTERPRET; test_kernels_in_fresh_interpreter runs these",
)

BLOCK = 16
LENGTHS = [1, 15, 16, 17, 100]  # one token, a block -1, exactly a block, a block +1, many
# (atol, rtol): fp32 to 1e-4; half precisions to about one rounding of the output
TOL = {torch.float32: (1e-4, 0.0), torch.float16: (2e-3, 2e-3), torch.bfloat16: (1e-2, 1.6e-2)}


def _arena(lens, hkv, d, dtype, seed=0):
    """A KV arena holding each request in physical blocks of shuffled order, and its block table.
    Table entries past a request's last block hold an out-of-range sentinel nobody may read."""
    g = torch.Generator().manual_seed(seed)
    need = [-(-n // BLOCK) for n in lens]
    num_blocks = sum(need) + 2
    k_cache = torch.randn(num_blocks, BLOCK, hkv, d, generator=g).to(dtype)
    v_cache = torch.randn(num_blocks, BLOCK, hkv, d, generator=g).to(dtype)
    physical = torch.randperm(num_blocks, generator=g).int()
    tables = torch.full((len(lens), max(need)), num_blocks + 1000, dtype=torch.int32)
    used = 0
    for b, n in enumerate(need):
        tables[b, :n] = physical[used : used + n]
        used += n
    return k_cache, v_cache, tables, torch.tensor(lens, dtype=torch.int32), g


def _assert_close(out, expected, dtype):
    assert out.dtype == dtype
    atol, rtol = TOL[dtype]
    torch.testing.assert_close(out.float(), expected.float(), atol=atol, rtol=rtol)


def _decode_case(lens, hkv, group, d, dtype=torch.float32, **knobs):
    k_cache, v_cache, tables, ctx, g = _arena(lens, hkv, d, dtype)
    q = torch.randn(len(lens), hkv * group, d, generator=g).to(dtype)
    expected = ref.paged_decode_attention(
        q.float(), k_cache.float(), v_cache.float(), tables, ctx, d**-0.5
    )
    out = decode_attention(q, k_cache, v_cache, tables, ctx, d**-0.5, **knobs)
    _assert_close(out, expected, dtype)


# every group size (1, 3, 8: each masked inside the 16-row tile) and both head sizes; the
# kernel has no branch on the pair, so the cross product adds no path
@interpreted
@pytest.mark.parametrize("group,d", [(1, 128), (3, 64), (8, 128)])
def test_decode_matches_reference_on_mixed_batch_with_shuffled_blocks(group, d):
    _decode_case(LENGTHS, hkv=2, group=group, d=d)


@interpreted
@pytest.mark.parametrize("length", LENGTHS)
def test_decode_matches_reference_at_block_boundaries(length):
    _decode_case([length], hkv=1, group=3, d=64)


@interpreted
@pytest.mark.parametrize("splits,tile_n", [(4, 16), (8, 64)])
def test_decode_split_across_programs_merges_to_the_same_softmax(splits, tile_n):
    # (4, 16): the long request's splits walk several tiles each before they are merged (2 splits
    # walk the same code with more tiles each); (8, 64): most splits hold no token at all and
    # must contribute nothing
    _decode_case(LENGTHS, hkv=2, group=3, d=64, num_splits=splits, tile_n=tile_n)


@interpreted
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_decode_half_precision_accumulates_in_fp32(dtype):
    _decode_case([17, 100], hkv=2, group=3, d=64, dtype=dtype)


def _prefill_case(lens, new, hkv, group, d, dtype=torch.float32):
    k_cache, v_cache, tables, ctx, g = _arena(lens, hkv, d, dtype)
    starts = torch.tensor([0] + new).cumsum(0).int()
    q = torch.randn(int(starts[-1]), hkv * group, d, generator=g).to(dtype)
    expected = ref.paged_prefill_attention(
        q.float(), k_cache.float(), v_cache.float(), tables, starts, ctx, d**-0.5
    )
    out = paged_prefill_attention(q, k_cache, v_cache, tables, starts, ctx, d**-0.5)
    _assert_close(out, expected, dtype)


# fresh prompts (new == context), prefix-cache hits (new < context), a request spanning several
# query tiles, and one with no new tokens at all
PREFILL_LENS = LENGTHS + [20]
PREFILL_NEW = [1, 15, 3, 17, 70, 0]


# every group size (1: MHA; 3: padded to 4 rows per token; 8) and both head sizes; the kernel
# has no branch on the pair, so the cross product (3x the interpreter's time) adds no path
@interpreted
@pytest.mark.parametrize("group,d", [(1, 64), (3, 128), (8, 64)])
def test_prefill_attends_causally_to_cached_blocks_and_itself(group, d):
    _prefill_case(PREFILL_LENS, PREFILL_NEW, hkv=2, group=group, d=d)


@interpreted
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_prefill_half_precision_accumulates_in_fp32(dtype):
    _prefill_case([17, 40], [17, 9], hkv=2, group=3, d=64, dtype=dtype)


@interpreted
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_store_kv_writes_slots_and_skips_minus_one(dtype):
    g = torch.Generator().manual_seed(1)
    hkv, d, t = 3, 64, 12
    k_cache = torch.randn(6, BLOCK, hkv, d, generator=g).to(dtype)
    v_cache = torch.randn(6, BLOCK, hkv, d, generator=g).to(dtype)
    qkv = torch.randn(t, 3 * hkv, d, generator=g)  # k, v as strided views, as a fused
    k, v = qkv[:, hkv : 2 * hkv], qkv[:, 2 * hkv :]  # QKV projection hands them over
    slots = torch.randperm(6 * BLOCK, generator=g)[:t]
    slots[[2, 7]] = -1
    expected_k, expected_v = k_cache.clone(), v_cache.clone()
    ref.store_kv(k, v, expected_k, expected_v, slots)
    store_kv(k, v, k_cache, v_cache, slots)
    # whole arenas equal: the slots written, and every other slot untouched
    assert torch.equal(k_cache, expected_k) and torch.equal(v_cache, expected_v)


FP8 = [torch.float8_e4m3fn, torch.float8_e5m2]
# per-tensor scales away from 1, so a kernel that divides where it should multiply fails
K_SCALE, V_SCALE = 0.5, 2.0
# fp8 vs full precision: about one float8 rounding of V (3 mantissa bits in e4m3, 2 in e5m2),
# plus what K's rounding does to the weights; a scale applied the wrong way is off by 4x
FP8_TOL = {
    torch.float8_e4m3fn: dict(atol=0.1, rtol=0.13),
    torch.float8_e5m2: dict(atol=0.2, rtol=0.26),
}


def _fp8_arena(lens, hkv, d, dtype):
    k32, v32, tables, ctx, g = _arena(lens, hkv, d, torch.float32)
    k8, v8 = quantize(k32, dtype, K_SCALE), quantize(v32, dtype, V_SCALE)
    return k32, v32, k8, v8, tables, ctx, g


@interpreted
@pytest.mark.parametrize("dtype", FP8)
@pytest.mark.parametrize("group", [1, 3, 8])
def test_fp8_decode_dequantizes_like_the_reference(group, dtype):
    k32, v32, k8, v8, tables, ctx, g = _fp8_arena(LENGTHS, 2, 64, dtype)
    q = torch.randn(len(LENGTHS), 2 * group, 64, generator=g)
    expected = ref.paged_decode_attention(q, k8, v8, tables, ctx, 64**-0.5, K_SCALE, V_SCALE)
    out = paged_decode_attention(q, k8, v8, tables, ctx, 64**-0.5, K_SCALE, V_SCALE)
    _assert_close(out, expected, torch.float32)
    # and the dequantized arena is the full-precision one up to float8 rounding
    exact = ref.paged_decode_attention(q, k32, v32, tables, ctx, 64**-0.5)
    torch.testing.assert_close(out, exact, **FP8_TOL[dtype])


# both float8 formats and both group shapes; dequantizing is per element, blind to the group,
# so group 8 (the interpreter's slowest) runs once, with e4m3's tighter tolerance
@interpreted
@pytest.mark.parametrize(
    "group,dtype", [(1, torch.float8_e4m3fn), (1, torch.float8_e5m2), (8, torch.float8_e4m3fn)]
)
def test_fp8_prefill_dequantizes_like_the_reference(group, dtype):
    k32, v32, k8, v8, tables, ctx, g = _fp8_arena(PREFILL_LENS, 2, 64, dtype)
    starts = torch.tensor([0] + PREFILL_NEW).cumsum(0).int()
    q = torch.randn(int(starts[-1]), 2 * group, 64, generator=g)
    args = (tables, starts, ctx, 64**-0.5)
    expected = ref.paged_prefill_attention(q, k8, v8, *args, K_SCALE, V_SCALE)
    out = paged_prefill_attention(q, k8, v8, *args, K_SCALE, V_SCALE)
    _assert_close(out, expected, torch.float32)
    exact = ref.paged_prefill_attention(q, k32, v32, *args)
    torch.testing.assert_close(out, exact, **FP8_TOL[dtype])


@interpreted
@pytest.mark.parametrize("dtype", FP8)
@pytest.mark.parametrize("src", [torch.float32, torch.bfloat16])
def test_fp8_store_kv_quantizes_to_the_same_bits_and_saturates(src, dtype):
    g = torch.Generator().manual_seed(2)
    hkv, d, t = 3, 64, 12
    k_cache = torch.zeros(6, BLOCK, hkv, d, dtype=dtype)
    v_cache = torch.zeros(6, BLOCK, hkv, d, dtype=dtype)
    qkv = (torch.randn(t, 3 * hkv, d, generator=g) * 4).to(src)
    k, v = qkv[:, hkv : 2 * hkv], qkv[:, 2 * hkv :]
    k[0, 0, 0] = 1e5  # far past float8's range: saturates
    slots = torch.randperm(6 * BLOCK, generator=g)[:t]
    slots[3] = -1
    expected_k, expected_v = k_cache.clone(), v_cache.clone()
    ref.store_kv(k, v, expected_k, expected_v, slots, K_SCALE, V_SCALE)
    store_kv(k, v, k_cache, v_cache, slots, K_SCALE, V_SCALE)
    assert torch.equal(k_cache.view(torch.uint8), expected_k.view(torch.uint8))
    assert torch.equal(v_cache.view(torch.uint8), expected_v.view(torch.uint8))
    flat = k_cache.view(-1, hkv, d).float()
    assert flat[slots[0], 0, 0] == torch.finfo(dtype).max  # not NaN, not inf
    assert torch.isfinite(flat).all()
    # stored is V / v_scale: reading it back times the scale is V to float8's precision
    back = v_cache.view(-1, hkv, d)[slots[slots >= 0]].float() * V_SCALE
    want = v[slots >= 0].float()
    assert torch.allclose(back, want, rtol=0.26 if dtype == torch.float8_e5m2 else 0.13, atol=1e-2)


@pytest.mark.parametrize(
    "batch,ctx,splits", [(1, 8192, 32), (1, 300, 1), (8, 2048, 4), (64, 8192, 1)]
)
def test_decode_splits_long_contexts_only_when_the_batch_leaves_the_gpu_idle(batch, ctx, splits):
    # an H200: 132 SMs; 8 KV heads per request
    assert pick_splits(batch * 8, ctx, num_sms=132) == splits


def test_gqa_needs_query_heads_to_be_a_multiple_of_kv_heads():
    k_cache = torch.zeros(2, BLOCK, 2, 64)
    with pytest.raises(ValueError, match="multiple"):
        paged_decode_attention(
            torch.zeros(1, 3, 64),
            k_cache,
            k_cache,
            torch.zeros(1, 1, dtype=torch.int32),
            torch.ones(1, dtype=torch.int32),
            1.0,
        )


def test_signatures_match_the_reference():
    import inspect

    for name, fn in [
        ("paged_decode_attention", paged_decode_attention),
        ("paged_prefill_attention", paged_prefill_attention),
        ("store_kv", store_kv),
        ("copy_blocks", copy_blocks),
    ]:
        assert inspect.signature(fn) == inspect.signature(getattr(ref, name)), name


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, *FP8])
def test_reference_copy_blocks_copies_each_block_whole(dtype):
    """float8 too (copy-on-write over an fp8 arena): CPU torch has no ``index_copy_`` for it,
    so the copy moves bytes; compared as bytes, a copy is exact or wrong."""
    g = torch.Generator().manual_seed(3)
    caches = [torch.randn(6, BLOCK, 3, 8, generator=g).to(dtype) for _ in range(3)]
    before = [c.view(torch.uint8).clone() if dtype in FP8 else c.clone() for c in caches]
    ref.copy_blocks(caches, torch.tensor([[1, 4], [2, 0]]))
    for c, b in zip(caches, before, strict=True):
        c = c.view(torch.uint8) if dtype in FP8 else c
        assert torch.equal(c[4], b[1]) and torch.equal(c[0], b[2])
        assert torch.equal(c[[1, 2, 3, 5]], b[[1, 2, 3, 5]])  # sources and bystanders intact


@interpreted
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, *FP8])
def test_copy_blocks_kernel_matches_reference(dtype):
    g = torch.Generator().manual_seed(4)
    # a block of 16 x 2 x 40 = 1,280 elements spans two of the kernel's chunks
    caches = [torch.randn(7, BLOCK, 2, 40, generator=g).to(dtype) for _ in range(2)]
    expect = [c.clone() for c in caches]
    mapping = torch.tensor([[0, 5], [3, 6], [2, 1]])
    ref.copy_blocks(expect, mapping)
    copy_blocks(caches, mapping)
    for c, e in zip(caches, expect, strict=True):
        assert torch.equal(c.view(torch.uint8), e.view(torch.uint8))


@pytest.mark.skipif(IN_PROCESS, reason="the kernel checks already ran in this process")
def test_kernels_in_fresh_interpreter():
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            str(Path(__file__).relative_to(ROOT)),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    summary = run.stdout.strip().splitlines()[-1]
    assert re.search(r"\b1 skipped", summary), summary  # only this test; the checks all ran
