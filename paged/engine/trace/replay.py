"""The checker's replay: each run's events against a small model of its allocator.

Once a line is a well-typed event (``paged.engine.trace.schema``), its run's ``RunChecker`` replays it,
so a trace that passes folds without error and every frame's numbers are possible ones (slots
inside the arena, shares in [0, 1], no negative free space). What it checks:

- order: ``seq`` strictly increases, ``step`` never goes back, no event follows its step's
  ``step_end``;
- references: events name requests that arrived; blocks and slots lie inside the arena;
- the allocator's invariants: no overlapping reservations; a block is in as many tables as its
  ref count says (sharing comes only through ``block_shared`` with the exact new count, at the
  logical index every holder has the block at, after the request's full shared blocks and with
  no more tokens than the block holds; a block shared in part is copied before its step ends;
  copies on write through ``block_copied``); a cached block is handed out fresh only after its
  ``block_evicted`` and never while referenced; no double free,
  a request releases exactly what it holds before it is preempted or finishes, tokens land in
  slots the request holds at the positions its table maps, at most once each, and never into a
  block others share (except the block being cached as this step computes it); and the engine's
  own reports (free slots, largest hole, queue lengths, final lengths) match the replay;
- the CPU tier (swap preemption): a swap-out maps the request's whole table, in order, to free
  CPU blocks; a swap-in maps exactly those CPU blocks, in order, to the device blocks just
  allocated, whose slots then hold the tokens written before; no CPU block is in two places;
  only unshared blocks move, and a fallback to recompute happens only when the tier really
  lacks room or the request shares a block (its other holders read it in place);
- attention reads (recorded on request): the request's own table at that step, shares of
  attention that add up to 1, and a tile walk whose rows, heads and final (m, l) agree.

Every refusal is one ``TraceError`` line. Pure Python, no torch.
"""

from __future__ import annotations

import math
import re
from typing import ClassVar

from paged.engine.core import events as E
from paged.engine.trace.replay_blocks import BlockReplay, RequestState
from paged.engine.trace.schema import TraceError

FINISH_REASONS = ("eos", "length")
#: How far an attention read's shares may sum from 1, and its (m, l) pairs disagree (rounded
#: to six decimals in the trace, float32 in the engine)
MASS_TOLERANCE = 1e-3
#: Query heads sharing one KV head (GQA's group) an attention read may name
MAX_GROUP = 256
#: Who may have walked an attention_read's tiles (events.AttentionRead says)
WALK_SOURCES = ("cpu", "reference")
#: The largest gap between the walk's output and the backend's a reader takes: far past any
#: rounding, short of a walk that read other blocks
MAX_OUT_DIFF = 1.0
_ZEROS = re.compile(b"\x00+")


