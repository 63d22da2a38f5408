"""Paged attention in Triton: the page-table *read* half of the software MMU.

Same contracts as ``paged/kernels/reference.py`` (layout documented there). A request's K/V is scattered
over physical blocks; each program walks its request's logical positions tile by tile, looks up
the physical block of every position in the block table (``block_tables[b, pos // block_size]``),
gathers K and V from there, and folds the tile into an online softmax (running max ``m``, running
sum ``l``, running output ``acc``), so no ``[L]``-sized score row or contiguous copy of K/V exists.

Decode packs all query heads sharing one KV head into one program: K/V is read once per group, not
once per query head. Long contexts with few requests are split across programs (flash-decoding) and
the partial softmaxes merged by a second small kernel, so a batch of one still fills the GPU.
"""

from __future__ import annotations

import math
from functools import cache

import torch
import triton
import triton.language as tl

from paged.kernels.fp8 import is_fp8
from paged.kernels.launch import check_device, next_pow2

LOG2E = 1.4426950408889634
# finite "minus infinity": an empty row keeps m finite, so no inf - inf = NaN; constexpr because
# compiled kernels may only read constexpr globals
NEG_BIG = tl.constexpr(-1.0e30)


@triton.jit
def _tile_kv(
    cache_ptr,
    bt_row_ptr,
    pos,
    valid,
    kvh,
    offs_d,
    d_mask,
    stride_blk,
    stride_off,
    stride_head,
    kv_scale,
    BLOCK_SIZE: tl.constexpr,
    FP8: tl.constexpr,
):
    """The MMU lookup: logical positions -> physical block -> [TILE_N, D] slice of one KV head.
    A float8 arena is dequantized here, to fp32 times its per-tensor scale."""
    physical = tl.load(bt_row_ptr + pos // BLOCK_SIZE, mask=valid, other=0).to(tl.int64)
    rows = physical * stride_blk + (pos % BLOCK_SIZE) * stride_off + kvh * stride_head
    x = tl.load(
        cache_ptr + rows[:, None] + offs_d[None, :],
        mask=valid[:, None] & d_mask[None, :],
        other=0.0,
    )
    if FP8:
        x = x.to(tl.float32) * kv_scale
    return x


@triton.jit
def _online_softmax_step(
    q, k, v, visible, m, l, acc, qk_scale, DOT_PRECISION: tl.constexpr, WIDEN: tl.constexpr
):
    """Fold one K/V tile into the running (m, l, acc). Scores are in log2 units: exp2 is
    cheaper than exp, and ``qk_scale`` already holds the log2(e) factor."""
    if WIDEN:  # see _widen_for_interpreter
        q, k, v = q.to(tl.float32), k.to(tl.float32), v.to(tl.float32)
    s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * qk_scale
    s = tl.where(visible, s, float("-inf"))
    m_new = tl.maximum(m, tl.max(s, 1))
    alpha = tl.exp2(m - m_new)  # rescales what was summed under the old max
    p = tl.exp2(s - m_new[:, None])
    l = l * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
    return m_new, l, acc


@triton.jit
def _decode_kernel(
    q_ptr,
    k_cache_ptr,
    v_cache_ptr,
    bt_ptr,
    ctx_ptr,
    out_ptr,
    part_ptr,
    ml_ptr,
    qk_scale,
    chunk,
    k_scale,
    v_scale,
    stride_qb,
    stride_qh,
    stride_kb,
    stride_ks,
    stride_kh,
    stride_vb,
    stride_vs,
    stride_vh,
    stride_bt,
    stride_ob,
    stride_oh,
    GROUP: tl.constexpr,
    GROUP_PAD: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    D_PAD: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    TILE_N: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    WIDEN: tl.constexpr,
    FP8: tl.constexpr,
):
    b = tl.program_id(0)
    kvh = tl.program_id(1)
    split = tl.program_id(2)
    ctx = tl.load(ctx_ptr + b)
    offs_g = tl.arange(0, GROUP_PAD)
    offs_d = tl.arange(0, D_PAD)
    offs_n = tl.arange(0, TILE_N)
    heads = kvh * GROUP + offs_g
    g_mask = offs_g < GROUP
    d_mask = offs_d < HEAD_DIM

    q = tl.load(
        q_ptr + b * stride_qb + heads[:, None] * stride_qh + offs_d[None, :],
        mask=g_mask[:, None] & d_mask[None, :],
        other=0.0,
    )
    m = tl.full([GROUP_PAD], NEG_BIG, tl.float32)
    l = tl.zeros([GROUP_PAD], tl.float32)
    acc = tl.zeros([GROUP_PAD, D_PAD], tl.float32)
    bt_row = bt_ptr + b * stride_bt
    start = split * chunk
    end = tl.minimum(start + chunk, ctx)
    for n0 in range(start, end, TILE_N):
        pos = n0 + offs_n
        valid = pos < end
        k = _tile_kv(
            k_cache_ptr,
            bt_row,
            pos,
            valid,
            kvh,
            offs_d,
            d_mask,
            stride_kb,
            stride_ks,
            stride_kh,
            k_scale,
            BLOCK_SIZE,
            FP8,
        ).to(q.dtype)
        v = _tile_kv(
            v_cache_ptr,
            bt_row,
            pos,
            valid,
            kvh,
            offs_d,
            d_mask,
            stride_vb,
            stride_vs,
            stride_vh,
            v_scale,
            BLOCK_SIZE,
            FP8,
        ).to(q.dtype)
        m, l, acc = _online_softmax_step(
            q, k, v, valid[None, :], m, l, acc, qk_scale, DOT_PRECISION, WIDEN
        )

    if NUM_SPLITS == 1:
        out = acc / tl.where(l > 0, l, 1.0)[:, None]
        tl.store(
            out_ptr + b * stride_ob + heads[:, None] * stride_oh + offs_d[None, :],
            out.to(out_ptr.dtype.element_ty),
            mask=g_mask[:, None] & d_mask[None, :],
        )
    else:
        # partials laid out [B, Hq, NUM_SPLITS, D_PAD] and [B, Hq, NUM_SPLITS, 2], contiguous fp32
        row = (b * tl.num_programs(1) * GROUP + heads) * NUM_SPLITS + split
        tl.store(part_ptr + row[:, None] * D_PAD + offs_d[None, :], acc, mask=g_mask[:, None])
        tl.store(ml_ptr + row * 2, m, mask=g_mask)
        tl.store(ml_ptr + row * 2 + 1, l, mask=g_mask)


@triton.jit
def _merge_splits_kernel(
    part_ptr,
    ml_ptr,
    out_ptr,
    stride_ob,
    stride_oh,
    num_heads,
    HEAD_DIM: tl.constexpr,
    D_PAD: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
):
    """Combine per-split softmaxes: rescale each to the global max, then normalise once."""
    b = tl.program_id(0)
    h = tl.program_id(1)
    offs_s = tl.arange(0, NUM_SPLITS)
    offs_d = tl.arange(0, D_PAD)
    row = (b * num_heads + h) * NUM_SPLITS + offs_s
    m = tl.load(ml_ptr + row * 2)
    l = tl.load(ml_ptr + row * 2 + 1)
    acc = tl.load(part_ptr + row[:, None] * D_PAD + offs_d[None, :])
    w = tl.exp2(m - tl.max(m, 0))
    l_total = tl.sum(l * w, 0)
    out = tl.sum(acc * w[:, None], 0) / tl.where(l_total > 0, l_total, 1.0)
    tl.store(
        out_ptr + b * stride_ob + h * stride_oh + offs_d,
        out.to(out_ptr.dtype.element_ty),
        mask=offs_d < HEAD_DIM,
    )


@triton.jit
def _prefill_kernel(
    q_ptr,
    k_cache_ptr,
    v_cache_ptr,
    bt_ptr,
    qsl_ptr,
    ctx_ptr,
    out_ptr,
    qk_scale,
    k_scale,
    v_scale,
    stride_qt,
    stride_qh,
    stride_kb,
    stride_ks,
    stride_kh,
    stride_vb,
    stride_vs,
    stride_vh,
    stride_bt,
    stride_ot,
    stride_oh,
    GROUP: tl.constexpr,
    GROUP_PAD: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    D_PAD: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    BLOCK_Q: tl.constexpr,
    TILE_N: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    WIDEN: tl.constexpr,
    FP8: tl.constexpr,
):
    # rows are (new token, query head of this KV group) pairs, so one K/V tile serves the group
    tile = tl.program_id(0)
    b = tl.program_id(1)
    kvh = tl.program_id(2)
    q_start = tl.load(qsl_ptr + b)
    n_new = tl.load(qsl_ptr + b + 1) - q_start
    ctx = tl.load(ctx_ptr + b)
    rows = tl.arange(0, BLOCK_Q * GROUP_PAD)
    tok = tile * BLOCK_Q + rows // GROUP_PAD
    head = kvh * GROUP + rows % GROUP_PAD
    rows_valid = (tok < n_new) & (rows % GROUP_PAD < GROUP)
    offs_d = tl.arange(0, D_PAD)
    offs_n = tl.arange(0, TILE_N)
    d_mask = offs_d < HEAD_DIM
    q_pos = ctx - n_new + tok  # new tokens are the last n_new of the context
    q_off = (q_start + tok)[:, None] * stride_qt + head[:, None] * stride_qh + offs_d[None, :]
    o_off = (q_start + tok)[:, None] * stride_ot + head[:, None] * stride_oh + offs_d[None, :]
    io_mask = rows_valid[:, None] & d_mask[None, :]

    q = tl.load(q_ptr + q_off, mask=io_mask, other=0.0)
    m = tl.full([BLOCK_Q * GROUP_PAD], NEG_BIG, tl.float32)
    l = tl.zeros([BLOCK_Q * GROUP_PAD], tl.float32)
    acc = tl.zeros([BLOCK_Q * GROUP_PAD, D_PAD], tl.float32)
    bt_row = bt_ptr + b * stride_bt
    # causal: the tile's last token sees up to its own position; tiles past n_new do nothing
    last = tl.minimum((tile + 1) * BLOCK_Q, n_new)
    hi = tl.where(tile * BLOCK_Q < n_new, ctx - n_new + last, 0)
    for n0 in range(0, hi, TILE_N):
        pos = n0 + offs_n
        valid = pos < hi
        k = _tile_kv(
            k_cache_ptr,
            bt_row,
            pos,
            valid,
            kvh,
            offs_d,
            d_mask,
            stride_kb,
            stride_ks,
            stride_kh,
            k_scale,
            BLOCK_SIZE,
            FP8,
        ).to(q.dtype)
        v = _tile_kv(
            v_cache_ptr,
            bt_row,
            pos,
            valid,
            kvh,
            offs_d,
            d_mask,
            stride_vb,
            stride_vs,
            stride_vh,
            v_scale,
            BLOCK_SIZE,
            FP8,
        ).to(q.dtype)
        visible = valid[None, :] & (pos[None, :] <= q_pos[:, None])
        m, l, acc = _online_softmax_step(
            q, k, v, visible, m, l, acc, qk_scale, DOT_PRECISION, WIDEN
        )

    out = acc / tl.where(l > 0, l, 1.0)[:, None]
    tl.store(out_ptr + o_off, out.to(out_ptr.dtype.element_ty), mask=io_mask)


# ---------------------------------------------------------------- launchers


def _check(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor) -> tuple[int, int]:
    hq, hkv = q.shape[1], k_cache.shape[2]
    if hq % hkv:
        raise ValueError(f"query heads ({hq}) must be a multiple of KV heads ({hkv})")
    for x in (q, k_cache, v_cache):
        if x.stride(-1) != 1:
            raise ValueError(f"kernels need a unit stride on head_dim, got strides {x.stride()}")
    check_device(q)
    return hq, hkv


def _dot_precision(dtype: torch.dtype) -> str | None:
    # fp32 on a GPU would default to tf32 (10-bit mantissa); fp32 callers asked for fp32.
    # None keeps the backend's default, which is what fp16/bf16 operands get anyway.
    return "ieee" if dtype == torch.float32 else None


def _widen_for_interpreter(q: torch.Tensor) -> bool:
    # Triton 3.9's interpreter stores bf16 as uint16 and tl.dot multiplies those raw bits; widening
    # to fp32 there keeps CPU results right. Compiled kernels keep bf16 operands (tensor cores).
    return q.dtype == torch.bfloat16 and q.device.type == "cpu"


@cache
def _num_sms(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def pick_splits(programs: int, max_ctx: int, num_sms: int, min_chunk: int = 256) -> int:
    """Flash-decoding split count: enough programs for ~2 waves over ``num_sms``, but no split
    under ``min_chunk`` tokens (the merge would cost more than it saves). A power of two, which
    bounds the number of compiled variants."""
    want = math.ceil(2 * num_sms / programs)
    splits = max(1, min(want, max_ctx // min_chunk, 64))
    return 1 << (splits.bit_length() - 1)  # round down: respect min_chunk


def decode_attention(
    q,
    k_cache,
    v_cache,
    block_tables,
    context_lens,
    scale,
    num_splits: int | None = None,
    tile_n: int = 64,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
    ml_out: torch.Tensor | None = None,
) -> torch.Tensor:
    """``paged_decode_attention`` with its tuning knobs exposed (tests force the split path).
    ``ml_out`` (fp32 ``[B, Hq, num_splits, 2]``), when the split path runs, receives each
    split's own softmax state (m, l) before the merge, m in log2 units of the scaled scores:
    what the attention lesson's split-K frames are checked against."""
    b, hq, d = q.shape
    _check(q, k_cache, v_cache)
    hkv, block_size = k_cache.shape[2], k_cache.shape[1]
    group = hq // hkv
    out = torch.empty_like(q)
    if b == 0:
        return out
    block_tables, context_lens = block_tables.contiguous(), context_lens.contiguous()
    # the table's width bounds every context: no device->host sync to read context_lens
    max_ctx = block_tables.shape[1] * block_size
    # the interpreter runs programs one after another: on CPU one split is fastest
    splits = num_splits or (
        pick_splits(b * hkv, max_ctx, _num_sms(q.device.index or 0))
        if q.device.type == "cuda"
        else 1
    )
    if splits & (splits - 1):
        raise ValueError(f"num_splits must be a power of two, got {splits}")
    chunk = triton.cdiv(triton.cdiv(max_ctx, splits), tile_n) * tile_n
    d_pad = next_pow2(max(d, 16))
    if splits > 1:
        part = torch.empty(b, hq, splits, d_pad, device=q.device, dtype=torch.float32)
        ml = torch.empty(b, hq, splits, 2, device=q.device, dtype=torch.float32)
        ml = ml_out if ml_out is not None else ml
    else:
        part = ml = out  # unused: the kernel writes out directly
    _decode_kernel[(b, hkv, splits)](
        q,
        k_cache,
        v_cache,
        block_tables,
        context_lens,
        out,
        part,
        ml,
        scale * LOG2E,
        chunk,
        k_scale,
        v_scale,
        q.stride(0),
        q.stride(1),
        k_cache.stride(0),
        k_cache.stride(1),
        k_cache.stride(2),
        v_cache.stride(0),
        v_cache.stride(1),
        v_cache.stride(2),
        block_tables.stride(0),
        out.stride(0),
        out.stride(1),
        GROUP=group,
        GROUP_PAD=max(16, next_pow2(group)),  # tl.dot needs >= 16 rows
        HEAD_DIM=d,
        D_PAD=d_pad,
        BLOCK_SIZE=block_size,
        TILE_N=tile_n,
        NUM_SPLITS=splits,
        DOT_PRECISION=_dot_precision(q.dtype),
        WIDEN=_widen_for_interpreter(q),
        FP8=is_fp8(k_cache.dtype),
    )
    if splits > 1:
        _merge_splits_kernel[(b, hq)](
            part,
            ml,
            out,
            out.stride(0),
            out.stride(1),
            hq,
            HEAD_DIM=d,
            D_PAD=d_pad,
            NUM_SPLITS=splits,
        )
    return out


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
    ``q`` [B, Hq, D] -> out [B, Hq, D] in q's dtype (fp32 accumulation). Raises ValueError when
    Hq is not a multiple of Hkv or head_dim is not the unit-stride dimension. A float8 arena is
    dequantized tile by tile (times ``k_scale`` / ``v_scale``)."""
    return decode_attention(
        q, k_cache, v_cache, block_tables, context_lens, scale, k_scale=k_scale, v_scale=v_scale
    )


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
    itself. Returns ``[T, Hq, D]`` in q's dtype (fp32 accumulation)."""
    t, hq, d = q.shape
    hq, hkv = _check(q, k_cache, v_cache)
    out = torch.empty_like(q)
    b = context_lens.shape[0]
    if t == 0 or b == 0:
        return out
    block_tables, context_lens = block_tables.contiguous(), context_lens.contiguous()
    query_start_loc = query_start_loc.contiguous()
    max_new = int((query_start_loc[1:] - query_start_loc[:-1]).max())
    group = hq // hkv
    group_pad = next_pow2(group)
    # ~64 (token, head) rows per program: big enough to feed tl.dot, small enough for registers
    block_q = min(max(1, 64 // group_pad), next_pow2(max_new))
    block_q = max(block_q, 16 // min(group_pad, 16))  # tl.dot needs >= 16 rows
    _prefill_kernel[(triton.cdiv(max_new, block_q), b, hkv)](
        q,
        k_cache,
        v_cache,
        block_tables,
        query_start_loc,
        context_lens,
        out,
        scale * LOG2E,
        k_scale,
        v_scale,
        q.stride(0),
        q.stride(1),
        k_cache.stride(0),
        k_cache.stride(1),
        k_cache.stride(2),
        v_cache.stride(0),
        v_cache.stride(1),
        v_cache.stride(2),
        block_tables.stride(0),
        out.stride(0),
        out.stride(1),
        GROUP=group,
        GROUP_PAD=group_pad,
        HEAD_DIM=d,
        D_PAD=next_pow2(max(d, 16)),
        BLOCK_SIZE=k_cache.shape[1],
        BLOCK_Q=block_q,
        TILE_N=64,
        DOT_PRECISION=_dot_precision(q.dtype),
        WIDEN=_widen_for_interpreter(q),
        FP8=is_fp8(k_cache.dtype),
    )
    return out
