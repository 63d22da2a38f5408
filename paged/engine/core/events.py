"""Typed allocator and scheduler events: the contract between engine and viewer.

Every event is a small frozen dataclass with a ``kind`` (its JSON tag), the engine ``step`` it
happened in, and a global ``seq`` number that orders the whole stream. Events serialise to one flat
JSON object each (``to_dict`` / ``from_dict``), which is what a JSONL trace stores line by line.
An event about one request is a ``RequestEvent`` (its ``req``). What reads the stream event by
event (the accounting fold, the viewer's fold, the checker's replay, the KV-event translator)
dispatches through a ``handler_table``, so a new kind of event is one more entry in each table.
A reader that wants some kinds out of a stream selects them with ``of_kind``, typed as those
kinds; one that branches on a single event's kind matches its class (``match ev: case
Finished():``), which a type checker narrows alike. Nobody compares ``kind`` strings.

This module is pure Python and must stay importable without torch: the viewer folds these events.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import IO, Any, ClassVar, TypeVar, overload

#: Reasons a waiting request could not be admitted.
BLOCKED_NO_FREE_BLOCK = "no_free_block"  # paging: fewer free blocks than the prompt needs
BLOCKED_NO_HOLE = "no_hole"  # contiguous: free slots suffice in total, no hole is large enough
BLOCKED_NO_SPACE = "no_space"  # contiguous: not enough free slots at all
BLOCKED_BATCH_FULL = "batch_full"  # scheduler limit (max running requests / tokens per step)


@dataclass(frozen=True)
class Event:
    kind: ClassVar[str] = "event"
    step: int
    seq: int

    def to_dict(self) -> dict:
        d: dict[str, object] = {"kind": self.kind}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            d[f.name] = (
                [list(x) if isinstance(x, tuple) else x for x in v] if isinstance(v, tuple) else v
            )
        return d


@dataclass(frozen=True)
class RequestEvent(Event):
    """An event about one request, ``req``: every event but the step's end and the prefix
    cache's bookkeeping. Its ``req`` comes right after ``step`` and ``seq``, as it always has in
    a trace line."""

    req: str


@dataclass(frozen=True)
class RequestArrived(RequestEvent):
    """A request entered the waiting queue. ``max_tokens`` bounds its output."""

    kind: ClassVar[str] = "request_arrived"
    prompt_len: int
    max_tokens: int


@dataclass(frozen=True)
class Admitted(RequestEvent):
    """A waiting request joined the running batch. ``num_tokens`` is what it prefills now
    (its prompt, or prompt plus generated tokens when it is recomputed after a preemption)."""

    kind: ClassVar[str] = "admitted"
    num_tokens: int


@dataclass(frozen=True)
class AdmissionBlocked(RequestEvent):
    """The head of the waiting queue could not be admitted this step.

    ``need_slots`` is what admission asked for, ``free_slots`` the arena's free total and
    ``largest_hole`` its largest contiguous free run (for paging: free blocks * block size).
    ``reason`` is one of the BLOCKED_* constants; ``no_hole`` is external fragmentation made visible."""

    kind: ClassVar[str] = "admission_blocked"
    reason: str
    need_slots: int
    free_slots: int
    largest_hole: int


@dataclass(frozen=True)
class BlockAllocated(RequestEvent):
    """Paging: logical block ``logical`` of ``req`` now maps to physical block ``physical``."""

    kind: ClassVar[str] = "block_allocated"
    logical: int
    physical: int


@dataclass(frozen=True)
class SlotsReserved(RequestEvent):
    """Contiguous: slots ``[start, start + length)`` are reserved for ``req``."""

    kind: ClassVar[str] = "slots_reserved"
    start: int
    length: int


@dataclass(frozen=True)
class TokensWritten(RequestEvent):
    """K/V of ``req``'s tokens at ``positions`` were written into arena ``slots`` this step."""

    kind: ClassVar[str] = "tokens_written"
    positions: tuple[int, ...]
    slots: tuple[int, ...]


@dataclass(frozen=True)
class BlockFreed(RequestEvent):
    """Paging: ``req`` dropped its reference to ``physical``; ``ref_count`` is what remains
    (0 means the block is back in the free pool)."""

    kind: ClassVar[str] = "block_freed"
    physical: int
    ref_count: int


@dataclass(frozen=True)
class ReservationReleased(RequestEvent):
    """Contiguous: ``req``'s run ``[start, start + length)`` is free again."""

    kind: ClassVar[str] = "reservation_released"
    start: int
    length: int


