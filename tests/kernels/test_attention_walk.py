"""The attention lesson's tile walk (``paged.kernels.reference.online_softmax_walk``): the decode
kernel's loop in plain torch, one tile per block. Its last (m, l) is the softmax over all the
scores at once, its output is the reference decode's, and each tile's own (m, l) is what the
Triton decode kernel's split programs report when each split holds one block."""

from __future__ import annotations

import math
import os
import sys

import torch

if "triton" not in sys.modules and not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"  # the only way kernels run here

import pytest

from paged.kernels import reference as ref
from paged.kernels.launch import interpreter_active

BLOCK = 16


def _case(length: int, hkv: int = 3, group: int = 3, d: int = 64, seed: int = 0):
    """One decode token over ``length`` cached tokens in shuffled blocks of a random arena."""
    g = torch.Generator().manual_seed(seed)
    n = -(-length // BLOCK)
    num_blocks = n + 3
    k_cache = torch.randn(num_blocks, BLOCK, hkv, d, generator=g)
    v_cache = torch.randn(num_blocks, BLOCK, hkv, d, generator=g)
    table = torch.randperm(num_blocks, generator=g)[:n].int()
    q = torch.randn(hkv * group, d, generator=g) * 2  # sharper than N(0, 1): a clear max
    return q, k_cache, v_cache, table


def _walk(q, k_cache, v_cache, table, length, kv_head):
    hkv, d = k_cache.shape[2], k_cache.shape[3]
    group = q.shape[0] // hkv
    heads = list(range(kv_head * group, (kv_head + 1) * group))
    scores = ref.decode_scores(q, k_cache, table.long(), length, d**-0.5)
    slots = ref.gather_slots(table[None], torch.arange(length), BLOCK)[0]
    v = v_cache.view(-1, hkv, d)[slots, kv_head]
    return heads, scores, ref.online_softmax_walk(scores[heads], v, BLOCK)


@pytest.mark.parametrize("length", [1, 16, 17, 70])
def test_the_walks_last_m_and_l_are_the_softmax_over_all_scores(length):
    q, k_cache, v_cache, table = _case(length)
    heads, scores, (run_m, run_l, part_m, part_l, out) = _walk(
        q, k_cache, v_cache, table, length, kv_head=1
    )
    s = scores[heads]
    assert run_m.shape == (-(-length // BLOCK), len(heads))
    torch.testing.assert_close(run_m[-1], s.max(dim=1).values)
    torch.testing.assert_close(run_l[-1], torch.exp(s - run_m[-1][:, None]).sum(dim=1))
    # the probabilities the walk implies are softmax's, and its output the reference decode's
    walked = torch.exp(s - run_m[-1][:, None]) / run_l[-1][:, None]
    torch.testing.assert_close(walked, torch.softmax(s, dim=1))
    expected = ref.paged_decode_attention(
        q[None], k_cache, v_cache, table[None], torch.tensor([length]), q.shape[1] ** -0.5
    )[0, heads]
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    # running max never falls; merging the per-tile states gives the walk's own last state
    assert bool((run_m[1:] >= run_m[:-1]).all())
    merged_m, merged_l = ref.merge_partials(part_m, part_l)
    torch.testing.assert_close(merged_m, run_m[-1])
    torch.testing.assert_close(merged_l, run_l[-1])


def test_a_walk_over_scores_it_has_not_seen_yet_differs_from_softmax():
    """The check above can fail: the state after the first tile of a long context is not the
    softmax over all scores."""
    q, k_cache, v_cache, table = _case(70)
    heads, scores, (run_m, run_l, *_) = _walk(q, k_cache, v_cache, table, 70, kv_head=0)
    s = scores[heads]
    full_l = torch.exp(s - s.max(dim=1).values[:, None]).sum(dim=1)
    assert not torch.allclose(run_l[0], full_l)


@pytest.mark.skipif(not interpreter_active(), reason="triton imported without TRITON_INTERPRET")
@pytest.mark.parametrize("length", [17, 70])
def test_each_tiles_own_m_and_l_is_what_the_triton_split_programs_report(length):
    from paged.kernels.paged_attention import decode_attention

    q, k_cache, v_cache, table = _case(length, seed=1)
    n = -(-length // BLOCK)
    splits = 1 << (n - 1).bit_length()  # a power of two >= n: one block per split program
    ml = torch.full((1, q.shape[0], splits, 2), float("nan"))
    d = q.shape[1]
    decode_attention(
        q[None], k_cache, v_cache, table[None], torch.tensor([length], dtype=torch.int32),
        d**-0.5, num_splits=splits, tile_n=BLOCK, ml_out=ml,
    )  # fmt: skip
    for kv_head in range(k_cache.shape[2]):
        heads, _, (_, _, part_m, part_l, _) = _walk(q, k_cache, v_cache, table, length, kv_head)
        triton_m = ml[0, heads, :n, 0].T / math.log2(math.e)  # log2 units -> natural
        torch.testing.assert_close(triton_m, part_m, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(ml[0, heads, :n, 1].T, part_l, atol=1e-5, rtol=1e-5)
