"""The pool of physical KV blocks: a free list plus a ref count (and room for a content hash) per
block, so that shared prefix blocks and copy-on-write can be added without changing callers."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass


class NoFreeBlocksError(RuntimeError):
    """``allocate`` was called with an empty free list (callers check ``num_free`` first)."""


@dataclass
class Block:
    block_id: int
    ref_count: int = 0
    #: Hash of the tokens this block holds once full; None while it is private or being filled.
    block_hash: int | None = None


class BlockPool:
    """Owns every physical block. Promises: a block is in the free list exactly when its ref
    count is 0; ``allocate`` hands out the longest-free block first (FIFO), so freed blocks are
    reused last and a future prefix cache can still hit them."""

    def __init__(self, num_blocks: int) -> None:
        if num_blocks <= 0:
            raise ValueError(f"num_blocks must be positive, got {num_blocks}")
        self.blocks = [Block(i) for i in range(num_blocks)]
        self._free: deque[int] = deque(range(num_blocks))

    @property
    def num_blocks(self) -> int:
        return len(self.blocks)

    @property
    def num_free(self) -> int:
        return len(self._free)

    def allocate(self) -> Block:
        """Take a free block; its ref count becomes 1. Raises NoFreeBlocksError when none is free."""
        if not self._free:
            raise NoFreeBlocksError("no free KV block")
        block = self.blocks[self._free.popleft()]
        block.ref_count = 1
        return block

    def share(self, block: Block) -> None:
        """Another table references ``block`` (prefix sharing)."""
        if block.ref_count <= 0:
            raise ValueError(f"block {block.block_id} is free and cannot be shared")
        block.ref_count += 1

    def release(self, block: Block) -> int:
        """Drop one reference; at zero the block returns to the free list. Returns the new count.
        Raises ValueError on a double free."""
        if block.ref_count <= 0:
            raise ValueError(f"block {block.block_id} freed twice")
        block.ref_count -= 1
        if block.ref_count == 0:
            block.block_hash = None
            self._free.append(block.block_id)
        return block.ref_count

    def free_ids(self) -> list[int]:
        return list(self._free)