class RunChecker(BlockReplay):
    """Replays one run's events against a model of its allocator and scheduler."""

    def feed(self, ev: E.Event) -> None:
        """Replay one event of the run, in order; raises TraceError saying what is impossible
        about it (the replay is then past use)."""
        self._order(ev)
        self._HANDLERS[type(ev)](self, ev)

    def _order(self, ev: E.Event) -> None:
        if ev.seq <= self.last_seq:
            raise TraceError(f"seq {ev.seq} does not follow seq {self.last_seq}")
        if ev.step < self.last_step:
            raise TraceError(f"step {ev.step} comes after step {self.last_step}")
        if ev.step <= self.closed_step:
            raise TraceError(f"event of step {ev.step} after that step's step_end")
        self.last_seq, self.last_step = ev.seq, ev.step

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
        self.reqs[ev.req] = RequestState(ev.prompt_len, ev.max_tokens)
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

    def _holds_nothing(self, ev: E.RequestEvent, r: RequestState) -> None:
        match ev:
            case E.Finished() if r.cpu_table:
                raise TraceError(
                    f"finished while request {ev.req!r:.40} still has blocks on the CPU tier"
                )
        if r.held or r.table or r.run is not None:
            raise TraceError(f"{ev.kind} while request {ev.req!r:.40} still holds memory")

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
            if r.part_shared is not None:
                logical, b = r.part_shared
                if logical < len(r.table) and r.table[logical] == b:
                    raise TraceError(
                        f"request {name!r:.40} ends step {ev.step} still sharing block {b}, "
                        "of which block_shared gave it only part, uncopied"
                    )
                r.part_shared = None
        self.closed_step = ev.step
        self.budget.frame(self.spec.num_slots)

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

    def _attention_read(self, ev: E.AttentionRead) -> None:
        """A decode token's reading of its K/V: its table as the replay holds it at this step,
        one share of attention per block that adds up to 1, and a tile walk of one row per
        block whose running max never falls and whose merged and all-at-once (m, l) are the
        walk's own final ones."""
        self._kind(ev, paged=True)
        r = self._req(ev, "running")
        bs = self.spec.block_size
        n = ev.position // bs + 1
        if tuple(r.table[:n]) != ev.physical or len(r.table) < n:
            raise TraceError(
                f"attention_read at position {ev.position} names blocks {list(ev.physical)!r:.60}"
                f"; the table maps {r.table[:n]!r:.60}"
            )
        if len(ev.mass) != n or any(not 0 <= x <= 1 + MASS_TOLERANCE for x in ev.mass):
            raise TraceError(f"attention_read needs {n} shares in [0, 1], one per block read")
        if abs(sum(ev.mass) - 1) > MASS_TOLERANCE:
            raise TraceError(f"attention_read shares sum to {sum(ev.mass):.6g}, not 1")
        g = len(ev.heads)
        if not 0 < g <= MAX_GROUP or len(set(ev.heads)) != g:
            raise TraceError(f"attention_read needs 1 to {MAX_GROUP} distinct query heads")
        for name in ("tile_m", "tile_l", "part_m", "part_l"):
            rows = getattr(ev, name)
            if len(rows) != n or any(len(row) != g for row in rows):
                raise TraceError(f"attention_read {name} needs {n} rows of {g} numbers")
        for name in ("merged_m", "merged_l", "full_m", "full_l"):
            if len(getattr(ev, name)) != g:
                raise TraceError(f"attention_read {name} needs {g} numbers, one per head")
        if ev.source not in WALK_SOURCES:
            raise TraceError(f"attention_read source must be one of {', '.join(WALK_SOURCES)}")
        split = ev.split or n  # int: the schema's; 0 in traces older than the field

        ends = [min(s + split, n) - 1 for s in range(0, n, split)]  # each split's last tile
        for h in range(g):
            m = [row[h] for row in ev.tile_m]
            if any(m[t] < m[t - 1] for t in range(1, n) if t % split):
                raise TraceError("attention_read's running max falls between tiles of a split")
            # a tile's sum counts its own max as exp(0) = 1: no running or partial sum is less
            if any(row[h] < 1 - MASS_TOLERANCE for row in (*ev.tile_l, *ev.part_l)):
                raise TraceError("attention_read holds a softmax sum below 1")
            top = max(m[t] for t in ends)
            last = (top, sum(ev.tile_l[t][h] * math.exp(m[t] - top) for t in ends))
            for what, (mm, ll) in (
                ("merged", (ev.merged_m[h], ev.merged_l[h])),
                ("all-at-once", (ev.full_m[h], ev.full_l[h])),
            ):
                if abs(mm - last[0]) > MASS_TOLERANCE or abs(ll - last[1]) > MASS_TOLERANCE * ll:
                    raise TraceError(f"attention_read's {what} (m, l) is not its splits' merged")
        if not (0 <= ev.max_diff <= 1 and 0 <= ev.out_diff <= MAX_OUT_DIFF):
            raise TraceError("attention_read differences must be small and non-negative")

    #: Every event kind's replay: the table refuses to be built if one is missing.
    _HANDLERS: ClassVar[dict[type[E.Event], E.Handler]] = E.handler_table(
        {
            **BlockReplay._BLOCK_HANDLERS,
            E.RequestArrived: _request_arrived,
            E.Admitted: _admitted,
            E.AdmissionBlocked: _admission_blocked,
            E.Preempted: _preempted,
            E.Finished: _finished,
            E.StepEnd: _step_end,
            E.SlotsReserved: _slots_reserved,
            E.ReservationReleased: _reservation_released,
            E.TokensWritten: _tokens_written,
            E.AttentionRead: _attention_read,
        }
    )
