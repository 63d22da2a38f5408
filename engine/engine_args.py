"""The engine's settings, validated in one place before any model loads.

``EngineArgs`` is what ``LLM`` (and through it ``python -m engine generate``) is configured with;
building one checks every field's type and range and raises ``InvalidConfigError`` with one line.
What only the loaded model can judge (``max_model_len`` against its context, the arena's bytes
against the device's memory) is checked by ``check_against_model`` / ``arena.check_fits``.
Pure Python, no torch.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

from engine.core.allocators import ALLOCATORS, check_block_size
from engine.core.swap import PREEMPTION_MODES, check_preemption_mode  # noqa: F401  (re-exported)
from engine.errors import InvalidConfigError

#: Sanity bounds, far above anything a machine here holds; the real limit is the device's memory
#: (``arena.check_fits``), but these refuse typos like ``--num-blocks 10**15`` before a model loads.
MAX_ARENA_SLOTS = 1 << 26
MAX_KV_BUDGET_MB = 1 << 20  # 1 TiB
#: ``--kv-cache-dtype`` choices (kernels/fp8.py maps them to torch dtypes; no torch here)
KV_CACHE_DTYPES = ("auto", "fp8_e4m3", "fp8_e5m2")


def is_int(v: object) -> bool:
    """A real integer: ``True`` and ``2.0`` are not."""
    return type(v) is int


def is_real(v: object) -> bool:
    """A finite int or float (not a bool, not NaN or infinity)."""
    return type(v) in (int, float) and math.isfinite(v)  # type: ignore[arg-type]


@dataclass(frozen=True)
class EngineArgs:
    """How big the KV arena is and how the scheduler batches. Give ``num_blocks`` or
    ``kv_budget_mb`` (MiB), not both; neither means the LLM's default budget."""

    num_blocks: int | None = None
    kv_budget_mb: float | None = None
    block_size: int = 16
    max_model_len: int | None = None  # None: the model's context length
    max_num_seqs: int = 256
    max_num_batched_tokens: int | None = None
    allocator: str = "paged"
    kv_cache_dtype: str = "auto"  # auto: the model's dtype; fp8_*: one byte an element
    preemption_mode: str = "recompute"  # or swap: blocks go to a CPU tier (paged only)
    swap_space_mb: float | None = None  # the CPU tier in MiB; None: as large as the arena
    #: Paging only: a contiguous run is private to its request, so it has nothing to share.
    enable_prefix_caching: bool = False

    def __post_init__(self) -> None:
        check_block_size(self.block_size)
        if self.num_blocks is not None and self.kv_budget_mb is not None:
            raise InvalidConfigError("give either num_blocks or kv_budget_mb, not both")
        if self.num_blocks is not None:
            if not is_int(self.num_blocks) or self.num_blocks <= 0:
                raise InvalidConfigError(
                    f"number of KV blocks must be a positive integer, got {self.num_blocks!r}"
                )
            if self.num_blocks * self.block_size > MAX_ARENA_SLOTS:
                raise InvalidConfigError(
                    f"{self.num_blocks} blocks of {self.block_size} tokens is more than "
                    f"{MAX_ARENA_SLOTS:,} KV slots; no machine here holds that"
                )
        if self.kv_budget_mb is not None and not (
            is_real(self.kv_budget_mb) and 0 < self.kv_budget_mb <= MAX_KV_BUDGET_MB
        ):
            raise InvalidConfigError(
                f"KV budget must be a number of MiB in (0, "
                f"{MAX_KV_BUDGET_MB:,}], got {self.kv_budget_mb!r}"
            )
        if self.max_model_len is not None and (
            not is_int(self.max_model_len) or self.max_model_len < 1
        ):
            raise InvalidConfigError(
                f"max_model_len must be a positive integer, got {self.max_model_len!r}"
            )
        if not is_int(self.max_num_seqs) or self.max_num_seqs < 1:
            raise InvalidConfigError(
                f"max_num_seqs must be at least 1 (no request could ever "
                f"run), got {self.max_num_seqs!r}"
            )
        if self.max_num_batched_tokens is not None and (
            not is_int(self.max_num_batched_tokens) or self.max_num_batched_tokens < 1
        ):
            raise InvalidConfigError(
                f"max_num_batched_tokens must be a positive integer, got "
                f"{self.max_num_batched_tokens!r}"
            )
        if self.allocator not in ALLOCATORS:
            raise InvalidConfigError(
                f"unknown allocator {self.allocator!r}; choose one of {', '.join(ALLOCATORS)}"
            )
        check_preemption_mode(self.preemption_mode, self.allocator)
        if type(self.enable_prefix_caching) is not bool:  # 'no' is truthy
            raise InvalidConfigError(
                f"enable_prefix_caching must be true or false, got {self.enable_prefix_caching!r:.40}"
            )
        if self.enable_prefix_caching and self.allocator != "paged":
            raise InvalidConfigError(
                f"prefix caching needs the paged allocator; a {self.allocator!r} run is private "
                "to its request and shares nothing"
            )
        if self.swap_space_mb is not None and not (
            is_real(self.swap_space_mb) and 0 <= self.swap_space_mb <= MAX_KV_BUDGET_MB
        ):
            raise InvalidConfigError(
                f"swap space must be a number of MiB in [0, "
                f"{MAX_KV_BUDGET_MB:,}], got {self.swap_space_mb!r}"
            )
        if self.swap_space_mb is not None and self.preemption_mode != "swap":
            raise InvalidConfigError(  # a CPU tier nothing would use: the setting was ignored
                "swap space applies only to swap preemption (preemption_mode swap)"
            )
        if self.kv_cache_dtype not in KV_CACHE_DTYPES:
            raise InvalidConfigError(
                f"unknown KV cache dtype {str(self.kv_cache_dtype)[:40]!r}; "
                f"choose one of {', '.join(KV_CACHE_DTYPES)}"
            )

    def model_len(self, context_len: int) -> int:
        """``max_model_len`` resolved against the model's context length; raises when it
        exceeds it."""
        n = context_len if self.max_model_len is None else self.max_model_len
        if not 0 < n <= context_len:
            raise InvalidConfigError(f"max_model_len must be in [1, {context_len}], got {n}")
        return n


def check_output_path(
    path: str | os.PathLike, what: str = "output", inputs: tuple[str | os.PathLike, ...] = ()
) -> Path:
    """A file path the engine may create or overwrite: its folder exists and is writable, it
    is not itself a folder, and it is none of the command's ``inputs`` (a scenario written over
    by its own trace is gone). Checked before a model loads, so a typo costs nothing."""
    p = Path(path)
    try:
        problem = _path_problem(p, str(path) == "")
        if problem is None and any(_same_file(p, Path(i)) for i in inputs):
            problem = "is also this command's input: it would be overwritten"
    except (OSError, ValueError) as e:  # a name too long, an embedded NUL
        problem = f"is not a usable path ({getattr(e, 'strerror', None) or e})"
    if problem:
        raise InvalidConfigError(f"{what} {str(p)[:200]!r} {problem}")
    return p


def _same_file(a: Path, b: Path) -> bool:
    return a.exists() and b.exists() and os.path.samefile(a, b)


def _path_problem(p: Path, empty: bool) -> str | None:
    if empty or p.is_dir():
        return "is a directory, not a file"
    if not p.parent.is_dir():
        return f"cannot be written: folder {str(p.parent)[:200]!r} does not exist"
    if not os.access(p.parent, os.W_OK):
        return f"cannot be written: folder {str(p.parent)[:200]!r} is not writable"
    return None