@dataclass(frozen=True)
class Preempted(RequestEvent):
    """``req`` lost its memory (released just before this event) and is back at the queue's
    front; it will be recomputed from its prompt plus ``num_generated`` tokens."""

    kind: ClassVar[str] = "preempted"
    num_generated: int


@dataclass(frozen=True)
class SwappedOut(RequestEvent):
    """Preemption by swap: ``req``'s K/V blocks were copied to the CPU tier, ``block_map`` pairs
    ``(device, cpu)`` in logical order (its whole table). Its ``block_freed`` events and its
    ``preempted`` follow; it keeps its computed tokens and is not recomputed."""

    kind: ClassVar[str] = "swapped_out"
    block_map: tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class SwappedIn(RequestEvent):
    """A swapped request was admitted again: its CPU blocks were copied back into the device
    blocks just allocated for it, ``block_map`` pairs ``(cpu, device)`` in logical order (the
    block table is rewritten; the tokens are not recomputed). The CPU blocks are free again."""

    kind: ClassVar[str] = "swapped_in"
    block_map: tuple[tuple[int, int], ...]


SWAP_FALLBACK_CPU_FULL = "cpu_full"
SWAP_FALLBACK_SHARED = "shared_blocks"


@dataclass(frozen=True)
class SwapFallback(RequestEvent):
    """Swap preemption was asked for but cannot be done: the CPU tier has only
    ``free_cpu_blocks`` free of the ``need_blocks`` ``req`` holds, or ``req`` holds a shared
    block. It is preempted by recompute instead (its ``block_freed`` and ``preempted`` events
    follow)."""

    kind: ClassVar[str] = "swap_fallback"
    need_blocks: int
    free_cpu_blocks: int
    #: why: the tier lacks room (``cpu_full``) or ``req`` holds a block others hold too
    #: (``shared_blocks``: a cached prefix or a parallel sample's prompt is never swapped)
    reason: str = "cpu_full"


@dataclass(frozen=True)
class Finished(RequestEvent):
    """``req`` finished. ``final_len`` is how many K/V slots it filled at most (prompt plus
    generated tokens minus the last one, whose K/V is never computed); ``num_generated`` its
    output length; ``reason`` is ``eos`` or ``length``."""

    kind: ClassVar[str] = "finished"
    final_len: int
    num_generated: int
    reason: str


@dataclass(frozen=True)
class StepEnd(Event):
    """The engine finished step ``step``: the frame boundary for the viewer."""

    kind: ClassVar[str] = "step_end"
    num_running: int
    num_waiting: int


@dataclass(frozen=True)
class BlockStored(Event):
    """Prefix caching: physical block ``physical`` is full and now findable by ``block_hash``,
    the sha256 chain hash of ``parent_block_hash`` (``prefix_hash.ROOT_HASH`` for a first
    block) and its ``token_ids`` (``block_size`` of them). Named and shaped as vLLM's KV event."""

    kind: ClassVar[str] = "block_stored"
    block_hash: str
    parent_block_hash: str
    token_ids: tuple[int, ...]
    block_size: int
    physical: int


@dataclass(frozen=True)
class BlockEvicted(Event):
    """Prefix caching: the free cached block ``physical`` was handed out fresh, so its content
    ``block_hash`` can no longer be hit (lazy eviction)."""

    kind: ClassVar[str] = "block_evicted"
    block_hash: str
    physical: int


@dataclass(frozen=True)
class AllBlocksCleared(Event):
    """Prefix caching: every cached hash was forgotten at once (the cache was reset)."""

    kind: ClassVar[str] = "all_blocks_cleared"


@dataclass(frozen=True)
class BlockShared(RequestEvent):
    """Paging: logical block ``logical`` of ``req`` maps to ``physical``, a block another table
    holds or a cached one taken back from the free queue; ``ref_count`` is its holders now and
    ``num_tokens`` how many of its slots already hold ``req``'s K/V (not computed again)."""

    kind: ClassVar[str] = "block_shared"
    logical: int
    physical: int
    ref_count: int
    num_tokens: int


@dataclass(frozen=True)
class CacheHit(RequestEvent):
    """``req``'s prompt begins with the cached ``blocks`` (physical ids in logical order); its
    prefill skips ``tokens_saved`` tokens."""

    kind: ClassVar[str] = "cache_hit"
    blocks: tuple[int, ...]
    tokens_saved: int


