"""The paper's subject in pure Python (no torch): requests, events, the block pool, both allocators,
the scheduler, the step loop and the accounting."""
