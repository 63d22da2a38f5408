"""The engine's settings: its CLI flags, their validation, and the one way to an ``EngineConfig``.

``EngineArgs`` is what ``LLM`` and the commands are configured with (vLLM's ``EngineArgs``):
``add_cli_args`` gives a command the engine's flags (``CLI_FLAGS``), ``from_cli_args`` reads them
back, building one checks every field's type and range once (InvalidConfigError, one line), and
``create_engine_config`` is the only producer of the ``EngineConfig`` an engine core is built
from. What only the loaded model can tell (its context length, the bytes of one KV block) comes
into ``create_engine_config`` as numbers; the arena's bytes against the device's memory are
checked where the arena is built (``paged.engine.model.runner.build_runner``). Pure Python, no torch.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from paged.engine.core.allocators import ALLOCATORS, check_allocator, check_block_size
from paged.engine.core.engine_core import EngineConfig
from paged.engine.core.placement import PLACEMENTS
from paged.engine.core.swap import PREEMPTION_MODES, check_preemption_mode
from paged.engine.errors import InvalidConfigError

MIB = 1 << 20
#: Sanity bounds, far above anything a machine here holds; the real limit is the device's memory
#: (``arena.check_fits``), but these refuse typos like ``--num-blocks 10**15`` before a model loads.
MAX_ARENA_SLOTS = 1 << 26
MAX_KV_BUDGET_MB = 1 << 20  # 1 TiB
#: Arena size when neither num_blocks nor kv_budget_mb is given: for SmolLM2 in fp32 about 11k
#: token slots, room for one request of the full 8192-token context.
DEFAULT_KV_BUDGET_MB = 512
#: ``--kv-cache-dtype`` choices (paged/kernels/fp8.py maps them to torch dtypes; no torch here)
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
    ``kv_budget_mb`` (MiB), not both; neither means ``DEFAULT_KV_BUDGET_MB``."""

    num_blocks: int | None = None
    kv_budget_mb: float | None = None
    block_size: int = 16
    max_model_len: int | None = None  # None: the model's context length
    max_num_seqs: int = 256
    max_num_batched_tokens: int | None = None
    allocator: str = "paged"
    placement: str = "first-fit"  # where a contiguous run goes: first-fit or buddy
    kv_cache_dtype: str = "auto"  # auto: the model's dtype; fp8_*: one byte an element
    preemption_mode: str = "recompute"  # or swap: blocks go to a CPU tier (paged only)
    swap_space_mb: float | None = None  # the CPU tier in MiB; None: as large as the arena
    #: The CPU tier in blocks, for callers that count in blocks (a scenario's ``cpu_blocks``);
    #: give it or ``swap_space_mb``, not both.
    num_cpu_blocks: int | None = None
    #: Paging only: a contiguous run is private to its request, so it has nothing to share.
    enable_prefix_caching: bool = False

    def __post_init__(self) -> None:
        self._check_arena()
        self._check_scheduler()
        self._check_policy()
        self._check_swap_space()
        if self.kv_cache_dtype not in KV_CACHE_DTYPES:
            raise InvalidConfigError(
                f"unknown KV cache dtype {str(self.kv_cache_dtype)[:40]!r}; "
                f"choose one of {', '.join(KV_CACHE_DTYPES)}"
            )
        if self.placement not in PLACEMENTS:
            raise InvalidConfigError(
                f"unknown placement {self.placement!r:.40}; choose one of {', '.join(PLACEMENTS)}"
            )
        self._check_cpu_blocks()

    def _check_arena(self) -> None:
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

    def _check_scheduler(self) -> None:
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

    def _check_policy(self) -> None:
        check_allocator(self.allocator)
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

    def _check_swap_space(self) -> None:
        if self.swap_space_mb is not None and not (
            is_real(self.swap_space_mb) and 0 <= self.swap_space_mb <= MAX_KV_BUDGET_MB
        ):
            raise InvalidConfigError(
                f"swap space must be a number of MiB in [0, "
                f"{MAX_KV_BUDGET_MB:,}], got {self.swap_space_mb!r}"
            )
        if self.swap_space_mb is not None and self.preemption_mode != "swap":
            raise InvalidConfigError(  # a CPU tier nothing would use: a setting silently ignored
                "swap space applies only to swap preemption (preemption_mode swap)"
            )

    def _check_cpu_blocks(self) -> None:
        n = self.num_cpu_blocks
        if n is None:
            return
        if not is_int(n) or n < 0:
            raise InvalidConfigError(f"the CPU tier cannot hold {n!r:.40} blocks")
        if n * self.block_size > MAX_ARENA_SLOTS:
            raise InvalidConfigError(
                f"a CPU tier of {n} blocks of {self.block_size} tokens is more than "
                f"{MAX_ARENA_SLOTS:,} KV slots; no machine here holds that"
            )
        if self.preemption_mode != "swap":
            raise InvalidConfigError(
                "CPU blocks apply only to swap preemption (preemption_mode swap)"
            )
        if self.swap_space_mb is not None:
            raise InvalidConfigError("give either num_cpu_blocks or swap_space_mb, not both")

    @classmethod
    def add_cli_args(
        cls,
        parser: argparse.ArgumentParser,
        only: Collection[str] | None = None,
        unset: Collection[str] = (),
    ) -> argparse.ArgumentParser:
        """Add the engine's flags (``CLI_FLAGS``; those of the fields named in ``only``, else
        all) to ``parser``, each with its field's default; a flag named in ``unset`` defaults to
        None instead, for a command whose own source (a scenario) stands when it is not given.
        Returns ``parser``."""
        return add_flags(parser, cls, CLI_FLAGS, only, unset)

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace) -> EngineArgs:
        """The settings parsed into ``args`` by a parser that ``add_cli_args`` gave every
        flag, checked once here (InvalidConfigError)."""
        return cls(**{name: getattr(args, name) for name in CLI_FLAGS})

    def model_len(self, context_len: int) -> int:
        """``max_model_len`` resolved against the model's context length; raises when it
        exceeds it."""
        n = context_len if self.max_model_len is None else self.max_model_len
        if not 0 < n <= context_len:
            raise InvalidConfigError(f"max_model_len must be in [1, {context_len}], got {n}")
        return n

    def create_engine_config(
        self, context_len: int | None = None, bytes_per_block: int | None = None
    ) -> EngineConfig:
        """The engine's config, the only way one is made. The model's facts come as numbers:
        ``context_len`` bounds (and by default is) ``max_model_len``; ``bytes_per_block`` (K and
        V of one block in every layer, in the arena's element type) turns ``kv_budget_mb`` and
        ``swap_space_mb`` into blocks. A dry run has no model: it sets ``num_blocks`` and
        ``max_model_len`` and gives neither. Raises InvalidConfigError when ``max_model_len``
        exceeds the context, a budget holds no block, or a size needs a fact not given."""
        max_model_len = self.max_model_len if context_len is None else self.model_len(context_len)
        if max_model_len is None:
            raise InvalidConfigError("max_model_len must be given when no model sets it")
        num_blocks = self.num_blocks
        if num_blocks is None:
            budget = DEFAULT_KV_BUDGET_MB if self.kv_budget_mb is None else self.kv_budget_mb
            num_blocks = blocks_in_budget(budget, self.block_size, _per_block(bytes_per_block))
        return EngineConfig(
            self.allocator,
            num_blocks,
            self.block_size,
            max_model_len,
            self.max_num_seqs,
            self.max_num_batched_tokens,
            placement=self.placement,
            preemption_mode=self.preemption_mode,
            num_cpu_blocks=self._cpu_blocks(num_blocks, bytes_per_block),
            enable_prefix_caching=self.enable_prefix_caching,
            kv_cache_dtype=self.kv_cache_dtype,
        )

    def _cpu_blocks(self, num_blocks: int, bytes_per_block: int | None) -> int:
        if self.preemption_mode != "swap":
            return 0
        if self.num_cpu_blocks is not None:
            return self.num_cpu_blocks
        if self.swap_space_mb is None:  # as large as the arena
            return num_blocks
        return int(self.swap_space_mb * MIB // _per_block(bytes_per_block))


def _per_block(bytes_per_block: int | None) -> int:
    if bytes_per_block is None:
        raise InvalidConfigError("a size in MiB needs the model's bytes per block; give blocks")
    return bytes_per_block


def blocks_in_budget(kv_budget_mb: float, block_size: int, bytes_per_block: int) -> int:
    """How many whole blocks of ``bytes_per_block`` fit in ``kv_budget_mb`` MiB. Raises
    InvalidConfigError when not even one does."""
    n = int(kv_budget_mb * MIB // bytes_per_block)
    if n <= 0:
        raise InvalidConfigError(
            f"KV budget of {kv_budget_mb} MiB is too small for one block of {block_size} tokens "
            f"({bytes_per_block / MIB:.3f} MiB)"
        )
    return n


@dataclass(frozen=True)
class CliFlag:
    """How an ``EngineArgs`` field appears on a command line, as ``--field-name`` with the
    field's default: ``kind`` parses its value (None: a string, or a --x/--no-x pair for a
    bool); flags of one ``exclusive`` group may not be given together."""

    help: str | None = None
    metavar: str | None = None
    kind: type | None = None
    choices: tuple[str, ...] | None = None
    exclusive: str | None = None


#: The engine's flags, in the order ``--help`` lists them.
CLI_FLAGS = {
    "num_blocks": CliFlag("KV arena size in blocks", "N", int, exclusive="arena size"),
    "kv_budget_mb": CliFlag("KV arena size in MiB", "M", float, exclusive="arena size"),
    "block_size": CliFlag("tokens per KV block", "B", int),
    "kv_cache_dtype": CliFlag(
        "KV arena element type: auto (the model's), fp8_e4m3 or fp8_e5m2", choices=KV_CACHE_DTYPES
    ),
    "max_model_len": CliFlag(
        "most K/V slots a request fills: prompt + output - 1, as the last token's K/V is "
        "never computed (vLLM stops at the same token); default: the model's context length",
        "L",
        int,
    ),
    "allocator": CliFlag(
        "paged, or a contiguous policy; here pow2/oracle know only the "
        "prompt + max-tokens bound (exact with --ignore-eos)",
        choices=ALLOCATORS,
    ),
    "placement": CliFlag(
        "where a contiguous policy puts a run: first-fit, or buddy as the paper's Orca",
        choices=PLACEMENTS,
    ),
    "preemption_mode": CliFlag(
        "when memory runs out: recompute the victim later, or swap its blocks "
        "to a CPU tier (paged allocator only)",
        choices=PREEMPTION_MODES,
    ),
    "swap_space_mb": CliFlag(
        "CPU tier size in MiB for --preemption-mode swap (default: the arena's)", "M", float
    ),
    "max_num_seqs": CliFlag(metavar="N", kind=int),
    "enable_prefix_caching": CliFlag(
        "reuse cached K/V blocks of shared prompt prefixes (paging only; default off, or a "
        "scenario's own setting)"
    ),
}


def add_flags(
    parser: argparse.ArgumentParser,
    settings: type,
    flags: dict[str, CliFlag],
    only: Collection[str] | None = None,
    unset: Collection[str] = (),
) -> argparse.ArgumentParser:
    """Add ``flags`` (those named in ``only``, else all) to ``parser`` as ``--field-name``, each
    with the default of the dataclass ``settings``' field of that name: the one place a flag's
    default is written. A field named in ``unset`` defaults to None (not given). Returns
    ``parser``."""
    defaults = {f.name: f.default for f in dataclasses.fields(settings)}
    groups: dict[str, argparse._MutuallyExclusiveGroup] = {}
    for name, flag in flags.items():
        if only is not None and name not in only:
            continue
        where: argparse._ActionsContainer = parser
        if flag.exclusive is not None:
            if flag.exclusive not in groups:
                groups[flag.exclusive] = parser.add_mutually_exclusive_group()
            where = groups[flag.exclusive]
        field_default = defaults[name]
        default = None if name in unset else field_default
        kind = type(field_default)
        where.add_argument(f"--{name.replace('_', '-')}", **_argparse_kwargs(flag, default, kind))
    return parser


def _argparse_kwargs(flag: CliFlag, default: object, kind: type) -> dict:
    kwargs = {"default": default, "help": flag.help, "metavar": flag.metavar}
    if kind is bool:
        return kwargs | {"action": argparse.BooleanOptionalAction}
    return kwargs | {"type": flag.kind, "choices": flag.choices}


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
