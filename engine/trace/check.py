"""Full validation of a trace, line by line, before anything folds or draws it.

A trace is hostile input (an upload, a live pipe): every line is checked for size, nesting and
types, and every run is replayed through a small model of its allocator, so a trace that passes
folds without error and every frame's numbers are possible ones (slots inside the arena, shares
in [0, 1], no negative free space). The checks, in order:

- size: ``Limits`` bounds the text, each line, JSON nesting, runs, requests, events, and the work
  the viewer's fold will do (frames x arena slots, slots walked by allocation events);
- schema: the header's runs and configs, each event's fields with exact JSON types (an int is an
  int, not a bool or a float; NaN and Infinity are refused);
- order: per run, ``seq`` strictly increases, ``step`` never goes back, no event follows its
  step's ``step_end``;
- references: events name requests that arrived; blocks and slots lie inside the arena;
- the allocator's invariants: no overlapping reservations; a block is in as many tables as its
  ref count says (sharing comes only through ``block_shared`` with the exact new count, copies
  on write through ``block_copied``); a cached block is handed out fresh only after its
  ``block_evicted`` and never while referenced; no double free,
  a request releases exactly what it holds before it is preempted or finishes, tokens land in
  slots the request holds at the positions its table maps, at most once each, and never into a
  block others share (except the block being cached as this step computes it); and the engine's
  own reports (free slots, largest hole, queue lengths, final lengths) match the replay;
- the CPU tier (swap preemption): a swap-out maps the request's whole table, in order, to free
  CPU blocks; a swap-in maps exactly those CPU blocks, in order, to the device blocks just
  allocated, whose slots then hold the tokens written before; no CPU block is in two places;
  only unshared blocks move, and a fallback to recompute happens only when the tier really
  lacks room or the request shares a block (its other holders read it in place).

Any failure is one ``TraceError`` line naming the line number. Pure Python, no torch.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from typing import Any

from engine.core import events as E
from engine.core.prefix_hash import ROOT_HASH


class TraceError(ValueError):
    """A trace file cannot be used; the message is one line saying why."""


class TraceTooLarge(TraceError):
    """A trace past the reader's budget: possibly whole and valid, never called corrupt."""


@dataclass(frozen=True)
class Limits:
    """What one trace may cost the viewer. The fold keeps one frame per step per run, and each
    frame stores a category, an owner and (when it changed) an index per arena slot, so the
    costly traces are small ones with a large arena that changes every step. The defaults hold
    every trace the engine records for the lessons with room to spare (the largest uses 127k
    frame cells and 2.2k events) and bound the worst accepted trace, a 22 KiB file whose
    65,536-slot arena changes wholly at each of 30 steps, to about 150 MiB and 1.5 s of folding
    (measured on the dev box). Pass larger ``Limits`` to ``read`` for a big local trace."""

    max_slots: int = 1 << 16  # arena slots per run
    max_runs: int = 8
    max_requests: int = 4096  # per run
    max_events: int = 200_000  # whole trace
    max_line_chars: int = 1 << 20
    max_trace_chars: int = 64 << 20  # the app refuses uploads over MAX_UPLOAD_MB (8) first
    max_depth: int = 32  # JSON nesting of one line
    max_frame_cells: int = 1 << 22  # sum over runs of frames x arena slots
    max_slot_touches: int = 1 << 22  # slots the fold walks for allocation, release, writes
    max_int: int = 2**31 - 1  # any integer field
    max_name_chars: int = 256  # run names, request ids, header strings


LIMITS = Limits()

FORMAT = "paged-kv-trace"
SCHEMA_VERSION = 1
#: A block of K and V over every layer; far above any model here, it bounds the header's product.
MAX_BLOCK_BYTES = 1 << 40
PAGED = "paged"
CONTIGUOUS_ALLOCATORS = ("contiguous", "max", "pow2", "oracle")
FINISH_REASONS = ("eos", "length")
_HEADER_TEXT = ("created", "model", "device", "forward")
_FIELD_TYPES = {  # the event dataclasses' annotations (strings: events.py defers them)
    kind: tuple((f.name, str(f.type)) for f in dataclasses.fields(cls))
    for kind, cls in E.EVENT_TYPES.items()
}
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_BRACKET = re.compile(r"[\[\]{}]")
_ZEROS = re.compile(b"\x00+")


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not a number a trace may hold")


# one decoder for every line: json.loads builds a new one per call when given parse_constant
_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)


