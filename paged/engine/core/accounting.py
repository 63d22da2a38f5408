"""The paper's Fig. 2 memory categories, computed from events alone.

One fold serves the engine's metrics, ``simulate`` and the viewer. At each step end every slot of
the arena is in exactly one category:

- ``token_states``: holds a computed token's K/V;
- ``reservation``: held by a running request that will fill it later;
- ``internal``: held by a request that will never fill it (past its final length; for paging, the
  unused tail of its last block);
- ``external``: free while a waiting request is refused for want of a hole: enough is free in
  total, no hole is large enough (``no_hole``; ``strands_free`` is the rule, and the only one);
- ``free``: free otherwise. With too little free in total (``no_space``) the free slots are
  simply free: compaction would not admit the request either. Paging's free blocks while a
  request waits for more of them are free too (any free block serves any request: that wait is
  for memory, not for a hole).

Paging can share: several block tables may point at one physical block (a cached prompt prefix,
parallel samples of one prompt). Such a slot is counted once, in its category; ``shared`` counts
the physical slots that serve more than one request and ``saved`` the slots sharing spares (what
the extra holders would need with private copies), so the memory sharing saves is a number too.
Under the device arena a CPU tier (swap preemption) may hold swapped-out requests' blocks; it is
counted apart (``cpu_blocks``, ``cpu_used``, ``swapped``): its blocks are not arena slots.

"Will fill later" needs each request's final length. Until its ``finished`` event nobody knows
it, but its bound is known from its arrival: ``prompt_len + max_tokens - 1`` slots at most (the
last token's K/V is never computed). A slot it holds past that bound is internal fragmentation
from the moment it is held; below it, an unwritten slot is reservation until the request stops
and its final length says which of them it never filled. ``final_lens`` gives the fold
hindsight instead (``simulate`` and the paper's Fig. 2 split a
complete run that way). ``show_finishing`` counts a request that finishes at the end of its last
step as it held it (tokens, and the rest it never filled as internal), freed from the next step
on: the one step in which its internal fragmentation is known and still there to see, and the
memory a waiter refused in that step was refused against. The viewer and ``simulate`` both use it.
Pure Python, no torch.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import ClassVar

from paged.engine.core import events as E

CATEGORIES = ("token_states", "reservation", "internal", "external", "free")


def strands_free(reason: str) -> bool:
    """Whether a standing refusal with this ``reason`` makes the free slots external
    fragmentation: only ``no_hole`` does (free slots suffice in total, no hole is large enough).
    ``no_space`` (too little free at all) and paging's ``no_free_block`` wait for memory, not
    for a hole: their free slots are free. The accounting, ``simulate``, the viewer's cells,
    captions and the lab all classify through this one rule."""
    return reason == E.BLOCKED_NO_HOLE


@dataclass(frozen=True)
class StepAccount:
    """Slot counts per category at the end of one step, plus the queue."""

    step: int
    num_slots: int
    token_states: int
    reservation: int
    internal: int
    external: int
    free: int
    running: int  # requests running at the step's end
    waiting: int
    blocked: int
    #: Requests in the step's batch: ``running`` plus those that finished in it, which ran in
    #: the batch to make their last token (the paper's Fig. 13 counts them). A step's batch
    #: size, where ``running`` is the queue it leaves.
    batched: int = 0
    cpu_blocks: int = 0  # the CPU tier's size in blocks (0: no tier)
    cpu_used: int = 0  # CPU blocks holding swapped-out K/V
    swapped: int = 0  # requests whose K/V sit on the CPU tier
    shared: int = 0  # physical slots in blocks held by more than one request
    saved: int = 0  # slots the extra holders of shared blocks would need without sharing

    def share(self, category: str) -> float:
        return getattr(self, category) / self.num_slots if self.num_slots else 0.0

    def shares(self) -> dict[str, float]:
        return {c: self.share(c) for c in CATEGORIES}


@dataclass
class RequestInfo:
    """What the fold knows of one request: its arrival rank, its declared lengths, and
    ``status`` (waiting / running / finished)."""

    order: int
    prompt_len: int
    max_tokens: int
    status: str = "waiting"

    @property
    def bound(self) -> int:
        """The most K/V slots it may fill: ``prompt_len + max_tokens - 1``."""
        return self.prompt_len + self.max_tokens - 1


@dataclass
class Tally:
    """The one fold of the event stream; ``apply`` one event at a time, ``close_step`` at every
    ``step_end``. Besides the slot counts it keeps what the viewer asks of a step: every
    request (``requests``), the queue (``running`` in admission order, ``waiting`` in queue
    order) and the refusals of the step last closed (``refusals``). ``final_lens`` maps request
    ids to their final length when known; a ``finished`` event fills in the rest.
    ``show_finishing`` keeps what a request released as it finished in the step's account:
    ``finishing`` maps it to (tokens, never filled) until ``close_step``."""

    num_slots: int
    block_size: int
    final_lens: dict[str, int] = field(default_factory=dict)
    held: dict[str, int] = field(default_factory=dict)  # slots held per request
    filled: dict[str, int] = field(default_factory=dict)  # K/V slots written per request
    block_refs: dict[int, int] = field(default_factory=dict)
    block_written: dict[int, int] = field(default_factory=dict)  # K/V slots written per block
    requests: dict[str, RequestInfo] = field(default_factory=dict)
    running: list[str] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)
    blocked_now: dict[str, E.AdmissionBlocked] = field(default_factory=dict)
    refusals: tuple[E.AdmissionBlocked, ...] = ()
    num_cpu_blocks: int = 0
    cpu_tables: dict[str, tuple[int, ...]] = field(default_factory=dict)  # swapped: CPU blocks
    swapped_filled: dict[str, int] = field(default_factory=dict)  # their written slots, parked
    show_finishing: bool = False
    finishing: dict[str, tuple[int, int]] = field(default_factory=dict)
    # slots released this step as (written, unwritten), until a finished or preempted says why
    released_now: dict[str, tuple[int, int]] = field(default_factory=dict)
    finished_now: int = 0  # requests that finished this step (they ran in its batch)
    shared_blocks: set[int] = field(default_factory=set)  # the blocks of block_refs above 1

    def final_len(self, req: str) -> int:
        info = self.requests.get(req)
        return self.final_lens.get(req, info.bound if info is not None else 0)

    def apply(self, ev: E.Event) -> None:
        # a slot handed out after a finish this step may be one of its: stop showing them
        if self.finishing and type(ev) in _ALLOCATING:
            self.finishing.clear()
        # One dict lookup instead of a chain of isinstance tests: a dry run folds every event of
        # a thousand-request run as it is emitted, and most of them are ``tokens_written``.
        self._HANDLERS[type(ev)](self, ev)

    def _arrived(self, ev: E.RequestArrived) -> None:
        self.requests[ev.req] = RequestInfo(len(self.requests), ev.prompt_len, ev.max_tokens)
        self.waiting.append(ev.req)

    def _admitted(self, ev: E.Admitted) -> None:
        _discard(self.waiting, ev.req)
        self.running.append(ev.req)
        self.requests[ev.req].status = "running"
        self.blocked_now.pop(ev.req, None)

    def _blocked(self, ev: E.AdmissionBlocked) -> None:
        self.blocked_now[ev.req] = ev

    def _block_allocated(self, ev: E.BlockAllocated) -> None:
        # every holder's table counts the block; close_step takes out the duplicates
        self._set_refs(ev.physical, self.block_refs.get(ev.physical, 0) + 1)
        self.block_written.setdefault(ev.physical, 0)
        self._hold(ev.req, self.block_size)

    def _block_shared(self, ev: E.BlockShared) -> None:
        if self.block_refs.get(ev.physical, 0) == 0:  # a cached block taken back: full
            self.block_written[ev.physical] = self.block_size
        self._set_refs(ev.physical, ev.ref_count)
        self._hold(ev.req, self.block_size)
        self.filled[ev.req] = self.filled.get(ev.req, 0) + ev.num_tokens

    def _block_copied(self, ev: E.BlockCopied) -> None:
        self._set_refs(ev.src, ev.src_ref_count)
        self._set_refs(ev.dst, 1)
        self.block_written[ev.dst] = ev.num_tokens

    def _slots_reserved(self, ev: E.SlotsReserved) -> None:
        self._hold(ev.req, ev.length)

    def _tokens_written(self, ev: E.TokensWritten) -> None:
        self.filled[ev.req] = self.filled.get(ev.req, 0) + len(ev.slots)
        if self.block_refs:  # paging: which blocks now hold how many tokens
            for slot in ev.slots:
                b = slot // self.block_size
                if b in self.block_written:
                    self.block_written[b] += 1

    def _block_freed(self, ev: E.BlockFreed) -> None:
        self._set_refs(ev.physical, ev.ref_count)
        if ev.ref_count == 0:
            written = min(self.block_size, self.block_written.get(ev.physical, 0))
            self._released(ev.req, written, self.block_size - written)
            del self.block_refs[ev.physical]
            self.block_written.pop(ev.physical, None)
        self._hold(ev.req, -self.block_size)

    def _reservation_released(self, ev: E.ReservationReleased) -> None:
        self._hold(ev.req, -ev.length)
        written = min(ev.length, self.filled.get(ev.req, 0))
        self._released(ev.req, written, ev.length - written)

    def _swapped_out(self, ev: E.SwappedOut) -> None:
        self.cpu_tables[ev.req] = tuple(c for _, c in ev.block_map)
        self.swapped_filled[ev.req] = self.filled.pop(ev.req, 0)

    def _swapped_in(self, ev: E.SwappedIn) -> None:
        self.cpu_tables.pop(ev.req, None)
        filled = self.filled[ev.req] = self.swapped_filled.pop(ev.req, 0)
        # the device blocks just allocated hold the copied-back tokens, in logical order
        for i, (_, dev) in enumerate(ev.block_map):
            self.block_written[dev] = max(0, min(self.block_size, filled - i * self.block_size))

    def _preempted(self, ev: E.Preempted) -> None:
        _discard(self.running, ev.req)
        self.waiting.insert(0, ev.req)  # back at the queue's front
        self.requests[ev.req].status = "waiting"
        self.filled.pop(ev.req, None)
        self.released_now.pop(ev.req, None)

    def _finished(self, ev: E.Finished) -> None:
        _discard(self.running, ev.req)
        self.requests[ev.req].status = "finished"
        self.finished_now += 1
        self.filled.pop(ev.req, None)
        # A live stream learns a final length only now (a complete trace knew it already).
        self.final_lens.setdefault(ev.req, ev.final_len)
        last = self.released_now.pop(ev.req, None)
        if self.show_finishing and last is not None:
            self.finishing[ev.req] = last

    def _ignored(self, ev: E.Event) -> None:
        """Events that change no count (step ends, cache bookkeeping, swap fallbacks)."""

    #: Each event type's step of the fold (built once, read for every event).
    _HANDLERS: ClassVar[dict[type[E.Event], E.Handler]] = E.handler_table(
        {
            E.RequestArrived: _arrived,
            E.Admitted: _admitted,
            E.AdmissionBlocked: _blocked,
            E.BlockAllocated: _block_allocated,
            E.BlockShared: _block_shared,
            E.BlockCopied: _block_copied,
            E.SlotsReserved: _slots_reserved,
            E.TokensWritten: _tokens_written,
            E.BlockFreed: _block_freed,
            E.ReservationReleased: _reservation_released,
            E.SwappedOut: _swapped_out,
            E.SwappedIn: _swapped_in,
            E.Preempted: _preempted,
            E.Finished: _finished,
        },
        default=_ignored,
    )

    def _hold(self, req: str, slots: int) -> None:
        """``req`` holds ``slots`` more (or fewer); a request holding nothing is dropped."""
        held = self.held[req] = self.held.get(req, 0) + slots
        if held == 0:
            del self.held[req]

    def _set_refs(self, block: int, refs: int) -> None:
        # blocks with several holders are kept apart, so close_step never walks every block
        self.block_refs[block] = refs
        if refs > 1:
            self.shared_blocks.add(block)
        else:
            self.shared_blocks.discard(block)

    def _released(self, req: str, written: int, unwritten: int) -> None:
        w, u = self.released_now.get(req, (0, 0))
        self.released_now[req] = (w + written, u + unwritten)

    def close_step(self, step: int) -> StepAccount:
        token = reservation = internal = held_total = 0
        final_lens, filled_by, requests = self.final_lens, self.filled, self.requests
        for req, held in self.held.items():  # every step of a dry run: final_len, inlined
            filled = filled_by.get(req, 0)
            # unknown final length (it has not stopped): its bound, known since it arrived
            final = final_lens.get(req)
            if final is None:
                info = requests.get(req)
                final = info.bound if info is not None else held
            if final < filled:
                final = filled
            token += filled
            # max(0, min(held, final) - filled) and max(0, held - final), without the calls
            if held > final:
                reservation += final - filled
                internal += held - final
            elif held > filled:
                reservation += held - filled
            held_total += held
        shared, saved, dup_tokens = self._sharing()
        if saved:  # (dup_tokens <= saved: nothing shared, nothing to take out)
            # a shared block is in every holder's count: keep one copy of its written tokens
            # and of its unwritten rest (reserved or internal)
            token, rest = _take(token, dup_tokens)
            reservation, rest = _take(reservation, saved - dup_tokens + rest)
            internal, rest = _take(internal, rest)
            token, _ = _take(token, rest)
        last_token = last_never = 0
        for w, u in self.finishing.values():
            last_token, last_never = last_token + w, last_never + u
        token, internal = token + last_token, internal + last_never
        free_total = self.num_slots - held_total + saved - last_token - last_never
        self.refusals = self._standing_refusals()
        blocked, stranded = 0, False
        for b in self.refusals:
            blocked += b.reason != E.BLOCKED_BATCH_FULL
            stranded = stranded or strands_free(b.reason)
        acct = StepAccount(
            step=step,
            num_slots=self.num_slots,
            token_states=token,
            reservation=reservation,
            internal=internal,
            external=free_total if stranded else 0,
            free=0 if stranded else free_total,
            running=len(self.running),
            waiting=len(self.waiting),
            blocked=blocked,
            cpu_blocks=self.num_cpu_blocks,
            cpu_used=sum(map(len, self.cpu_tables.values())),
            swapped=len(self.cpu_tables),
            shared=shared,
            saved=saved,
            batched=len(self.running) + self.finished_now,
        )
        self.finished_now = 0
        self.blocked_now.clear()
        self.finishing.clear()
        self.released_now.clear()
        return acct

    def _standing_refusals(self) -> tuple[E.AdmissionBlocked, ...]:
        """This step's refusals of requests still waiting at its end."""
        if not self.blocked_now:
            return ()
        # the scheduler refuses one request a step, the queue's head: a list lookup finds it
        # at once, where a set would be built of a thousand waiting requests every step
        waiting = self.waiting if len(self.blocked_now) == 1 else set(self.waiting)
        return tuple(b for r, b in self.blocked_now.items() if r in waiting)

    def _sharing(self) -> tuple[int, int, int]:
        """Physical slots shared, slots saved, and how many of the saved ones hold tokens."""
        shared = saved = dup_tokens = 0
        bs = self.block_size
        for b in self.shared_blocks:
            refs = self.block_refs[b]
            shared += bs
            saved += (refs - 1) * bs
            dup_tokens += (refs - 1) * min(bs, self.block_written.get(b, 0))
        return shared, saved, dup_tokens


