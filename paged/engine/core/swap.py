"""A CPU tier under the device arena: preemption by swapping blocks out instead of recomputing.

Paging makes this a per-block affair: a preempted request's blocks are copied one by one to free
CPU blocks, its device blocks go back to the pool, and when it is admitted again its CPU blocks
are copied into whatever device blocks are free then. Its block table is rewritten; its tokens
are not recomputed. Only the paged allocator swaps: a contiguous run would need one hole as large
as the whole request to come back to, which is the very thing preemption could not find, so the
contiguous allocators preempt by recompute only.

This module is the bookkeeping (pure Python, no torch). The scheduler asks for the moves; the
bytes are moved by ``paged.engine.model.cpu_tier.CpuKVStore`` at the start of the step's ``execute``, before
the forward can overwrite a block just given up (``Batch.swap_out`` / ``Batch.swap_in``).
"""

from __future__ import annotations

from paged.engine.core import events as E
from paged.engine.core.allocators import AdmitRefusal, PagedAllocator, cdiv
from paged.engine.core.block_pool import Block, BlockPool
from paged.engine.core.request import Request
from paged.engine.errors import InvalidConfigError

PREEMPTION_MODES = ("recompute", "swap")


def check_preemption_mode(mode: str, allocator: str) -> str:
    """``mode`` if valid for ``allocator``, else InvalidConfigError (swap needs paging)."""
    if mode not in PREEMPTION_MODES:
        raise InvalidConfigError(
            f"unknown preemption mode {str(mode)[:40]!r}; choose recompute or swap"
        )
    if mode == "swap" and allocator != "paged":
        raise InvalidConfigError(
            f"swap preemption needs the paged allocator; {allocator!r} preempts by recompute only"
        )
    return mode


class SwappingPagedAllocator(PagedAllocator):
    """Paging plus a pool of ``num_cpu_blocks`` CPU blocks.

    ``swap_out(req_id)`` moves a running request's blocks to the CPU tier (or returns None,
    having said so in a ``swap_fallback`` event, when the tier lacks room); ``admit`` of a
    swapped request brings them back into free device blocks. ``take_swaps`` hands the scheduler
    this step's ``(device, cpu)`` and ``(cpu, device)`` copies, in the order they must run.
    Promise: every block, device or CPU, is in exactly one place - a free list or one table."""

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        bus: E.EventBus,
        num_cpu_blocks: int,
        enable_prefix_caching: bool = False,
    ) -> None:
        super().__init__(num_blocks, block_size, bus, enable_prefix_caching)
        self.cpu_pool = BlockPool(num_cpu_blocks) if num_cpu_blocks > 0 else None
        self.cpu_tables: dict[str, list[Block]] = {}
        self._out: list[tuple[int, int]] = []
        self._in: list[tuple[int, int]] = []

    @property
    def num_cpu_blocks(self) -> int:
        return self.cpu_pool.num_blocks if self.cpu_pool is not None else 0

    @property
    def free_cpu_blocks(self) -> int:
        return self.cpu_pool.num_free if self.cpu_pool is not None else 0

    def swap_out(self, req_id: str) -> list[tuple[int, int]] | None:
        table = self.tables[req_id]
        # A block others hold too (a cached prefix, a parallel sample's prompt) stays where its
        # other holders read it: such a request is preempted by recompute, never swapped.
        shared = any(b.ref_count > 1 for b in table)
        if shared or len(table) > self.free_cpu_blocks or self.cpu_pool is None:
            self.bus.emit(
                E.SwapFallback,
                req=req_id,
                need_blocks=len(table),
                free_cpu_blocks=self.free_cpu_blocks,
                reason=E.SWAP_FALLBACK_SHARED if shared else E.SWAP_FALLBACK_CPU_FULL,
            )
            return None
        cpu = [self.cpu_pool.allocate() for _ in table]
        pairs = [(d.block_id, c.block_id) for d, c in zip(table, cpu, strict=True)]
        self.bus.emit(E.SwappedOut, req=req_id, block_map=tuple(pairs))
        self.release(req_id)  # device blocks back to the pool (block_freed events)
        self.cpu_tables[req_id] = cpu
        self._out += pairs
        return pairs

    def check_admit(self, req: Request, num_tokens: int) -> AdmitRefusal | None:
        if req.req_id not in self.cpu_tables:
            return super().check_admit(req, num_tokens)
        need = cdiv(num_tokens, self.block_size)  # a swap-in takes no cached blocks
        if need <= self.pool.num_free:
            return None
        return AdmitRefusal(
            E.BLOCKED_NO_FREE_BLOCK, need * self.block_size, self.free_slots, self.largest_hole
        )

    def admit(self, req: Request, num_tokens: int) -> int:
        """As ``PagedAllocator.admit``; a swapped-out request gets fresh device blocks for its
        CPU ones and returns ``req.num_computed``: every token it had is back, none cached."""
        cpu = self.cpu_tables.pop(req.req_id, None)
        if cpu is None:
            return super().admit(req, num_tokens)
        assert self.cpu_pool is not None
        if cdiv(num_tokens, self.block_size) > self.pool.num_free:
            raise RuntimeError("admit() called without a successful check_admit()")
        self.tables[req.req_id] = []
        self.hashes[req.req_id] = []  # its new blocks are hashed (and cached) again on commit
        self.grow(req, len(cpu) * self.block_size)  # any free device blocks will do
        pairs = [
            (c.block_id, d.block_id) for c, d in zip(cpu, self.tables[req.req_id], strict=True)
        ]
        self.bus.emit(E.SwappedIn, req=req.req_id, block_map=tuple(pairs))
        for c in cpu:
            self.cpu_pool.release(c)
        self._in += pairs
        self.grow(req, num_tokens)  # room for the token it feeds now
        return req.num_computed

    def take_swaps(self) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        """This step's copies: ``(device, cpu)`` out, then ``(cpu, device)`` in. A step swaps
        one way only (the scheduler admits nobody in a step that preempted), so no CPU block
        is both written and read in one step."""
        out, self._out, inn, self._in = self._out, [], self._in, []
        return out, inn
