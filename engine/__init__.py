"""A paged-KV inference engine that shows its allocator at work.

``from engine import LLM, SamplingParams``. The heavy parts (torch, the model) load lazily, so the
pure-Python parts (events, traces, accounting, allocators, scheduler) import without torch.
"""

import os

# Why: a CPU step is hundreds of small ops, each a parallel region of torch's OpenMP threads.
# libgomp's default lets an idle worker spin ~300k iterations before it sleeps; on a shared
# machine (more runnable threads than cores) the spinner takes the core its partner needs and
# every region waits out a scheduler time slice. Measured with a decode-sized matmul under load
# ~8 on 2 cores: 16-18 ms spinning, 0.8 ms passive (1 thread: 0.6 ms). libgomp reads this once,
# when torch loads, so it only holds if ``engine`` is imported first; an explicit setting wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from engine.request import EngineInputError, InvalidConfigError, InvalidRequestError, SamplingParams

__all__ = ["LLM", "SamplingParams", "EngineInputError", "InvalidConfigError", "InvalidRequestError"]


def __getattr__(name: str):
    if name == "LLM":
        from engine.llm import LLM

        return LLM
    raise AttributeError(f"module 'engine' has no attribute {name!r}")
