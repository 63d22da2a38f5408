"""Paged attention in plain torch: the oracle for the Triton and C kernels, and the torch backend.

Layout shared by every function here (the KV arena of one layer):
    k_cache, v_cache: [num_blocks, block_size, num_kv_heads, head_dim]
A flat slot index is ``physical_block * block_size + offset``. Block tables are int32
``[batch, max_blocks]``; entries past a request's last block are ignored (any value).
Query heads map to KV heads as in GQA: query head h reads KV head h // (Hq // Hkv).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from paged.kernels.fp8 import bits, dequantize, quantize


def store_kv(
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
) -> None:
    """Write new tokens' K/V ``[T, Hkv, D]`` into the arena at ``slot_mapping`` (int64 ``[T]``);
    a slot of -1 means: skip this token. A float8 arena stores ``K / k_scale`` and ``V / v_scale``
    (``paged.kernels.fp8.quantize``); the scales are ignored otherwise."""
    keep = slot_mapping >= 0
    if not bool(keep.all()):
        k, v, slot_mapping = k[keep], v[keep], slot_mapping[keep]
    hkv, d = k_cache.shape[2], k_cache.shape[3]
    bits(k_cache).view(-1, hkv, d).index_copy_(
        0, slot_mapping, bits(quantize(k, k_cache.dtype, k_scale))
    )
    bits(v_cache).view(-1, hkv, d).index_copy_(
        0, slot_mapping, bits(quantize(v, v_cache.dtype, v_scale))
    )


def gather_slots(
    block_tables: torch.Tensor, positions: torch.Tensor, block_size: int
) -> torch.Tensor:
    """Flat slot of each logical position: the block table lookup the MMU would do.
    ``block_tables`` [B, max_blocks], ``positions`` [L] -> slots [B, L] (int64)."""
    logical = (positions // block_size).long()
    physical = block_tables.long().index_select(1, logical).clamp_(min=0)
    return physical * block_size + (positions % block_size).long()


def own_first_slot_past_context(
    slots: torch.Tensor, positions: torch.Tensor, context_lens: torch.Tensor
) -> torch.Tensor:
    """``slots`` [B, L] with every position at or past request b's context length pointed at
    b's own first slot. Those positions are masked out, but a masked score is added to, not
    replaced: a NaN or inf left in whatever slot they would read (another request's block
    under the table's padding, a freed block's stale tail) still makes the softmax NaN. Read
    from the request's own written slot instead, one request's non-finite K/V cannot reach
    another's output."""
    past = positions[None, :] >= context_lens[:, None].to(positions.device)
    return torch.where(past, slots[:, :1], slots)


def _gather_kv(
    k_cache,
    v_cache,
    block_tables,
    length: int,
    out_dtype: torch.dtype,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
    context_lens: torch.Tensor | None = None,
):
    bs, hkv, d = k_cache.shape[1], k_cache.shape[2], k_cache.shape[3]
    pos = torch.arange(length, device=k_cache.device)
    # a shorter request's table past its last block may hold anything; clamp so gathering those
    # (masked-out) positions stays in bounds
    slots = gather_slots(block_tables, pos, bs).clamp_(max=k_cache.shape[0] * bs - 1)  # [B, L]
    if context_lens is not None:
        slots = own_first_slot_past_context(slots, pos, context_lens)
    k = dequantize(k_cache.view(-1, hkv, d)[slots], out_dtype, k_scale)  # [B, L, Hkv, D]
    v = dequantize(v_cache.view(-1, hkv, d)[slots], out_dtype, v_scale)
    return k, v, pos


def paged_decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
) -> torch.Tensor:
    """One new query token per request attends to its first ``context_lens[b]`` cached tokens.
    ``q`` [B, Hq, D] -> out [B, Hq, D]. A float8 arena is dequantized (times ``k_scale`` /
    ``v_scale``) to q's dtype as it is gathered."""
    b, hq, d = q.shape
    hkv = k_cache.shape[2]
    k, v, pos = _gather_kv(
        k_cache,
        v_cache,
        block_tables,
        int(context_lens.max()),
        q.dtype,
        k_scale,
        v_scale,
        context_lens,
    )
    mask = pos[None, :] < context_lens[:, None].to(pos.device)  # [B, L]
    out = F.scaled_dot_product_attention(
        q.unsqueeze(2),
        k.transpose(1, 2),
        v.transpose(1, 2),  # [B, H, 1|L, D]
        attn_mask=mask[:, None, None, :],
        scale=scale,
        enable_gqa=hq != hkv,
    )
    return out.squeeze(2)


