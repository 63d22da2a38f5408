"""Continuous batching: requests join and leave the running batch at every step.

Each step: every running request gets room for its next token (when the arena has none, the most
recently admitted request is preempted - its memory freed, itself requeued at the front to be
recomputed, or with ``preemption_mode="swap"`` its blocks moved to the CPU tier, see
paged/engine/core/swap.py); then waiting requests are admitted first-come-first-served while their prompt fits.
The head of the queue is never skipped, so a blocked head blocks everyone behind it.

Sharing (paging): admission asks the allocator how much of a prompt is cached and feeds only the
rest; a parallel sample waits until its first sibling has computed the prompt, then forks its
blocks and computes just the last prompt token. ``commit`` tells the allocator what each step
will have computed, so full blocks are cached as soon as their K/V exist.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection
from typing import Literal

from paged.engine.core import events as E
from paged.engine.core.allocators import AdmitRefusal, Allocator
from paged.engine.core.request import Batch, Request, ScheduledSeq, Status
from paged.engine.errors import InvalidRequestError


class Scheduler:
    def __init__(
        self,
        allocator: Allocator,
        bus: E.EventBus,
        max_num_seqs: int = 256,
        max_num_batched_tokens: int = 8192,
        eos_token_id: int | Collection[int] | None = None,
        preemption_mode: str = "recompute",
    ) -> None:
        self.allocator = allocator
        self.preemption_mode = preemption_mode
        self.bus = bus
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        #: the ids a sequence stops at (a model may have several: any one ends it)
        self.stop_ids: frozenset[int] = frozenset(
            ()
            if eos_token_id is None
            else (eos_token_id,)
            if isinstance(eos_token_id, int)
            else eos_token_id
        )
        self.pending: list[Request] = []  # not arrived yet, by arrival step
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []  # in admission order
        self.num_preemptions = 0
        self.prefill_tokens_computed = 0  # tokens fed on admission (prompts, recomputes)
        self.prefix_cache_hit_tokens = 0  # tokens admission found cached or forked
        self._by_id: dict[str, Request] = {}

    def add(self, req: Request) -> None:
        self._by_id[req.req_id] = req
        self.pending.append(req)
        self.pending.sort(key=lambda r: r.arrival_step)

    def knows(self, req_id: str) -> bool:
        """Whether a request of that id was ever added."""
        return req_id in self._by_id

    def has_unfinished(self) -> bool:
        return bool(self.pending or self.waiting or self.running)

    def schedule(self, step: int) -> Batch:
        self._arrive(step)
        preempted_before = self.num_preemptions
        seqs = self._schedule_running()
        # After a preemption memory is short: admitting now would only evict someone again.
        if self.waiting and self.num_preemptions == preempted_before:
            seqs += self._admit_waiting(sum(len(s.token_ids) for s in seqs))
        out, inn = self.allocator.take_swaps()
        return Batch(
            seqs=seqs,
            block_size=self.allocator.view_block_size,
            copies=self.allocator.take_copies(),
            swap_out=out,
            swap_in=inn,
        )

    def _arrive(self, step: int) -> None:
        while self.pending and self.pending[0].arrival_step <= step:
            req = self.pending.pop(0)
            self.waiting.append(req)
            self.bus.emit(
                E.RequestArrived,
                req=req.req_id,
                prompt_len=req.prompt_len,
                max_tokens=req.params.max_tokens,
            )

    def _schedule_running(self) -> list[ScheduledSeq]:
        seqs, i = [], 0
        while i < len(self.running):
            req = self.running[i]
            while not self.allocator.grow(req, req.num_tokens):
                # evict the latest admitted, unless freeing others cannot help (a full run)
                victim = self.running[-1] if self.allocator.grows_from_free else req
                self._preempt(victim)
                if victim is req:
                    break
            else:
                seqs.append(self._seq(req))
                i += 1
        return seqs

    def _preempt(self, req: Request) -> None:
        self.running.remove(req)
        if self.preemption_mode != "swap" or self.allocator.swap_out(req.req_id) is None:
            self.allocator.release(req.req_id)
            req.num_computed = 0  # recomputed from its prompt on readmission
        req.status = Status.WAITING
        req.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(req)
        self.bus.emit(E.Preempted, req=req.req_id, num_generated=len(req.output_token_ids))

    def _admit_waiting(self, num_batched: int) -> list[ScheduledSeq]:
        seqs: list[ScheduledSeq] = []
        while self.waiting:
            req = self.waiting[0]
            n = req.num_tokens
            new = n - req.num_computed  # a swapped-in request feeds only its last token
            if len(self.running) >= self.max_num_seqs or (
                seqs and num_batched + new > self.max_num_batched_tokens
            ):
                alloc = self.allocator
                self._blocked(
                    req, AdmitRefusal(E.BLOCKED_BATCH_FULL, n, alloc.free_slots, alloc.largest_hole)
                )
                break
            parent = self._fork_source(req)
            if parent is False:
                break  # its parent is computing the shared prompt this very step: wait for it
            if parent is None:
                refusal = self.allocator.check_admit(req, n)
                if refusal is not None:
                    self._blocked(req, refusal)
                    self._check_not_stuck(req, refusal)
                    break
            self.waiting.popleft()
            self.bus.emit(E.Admitted, req=req.req_id, num_tokens=n)
            resumed = req.num_computed > 0  # swapped out: its K/V come back from the CPU tier
            if parent is None:
                cached = self.allocator.admit(req, n)
            else:
                cached = self.allocator.fork(parent, req, n - 1)
                req.num_computed = cached
                if not self.allocator.grow(req, n):  # can_fork promised the one block
                    raise RuntimeError("a fork found no block for its first write")
            req.num_computed = cached
            if not resumed:
                self.prefix_cache_hit_tokens += cached
                self.prefill_tokens_computed += n - cached
            new = n - cached
            req.status = Status.RUNNING
            self.running.append(req)
            seqs.append(self._seq(req))
            num_batched += new
        return seqs

    def _fork_source(self, req: Request) -> Request | None | Literal[False]:
        """For a parallel sample: the running sibling whose prompt blocks it can share (paging
        only), False when that sibling is still computing them, None to admit it on its own."""
        parent = self._by_id.get(req.parent_id) if req.parent_id is not None else None
        if (
            parent is None
            or req.output_token_ids
            or parent.status is not Status.RUNNING
            or not self.allocator.can_share
        ):
            return None
        if parent.num_computed < req.prompt_len:
            return False
        return parent if self.allocator.can_fork() else None

    def _check_not_stuck(self, req: Request, refusal: AdmitRefusal) -> None:
        """Refused with nothing running and the whole arena free, the queue's head can never be
        admitted: nothing will free memory for it, and it blocks everyone behind it. add_request
        refuses what cannot fit; this is a contiguous run whose final-length hint proved short
        and that outgrew the longest run the arena can hold. Raise instead of stepping forever."""
        if self.running or self.allocator.free_slots < self.allocator.num_slots:
            return
        raise InvalidRequestError(
            f"request {req.req_id} can never run again: it has grown to {req.num_tokens} tokens "
            f"and needs {refusal.need_slots} slots, but the longest run this empty arena can "
            f"hold is {refusal.largest_hole} (its final-length hint proved short)"
        )

    def _blocked(self, req: Request, refusal: AdmitRefusal) -> None:
        self.bus.emit(
            E.AdmissionBlocked,
            req=req.req_id,
            reason=refusal.reason,
            need_slots=refusal.need_slots,
            free_slots=refusal.free_slots,
            largest_hole=refusal.largest_hole,
        )

    def _seq(self, req: Request) -> ScheduledSeq:
        """The tokens ``req`` feeds this step: everything not yet computed (its whole prompt on
        admission, one token while decoding)."""
        start, end = req.num_computed, req.num_tokens
        self.allocator.commit(req, end)
        return ScheduledSeq(
            request=req,
            token_ids=req.token_ids(start, end),
            positions=list(range(start, end)),
            slot_mapping=self.allocator.slots(req.req_id, start, end),
            block_table=self.allocator.block_table(req.req_id),
            context_len=end,
        )

    def update(self, batch: Batch, next_tokens: list[int]) -> list[Request]:
        """Record this step's K/V writes and sampled tokens; finish and free what is done.
        Returns the requests that finished."""
        finished = []
        emit = self.bus.emit  # once, not per sequence: every running request passes here
        for seq, token in zip(batch.seqs, next_tokens, strict=True):
            req = seq.request
            emit(
                E.TokensWritten,
                req=req.req_id,
                positions=tuple(seq.positions),
                slots=tuple(seq.slot_mapping),
            )
            req.num_computed = seq.context_len
            req.output_token_ids.append(token)
            reason = self._finish_reason(req, token)
            if reason is not None:
                self._finish(req, reason)
                finished.append(req)
        return finished

    def _finish_reason(self, req: Request, token: int) -> str | None:
        if not req.params.ignore_eos and token in self.stop_ids:
            return "eos"
        if len(req.output_token_ids) >= req.params.max_tokens:
            return "length"
        return None

    def _finish(self, req: Request, reason: str) -> None:
        self.running.remove(req)
        self.allocator.release(req.req_id)
        req.status, req.finish_reason = Status.FINISHED, reason
        self.bus.emit(
            E.Finished,
            req=req.req_id,
            final_len=req.num_computed,
            num_generated=len(req.output_token_ids),
            reason=reason,
        )
