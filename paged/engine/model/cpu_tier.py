"""The CPU tier's memory: per-layer K/V blocks in host RAM, the other end of a swap.

Same block layout and element type as the device arena (``[num_blocks, block_size, Hkv, D]``),
so a block moves as raw bytes: a float8 block is copied as uint8 (CPU torch cannot index float8)
and comes back bit for bit. Pinned (page-locked) when the arena is on a CUDA device, so copies
to and from it can use DMA.
"""

from __future__ import annotations

import torch

from paged.engine.model.arena import KVArena
from paged.kernels.fp8 import bits


class CpuKVStore:
    """``num_blocks`` CPU blocks shaped like ``arena``'s. ``swap_out(pairs)`` copies device
    blocks to CPU blocks, ``swap_in(pairs)`` back; ``bytes_out`` / ``bytes_in`` count what
    moved (K and V, every layer)."""

    def __init__(self, arena: KVArena, num_blocks: int) -> None:
        if num_blocks <= 0:
            raise ValueError(f"a CPU tier needs at least one block, got {num_blocks}")
        self.arena = arena
        s = arena.shape
        dims = (num_blocks, s.block_size, s.num_kv_heads, s.head_dim)
        pin = arena.k[0].device.type == "cuda"
        layers = len(arena.k)
        self.k = [torch.zeros(dims, dtype=arena.dtype, pin_memory=pin) for _ in range(layers)]
        self.v = [torch.zeros(dims, dtype=arena.dtype, pin_memory=pin) for _ in range(layers)]
        self.block_bytes = (
            2 * layers * s.block_size * s.num_kv_heads * s.head_dim * self.k[0].element_size()
        )
        self.bytes_out = self.bytes_in = 0

    @property
    def num_blocks(self) -> int:
        return self.k[0].shape[0]

    def swap_out(self, pairs: list[tuple[int, int]]) -> None:
        """Copy device block ``d`` to CPU block ``c`` for each ``(d, c)``."""
        if not pairs:
            return
        dev = torch.tensor([d for d, _ in pairs], device=self.arena.k[0].device)
        cpu = torch.tensor([c for _, c in pairs])
        for src, dst in zip(self.arena.k + self.arena.v, self.k + self.v, strict=True):
            bits(dst).index_copy_(0, cpu, bits(src).index_select(0, dev).cpu())
        self.bytes_out += len(pairs) * self.block_bytes

    def swap_in(self, pairs: list[tuple[int, int]]) -> None:
        """Copy CPU block ``c`` to device block ``d`` for each ``(c, d)``."""
        if not pairs:
            return
        device = self.arena.k[0].device
        cpu = torch.tensor([c for c, _ in pairs])
        dev = torch.tensor([d for _, d in pairs], device=device)
        for src, dst in zip(self.k + self.v, self.arena.k + self.arena.v, strict=True):
            rows = bits(src).index_select(0, cpu).to(device, non_blocking=True)
            bits(dst).index_copy_(0, dev, rows)
        self.bytes_in += len(pairs) * self.block_bytes