def check_nesting(line: str, max_depth: int) -> bool:
    """True when no bracket in ``line`` nests deeper than ``max_depth`` (strings ignored). Cheap:
    a line with few brackets cannot nest deep, so only bracket-heavy lines are scanned."""
    if line.count("[") + line.count("{") <= max_depth:
        return True
    depth = 0
    for m in _BRACKET.finditer(_STRING.sub("", line)):
        depth += 1 if m.group() in "[{" else -1
        if depth > max_depth:
            return False
    return True


def parse_json_line(line: str, where: str, limits: Limits = LIMITS) -> object:
    """One line as JSON, refusing what is too long, too deep, or not strict JSON."""
    if len(line) > limits.max_line_chars + 1:
        raise TraceError(
            f"trace is corrupt: {where} is longer than {limits.max_line_chars:,} characters"
        )
    if not check_nesting(line, limits.max_depth):
        raise TraceError(f"trace is corrupt: {where} nests deeper than {limits.max_depth} levels")
    try:
        obj = _DECODER.decode(line)
    except (ValueError, RecursionError):  # JSONDecodeError, NaN, ints of 4,300+ digits
        raise TraceError(f"trace is corrupt or truncated: {where} is not valid JSON") from None
    # a \ud800 escape with no partner decodes to a string nothing can encode or draw: every
    # page that showed it would fail (rare, so only a line that has such an escape is walked)
    if _SURROGATE_ESCAPE.search(line) and not all_text_encodes(obj):
        raise TraceError(f"trace is corrupt: {where} holds a lone surrogate (\\ud800-\\udfff)")
    return obj


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def all_text_encodes(obj: object) -> bool:
    """Whether every string in ``obj`` (keys too) is valid Unicode (no lone surrogate)."""
    todo = [obj]
    while todo:
        o = todo.pop()
        if isinstance(o, str):
            try:
                o.encode("utf-8")
            except UnicodeEncodeError:
                return False
        elif isinstance(o, dict):
            todo += [*o.keys(), *o.values()]
        elif isinstance(o, list):
            todo += o
    return True


