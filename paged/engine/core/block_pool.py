"""The pool of physical KV blocks: an LRU free queue, a ref count and a content hash per block.

Prefix caching lives here. A full block may carry the hash of its contents (``cache``); when its
last holder lets it go it joins the free queue *keeping* that hash, so a later request with the
same prefix can take it back (``share``) until the pool has to hand it out as a fresh block: only
then is the hash dropped (lazy eviction, reported through ``on_evict``). Without caching no block
ever carries a hash and the pool is a plain FIFO free list.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field


class NoFreeBlocksError(RuntimeError):
    """``allocate`` was called with an empty free list (callers check ``num_free`` first)."""


@dataclass(eq=False)
class Block:
    block_id: int
    ref_count: int = 0
    #: Hash of the tokens this block holds once full and cached; None while private or filling.
    block_hash: str | None = None
    # free-queue links (None when not queued); the queue owns them
    prev: Block | None = field(default=None, repr=False)
    next: Block | None = field(default=None, repr=False)


class FreeBlockQueue:
    """Free blocks, least recently freed first, as a doubly linked list: ``popleft``, ``append``
    and ``remove`` (a cached block taken back from the middle) are all O(1)."""

    def __init__(self, blocks: list[Block]) -> None:
        self._head = Block(-1)  # sentinels: no edge cases at either end
        self._tail = Block(-1)
        self._head.next, self._tail.prev = self._tail, self._head
        self._len = 0
        for b in blocks:
            self.append(b)

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[Block]:
        b = self._head.next
        while b is not self._tail:
            assert b is not None
            yield b
            b = b.next

    def append(self, block: Block) -> None:
        last = self._tail.prev
        assert last is not None
        block.prev, block.next = last, self._tail
        last.next = self._tail.prev = block
        self._len += 1

    def remove(self, block: Block) -> None:
        if block.prev is None or block.next is None:
            raise ValueError(f"block {block.block_id} is not in the free queue")
        block.prev.next, block.next.prev = block.next, block.prev
        block.prev = block.next = None
        self._len -= 1

    def popleft(self) -> Block:
        first = self._head.next
        if first is self._tail or first is None:
            raise NoFreeBlocksError("no free KV block")
        self.remove(first)
        return first


class BlockPool:
    """Owns every physical block. Promises: a block is in the free queue exactly when its ref
    count is 0; ``allocate`` hands out the least recently freed block (so cached blocks freed
    late survive longest); a block is in the hash map ``cached`` exactly when it carries a
    hash, and no two blocks carry the same one; a block with holders is never handed out."""

    def __init__(
        self, num_blocks: int, on_evict: Callable[[Block, str], None] | None = None
    ) -> None:
        if num_blocks <= 0:
            raise ValueError(f"num_blocks must be positive, got {num_blocks}")
        self.blocks = [Block(i) for i in range(num_blocks)]
        self._free = FreeBlockQueue(self.blocks)
        self.cached: dict[str, Block] = {}
        self.on_evict = on_evict

    @property
    def num_blocks(self) -> int:
        return len(self.blocks)

    @property
    def num_free(self) -> int:
        """Blocks ``allocate`` can hand out: truly free ones plus cached ones nobody holds."""
        return len(self._free)

    def allocate(self) -> Block:
        """Take the least recently freed block; its ref count becomes 1. A cached block is
        evicted first (its hash dropped, ``on_evict`` told). Raises NoFreeBlocksError."""
        block = self._free.popleft()
        if block.block_hash is not None:
            old = block.block_hash
            del self.cached[old]
            block.block_hash = None
            if self.on_evict is not None:
                self.on_evict(block, old)
        block.ref_count = 1
        return block

    def share(self, block: Block) -> None:
        """Another table references ``block``: a running block, or a cached free one taken
        back from the free queue."""
        if block.ref_count == 0:
            if block.block_hash is None:
                raise ValueError(f"block {block.block_id} is free and holds nothing to share")
            self._free.remove(block)
        block.ref_count += 1

    def release(self, block: Block) -> int:
        """Drop one reference; at zero the block joins the free queue's tail, keeping its hash.
        Returns the new count. Raises ValueError on a double free."""
        if block.ref_count <= 0:
            raise ValueError(f"block {block.block_id} freed twice")
        block.ref_count -= 1
        if block.ref_count == 0:
            self._free.append(block)
        return block.ref_count

    def cache(self, block: Block, block_hash: str) -> bool:
        """Make the full, held ``block`` findable by ``block_hash``. False (nothing changes)
        when another block already holds that content or this one is already cached."""
        if block.ref_count <= 0:
            raise ValueError(f"block {block.block_id} is free; only a held block can be cached")
        if block.block_hash is not None or block_hash in self.cached:
            return False
        block.block_hash = block_hash
        self.cached[block_hash] = block
        return True

    def lookup(self, block_hash: str) -> Block | None:
        return self.cached.get(block_hash)
