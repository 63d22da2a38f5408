"""Write new tokens' K/V into the paged arena: the page-table *write* half of the software MMU.

Same contract as ``paged.kernels.reference.store_kv``; layout documented there.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from paged.kernels.fp8 import quantize
from paged.kernels.launch import check_device, next_pow2


@triton.jit
def _store_kv_kernel(
    k_ptr,
    v_ptr,
    k_cache_ptr,
    v_cache_ptr,
    slot_ptr,
    stride_kt,
    stride_kh,
    stride_vt,
    stride_vh,
    stride_kcb,
    stride_kcs,
    stride_kch,
    stride_vcb,
    stride_vcs,
    stride_vch,
    block_size,
    num_heads,
    head_dim,
    H_PAD: tl.constexpr,
    D_PAD: tl.constexpr,
):
    t = tl.program_id(0)
    slot = tl.load(slot_ptr + t).to(tl.int64)
    blk = slot // block_size
    off = slot % block_size
    offs_h = tl.arange(0, H_PAD)
    offs_d = tl.arange(0, D_PAD)
    # a slot of -1 masks the whole token (no heads live): nothing is read, nothing is written
    live_heads = tl.where(slot >= 0, num_heads, 0)
    mask = (offs_h[:, None] < live_heads) & (offs_d[None, :] < head_dim)

    src = t * stride_kt + offs_h[:, None] * stride_kh + offs_d[None, :]
    dst = blk * stride_kcb + off * stride_kcs + offs_h[:, None] * stride_kch + offs_d[None, :]
    k = tl.load(k_ptr + src, mask=mask)
    tl.store(k_cache_ptr + dst, k, mask=mask)

    src = t * stride_vt + offs_h[:, None] * stride_vh + offs_d[None, :]
    dst = blk * stride_vcb + off * stride_vcs + offs_h[:, None] * stride_vch + offs_d[None, :]
    v = tl.load(v_ptr + src, mask=mask)
    tl.store(v_cache_ptr + dst, v, mask=mask)


def _last_dim_contiguous(*tensors: torch.Tensor) -> None:
    for x in tensors:
        if x.stride(-1) != 1:
            raise ValueError(f"kernels need a unit stride on head_dim, got strides {x.stride()}")


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
    a slot of -1 means: skip this token. A float8 arena gets ``K / k_scale``, ``V / v_scale``. One program per token; K/V may be strided views
    (e.g. slices of a fused QKV projection) as long as head_dim is contiguous."""
    t, hkv, d = k.shape
    if t == 0:
        return
    # cast (and quantize to float8) here, not in the kernel: torch rounds to nearest-even,
    # Triton's interpreter truncates, and the arena must hold the same bits on every backend
    # (a no-op when dtypes already agree)
    k, v = quantize(k, k_cache.dtype, k_scale), quantize(v, v_cache.dtype, v_scale)
    _last_dim_contiguous(k, v, k_cache, v_cache)
    check_device(k_cache)
    slot_mapping = slot_mapping.contiguous()
    _store_kv_kernel[(t,)](
        k,
        v,
        k_cache,
        v_cache,
        slot_mapping,
        k.stride(0),
        k.stride(1),
        v.stride(0),
        v.stride(1),
        k_cache.stride(0),
        k_cache.stride(1),
        k_cache.stride(2),
        v_cache.stride(0),
        v_cache.stride(1),
        v_cache.stride(2),
        k_cache.shape[1],
        hkv,
        d,
        H_PAD=next_pow2(hkv),
        D_PAD=next_pow2(d),
    )
