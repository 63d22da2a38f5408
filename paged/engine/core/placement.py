"""Where a contiguous allocator puts a run: the hole-finding half of preallocation.

A placement owns the arena's free space and answers three questions: how many slots a run of
``need`` really takes (``footprint``), where it goes (``place``), and how to take it back
(``free``). ``ContiguousAllocator`` keeps the per-request bookkeeping and the events; swapping the
placement changes only which slots a run lands on and how much rounding slack it drags along.

- ``first-fit``: the lowest hole that is large enough; a run takes exactly what it asks for.
- ``buddy`` (engine.core.buddy): power-of-two blocks split and merged in halves, as the vLLM paper's
  Orca baseline places its reservations (Kwon et al., SOSP 2023, §6.1).
"""

from __future__ import annotations

from typing import Protocol

from paged.engine.errors import InvalidConfigError

PLACEMENTS = ("first-fit", "buddy")


class Placement(Protocol):
    """Free space of an arena of ``num_slots`` slots. Callers ``place`` only what fits."""

    name: str
    num_slots: int

    @property
    def free_slots(self) -> int: ...

    @property
    def largest_hole(self) -> int:
        """The largest run ``place`` could hand out now."""

    @property
    def max_run(self) -> int:
        """The largest run the empty arena could hold: longer requests can never be placed."""

    def footprint(self, need: int) -> int:
        """Slots a run of ``need`` slots occupies (``need`` itself, or more after rounding)."""

    def place(self, need: int) -> int | None:
        """Take ``footprint(need)`` slots; their start, or None when no hole is large enough."""

    def free(self, start: int, need: int) -> None:
        """Give back the run of ``need`` slots placed at ``start``."""

    def holes(self) -> list[tuple[int, int]]:
        """Free runs as sorted ``(start, length)`` pairs (for tests and views)."""


class FirstFit:
    """The lowest hole that is large enough; freed runs merge with free neighbours."""

    name = "first-fit"

    def __init__(self, num_slots: int) -> None:
        self.num_slots = num_slots
        self._holes: list[list[int]] = [[0, num_slots]]  # sorted [start, length] free runs

    @property
    def free_slots(self) -> int:
        return sum(length for _, length in self._holes)

    @property
    def largest_hole(self) -> int:
        return max((length for _, length in self._holes), default=0)

    @property
    def max_run(self) -> int:
        return self.num_slots

    def footprint(self, need: int) -> int:
        return need

    def place(self, need: int) -> int | None:
        for i, (start, length) in enumerate(self._holes):
            if length >= need:
                if length == need:
                    del self._holes[i]
                else:
                    self._holes[i] = [start + need, length - need]
                return start
        return None

    def free(self, start: int, need: int) -> None:
        holes = self._holes
        i = next((k for k, h in enumerate(holes) if h[0] > start), len(holes))
        holes.insert(i, [start, need])
        if i + 1 < len(holes) and start + need == holes[i + 1][0]:  # merge with the next hole
            holes[i][1] += holes.pop(i + 1)[1]
        if i > 0 and holes[i - 1][0] + holes[i - 1][1] == start:  # and with the previous
            holes[i - 1][1] += holes.pop(i)[1]

    def holes(self) -> list[tuple[int, int]]:
        return [(s, n) for s, n in self._holes]


def make_placement(name: str, num_slots: int) -> Placement:
    """The placement ``name`` (one of PLACEMENTS) over ``num_slots`` slots."""
    from paged.engine.core.buddy import BuddyPlacement

    if name == "first-fit":
        return FirstFit(num_slots)
    if name == "buddy":
        return BuddyPlacement(num_slots)
    raise InvalidConfigError(f"unknown placement {name!r}; choose one of {', '.join(PLACEMENTS)}")