#: Events that hand slots to a request.
_ALLOCATING = frozenset(
    (E.SlotsReserved, E.BlockAllocated, E.BlockShared, E.BlockCopied, E.SwappedIn)
)


def _take(amount: int, want: int) -> tuple[int, int]:
    """Take up to ``want`` from ``amount``: what is left of it, and what could not be taken."""
    got = min(amount, max(0, want))
    return amount - got, max(0, want) - got


def _discard(queue: list[str], req: str) -> None:
    if req in queue:
        queue.remove(req)


def final_lengths(events: Iterable[E.Event]) -> dict[str, int]:
    """Each finished request's final length, from a complete event list."""
    return {ev.req: ev.final_len for ev in E.of_kind(events, E.Finished)}


def account(
    events: list[E.Event],
    num_slots: int,
    block_size: int,
    num_cpu_blocks: int = 0,
    *,
    hindsight: bool = True,
    show_finishing: bool = False,
) -> list[StepAccount]:
    """One StepAccount per ``step_end`` event, in order. ``hindsight`` (the default, as the
    paper's Fig. 2 counts a finished run) reads every finished request's final length from the
    events first; without it a final length is known from its ``finished`` event on.
    ``show_finishing`` counts a finishing request in its last step (``Tally.show_finishing``):
    the viewer's frames are ``hindsight=False, show_finishing=True``."""
    tally = Tally(
        num_slots=num_slots,
        block_size=block_size,
        final_lens=final_lengths(events) if hindsight else {},
        num_cpu_blocks=num_cpu_blocks,
        show_finishing=show_finishing,
    )
    out = []
    for ev in events:
        tally.apply(ev)
        match ev:
            case E.StepEnd():
                out.append(tally.close_step(ev.step))
    return out


def time_averaged_shares(accounts: list[StepAccount]) -> dict[str, float]:
    """Mean share of the arena per category over all steps (sums to 1)."""
    if not accounts:
        return {c: 0.0 for c in CATEGORIES}
    return {c: sum(a.share(c) for a in accounts) / len(accounts) for c in CATEGORIES}
