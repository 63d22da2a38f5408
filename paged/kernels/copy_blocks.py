"""Copy whole KV blocks inside the arena: the copy half of copy-on-write.

Same contract as ``paged.kernels.reference.copy_blocks``; layout documented in ``paged/kernels/reference.py``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from paged.kernels.fp8 import bits
from paged.kernels.launch import check_device

_CHUNK = 1024  # elements one program moves per loop turn


@triton.jit
def _copy_blocks_kernel(cache_ptr, map_ptr, block_numel, CHUNK: tl.constexpr):
    pair = tl.program_id(0)
    src = tl.load(map_ptr + 2 * pair).to(tl.int64)
    dst = tl.load(map_ptr + 2 * pair + 1).to(tl.int64)
    for start in range(0, block_numel, CHUNK):
        offs = start + tl.arange(0, CHUNK)
        mask = offs < block_numel
        x = tl.load(cache_ptr + src * block_numel + offs, mask=mask)
        tl.store(cache_ptr + dst * block_numel + offs, x, mask=mask)


def copy_blocks(caches: list[torch.Tensor], block_mapping: torch.Tensor) -> None:
    """For each row ``(src, dst)`` of ``block_mapping`` (int64 ``[N, 2]``) copy block ``src``
    over block ``dst`` in every cache (contiguous, ``[num_blocks, ...]``). One program per pair
    per cache; no ``dst`` may also be a ``src``."""
    if block_mapping.numel() == 0:
        return
    mapping = block_mapping.to(torch.int64).contiguous()
    for cache in caches:
        if not cache.is_contiguous():
            raise ValueError("copy_blocks needs contiguous caches")
        check_device(cache)
        mapping = mapping.to(cache.device)
        raw = bits(cache)  # float8 as bytes: the copy is exact whatever the codes mean
        _copy_blocks_kernel[(mapping.shape[0],)](raw, mapping, raw[0].numel(), CHUNK=_CHUNK)
