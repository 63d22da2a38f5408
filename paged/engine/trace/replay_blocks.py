"""The checker's replay of paging's blocks: tables and ref counts, the prefix cache, the CPU tier.

``BlockReplay`` holds the model of one run's arena and requests that ``RunChecker``
(``paged.engine.trace.replay``) replays every event against, and the rules for the events that move
blocks; the scheduler's events, contiguous runs and written tokens are ``RunChecker``'s. Every
refusal is one ``TraceError`` line. Pure Python, no torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from paged.engine.core import events as E
from paged.engine.core.prefix_hash import ROOT_HASH
from paged.engine.trace.header import RunHeader
from paged.engine.trace.schema import Budget, TraceError


@dataclass
class RequestState:
    """One request as the replay has seen it so far."""

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
    #: (logical, block) of a block shared with fewer tokens than it holds: the request must
    #: copy it before the step ends, or its tokens in it are counted twice
    part_shared: tuple[int, int] | None = None


class BlockReplay:
    """One run's arena and requests as the replay sees them, and how paging's events (blocks
    allocated, shared, copied, cached, evicted, freed, swapped) change them."""

    def __init__(self, spec: RunHeader, budget: Budget) -> None:
        self.spec, self.budget = spec, budget
        n, bs = spec.num_slots, spec.block_size
        self.num_blocks = n // bs
        self.reqs: dict[str, RequestState] = {}
        self.refs = [0] * self.num_blocks  # paging: holders per block
        self.hash_of: list[str | None] = [None] * self.num_blocks
        self.stored_step = [-1] * self.num_blocks  # step a block was last cached in
        # the logical index every table holding a block has it at (kept while it is cached)
        self.logical_of = [-1] * self.num_blocks
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

    def _req(self, ev: E.RequestEvent, status: str) -> RequestState:
        r = self.reqs.get(ev.req)
        if r is None:
            raise TraceError(f"{ev.kind} names request {ev.req!r:.40}, which never arrived")
        if r.status != status:
            raise TraceError(
                f"{ev.kind} for request {ev.req!r:.40} while it is {r.status}, not {status}"
            )
        return r

    def _kind(self, ev: E.Event, paged: bool) -> None:
        if self.spec.paged != paged:
            raise TraceError(
                f"{ev.kind} event in a {'paged' if self.spec.paged else 'contiguous'} run"
            )

    def _touch(self, n: int) -> None:
        self.budget.touch(n)

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
        self.logical_of[b] = ev.logical
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
        if self.logical_of[b] != ev.logical:
            raise TraceError(
                f"block_shared puts block {b} at logical {ev.logical}; its holders have it at "
                f"logical {self.logical_of[b]}"
            )
        self._shared_tokens(ev, r, b)
        self._take(b, fresh=False)
        r.table.append(b)
        r.held += self.spec.block_size
        r.filled += ev.num_tokens
        if ev.num_tokens < self._tokens_in(b):
            r.part_shared = (ev.logical, b)

    def _tokens_in(self, b: int) -> int:
        """The tokens block ``b`` holds: all of them once cached (a block is cached full, maybe
        in this very step before its tokens_written), else the slots written so far."""
        bs = self.spec.block_size
        if self.hash_of[b] is not None:
            return bs
        return bs - self.written.count(0, b * bs, (b + 1) * bs)

    def _shared_tokens(self, ev: E.BlockShared, r: RequestState, b: int) -> None:
        """The engine shares a request's leading blocks, each full but maybe the last of a
        fork, whose K/V the source block already holds; a cached block taken back is full."""
        bs, has = self.spec.block_size, self._tokens_in(b)
        if r.filled != ev.logical * bs:
            raise TraceError(
                f"block_shared at logical {ev.logical} for request {ev.req!r:.40}, which has "
                f"{r.filled} tokens, not the {ev.logical * bs} of the full blocks before it"
            )
        fits = ev.num_tokens == bs if self.refs[b] == 0 else 1 <= ev.num_tokens <= has
        if not fits:
            raise TraceError(
                f"block_shared carries {ev.num_tokens} tokens of block {b}, which holds {has} "
                f"of {bs}"
            )

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
        if ev.num_tokens != r.filled - ev.logical * bs:
            raise TraceError(
                f"block_copied carries {ev.num_tokens} tokens; request {ev.req!r:.40} has "
                f"{r.filled - ev.logical * bs} in logical block {ev.logical}"
            )
        self._take(dst, fresh=True)
        self.written[dst * bs : dst * bs + ev.num_tokens] = b"\x01" * ev.num_tokens
        self.logical_of[dst] = ev.logical
        self.refs[src] -= 1
        r.table[ev.logical] = dst
        if r.part_shared == (ev.logical, src):
            r.part_shared = None

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

    #: The events this class replays (``RunChecker`` adds the rest).
    _BLOCK_HANDLERS: ClassVar[dict[type[E.Event], E.Handler]] = {
        E.BlockAllocated: _block_allocated,
        E.BlockShared: _block_shared,
        E.CacheHit: _cache_hit,
        E.BlockCopied: _block_copied,
        E.BlockStored: _block_stored,
        E.BlockEvicted: _block_evicted,
        E.AllBlocksCleared: _all_blocks_cleared,
        E.BlockFreed: _block_freed,
        E.SwappedOut: _swapped_out,
        E.SwappedIn: _swapped_in,
        E.SwapFallback: _swap_fallback,
    }
