"""A paged-KV inference engine that shows its allocator at work.

``from engine import LLM, SamplingParams``. The heavy parts (torch, the model) load lazily, so the
pure-Python parts (events, traces, accounting, allocators, scheduler) import without torch.
"""

import os

# Why: a CPU step is hundreds of small ops, each a parallel region of torch's OpenMP threads.
# libgomp's default lets an idle worker spin ~300k iterations (~3 ms) before it sleeps; on a
# shared machine (more runnable threads than cores) the spinner takes the core its partner needs
# and every region waits out a scheduler time slice (a decode-sized matmul at load ~8 on 2 cores:
# 16-18 ms spinning, 0.8 ms passive). Never spinning costs the other way on an idle machine: each
# region then starts with a futex wake-up (bench/prefix.py's cached run, idle: 4.7-4.9 s passive,
# 3.9-4.4 s with a short spin). So workers spin briefly (3000 iterations, tens of microseconds,
# enough to bridge back-to-back ops) and then sleep; OMP_WAIT_POLICY=PASSIVE covers OpenMP
# runtimes that do not read GOMP_SPINCOUNT. libgomp reads these once, when torch loads, so they
# only hold if ``engine`` is imported first; a setting of either by the user wins.
if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    os.environ["GOMP_SPINCOUNT"] = "3000"

from engine.core.request import SamplingParams
from engine.errors import EngineInputError, InvalidConfigError, InvalidRequestError

__all__ = ["LLM", "SamplingParams", "EngineInputError", "InvalidConfigError", "InvalidRequestError"]


def __getattr__(name: str):
    if name == "LLM":
        from engine.llm import LLM

        return LLM
    raise AttributeError(f"module 'engine' has no attribute {name!r}")
