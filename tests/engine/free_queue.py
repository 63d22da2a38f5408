"""What the invariant tests read of a block pool that the engine itself never asks."""

from __future__ import annotations

from paged.engine.core.block_pool import BlockPool


def free_ids(pool: BlockPool) -> list[int]:
    """The ids in ``pool``'s free queue, in queue order, a block twice if it is queued twice."""
    return [b.block_id for b in pool._free]
