"""A paged-KV inference engine that shows its allocator at work.

``from paged.engine import LLM, SamplingParams``. The heavy parts (torch, the model) load lazily, so the
pure-Python parts (events, traces, accounting, allocators, scheduler) import without torch.
"""

from paged.engine.core.request import SamplingParams
from paged.engine.errors import EngineInputError, InvalidConfigError, InvalidRequestError

__all__ = ["LLM", "SamplingParams", "EngineInputError", "InvalidConfigError", "InvalidRequestError"]


def __getattr__(name: str):
    if name == "LLM":
        from paged.engine.llm import LLM

        return LLM
    raise AttributeError(f"module 'engine' has no attribute {name!r}")