@dataclass(frozen=True)
class BlockCopied(RequestEvent):
    """Copy-on-write: ``req`` was about to write into ``src``, shared with others, so its
    logical block ``logical`` now maps to a fresh copy ``dst``; ``src_ref_count`` is what ``src``
    keeps and ``num_tokens`` the slots of ``req``'s K/V the copy carries."""

    kind: ClassVar[str] = "block_copied"
    logical: int
    src: int
    dst: int
    src_ref_count: int
    num_tokens: int


@dataclass(frozen=True)
class AttentionRead(RequestEvent):
    """Recorded on request only (``[attention]`` in a scenario): how ``req``'s decode token at
    ``position`` read its K/V this step. ``physical`` is its block table (logical order) up to
    the block holding ``position``; ``mass[i]`` the share of attention that fell on logical
    block ``i``, the mean over layers and query heads (the shares sum to 1).

    The tile walk, for layer ``layer`` and KV head ``kv_head`` (read by query heads ``heads``),
    one tile per block, in natural-log units of the scaled scores: ``tile_m[t][g]`` and
    ``tile_l[t][g]`` are head ``heads[g]``'s running max and running sum after tile ``t``, in
    the split-K split that holds it (the kernel cuts a context every ``split`` tiles; 0, in
    traces older than the field: one split holds them all);
    ``part_m`` / ``part_l`` are tile ``t`` alone (its largest score, and the sum of exp(s - that));
    ``merged_m`` / ``merged_l`` the splits' last (m, l) merged; ``full_m`` / ``full_l`` the
    softmax over all scores at once, by the plain-torch reference. ``source`` says who walked:
    ``cpu`` (paged/kernels/cpu.c's own record of the tiles it ran) or ``reference`` (the
    reference's walk over the same tensors, for a backend that reports none). ``max_diff`` is
    the largest gap between a probability the walk's (m, l) give and the reference softmax's,
    ``out_diff`` between the reference walk's output and the output the engine's attention
    backend computed."""

    kind: ClassVar[str] = "attention_read"
    position: int
    physical: tuple[int, ...]
    mass: tuple[float, ...]
    layer: int
    kv_head: int
    heads: tuple[int, ...]
    tile_m: tuple[tuple[float, ...], ...]
    tile_l: tuple[tuple[float, ...], ...]
    part_m: tuple[tuple[float, ...], ...]
    part_l: tuple[tuple[float, ...], ...]
    merged_m: tuple[float, ...]
    merged_l: tuple[float, ...]
    full_m: tuple[float, ...]
    full_l: tuple[float, ...]
    max_diff: float
    out_diff: float
    # Traces written before these fields carried the reference's walk, one split over all tiles
    source: str = "reference"
    split: int = 0


EVENT_TYPES: dict[str, type[Event]] = {
    cls.kind: cls
    for cls in (
        RequestArrived,
        Admitted,
        AdmissionBlocked,
        BlockAllocated,
        SlotsReserved,
        TokensWritten,
        BlockFreed,
        ReservationReleased,
        Preempted,
        SwappedOut,
        SwappedIn,
        SwapFallback,
        Finished,
        StepEnd,
        BlockStored,
        BlockEvicted,
        AllBlocksCleared,
        BlockShared,
        CacheHit,
        BlockCopied,
        AttentionRead,
    )
}


_A = TypeVar("_A", bound=Event)
_B = TypeVar("_B", bound=Event)


@overload
def of_kind(events: Iterable[Event], kind: type[_A], /) -> Iterator[_A]: ...
@overload
def of_kind(events: Iterable[Event], kind: type[_A], other: type[_B], /) -> Iterator[_A | _B]: ...
def of_kind(events: Iterable[Event], *kinds: type[Event]) -> Iterator[Event]:
    """The events of ``kinds`` (a subclass counts: ``RequestEvent`` selects every event about a
    request), in stream order, typed as those kinds."""
    return (one for one in events if isinstance(one, kinds))


def count_of(events: Iterable[Event], kind: type[Event]) -> int:
    """How many of ``events`` are of ``kind`` (a subclass counts)."""
    return sum(1 for _ in of_kind(events, kind))


#: What an interpreter of events does with one: ``handler(interpreter, event)``.
Handler = Callable[[Any, Any], None]


class _HandlerTable(dict[type[Event], Handler]):
    """A type not in the table (a subclass of an event type) takes its nearest base's handler."""

    def nearest(self, cls: type[Event]) -> Handler | None:
        return next((self[base] for base in cls.__mro__ if base in self), None)

    def __missing__(self, cls: type[Event]) -> Handler:
        handler = self.nearest(cls)
        if handler is None:
            raise KeyError(cls)
        return handler


