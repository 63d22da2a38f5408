"""A trace's first line, and the one type each of its runs is read as.

The engine writes a ``RunHeader`` per run (``to_dict``), the checker parses and validates each
one back (``from_header``, ``check_header``) and the viewer draws from what the checker built:
one shape, so no reader fills in defaults of its own. Pure Python, no torch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from paged.engine.trace.schema import LIMITS, Limits, TraceError, short_text

if TYPE_CHECKING:
    from paged.engine.core.engine_core import EngineConfig

FORMAT = "paged-kv-trace"
SCHEMA_VERSION = 1
#: A block of K and V over every layer; far above any model here, it bounds the header's product.
MAX_BLOCK_BYTES = 1 << 40
PAGED, CONTIGUOUS = "paged", "contiguous"
#: What a header may call a contiguous run: the engine writes its policy (max, pow2, oracle); a
#: hand-made trace may say ``contiguous`` and give the policy in its config, or not at all.
CONTIGUOUS_ALLOCATORS = (CONTIGUOUS, "max", "pow2", "oracle")
#: the header's own text fields, in the order a viewer credits them
_HEADER_TEXT = ("model", "device", "created", "forward")


@dataclass(frozen=True)
class RunHeader:
    """One run as a trace header declares it: ``{"name", "allocator", "config": {...}}``.

    ``allocator`` is what the viewer draws by, PAGED or CONTIGUOUS; a contiguous run's
    ``policy`` says how it reserves (the header's allocator name: max, pow2, oracle), "" for
    paging. ``block_size`` is the paging granularity, and for a contiguous run the block size it
    is drawn at. A zero or empty optional field was not recorded."""

    name: str
    allocator: str
    num_slots: int
    block_size: int
    policy: str = ""
    max_model_len: int = 0
    num_cpu_blocks: int = 0  # the CPU tier under the arena (swap preemption), 0 if none
    block_bytes: int = 0  # K and V of one block over all layers
    kv_cache_dtype: str = ""  # the arena's element type
    view_block_size: int = 0  # the block size the allocator shows its arena in
    preemption_mode: str = "recompute"  # or swap

    @property
    def paged(self) -> bool:
        return self.allocator == PAGED

    @property
    def num_blocks(self) -> int:
        return self.num_slots // self.block_size

    @property
    def arena_bytes(self) -> int | None:
        """The arena's bytes, when the header says what a block weighs."""
        return self.block_bytes * self.num_blocks or None

    @classmethod
    def from_engine(
        cls,
        name: str,
        config: EngineConfig,
        view_block_size: int,
        *,
        kv_cache_dtype: str = "",
        block_bytes: int = 0,
    ) -> RunHeader:
        """The header of a run the engine makes from ``config`` under ``name``; the arena's
        element type and block weight when a real (or a stood-for) arena says."""
        paged = config.allocator == PAGED
        swap = config.preemption_mode == "swap"
        return cls(
            name=name,
            allocator=PAGED if paged else CONTIGUOUS,
            num_slots=config.num_slots,
            block_size=config.block_size,
            policy="" if paged else config.allocator,
            max_model_len=config.max_model_len,
            num_cpu_blocks=config.num_cpu_blocks if swap else 0,
            block_bytes=block_bytes,
            kv_cache_dtype=kv_cache_dtype,
            view_block_size=view_block_size,
            preemption_mode=config.preemption_mode,
        )

    def to_dict(self) -> dict:
        """The run's entry in a header's ``runs``, key for key as the engine has always written
        it (the lessons' traces re-record byte for byte); ``from_header`` reads it back equal."""
        cfg: dict[str, int | str] = {
            "num_blocks": self.num_blocks,
            "block_size": self.block_size,
            "num_slots": self.num_slots,
            "max_model_len": self.max_model_len,
        }
        if self.view_block_size:
            cfg["view_block_size"] = self.view_block_size
        if self.preemption_mode != "recompute":
            cfg |= {"preemption_mode": self.preemption_mode, "num_cpu_blocks": self.num_cpu_blocks}
        if self.kv_cache_dtype:
            cfg["kv_cache_dtype"] = self.kv_cache_dtype
        if self.block_bytes:
            cfg["block_bytes"] = self.block_bytes
        allocator = PAGED if self.paged else self.policy
        if not self.paged and allocator not in CONTIGUOUS_ALLOCATORS:
            allocator = CONTIGUOUS
            if self.policy:
                cfg["policy"] = self.policy
        return {"name": self.name, "allocator": allocator, "config": cfg}

    @classmethod
    def from_header(cls, run: object, index: int = 0, limits: Limits = LIMITS) -> RunHeader:
        """Parse and validate entry ``index`` of a header's ``runs``. A config may leave out
        ``block_size`` (16), ``max_model_len`` and the CPU tier (0). Raises TraceError, one line
        naming the run and what is wrong with it."""
        where = f"trace header: run #{index + 1}"
        if not isinstance(run, dict):
            raise TraceError(f"{where} is not an object")
        if not short_text(run.get("name"), limits):
            raise TraceError(
                f"{where} needs a name (a string of 1 to {limits.max_name_chars} characters)"
            )
        alloc = run.get("allocator")
        if alloc != PAGED and alloc not in CONTIGUOUS_ALLOCATORS:
            raise TraceError(
                f"{where} has allocator {alloc!r:.40}; expected paged or one of "
                f"{', '.join(CONTIGUOUS_ALLOCATORS)}"
            )
        cfg = run.get("config")
        if not isinstance(cfg, dict):
            raise TraceError(f"{where} has no config object")
        n = _config_int(cfg, "num_slots", None, 1, limits.max_slots, where)
        bs = _config_int(cfg, "block_size", 16, 1, n, where)
        if n % bs:
            raise TraceError(f"{where}: block_size ({bs}) must divide num_slots ({n})")
        if "num_blocks" in cfg and cfg["num_blocks"] != n // bs:
            raise TraceError(f"{where}: num_blocks x block_size must equal num_slots")
        mml = _config_int(cfg, "max_model_len", 0, 0, limits.max_int, where)
        view = (
            _config_int(cfg, "view_block_size", 0, 1, n, where) if "view_block_size" in cfg else 0
        )
        if "policy" in cfg and not short_text(cfg["policy"], limits):
            raise TraceError(f"{where}: policy must be a short string")
        cpu = _config_int(cfg, "num_cpu_blocks", 0, 0, limits.max_slots, where)
        mode = cfg.get("preemption_mode", "recompute")
        if mode not in ("recompute", "swap"):
            raise TraceError(f"{where}: preemption_mode must be recompute or swap")
        if cpu and alloc != PAGED:
            raise TraceError(f"{where}: only a paged run has a CPU tier")
        dtype = cfg.get("kv_cache_dtype", "")
        if "kv_cache_dtype" in cfg and not short_text(dtype, limits):
            raise TraceError(f"{where}: kv_cache_dtype must be a short string")
        block_bytes = _config_int(cfg, "block_bytes", 0, 0, MAX_BLOCK_BYTES, where)
        name = run["name"]
        return cls(
            name=name,
            allocator=PAGED if alloc == PAGED else CONTIGUOUS,
            num_slots=n,
            block_size=bs,
            policy=_policy(alloc, cfg, name),
            max_model_len=mml,
            num_cpu_blocks=cpu,
            block_bytes=block_bytes,
            kv_cache_dtype=dtype,
            view_block_size=view,
            preemption_mode=mode,
        )


def _policy(alloc: str, cfg: dict, name: str) -> str:
    """A contiguous run's policy: its config's, else the allocator it names, else (a run called
    just ``contiguous``) its own name."""
    if alloc == PAGED:
        return ""
    return cfg.get("policy", alloc if alloc != CONTIGUOUS else name)


def _config_int(cfg: dict, key: str, default: int | None, lo: int, hi: int, where: str) -> int:
    v = cfg.get(key, default)
    if type(v) is not int or not lo <= v <= hi:
        raise TraceError(f"{where}: {key} must be an integer in [{lo:,}, {hi:,}], got {v!r:.40}")
    return v


@dataclass(frozen=True)
class TraceHeader:
    """A header's own fields, beside its runs: where and how the trace was recorded, and the
    scenario it ran. A field the header leaves out (or, in a trace that was never checked,
    gives in another type) is empty."""

    model: str = ""
    device: str = ""
    created: str = ""
    forward: str = ""  # "model", or "skip" for a dry run
    scenario: Mapping[str, object] = field(default_factory=dict)

    @classmethod
    def from_header(cls, obj: dict) -> TraceHeader:
        scenario = obj.get("scenario")
        return cls(
            **{k: obj[k] for k in _HEADER_TEXT if isinstance(obj.get(k), str)},
            scenario=scenario if isinstance(scenario, dict) else {},
        )

    @property
    def requests_named(self) -> int:
        """How many requests the scenario names, each request's samples (``n``) counted; 0
        when it names none."""
        requests = self.scenario.get("requests")
        listed = [r for r in requests if isinstance(r, dict)] if isinstance(requests, list) else []
        return sum(n if type(n := r.get("n", 1)) is int and n > 0 else 1 for r in listed)

    def origin(self, keys: Sequence[str] = _HEADER_TEXT) -> tuple[tuple[str, str], ...]:
        """The fields in ``keys`` that say something, as (name, text): what a viewer credits."""
        return tuple((k, v) for k in keys if (v := getattr(self, k)))


def check_header(obj: object, limits: Limits = LIMITS) -> tuple[dict, list[RunHeader]]:
    """Validate a parsed header line: the header as it is, and each of its runs parsed. Raises
    TraceError saying what is wrong."""
    if not isinstance(obj, dict) or obj.get("format") != FORMAT:
        raise TraceError("not a paged-KV trace (its first line is not a trace header)")
    v = obj.get("schema_version")
    if type(v) is not int or v != SCHEMA_VERSION:
        raise TraceError(
            f"trace schema version {v!r:.40} is not supported (this viewer reads "
            f"version {SCHEMA_VERSION})"
        )
    for key in _HEADER_TEXT:
        if key in obj and not (
            isinstance(obj[key], str) and len(obj[key]) <= limits.max_name_chars
        ):
            raise TraceError(
                f"trace header: {key} must be a string of at most "
                f"{limits.max_name_chars} characters"
            )
    if not isinstance(obj.get("scenario", {}), dict):
        raise TraceError("trace header: scenario must be an object")
    runs = obj.get("runs")
    if not isinstance(runs, list) or not runs or not all(isinstance(r, dict) for r in runs):
        raise TraceError("trace header lists no valid runs")
    if len(runs) > limits.max_runs:
        raise TraceError(f"trace header lists {len(runs)} runs, more than {limits.max_runs}")
    specs = [RunHeader.from_header(r, i, limits) for i, r in enumerate(runs)]
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise TraceError("trace header: run names must be unique")
    arenas = {s.arena_bytes for s in specs}
    if len({s.num_slots for s in specs}) > 1 and (len(arenas) != 1 or None in arenas):
        raise TraceError(
            "trace header: runs compare equal memory, so every run needs the same num_slots "
            "(or, for arenas of different element types, the same block_bytes x num_blocks)"
        )
    return obj, specs
