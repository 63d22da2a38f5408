"""The torch backend gathers decode K/V into buffers it keeps from layer to layer and step to step
(paged/engine/model/attention_torch.py, ``_Rows``): reuse must never change a result. One backend object runs
a series of decode steps whose batches and contexts grow and shrink; every step must equal the
reference computed from scratch, bit for bit, K/V written included."""

from __future__ import annotations

import torch

from paged.engine.model.attention import Attention, AttentionMetadata

BLOCK, HQ, HKV, D, NUM_BLOCKS = 4, 8, 2, 16, 40


def decode_step(g: torch.Generator, ctx: list[int]):
    """A decode-only step over a shuffled arena: one new token per sequence at ``ctx - 1``."""
    k_cache = torch.randn(NUM_BLOCKS, BLOCK, HKV, D, generator=g)
    v_cache = torch.randn(NUM_BLOCKS, BLOCK, HKV, D, generator=g)
    width = max(-(-c // BLOCK) for c in ctx)
    perm = torch.randperm(NUM_BLOCKS, generator=g)[: len(ctx) * width]
    tables = perm.view(len(ctx), width).int()
    slots = [
        row[(c - 1) // BLOCK] * BLOCK + (c - 1) % BLOCK
        for row, c in zip(tables.tolist(), ctx, strict=True)
    ]
    meta = AttentionMetadata(
        slot_mapping=torch.tensor(slots),
        num_prefill_tokens=0,
        prefill_block_tables=None,
        query_start_loc=None,
        prefill_context_lens=None,
        decode_block_tables=tables,
        decode_context_lens=torch.tensor(ctx, dtype=torch.int32),
    )
    q, k, v = (torch.randn(len(ctx), h, D, generator=g) for h in (HQ, HKV, HKV))
    return (q, k, v), k_cache, v_cache, meta


def run(attn: Attention, case) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    (q, k, v), k_cache, v_cache, meta = case
    k_cache, v_cache = k_cache.clone(), v_cache.clone()
    attn.prepare(meta, BLOCK)
    return attn(q, k, v, k_cache, v_cache, meta), k_cache, v_cache


def test_reused_gather_buffers_match_the_reference_as_batches_grow_and_shrink():
    g = torch.Generator().manual_seed(0)
    kept = Attention("torch", torch.device("cpu"), 0.25)
    steps = [[5, 9], [13, 2, 7, 11], [6, 10], [3], [17, 17, 1], [14, 8]]
    previous = None
    for i, ctx in enumerate(steps):
        case = decode_step(g, ctx)
        ref = run(Attention("reference", torch.device("cpu"), 0.25), case)
        # alternate inference mode: a buffer made inside it cannot be written outside it
        with torch.inference_mode(i % 2 == 1):
            got = run(kept, case)
        for a, b in zip(got, ref, strict=True):
            assert torch.equal(a, b), f"step {i} (contexts {ctx}) differs from the reference"
        if previous is not None:  # a later step must not write into an earlier step's output
            assert torch.equal(previous[0], previous[1])
        previous = (got[0], ref[0].clone())


def test_a_non_finite_slot_no_request_may_read_changes_no_output():
    """Masked positions still gather a slot (the short request's table padding, -1, reads block
    0; its last block's unwritten tail reads whatever its previous owner left). NaN and inf
    there, as a request whose K/V overflowed would leave behind, must not reach any output: a
    masked score is added to, so 0 x NaN would poison the softmax."""
    g = torch.Generator().manual_seed(1)
    ctx = [3, 9]  # block 4: the first request's table is one block, then padding
    case = decode_step(g, ctx)
    (q, k, v), k_cache, v_cache, meta = case
    meta.decode_block_tables = torch.tensor([[5, -1, -1], [7, 2, 9]], dtype=torch.int32)
    meta.slot_mapping = torch.tensor([5 * BLOCK + 2, 9 * BLOCK + 0])  # positions 2 and 8
    readable = torch.zeros(NUM_BLOCKS * BLOCK, dtype=torch.bool)
    for row, c in zip(meta.decode_block_tables.tolist(), ctx, strict=True):
        for p in range(c):
            readable[row[p // BLOCK] * BLOCK + p % BLOCK] = True
    assert not readable[:BLOCK].any(), "block 0 must be the padding's, no request's"
    for name in ("reference", "torch"):
        clean = run(Attention(name, torch.device("cpu"), 0.25), case)[0]
        for poison in (float("nan"), float("inf")):
            dirty_k, dirty_v = k_cache.clone(), v_cache.clone()
            for cache in (dirty_k, dirty_v):
                cache.view(-1, HKV, D)[~readable] = poison
            got = run(
                Attention(name, torch.device("cpu"), 0.25), ((q, k, v), dirty_k, dirty_v, meta)
            )
            assert torch.equal(got[0], clean), (
                f"{name}: a {poison} no request owns changed an output"
            )