def paged_prefill_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    query_start_loc: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
) -> torch.Tensor:
    """Varlen prefill. Request b's new tokens are ``q[query_start_loc[b]:query_start_loc[b+1]]``
    (``[T, Hq, D]`` overall); they are the last tokens of its ``context_lens[b]`` tokens, whose
    K/V (new ones included) are already in the arena. Each attends causally to its cache and
    itself. Returns ``[T, Hq, D]``."""
    hq, hkv = q.shape[1], k_cache.shape[2]
    out = torch.empty_like(q)
    starts = query_start_loc.tolist()
    for b, ctx in enumerate(context_lens.tolist()):
        s, e = starts[b], starts[b + 1]
        n = e - s
        if n == 0:
            continue
        k, v, pos = _gather_kv(
            k_cache, v_cache, block_tables[b : b + 1], ctx, q.dtype, k_scale, v_scale
        )
        qpos = torch.arange(ctx - n, ctx, device=q.device)
        mask = pos[None, :] <= qpos[:, None]  # [n, ctx]
        o = F.scaled_dot_product_attention(
            q[s:e].transpose(0, 1).unsqueeze(0),
            k.transpose(1, 2),
            v.transpose(1, 2),
            attn_mask=None if n == ctx else mask,
            is_causal=n == ctx,
            scale=scale,
            enable_gqa=hq != hkv,
        )
        out[s:e] = o[0].transpose(0, 1)
    return out


def copy_blocks(caches: list[torch.Tensor], block_mapping: torch.Tensor) -> None:
    """Copy-on-write: for each row ``(src, dst)`` of ``block_mapping`` (int64 ``[N, 2]``) copy
    block ``src`` over block ``dst`` in every cache of ``caches`` (each ``[num_blocks, ...]``).
    No ``dst`` may also be a ``src``: every copy reads the blocks as they were before."""
    if block_mapping.numel() == 0:
        return
    src, dst = block_mapping[:, 0], block_mapping[:, 1]
    for cache in caches:
        raw = bits(cache)  # float8 as bytes: CPU torch cannot index_copy_ float8
        raw.index_copy_(0, dst.to(cache.device), raw.index_select(0, src.to(cache.device)))


def decode_scores(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    block_table: torch.Tensor,
    context_len: int,
    scale: float,
    k_scale: float = 1.0,
) -> torch.Tensor:
    """One decode token's scaled scores against its whole context, in fp32: ``q`` [Hq, D],
    ``block_table`` [n_blocks] -> [Hq, context_len]. The keys are gathered through the table
    as ``paged_decode_attention`` gathers them; query head h reads KV head h // (Hq // Hkv)."""
    hq, hkv, d = q.shape[0], k_cache.shape[2], k_cache.shape[3]
    pos = torch.arange(context_len, device=k_cache.device)
    slots = gather_slots(block_table[None], pos, k_cache.shape[1])[0]
    k = dequantize(k_cache.view(-1, hkv, d)[slots], torch.float32, k_scale)  # [L, Hkv, D]
    k = k.repeat_interleave(hq // hkv, dim=1)  # [L, Hq, D]
    return torch.einsum("hd,lhd->hl", q.float(), k) * scale


def online_softmax_walk(
    scores: torch.Tensor, v: torch.Tensor, tile: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The decode kernel's loop, one tile of ``tile`` positions at a time, for a group of
    heads: ``scores`` [G, L] (scaled, fp32), ``v`` [L, D]. Returns the running ``m`` and ``l``
    after each tile ([n_tiles, G] each), each tile's own ``m`` and ``l`` (what a split-K
    program holding only that tile reports, [n_tiles, G] each) and the output ``acc / l``
    [G, D]. Natural-log units (the kernel's exp2 over log2(e)-scaled scores is the same)."""
    g, length = scores.shape
    m = torch.full((g,), -torch.inf, dtype=torch.float32, device=scores.device)
    total = torch.zeros(g, dtype=torch.float32, device=scores.device)
    acc = torch.zeros(g, v.shape[1], dtype=torch.float32, device=scores.device)
    run_m, run_l, part_m, part_l = [], [], [], []
    for t0 in range(0, length, tile):
        s = scores[:, t0 : t0 + tile]
        tile_max = s.max(dim=1).values
        m_new = torch.maximum(m, tile_max)
        alpha = torch.exp(m - m_new)  # rescales what was summed under the old max
        p = torch.exp(s - m_new[:, None])
        total = total * alpha + p.sum(dim=1)
        acc = acc * alpha[:, None] + p @ v[t0 : t0 + tile].float()
        m = m_new
        run_m.append(m)
        run_l.append(total)
        part_m.append(tile_max)
        part_l.append(torch.exp(s - tile_max[:, None]).sum(dim=1))
    return (
        torch.stack(run_m),
        torch.stack(run_l),
        torch.stack(part_m),
        torch.stack(part_l),
        acc / total[:, None],
    )


def merge_partials(part_m: torch.Tensor, part_l: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Flash-decoding's merge of split programs' softmax states ([n_splits, G] each): rescale
    each to the largest max, then add the sums (``_merge_splits_kernel``'s arithmetic)."""
    m = part_m.max(dim=0).values
    return m, (part_l * torch.exp(part_m - m)).sum(dim=0)
