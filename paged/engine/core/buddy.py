"""Buddy placement: runs live in power-of-two blocks that split in halves and merge back.

The vLLM paper's Orca baseline "uses the buddy allocation algorithm to determine the memory
address to store KV cache" (Kwon et al., SOSP 2023, §6.1). A run of ``need`` slots takes the
smallest free block of ``next_pow2(need)`` slots or more, halving a larger block as often as it
takes; a freed block merges with its buddy (the other half of its parent) while that buddy is
free too. The slots between ``need`` and the block's size are rounding slack: held by nobody's
tokens, usable by nobody else until the block is freed.

An arena whose size is not a power of two is tiled greedily by aligned power-of-two blocks, the
largest first (15,728 = 8,192 + 4,096 + 2,048 + 1,024 + 256 + 64 + 32 + 16); two halves merge only
when their parent lies inside the arena, so no block ever straddles its end.
"""

from __future__ import annotations


def next_pow2(n: int) -> int:
    """The smallest power of two >= ``n`` (1 for n <= 1)."""
    return 1 << max(0, n - 1).bit_length()


class BuddyPlacement:
    """Free lists of aligned power-of-two blocks, one set of start addresses per order.
    Promises: free blocks and placed blocks tile the arena without overlap; no two free buddies
    of the same order both sit in the free lists (they would have merged); ``place`` takes the
    lowest-addressed block of the smallest sufficient order, so placement is deterministic."""

    name = "buddy"

    def __init__(self, num_slots: int) -> None:
        if num_slots <= 0:
            raise ValueError(f"num_slots must be positive, got {num_slots}")
        self.num_slots = num_slots
        self.free_lists: dict[int, set[int]] = {}  # order -> starts of free 2**order blocks
        start = 0
        for order in range(num_slots.bit_length() - 1, -1, -1):
            if num_slots >> order & 1:
                self.free_lists.setdefault(order, set()).add(start)
                start += 1 << order
        self._max_run = 1 << (num_slots.bit_length() - 1)
        self._free = num_slots  # kept as blocks come and go: admission asks at every step
        self._largest: int | None = None  # largest_hole, until the next place or free

    @property
    def free_slots(self) -> int:
        return self._free

    @property
    def largest_hole(self) -> int:
        if self._largest is None:
            self._largest = max(
                (1 << order for order, starts in self.free_lists.items() if starts), default=0
            )
        return self._largest

    @property
    def max_run(self) -> int:
        return self._max_run

    def footprint(self, need: int) -> int:
        return next_pow2(need)

    def place(self, need: int) -> int | None:
        want = self.footprint(need).bit_length() - 1
        order = min((o for o, s in self.free_lists.items() if o >= want and s), default=None)
        if order is None:
            return None
        start = min(self.free_lists[order])
        self.free_lists[order].discard(start)
        self._free -= 1 << want
        self._largest = None
        while order > want:  # keep the lower half, free the upper one
            order -= 1
            self.free_lists.setdefault(order, set()).add(start + (1 << order))
        return start

    def free(self, start: int, need: int) -> None:
        order = self.footprint(need).bit_length() - 1
        self._free += 1 << order
        self._largest = None
        while True:
            size = 1 << order
            buddy = start ^ size
            parent = min(start, buddy)
            starts = self.free_lists.get(order)
            if parent + 2 * size > self.num_slots or not starts or buddy not in starts:
                break
            starts.discard(buddy)
            start, order = parent, order + 1
        self.free_lists.setdefault(order, set()).add(start)

    def holes(self) -> list[tuple[int, int]]:
        return sorted((s, 1 << o) for o, starts in self.free_lists.items() for s in starts)