# --- the header ------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunSpec:
    """A run as the header declares it, checked."""

    name: str
    paged: bool
    num_slots: int
    block_size: int
    max_model_len: int
    num_cpu_blocks: int = 0
    block_bytes: int = 0  # K and V of one block, all layers (0: not recorded)

    @property
    def arena_bytes(self) -> int | None:
        """The arena's bytes, when the header says what a block weighs."""
        return self.block_bytes * (self.num_slots // self.block_size) or None


def _text(v: object, limits: Limits) -> bool:
    return isinstance(v, str) and 0 < len(v) <= limits.max_name_chars


def _int_in(v: object, lo: int, hi: int) -> bool:
    return type(v) is int and lo <= v <= hi


def check_header(obj: object, limits: Limits = LIMITS) -> tuple[dict, list[RunSpec]]:
    """Validate a parsed header line; raise TraceError saying what is wrong."""
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
    specs = [_run_spec(i, r, limits) for i, r in enumerate(runs)]
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


def _run_spec(i: int, run: dict, limits: Limits) -> RunSpec:
    where = f"trace header: run #{i + 1}"
    if not _text(run.get("name"), limits):
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
    bs = _config_int(cfg, "block_size", 16, 1, n, where)  # 16: the viewer's default
    if n % bs:
        raise TraceError(f"{where}: block_size ({bs}) must divide num_slots ({n})")
    if "num_blocks" in cfg and cfg["num_blocks"] != n // bs:
        raise TraceError(f"{where}: num_blocks x block_size must equal num_slots")
    mml = _config_int(cfg, "max_model_len", 0, 0, limits.max_int, where)
    if "view_block_size" in cfg:
        _config_int(cfg, "view_block_size", None, 1, n, where)
    if "policy" in cfg and not _text(cfg["policy"], limits):
        raise TraceError(f"{where}: policy must be a short string")
    cpu = _config_int(cfg, "num_cpu_blocks", 0, 0, limits.max_slots, where)
    if cfg.get("preemption_mode", "recompute") not in ("recompute", "swap"):
        raise TraceError(f"{where}: preemption_mode must be recompute or swap")
    if cpu and alloc != PAGED:
        raise TraceError(f"{where}: only a paged run has a CPU tier")
    if "kv_cache_dtype" in cfg and not _text(cfg["kv_cache_dtype"], limits):
        raise TraceError(f"{where}: kv_cache_dtype must be a short string")
    block_bytes = _config_int(cfg, "block_bytes", 0, 0, MAX_BLOCK_BYTES, where)
    return RunSpec(run["name"], alloc == PAGED, n, bs, mml, cpu, block_bytes)


def _config_int(cfg: dict, key: str, default: int | None, lo: int, hi: int, where: str) -> int:
    v = cfg.get(key, default)
    if type(v) is not int or not lo <= v <= hi:
        raise TraceError(f"{where}: {key} must be an integer in [{lo:,}, {hi:,}], got {v!r:.40}")
    return v


# --- events ----------------------------------------------------------------------------------


def build_event(obj: dict, limits: Limits = LIMITS) -> E.Event:
    """An event from its JSON object, every field of the exact type; raises TraceError."""
    tag = obj.get("kind")
    cls = E.EVENT_TYPES.get(tag) if isinstance(tag, str) else None
    if cls is None:
        raise TraceError(f"unknown event kind {tag!r:.40}")
    kwargs: dict[str, Any] = {}
    for name, typ in _FIELD_TYPES[cls.kind]:
        if name not in obj:
            raise TraceError(f"{cls.kind} event lacks field {name!r}")
        v = obj[name]
        if typ == "int":
            ok = _int_in(v, 0, limits.max_int)
        elif typ == "str":
            ok = _text(v, limits)
        elif typ.startswith("tuple[tuple"):  # a block map: [[a, b], ...]
            ok = isinstance(v, list) and all(
                isinstance(x, list)
                and len(x) == 2
                and all(_int_in(y, 0, limits.max_int) for y in x)
                for x in v
            )
            v = tuple(tuple(x) for x in v) if ok else v
        else:  # tuple[int, ...]
            ok = isinstance(v, list) and all(_int_in(x, 0, limits.max_int) for x in v)
            v = tuple(v) if ok else v
        if not ok:
            want = {
                "int": f"an integer in [0, {limits.max_int}]",
                "str": f"a string of 1 to {limits.max_name_chars} characters",
            }.get(typ, "a list of such integers (or of [int, int] pairs)")
            raise TraceError(f"{cls.kind} field {name!r} must be {want}, got {obj[name]!r:.40}")
        kwargs[name] = v
    return cls(**kwargs)


@dataclass
class _Req:
    prompt_len: int
    max_tokens: int
    status: str = "waiting"  # waiting / running / finished
    generated: int = 0  # output tokens it had when last preempted (recomputed on entry)
    filled: int = 0  # slots written since admission (the accounting's ``filled``)
    held: int = 0  # slots it holds
    table: list[int] = field(default_factory=list)  # paging: physical blocks in logical order
    run: tuple[int, int] | None = None  # contiguous: (start, length)
    cpu_table: list[int] = field(default_factory=list)  # swapped: CPU blocks in logical order
    swapped_filled: int = 0  # slots it had written when swapped out (restored on swap-in)
    swapping: bool = False  # between its swapped_out and its preempted event


class RunChecker:
    """Replays one run's events against a model of its allocator and scheduler."""

    def __init__(self, spec: RunSpec, budget: Budget) -> None:
        self.spec, self.budget = spec, budget
        n, bs = spec.num_slots, spec.block_size
        self.num_blocks = n // bs
        self.reqs: dict[str, _Req] = {}
        self.refs = [0] * self.num_blocks  # paging: holders per block
        self.hash_of: list[str | None] = [None] * self.num_blocks
        self.stored_step = [-1] * self.num_blocks  # step a block was last cached in
        self.cached: dict[str, int] = {}  # hash -> block carrying it
        self.known_hashes: set[str] = {ROOT_HASH}  # every hash ever stored
        self.occupied = bytearray(n)  # contiguous: reserved slots
        self.written = bytearray(n)  # slots holding a written token
        self.free = n
        self.cpu_owner: list[str | None] = [None] * spec.num_cpu_blocks
        self.cpu_free = spec.num_cpu_blocks
        self.last_seq = -1
        self.last_step = 0
        self.closed_step = -1  # step of the last step_end
        self.num_running = self.num_waiting = 0

    def feed(self, ev: E.Event) -> None:
        self._order(ev)
        getattr(self, "_" + ev.kind)(ev)

    def _order(self, ev: E.Event) -> None:
        if ev.seq <= self.last_seq:
            raise TraceError(f"seq {ev.seq} does not follow seq {self.last_seq}")
        if ev.step < self.last_step:
            raise TraceError(f"step {ev.step} comes after step {self.last_step}")
        if ev.step <= self.closed_step:
            raise TraceError(f"event of step {ev.step} after that step's step_end")
        self.last_seq, self.last_step = ev.seq, ev.step

    def _req(self, ev: E.Event, status: str) -> _Req:
        r = self.reqs.get(ev.req)  # type: ignore[attr-defined]
        if r is None:
            raise TraceError(
                f"{ev.kind} names request {ev.req!r:.40}, "  # type: ignore[attr-defined]
                "which never arrived"
            )
        if r.status != status:
            raise TraceError(
                f"{ev.kind} for request {ev.req!r:.40} "  # type: ignore[attr-defined]
                f"while it is {r.status}, not {status}"
            )
        return r

    def _kind(self, ev: E.Event, paged: bool) -> None:
        if self.spec.paged != paged:
            raise TraceError(
                f"{ev.kind} event in a {'paged' if self.spec.paged else 'contiguous'} run"
            )

    def _touch(self, n: int) -> None:
        self.budget.touch(n)

    # --- scheduler events ---

    def _request_arrived(self, ev: E.RequestArrived) -> None:
        if ev.req in self.reqs:
            raise TraceError(f"request {ev.req!r:.40} arrives twice")
        if len(self.reqs) >= self.budget.limits.max_requests:
            raise TraceError(f"run holds more than {self.budget.limits.max_requests} requests")
        if ev.prompt_len < 1 or ev.max_tokens < 1:
            raise TraceError("request_arrived needs a positive prompt_len and max_tokens")
        mml = self.spec.max_model_len
        if mml and ev.prompt_len + ev.max_tokens - 1 > mml:
            raise TraceError(f"request {ev.req!r:.40} may grow past max_model_len {mml}")
        self.reqs[ev.req] = _Req(ev.prompt_len, ev.max_tokens)
        self.num_waiting += 1

    def _admitted(self, ev: E.Admitted) -> None:
        r = self._req(ev, "waiting")
        # a swapped request comes back holding all its tokens: prompt plus what it generated
        if ev.num_tokens != r.prompt_len + r.generated:
            raise TraceError(
                f"admitted with {ev.num_tokens} tokens; the request has "
                f"{r.prompt_len + r.generated}"
            )
        r.status = "running"
        self.num_waiting -= 1
        self.num_running += 1

    def _admission_blocked(self, ev: E.AdmissionBlocked) -> None:
        self._req(ev, "waiting")
        allowed = (
            (E.BLOCKED_NO_FREE_BLOCK, E.BLOCKED_BATCH_FULL)
            if self.spec.paged
            else (E.BLOCKED_NO_HOLE, E.BLOCKED_NO_SPACE, E.BLOCKED_BATCH_FULL)
        )
        if ev.reason not in allowed:
            raise TraceError(
                f"admission_blocked reason {ev.reason!r:.40} is not one of {', '.join(allowed)}"
            )
        hole = self.free if self.spec.paged else self._largest_hole()
        if (ev.free_slots, ev.largest_hole) != (self.free, hole):
            raise TraceError(
                f"admission_blocked reports {ev.free_slots} free slots and a hole "
                f"of {ev.largest_hole}; the arena has {self.free} and {hole}"
            )
        if ev.need_slots < 1:
            raise TraceError("admission_blocked needs a positive need_slots")
        # the reason must fit the numbers, or the viewer's caption says "needs 2, 4 free"
        fits = {
            E.BLOCKED_NO_FREE_BLOCK: ev.need_slots > self.free,
            E.BLOCKED_NO_SPACE: ev.need_slots > self.free,
            E.BLOCKED_NO_HOLE: hole < ev.need_slots <= self.free,
        }
        if not fits.get(ev.reason, True):
            raise TraceError(
                f"admission_blocked ({ev.reason}) needs {ev.need_slots} slots, "
                f"with {self.free} free and a hole of {hole}: that would have fit"
            )

    def _largest_hole(self) -> int:
        self._touch(self.spec.num_slots)
        return max((m.end() - m.start() for m in _ZEROS.finditer(self.occupied)), default=0)

    def _preempted(self, ev: E.Preempted) -> None:
        r = self._req(ev, "running")
        self._holds_nothing(ev, r)
        if ev.num_generated > r.max_tokens:
            raise TraceError(f"preempted after {ev.num_generated} tokens, more than max_tokens")
        if r.swapping and ev.num_generated + r.prompt_len - 1 != r.swapped_filled:
            raise TraceError(
                f"preempted after {ev.num_generated} tokens, but its swapped "
                f"blocks hold {r.swapped_filled} tokens"
            )
        r.status, r.generated, r.filled, r.swapping = "waiting", ev.num_generated, 0, False
        self.num_running -= 1
        self.num_waiting += 1

    def _finished(self, ev: E.Finished) -> None:
        r = self._req(ev, "running")
        self._holds_nothing(ev, r)
        if ev.reason not in FINISH_REASONS:
            raise TraceError(f"finish reason {ev.reason!r:.40} is not eos or length")
        if not 1 <= ev.num_generated <= r.max_tokens:
            raise TraceError(
                f"finished with {ev.num_generated} tokens; max_tokens is {r.max_tokens}"
            )
        if ev.final_len != r.filled or ev.final_len != r.prompt_len + ev.num_generated - 1:
            raise TraceError(
                f"finished with final_len {ev.final_len}; it wrote {r.filled} slots "
                f"for a prompt of {r.prompt_len} and {ev.num_generated} tokens"
            )
        r.status, r.filled = "finished", 0
        self.num_running -= 1

    def _holds_nothing(self, ev: E.Event, r: _Req) -> None:
        if ev.kind == E.Finished.kind and r.cpu_table:
            raise TraceError(
                f"finished while request {ev.req!r:.40} "  # type: ignore[attr-defined]
                "still has blocks on the CPU tier"
            )
        if r.held or r.table or r.run is not None:
            raise TraceError(
                f"{ev.kind} while request {ev.req!r:.40} "  # type: ignore[attr-defined]
                "still holds memory"
            )

    def _step_end(self, ev: E.StepEnd) -> None:
        if (ev.num_running, ev.num_waiting) != (self.num_running, self.num_waiting):
            raise TraceError(
                f"step_end reports {ev.num_running} running and {ev.num_waiting} "
                f"waiting; the run has {self.num_running} and {self.num_waiting}"
            )
        for name, r in self.reqs.items():
            if r.filled > r.held:
                raise TraceError(
                    f"request {name!r:.40} has written {r.filled} slots but holds {r.held}"
                )
        self.closed_step = ev.step
        self.budget.frame(self.spec.num_slots)

    # --- paging ---

    def _block(self, physical: int) -> int:
        if physical >= self.num_blocks:
            raise TraceError(f"block {physical} is outside the arena's {self.num_blocks} blocks")
        return physical

    def _block_allocated(self, ev: E.BlockAllocated) -> None:
        self._kind(ev, paged=True)
        r = self._req(ev, "running")
        if ev.logical != len(r.table):
            raise TraceError(
                f"block_allocated at logical {ev.logical}; the table has {len(r.table)} entries"
            )
        b = self._block(ev.physical)
        if self.refs[b]:
            raise TraceError(f"block {b} is already in {self.refs[b]} table(s)")
        if self.hash_of[b] is not None:
            raise TraceError(
                f"block {b} is handed out fresh while still cached (no block_evicted before)"
            )
        self._take(b, fresh=True)
        r.table.append(b)
        r.held += self.spec.block_size

    def _take(self, b: int, fresh: bool) -> None:
        bs = self.spec.block_size
        self._touch(bs)
        if self.refs[b] == 0:
            self.free -= bs
        if fresh:  # whatever it held before is gone
            self.written[b * bs : (b + 1) * bs] = bytes(bs)
        self.refs[b] += 1

    def _block_shared(self, ev: E.BlockShared) -> None:
        self._kind(ev, paged=True)
        r = self._req(ev, "running")
        b = self._block(ev.physical)
        if ev.logical != len(r.table):
            raise TraceError(
                f"block_shared at logical {ev.logical}; the table has {len(r.table)} entries"
            )
        if b in r.table:
            raise TraceError(f"block {b} is already in request {ev.req!r:.40}'s table")
        if self.refs[b] == 0 and self.hash_of[b] is None:
            raise TraceError(f"block {b} is shared while free and not cached")
        if ev.ref_count != self.refs[b] + 1:
            raise TraceError(
                f"block_shared gives block {b} ref_count {ev.ref_count}; it had "
                f"{self.refs[b]} holder(s)"
            )
        if not 1 <= ev.num_tokens <= self.spec.block_size:
            raise TraceError(
                f"block_shared carries {ev.num_tokens} tokens; a block holds {self.spec.block_size}"
            )
        self._take(b, fresh=False)
        r.table.append(b)
        r.held += self.spec.block_size
        r.filled += ev.num_tokens

    def _cache_hit(self, ev: E.CacheHit) -> None:
        self._kind(ev, paged=True)
        r = self._req(ev, "running")
        n = len(ev.blocks)
        if not n or tuple(r.table[:n]) != ev.blocks:
            raise TraceError(
                f"cache_hit names blocks that do not begin request {ev.req!r:.40}'s table"
            )
        if ev.tokens_saved != n * self.spec.block_size:
            raise TraceError(f"cache_hit saves {ev.tokens_saved} tokens with {n} full blocks")

    def _block_copied(self, ev: E.BlockCopied) -> None:
        self._kind(ev, paged=True)
        r = self._req(ev, "running")
        src, dst = self._block(ev.src), self._block(ev.dst)
        if ev.logical >= len(r.table) or r.table[ev.logical] != src:
            raise TraceError(
                f"block_copied: block {src} is not logical block {ev.logical} of "
                f"request {ev.req!r:.40}"
            )
        if self.refs[src] < 2 or ev.src_ref_count != self.refs[src] - 1:
            raise TraceError(
                f"block_copied leaves block {src} ref_count {ev.src_ref_count}; it "
                f"had {self.refs[src]} holder(s) (a copy needs at least two)"
            )
        if self.refs[dst] or self.hash_of[dst] is not None:
            raise TraceError(f"block_copied into block {dst}, which is not free and uncached")
        bs = self.spec.block_size
        if not 0 <= ev.num_tokens < bs:
            raise TraceError(
                f"block_copied carries {ev.num_tokens} tokens; a copy precedes a "
                f"write into a block of {bs}"
            )
        self._take(dst, fresh=True)
        self.written[dst * bs : dst * bs + ev.num_tokens] = b"\x01" * ev.num_tokens
        self.refs[src] -= 1
        r.table[ev.logical] = dst

    def _block_stored(self, ev: E.BlockStored) -> None:
        self._kind(ev, paged=True)
        b = self._block(ev.physical)
        if ev.block_size != self.spec.block_size or len(ev.token_ids) != ev.block_size:
            raise TraceError(
                f"block_stored holds {len(ev.token_ids)} tokens of block size "
                f"{ev.block_size}; the run's blocks hold {self.spec.block_size}"
            )
        if not self.refs[b] or self.hash_of[b] is not None:
            raise TraceError(f"block_stored for block {b}, which is free or already cached")
        if ev.block_hash in self.cached:
            raise TraceError(f"block_stored: hash {ev.block_hash:.16} is already cached")
        if ev.parent_block_hash not in self.known_hashes:
            raise TraceError(
                f"block_stored: parent hash {ev.parent_block_hash:.16} was never stored"
            )
        if len(self.known_hashes) > self.budget.limits.max_events:
            raise TraceError("trace stores more block hashes than it may hold events")
        self._touch(len(ev.token_ids))
        self.hash_of[b] = ev.block_hash
        self.cached[ev.block_hash] = b
        self.known_hashes.add(ev.block_hash)
        self.stored_step[b] = ev.step

    def _block_evicted(self, ev: E.BlockEvicted) -> None:
        self._kind(ev, paged=True)
        b = self._block(ev.physical)
        if self.hash_of[b] != ev.block_hash or self.refs[b]:
            raise TraceError(
                f"block_evicted: block {b} is not a free block cached as {ev.block_hash:.16}"
            )
        self.hash_of[b] = None
        del self.cached[ev.block_hash]

    def _all_blocks_cleared(self, ev: E.AllBlocksCleared) -> None:
        self._kind(ev, paged=True)
        for b in self.cached.values():
            self.hash_of[b] = None
        self.cached.clear()

    def _block_freed(self, ev: E.BlockFreed) -> None:
        self._kind(ev, paged=True)
        r = self._req(ev, "running")
        if ev.physical >= self.num_blocks or ev.physical not in r.table:
            raise TraceError(f"block {ev.physical} freed but not in request {ev.req!r:.40}'s table")
        b = ev.physical
        if ev.ref_count != self.refs[b] - 1:
            raise TraceError(
                f"block {b} freed with ref_count {ev.ref_count}; it had {self.refs[b]} holder(s)"
            )
        bs = self.spec.block_size
        # the fold finds the block in its table by a scan (in C: charged at a sixteenth)
        self._touch(bs + len(r.table) // 16)
        if r.table[-1] == b:  # the engine frees tail first
            r.table.pop()
        else:
            r.table.remove(b)
        self.refs[b] -= 1
        r.held -= bs
        if self.refs[b] == 0:
            self.free += bs
            if self.hash_of[b] is None:  # nothing can read it again
                self.written[b * bs : (b + 1) * bs] = bytes(bs)

    # --- the CPU tier ---

    def _swapped_out(self, ev: E.SwappedOut) -> None:
        self._kind(ev, paged=True)
        r = self._req(ev, "running")
        if r.swapping or r.cpu_table:
            raise TraceError(f"request {ev.req!r:.40} is swapped out twice")
        device = [d for d, _ in ev.block_map]
        cpu = [c for _, c in ev.block_map]
        if not device or device != r.table:
            raise TraceError(
                f"swapped_out maps blocks {device[:8]}, not request {ev.req!r:.40}'s table"
            )
        if any(self.refs[d] != 1 for d in device):
            raise TraceError(
                f"swapped_out moves a block request {ev.req!r:.40} shares with others "
                "(a shared block is never swapped)"
            )
        if len(set(cpu)) != len(cpu) or any(
            c >= len(self.cpu_owner) or self.cpu_owner[c] is not None for c in cpu
        ):
            raise TraceError(
                "swapped_out moves blocks to CPU blocks that are not free ones of "
                f"its {len(self.cpu_owner)}-block tier"
            )
        self._touch(len(cpu) * self.spec.block_size)
        for c in cpu:
            self.cpu_owner[c] = ev.req
        self.cpu_free -= len(cpu)
        r.cpu_table, r.swapped_filled, r.swapping = cpu, r.filled, True

    def _swapped_in(self, ev: E.SwappedIn) -> None:
        self._kind(ev, paged=True)
        r = self._req(ev, "running")
        cpu = [c for c, _ in ev.block_map]
        device = [d for _, d in ev.block_map]
        if not cpu or cpu != r.cpu_table:
            raise TraceError(
                f"swapped_in brings back CPU blocks {cpu[:8]}, not the ones request "
                f"{ev.req!r:.40} was swapped to"
            )
        if device != r.table or r.filled:
            raise TraceError(
                f"swapped_in must fill exactly the blocks request {ev.req!r:.40} "
                "was just given, before it writes anything"
            )
        if any(self.refs[d] != 1 for d in device):
            raise TraceError(f"swapped_in fills a block request {ev.req!r:.40} shares")
        bs = self.spec.block_size
        self._touch(len(cpu) * bs)
        for c in cpu:
            self.cpu_owner[c] = None
        self.cpu_free += len(cpu)
        for pos in range(r.swapped_filled):  # its tokens are back, in their new slots
            self.written[device[pos // bs] * bs + pos % bs] = 1
        r.filled, r.cpu_table, r.swapped_filled = r.swapped_filled, [], 0

    def _swap_fallback(self, ev: E.SwapFallback) -> None:
        self._kind(ev, paged=True)
        r = self._req(ev, "running")
        if ev.reason == E.SWAP_FALLBACK_SHARED:
            if not any(self.refs[b] > 1 for b in r.table):
                raise TraceError(
                    f"swap_fallback says request {ev.req!r:.40} shares a block; it shares none"
                )
            lacks_room = True  # any room is beside the point
        elif ev.reason == E.SWAP_FALLBACK_CPU_FULL:
            lacks_room = ev.need_blocks > ev.free_cpu_blocks
        else:
            raise TraceError(f"swap_fallback has an unknown reason {str(ev.reason)[:40]!r}")
        if (ev.need_blocks, ev.free_cpu_blocks) != (
            len(r.table),
            self.cpu_free,
        ) or not lacks_room:
            raise TraceError(
                f"swap_fallback reports {ev.need_blocks} blocks needed and "
                f"{ev.free_cpu_blocks} free on the CPU tier; the run has "
                f"{len(r.table)} and {self.cpu_free}"
            )

    # --- contiguous ---

    def _slots_reserved(self, ev: E.SlotsReserved) -> None:
        self._kind(ev, paged=False)
        r = self._req(ev, "running")
        end = ev.start + ev.length
        if r.run is not None:
            raise TraceError(f"request {ev.req!r:.40} reserves a second run")
        if ev.length < 1 or end > self.spec.num_slots:
            raise TraceError(
                f"slots [{ev.start}, {end}) are not a run inside the arena's "
                f"{self.spec.num_slots} slots"
            )
        if self.occupied.find(1, ev.start, end) != -1:
            raise TraceError(f"slots [{ev.start}, {end}) overlap another reservation")
        self._touch(ev.length)
        self.occupied[ev.start : end] = b"\x01" * ev.length
        r.run, r.held = (ev.start, ev.length), ev.length
        self.free -= ev.length

    def _reservation_released(self, ev: E.ReservationReleased) -> None:
        self._kind(ev, paged=False)
        r = self._req(ev, "running")
        if r.run != (ev.start, ev.length):
            raise TraceError(
                f"request {ev.req!r:.40} releases [{ev.start}, "
                f"{ev.start + ev.length}), which is not its reservation"
            )
        self._touch(ev.length)
        zero = bytes(ev.length)
        self.occupied[ev.start : ev.start + ev.length] = zero
        self.written[ev.start : ev.start + ev.length] = zero
        r.run, r.held = None, 0
        self.free += ev.length

    # --- both ---

    def _tokens_written(self, ev: E.TokensWritten) -> None:
        r = self._req(ev, "running")
        if r.cpu_table:
            raise TraceError(
                f"tokens written for request {ev.req!r:.40} while its blocks are on the CPU tier"
            )
        if not ev.slots or len(ev.slots) != len(ev.positions):
            raise TraceError("tokens_written needs as many positions as slots, at least one")
        self._touch(len(ev.slots))
        bs = self.spec.block_size
        for pos, slot in zip(ev.positions, ev.slots, strict=True):
            if self.spec.paged:
                ok = pos // bs < len(r.table) and slot == r.table[pos // bs] * bs + pos % bs
            else:
                ok = r.run is not None and pos < r.run[1] and slot == r.run[0] + pos
            if not ok:
                raise TraceError(
                    f"position {pos} of request {ev.req!r:.40} does not map to slot {slot} it holds"
                )
            if self.written[slot]:
                raise TraceError(f"slot {slot} is written twice")
            if (
                self.spec.paged
                and self.refs[slot // bs] > 1
                and self.stored_step[slot // bs] != ev.step
            ):
                raise TraceError(
                    f"slot {slot} is written while its block is shared (no copy on write)"
                )
            self.written[slot] = 1
        r.filled += len(ev.slots)


@dataclass
class Budget:
    """Work the viewer will do for the whole trace, counted as the runs are replayed."""

    limits: Limits
    events: int = 0
    cells: int = 0
    touches: int = 0

    def event(self) -> None:
        self.events += 1
        if self.events > self.limits.max_events:
            raise TraceTooLarge(f"trace holds more than {self.limits.max_events:,} events")

    def frame(self, num_slots: int) -> None:
        self.cells += num_slots
        if self.cells > self.limits.max_frame_cells:
            raise TraceTooLarge(
                f"trace is too large to draw: frames x arena slots exceed "
                f"{self.limits.max_frame_cells:,}"
            )

    def touch(self, n: int) -> None:
        self.touches += n
        if self.touches > self.limits.max_slot_touches:
            raise TraceTooLarge(
                f"trace is too large to draw: its events walk more than "
                f"{self.limits.max_slot_touches:,} slots"
            )


class TraceChecker:
    """Feed it a trace's lines in order (``line``), then ``finish``; it keeps the header and
    each run's events. Raises TraceError naming the line for anything wrong."""

    def __init__(self, limits: Limits = LIMITS) -> None:
        self.limits = limits
        self.budget = Budget(limits)
        self.header: dict | None = None
        self.runs: dict[str, list[E.Event]] = {}
        self.checkers: dict[str, RunChecker] = {}
        self.ended = False
        self.chars = 0

    def line(self, lineno: int, line: str) -> None:
        self.chars += len(line)
        if self.chars > self.limits.max_trace_chars:
            raise TraceTooLarge(f"trace is larger than {self.limits.max_trace_chars:,} characters")
        if len(line) <= self.limits.max_line_chars + 1 and not line.strip():
            return
        where = "header" if self.header is None else f"line {lineno}"
        obj = parse_json_line(line, where, self.limits)
        if self.header is None:
            self.header, specs = check_header(obj, self.limits)
            self.runs = {s.name: [] for s in specs}
            self.checkers = {s.name: RunChecker(s, self.budget) for s in specs}
            return
        if self.ended:
            raise TraceError(f"trace is corrupt: line {lineno} follows the end line")
        if isinstance(obj, dict) and obj.get("end") is True:
            self._end(obj)
            return
        run = obj.get("run") if isinstance(obj, dict) else None
        if not isinstance(run, str) or run not in self.runs:
            raise TraceError(f"trace is corrupt: line {lineno} names unknown run {run!r:.40}")
        try:
            ev = build_event(obj, self.limits)  # type: ignore[arg-type]
            self.budget.event()
            self.checkers[run].feed(ev)
        except TraceTooLarge as e:  # whole and valid, maybe: past the budget, not corrupt
            raise TraceTooLarge(f"{e} (at line {lineno})") from None
        except TraceError as e:
            raise TraceError(f"trace is corrupt: line {lineno} (run {run!r:.40}): {e}") from None
        self.runs[run].append(ev)

    def _end(self, obj: dict) -> None:
        self.ended = True
        n = sum(len(v) for v in self.runs.values())
        got = obj.get("num_events")
        if type(got) is not int or got != n:
            raise TraceError(
                f"trace is corrupt: end line counts {got!r:.40} events, the file holds {n}"
            )

    def finish(self, require_end: bool = True) -> tuple[dict, dict[str, list[E.Event]]]:
        if self.header is None:
            raise TraceError("trace is empty")
        if require_end and not self.ended:
            raise TraceError("trace is truncated: it has no end line")
        return self.header, self.runs
