"""The runs a scenario is recorded under, named by what differs between them.

By default a recording runs one scenario under several allocators and names each run after its
allocator (``max``, ``paged``). Two paged runs that differ in something else (how they preempt,
what their KV blocks are stored as) need names of their own: a scenario may list them::

    [[runs]]
    label = "recompute"            # the run's name in the trace (unique, short)
    allocator = "paged"            # default paged
    preemption_mode = "recompute"  # or swap (paged only)
    cpu_blocks = 8                 # swap: the CPU tier in blocks (default: as many as the arena)
    kv_cache_dtype = "auto"        # or fp8_e4m3 / fp8_e5m2
    num_blocks = 24                # default: [arena] num_blocks

Runs whose arenas differ in size must still compare equal *bytes* (an fp8 arena holds twice the
blocks of a bf16 one in the same memory): the recorder writes each run's bytes per block, and the
trace check refuses unequal arenas. Pure Python, no torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from paged.engine.core.allocators import check_allocator
from paged.engine.core.swap import check_preemption_mode
from paged.engine.engine_args import KV_CACHE_DTYPES
from paged.engine.errors import InvalidConfigError

MAX_RUNS = 4  # side by side on one screen; a trace may hold more, a lesson shows two
_LABEL_CHARS = 24


@dataclass(frozen=True)
class ScenarioRun:
    """One run of a recording: its name in the trace and the options it differs by."""

    label: str
    allocator: str = "paged"
    preemption_mode: str = "recompute"
    cpu_blocks: int | None = None  # swap only; None: as many as the arena's blocks
    kv_cache_dtype: str = "auto"
    num_blocks: int | None = None  # None: the scenario's [arena] num_blocks

    @property
    def plain(self) -> bool:
        """Named after its allocator and nothing else set: what ``--allocators`` records."""
        return self == ScenarioRun(self.label, self.label)

    def arena_blocks(self, default: int) -> int:
        return self.num_blocks if self.num_blocks is not None else default

    def tier_blocks(self, arena_blocks: int) -> int:
        if self.preemption_mode != "swap":
            return 0
        return self.cpu_blocks if self.cpu_blocks is not None else arena_blocks


def by_allocator(names: list[str]) -> tuple[ScenarioRun, ...]:
    """``--allocators max,paged``: one plain run per allocator, named after it."""
    for name in names:
        check_allocator(name)
    return tuple(ScenarioRun(n, n) for n in names)


def parse_runs(raw: object, where: str, max_blocks: int) -> tuple[ScenarioRun, ...]:
    """The scenario's ``[[runs]]`` tables, checked; () when it has none. Raises
    InvalidConfigError with one line naming the run and the key."""
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(d, dict) for d in raw):
        raise InvalidConfigError(f"scenario {where}: runs must be [[runs]] tables")
    if not 1 <= len(raw) <= MAX_RUNS:
        raise InvalidConfigError(f"scenario {where}: list 1 to {MAX_RUNS} [[runs]]")
    runs = tuple(_run(f"scenario {where} run #{i + 1}", d, max_blocks) for i, d in enumerate(raw))
    if len({r.label for r in runs}) != len(runs):
        raise InvalidConfigError(f"scenario {where}: run labels must be unique")
    return runs


def _run(where: str, d: dict, max_blocks: int) -> ScenarioRun:
    extra = set(d) - set(ScenarioRun.__dataclass_fields__)
    if extra:
        raise InvalidConfigError(f"{where}: unknown key {sorted(extra)[0]!r:.40}")
    label = d.get("label")
    if not isinstance(label, str) or not 0 < len(label) <= _LABEL_CHARS:
        raise InvalidConfigError(f"{where}: label must be a string of 1 to {_LABEL_CHARS} chars")
    if not label.replace("-", "").replace("_", "").isalnum() or not label.isascii():
        raise InvalidConfigError(f"{where}: label may hold letters, digits, - and _ only")
    for key in ("allocator", "preemption_mode", "kv_cache_dtype"):
        if key in d and not isinstance(d[key], str):
            raise InvalidConfigError(f"{where} ({label}): {key} must be a string")
    for key in ("cpu_blocks", "num_blocks"):
        low = 0 if key == "cpu_blocks" else 1
        if key in d and (type(d[key]) is not int or not low <= d[key] <= max_blocks):
            raise InvalidConfigError(
                f"{where} ({label}): {key} must be an integer in [{low}, {max_blocks}]"
            )
    run = ScenarioRun(**d)
    check_allocator(run.allocator)
    check_preemption_mode(run.preemption_mode, run.allocator)
    if run.kv_cache_dtype not in KV_CACHE_DTYPES:
        raise InvalidConfigError(
            f"{where} ({label}): kv_cache_dtype must be one of {', '.join(KV_CACHE_DTYPES)}"
        )
    if run.cpu_blocks is not None and run.preemption_mode != "swap":
        raise InvalidConfigError(f"{where} ({label}): cpu_blocks needs preemption_mode = swap")
    return run
