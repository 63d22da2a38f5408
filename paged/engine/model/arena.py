"""The KV arena: one K and one V tensor per layer, ``[num_blocks, block_size, Hkv, D]``.

Both allocators manage this same memory. The paged one hands out whole blocks; a contiguous one
sees the arena as ``num_slots`` blocks of one slot each. ``view(block_size)`` gives either picture
without copying: a flat slot index means the same token slot in every view.
"""

from __future__ import annotations

import math
import mmap
import os
from dataclasses import dataclass

import torch

from paged.engine.core.allocators import check_block_size
from paged.engine.engine_args import MIB, blocks_in_budget
from paged.engine.errors import InvalidConfigError
from paged.engine.model.weights import ModelConfig


def bytes_per_block(config: ModelConfig, block_size: int, dtype: torch.dtype) -> int:
    """K and V for ``block_size`` tokens across every layer."""
    elem = torch.empty((), dtype=dtype).element_size()
    return 2 * config.num_layers * block_size * config.num_kv_heads * config.head_dim * elem


def blocks_for_budget(
    config: ModelConfig, block_size: int, dtype: torch.dtype, kv_budget_mb: float
) -> int:
    """How many whole blocks fit in ``kv_budget_mb`` MiB. Raises InvalidConfigError when not
    even one does."""
    check_block_size(block_size)
    return blocks_in_budget(kv_budget_mb, block_size, bytes_per_block(config, block_size, dtype))


def device_memory(device: torch.device | str) -> int | None:
    """Total memory of ``device`` in bytes (physical RAM for the CPU), or None if unknown."""
    device = torch.device(device)
    try:
        if device.type == "cuda":
            return torch.cuda.get_device_properties(device).total_memory
        if device.type == "cpu":
            ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
            return min([ram, *_cgroup_limits()])
    except (OSError, ValueError, RuntimeError, AssertionError):
        return None
    return None


def _cgroup_limits() -> list[int]:
    # In a container the cgroup's limit, not the host's RAM, is what an allocation may use.
    out = []
    for f in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(f, encoding="ascii") as fh:
                text = fh.read().strip()
        except OSError:
            continue
        if text.isdigit():
            out.append(int(text))
    return out


def check_fits(nbytes: int, device: torch.device | str) -> None:
    """Refuse (InvalidConfigError) a KV arena larger than ``device``'s whole memory: allocating
    it would fail or, on an overcommitting OS, get the process killed later."""
    total = device_memory(device)
    if total is not None and nbytes > total:
        raise InvalidConfigError(
            f"a KV arena of {nbytes / MIB:,.0f} MiB does not fit in the {total / MIB:,.0f} MiB "
            f"of {device}; lower --num-blocks or --kv-budget-mb"
        )


@dataclass(frozen=True)
class ArenaShape:
    num_blocks: int
    block_size: int
    num_kv_heads: int
    head_dim: int

    @property
    def num_slots(self) -> int:
        return self.num_blocks * self.block_size


class KVArena:
    """Per-layer K/V storage. Raises InvalidConfigError for a non-positive block size or block
    count. The memory starts zeroed: attention may read (masked) slots never written, and
    masked garbage is only harmless while it is finite (0 * NaN is NaN)."""

    def __init__(
        self,
        config: ModelConfig,
        num_blocks: int,
        block_size: int,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
    ) -> None:
        check_block_size(block_size)
        if num_blocks <= 0:
            raise InvalidConfigError(f"number of KV blocks must be positive, got {num_blocks}")
        self.shape = ArenaShape(num_blocks, block_size, config.num_kv_heads, config.head_dim)
        self.dtype = dtype
        # per-tensor float8 scales (paged/kernels/fp8.py says why per tensor); 1.0 as in vLLM when no
        # calibrated scales are given, and ignored by every other dtype
        self.k_scale, self.v_scale = 1.0, 1.0
        dims = (num_blocks, block_size, config.num_kv_heads, config.head_dim)
        tensors = _zeroed(2 * config.num_layers, dims, torch.device(device), dtype)
        self.k, self.v = tensors[: config.num_layers], tensors[config.num_layers :]
        self._views: dict[int, list[tuple[torch.Tensor, torch.Tensor]]] = {}

    @property
    def num_blocks(self) -> int:
        return self.shape.num_blocks

    @property
    def block_size(self) -> int:
        return self.shape.block_size

    @property
    def num_slots(self) -> int:
        return self.shape.num_slots

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.k + self.v)

    def view(self, block_size: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per layer ``(k, v)`` seen as ``[num_slots // block_size, block_size, Hkv, D]``.
        ``block_size`` must divide ``num_slots``; views are cached (they share storage)."""
        if block_size <= 0 or self.num_slots % block_size:
            raise InvalidConfigError(
                f"cannot view {self.num_slots} slots as blocks of {block_size}"
            )
        views = self._views.get(block_size)
        if views is None:
            s = self.shape
            dims = (s.num_slots // block_size, block_size, s.num_kv_heads, s.head_dim)
            views = [(k.view(dims), v.view(dims)) for k, v in zip(self.k, self.v, strict=True)]
            self._views[block_size] = views
        return views

    def copy_blocks(self, pairs: list[tuple[int, int]]) -> None:
        """Copy-on-write: block ``src`` over block ``dst`` in every layer's K and V, for each
        pair. The Triton kernel on CUDA, its torch reference elsewhere."""
        if not pairs:
            return
        caches = self.k + self.v
        mapping = torch.tensor(pairs, dtype=torch.int64, device=caches[0].device)
        if caches[0].device.type == "cuda":
            from paged.kernels.copy_blocks import copy_blocks
        else:
            from paged.kernels.reference import copy_blocks
        copy_blocks(caches, mapping)


def _zeroed(
    count: int, dims: tuple[int, ...], device: torch.device, dtype: torch.dtype
) -> list[torch.Tensor]:
    """``count`` zeroed tensors of ``dims``. On CPU they share one anonymous memory map, whose
    pages the OS hands out already zeroed, and only when first written: ``torch.zeros`` would
    write every byte up front (~0.4 s for the CLI's default 512 MiB arena on this 2-core CPU,
    most of which a short run never touches)."""
    if device.type != "cpu":
        return [torch.zeros(dims, device=device, dtype=dtype) for _ in range(count)]
    elem = torch.empty((), dtype=dtype).element_size()
    size = elem * math.prod(dims)
    # the tensors hold the map (torch.frombuffer keeps its buffer alive); unmapped when they go
    flat = torch.frombuffer(mmap.mmap(-1, count * size), dtype=torch.uint8)
    return [flat[i * size : (i + 1) * size].view(dtype).view(dims) for i in range(count)]