def handler_table(
    handlers: dict[type[Event], Handler], default: Handler | None = None
) -> dict[type[Event], Handler]:
    """The one way to dispatch on an event: a table from every event type to its handler, built
    once beside the handlers and read as ``table[type(ev)](interpreter, ev)`` (one dict lookup,
    the cost the accounting fold can afford on every event). A type ``handlers`` leaves out
    takes its nearest named base's handler (``RequestEvent``'s, say), else ``default``; with no
    default every type must be covered, so a new event kind cannot slip past an interpreter
    that must judge each one. Raises TypeError for a type left uncovered with no default, or a
    key that is not an event type."""
    stray = [cls for cls in handlers if not (isinstance(cls, type) and issubclass(cls, Event))]
    if stray:
        raise TypeError(f"not event types: {stray}")
    table = _HandlerTable(handlers)
    missing = [cls.kind for cls in EVENT_TYPES.values() if table.nearest(cls) is None]
    if missing and default is None:
        raise TypeError(f"no handler for event kinds {', '.join(missing)}")
    for cls in EVENT_TYPES.values():
        handler = table.nearest(cls) or default
        if handler is not None:  # always: a type with neither was refused above
            table[cls] = handler
    return table


#: Each event type's own fields (those ``emit`` passes besides ``step`` and ``seq``), for the
#: types ``emit`` may build without ``__init__``: not one with a ``__post_init__``, whose
#: checks or derived fields that would skip.
_FIELDS: dict[type[Event], set[str]] = {
    cls: {f.name for f in dataclasses.fields(cls)} - {"step", "seq"}
    for cls in EVENT_TYPES.values()
    if not hasattr(cls, "__post_init__")
}
_new = object.__new__


class EventError(ValueError):
    """An event record is malformed (unknown kind, missing or wrong fields)."""


def from_dict(d: dict) -> Event:
    """Rebuild an event from ``Event.to_dict`` output. Raises EventError on anything else."""
    if not isinstance(d, dict):
        raise EventError(f"event is not a JSON object: {d!r:.80}")
    cls = EVENT_TYPES.get(str(d.get("kind")))
    if cls is None:
        raise EventError(f"unknown event kind {d.get('kind')!r}")
    kwargs: dict[str, object] = {}
    for f in dataclasses.fields(cls):
        if f.name not in d:
            if f.default is not dataclasses.MISSING:  # a field added since: its old meaning
                continue
            raise EventError(f"{cls.kind} event lacks field {f.name!r}")
        v = d[f.name]
        if isinstance(v, list):  # block maps nest: [[a, b], ...] -> ((a, b), ...)
            v = tuple(tuple(x) if isinstance(x, list) else x for x in v)
        kwargs[f.name] = v
    try:
        return cls(**kwargs)  # type: ignore[arg-type]  # field types are the callers' to check
    except TypeError as e:  # pragma: no cover - dataclass signature mismatch
        raise EventError(str(e)) from None


class EventBus:
    """Stamps and fans out events. The engine creates events through ``emit`` so that every event
    gets the current step and the next global sequence number; subscribers are plain callables."""

    def __init__(self) -> None:
        self.step = 0
        self._seq = 0
        self._subscribers: list[Callable[[Event], None]] = []

    def subscribe(self, fn: Callable[[Event], None]) -> None:
        self._subscribers.append(fn)

    def emit(self, cls: type[Event], **fields) -> None:
        if not self._subscribers:
            return  # tracing off: no event objects are built at all
        if fields.keys() == _FIELDS.get(cls):
            # the frozen dataclass __init__ sets each field through object.__setattr__, which
            # cost a dry run a tenth of its time: fill the instance's dict directly (the same
            # event, equal and hashing alike); anything else (a defaulted field left out, a
            # wrong name) goes through __init__ and fails there
            ev = _new(cls)
            ev.__dict__.update(fields, step=self.step, seq=self._seq)
        else:
            ev = cls(step=self.step, seq=self._seq, **fields)
        self._seq += 1
        for fn in self._subscribers:
            fn(ev)


class JsonlSink:
    """Writes one JSON object per event to an open text stream (a trace body)."""

    def __init__(self, stream: IO[str], run: str | None = None, flush: bool = False) -> None:
        self.stream, self.run, self.flush = stream, run, flush

    def __call__(self, ev: Event) -> None:
        d = ev.to_dict()
        if self.run is not None:
            d["run"] = self.run
        self.stream.write(json.dumps(d, separators=(",", ":")) + "\n")
        if self.flush:
            self.stream.flush()
