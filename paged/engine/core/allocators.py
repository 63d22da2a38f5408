"""Two ways to hand out the same KV arena of ``num_blocks * block_size`` token slots.

Both allocators implement the ``Allocator`` protocol, the one interface the scheduler and the
engine core use. They emit allocator events on the bus; the scheduler emits the rest.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from paged.engine.core import events as E
from paged.engine.core.block_pool import Block, BlockPool
from paged.engine.core.buddy import next_pow2
from paged.engine.core.placement import make_placement
from paged.engine.core.prefix_hash import ROOT_HASH, block_hash
from paged.engine.core.request import Request
from paged.engine.errors import InvalidConfigError

ALLOCATORS = ("paged", "max", "pow2", "oracle")


def check_allocator(name: str) -> str:
    """``name`` if it is one of ALLOCATORS, else InvalidConfigError (the one place this is
    checked)."""
    if name not in ALLOCATORS:
        raise InvalidConfigError(
            f"unknown allocator {name!r}; choose one of {', '.join(ALLOCATORS)}"
        )
    return name


#: The largest block size anything here accepts, in tokens: far above any real engine's
#: (vLLM's largest is 256), and small enough that one block is never a whole arena by itself.
MAX_BLOCK_SIZE = 1 << 16


def check_block_size(block_size: int) -> int:
    """``block_size`` if it is a whole number from 1 to MAX_BLOCK_SIZE, else InvalidConfigError
    (the one place this is checked: the engine, the API, the calculator and the simulator)."""
    if type(block_size) is not int or not 0 < block_size <= MAX_BLOCK_SIZE:
        raise InvalidConfigError(
            f"block size must be a whole number from 1 to {MAX_BLOCK_SIZE:,}, "
            f"got {block_size!r:.40}"
        )
    return block_size


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class AdmitRefusal:
    """Why the head of the queue cannot be admitted now: ``reason`` (one of the
    ``events.BLOCKED_*``), what admission asked for, the free total and the largest free run.
    The scheduler publishes it unchanged as an ``AdmissionBlocked`` event."""

    reason: str
    need_slots: int
    free_slots: int
    largest_hole: int


class Allocator(Protocol):
    """The KV allocator contract.

    - ``check_admit(req, num_tokens)`` -> None, or an ``AdmitRefusal`` saying why not;
    - ``admit(req, num_tokens) -> int`` reserves what admission needs (call only after a None
      check) and returns how many leading tokens are already cached (0 without sharing);
    - ``commit(req, num_tokens)``: this step computes ``req``'s tokens up to ``num_tokens``
      (prefix caching hashes the blocks full by then);
    - ``grow(req, num_tokens) -> bool``: room for ``num_tokens`` tokens, False if impossible now;
    - ``release(req_id)``: give everything back;
    - ``block_table(req_id)``: physical blocks in units of ``view_block_size`` (1 for contiguous:
      a run of slots is a table of one-slot blocks, so attention has a single entry point);
    - ``slot(req_id, pos)``: the flat arena slot of a logical position; ``slots(req_id, start,
      end)`` those of positions ``start`` to ``end`` (the scheduler's slot mapping);
    - ``slots_needed(req)``: the most slots ``req`` could ever hold (feasibility check);
    - ``free_slots`` / ``largest_hole``: the free total and the largest run one request could
      be given (for paging any free block will do, so the two are equal);
    - ``grows_from_free``: ``grow`` draws on the free memory, so preempting others can make it
      succeed (paging); a contiguous run never grows, and only its own request can give way;
    - ``can_share``: blocks may have several holders (paging). Only then may the scheduler
      ``fork(parent, child, num_tokens) -> int`` (the child shares the parent's first
      ``num_tokens`` tokens and need not compute them) once ``can_fork()`` says there is room;
    - ``take_copies()``: the ``(src, dst)`` block copies due before the next forward
      (copy-on-write); ``take_swaps()``: the ``(device, cpu)`` and ``(cpu, device)`` copies
      (swap preemption); both empty for an allocator that never makes them;
    - ``swap_out(req_id)``: park a preempted request's blocks in the CPU tier and return the
      moves, or None: then it is released and recomputed."""

    name: str
    view_block_size: int
    num_slots: int
    bus: E.EventBus
    grows_from_free: bool
    can_share: bool

    @property
    def free_slots(self) -> int: ...

    @property
    def largest_hole(self) -> int: ...

    @property
    def slack_slots(self) -> int:
        """Slots placed but in no request's table or run (buddy rounding); 0 for paging."""
        ...

    def slots_needed(self, req: Request) -> int: ...

    def check_admit(self, req: Request, num_tokens: int) -> AdmitRefusal | None: ...

    def admit(self, req: Request, num_tokens: int) -> int: ...

    def commit(self, req: Request, num_tokens: int) -> None: ...

    def grow(self, req: Request, num_tokens: int) -> bool: ...

    def release(self, req_id: str) -> None: ...

    def block_table(self, req_id: str) -> Sequence[int]: ...

    def slot(self, req_id: str, pos: int) -> int: ...

    def slots(self, req_id: str, start: int, end: int) -> list[int]: ...

    def can_fork(self) -> bool: ...

    def fork(self, parent: Request, child: Request, num_tokens: int) -> int: ...

    def take_copies(self) -> list[tuple[int, int]]: ...

    def take_swaps(self) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]: ...

    def swap_out(self, req_id: str) -> list[tuple[int, int]] | None: ...


class PagedAllocator:
    """Paging: a per-request block table grows by one block only when its last block is full;
    blocks come from anywhere in the pool and go back to it when the request ends.

    With ``enable_prefix_caching`` every full block is hashed (``paged.engine.core.prefix_hash``) and kept
    findable, even after it is freed, until the pool hands it out fresh; admission takes the
    longest cached run of a prompt's full blocks instead of computing them again (never the
    block holding the last prompt token: at least one token is always computed). ``fork`` lets
    a request share another's blocks (parallel sampling); a write into a block with more than
    one holder first copies it (``pending_copies``, which the runner executes before the
    forward)."""

    name = "paged"
    grows_from_free = True
    can_share = True

    def __init__(
        self, num_blocks: int, block_size: int, bus: E.EventBus, enable_prefix_caching: bool = False
    ) -> None:
        self.block_size = block_size
        self.view_block_size = block_size
        self.num_slots = num_blocks * block_size
        self.pool = BlockPool(num_blocks, on_evict=self._evicted)
        self.tables: dict[str, list[Block]] = {}
        self.bus = bus
        self.enable_prefix_caching = enable_prefix_caching
        self.hashes: dict[str, list[str]] = {}  # chain hashes of each request's full blocks
        #: (src, dst) block copies the next forward must make first (copy-on-write)
        self.pending_copies: list[tuple[int, int]] = []

    @property
    def free_slots(self) -> int:
        return self.pool.num_free * self.block_size

    @property
    def largest_hole(self) -> int:
        return self.free_slots  # blocks need not be adjacent: every free block is usable

    @property
    def slack_slots(self) -> int:
        return 0  # a block is handed out whole and counted in its table

    def slots_needed(self, req: Request) -> int:
        """Slots this request needs at the very most (for up-front feasibility checks)."""
        return cdiv(req.max_final_len, self.block_size) * self.block_size

    def cached_prefix(self, req: Request, num_tokens: int) -> list[Block]:
        """The longest run of cached blocks that begins ``req``'s first ``num_tokens`` tokens,
        leaving at least the last token to compute. Empty without prefix caching."""
        if not self.enable_prefix_caching:
            return []
        bs, tokens = self.block_size, req.all_token_ids[:num_tokens]
        hits: list[Block] = []
        parent = ROOT_HASH
        for i in range((num_tokens - 1) // bs):
            parent = block_hash(parent, tokens[i * bs : (i + 1) * bs])
            block = self.pool.lookup(parent)
            if block is None:
                break
            hits.append(block)
        return hits

    def check_admit(self, req: Request, num_tokens: int) -> AdmitRefusal | None:
        hits = self.cached_prefix(req, num_tokens)
        # a cached block nobody holds leaves the free queue when it is taken back, so it is
        # needed from the free blocks as much as a fresh one
        need = cdiv(num_tokens, self.block_size) - sum(1 for b in hits if b.ref_count > 0)
        if need <= self.pool.num_free:
            return None
        return AdmitRefusal(
            E.BLOCKED_NO_FREE_BLOCK, need * self.block_size, self.free_slots, self.largest_hole
        )

    def admit(self, req: Request, num_tokens: int) -> int:
        """Reserve ``num_tokens`` tokens; returns how many of them the cache already holds."""
        hits = self.cached_prefix(req, num_tokens)
        table: list[Block] = []
        self.tables[req.req_id] = table
        for block in hits:
            self._share(req.req_id, block, self.block_size)
        if hits:
            self.bus.emit(
                E.CacheHit,
                req=req.req_id,
                blocks=tuple(b.block_id for b in hits),
                tokens_saved=len(hits) * self.block_size,
            )
        self.hashes[req.req_id] = [b.block_hash for b in hits if b.block_hash is not None]
        if not self._append(req.req_id, num_tokens):
            raise RuntimeError("admit() called without a successful check_admit()")
        return len(hits) * self.block_size

    def can_fork(self) -> bool:
        """Room for what a fork's first step needs: one block (a copy or a fresh one)."""
        return self.pool.num_free >= 1

    def fork(self, parent: Request, child: Request, num_tokens: int) -> int:
        """``child`` (same first ``num_tokens`` tokens as ``parent``, which has computed them)
        shares the blocks holding them. Returns ``num_tokens``: the tokens it need not compute."""
        bs = self.block_size
        table: list[Block] = []
        self.tables[child.req_id] = table
        for i, block in enumerate(self.tables[parent.req_id][: cdiv(num_tokens, bs)]):
            self._share(child.req_id, block, min(bs, num_tokens - i * bs))
        self.hashes[child.req_id] = list(self.hashes.get(parent.req_id, []))[: num_tokens // bs]
        return num_tokens

    def _share(self, req_id: str, block: Block, num_tokens: int) -> None:
        self.pool.share(block)
        table = self.tables[req_id]
        table.append(block)
        self.bus.emit(
            E.BlockShared,
            req=req_id,
            logical=len(table) - 1,
            physical=block.block_id,
            ref_count=block.ref_count,
            num_tokens=num_tokens,
        )

    def grow(self, req: Request, num_tokens: int) -> bool:
        table = self.tables[req.req_id]
        first = req.num_computed // self.block_size  # the block the next write lands in
        cow = first < len(table) and table[first].ref_count > 1
        need = cdiv(num_tokens, self.block_size) - len(table) + int(cow)
        if need <= 0 and not cow:
            return True  # room in the table already: most decode steps of every request
        if need > self.pool.num_free:
            return False
        if cow:
            self._copy_on_write(req, first)
        return self._append(req.req_id, num_tokens)

    def _copy_on_write(self, req: Request, logical: int) -> None:
        table = self.tables[req.req_id]
        src = table[logical]
        dst = self.pool.allocate()
        refs = self.pool.release(src)
        table[logical] = dst
        self.pending_copies.append((src.block_id, dst.block_id))
        self.bus.emit(
            E.BlockCopied,
            req=req.req_id,
            logical=logical,
            src=src.block_id,
            dst=dst.block_id,
            src_ref_count=refs,
            num_tokens=req.num_computed - logical * self.block_size,
        )

    def _append(self, req_id: str, num_tokens: int) -> bool:
        table = self.tables[req_id]
        need = cdiv(num_tokens, self.block_size) - len(table)
        if need > self.pool.num_free:
            return False
        for _ in range(need):
            block = self.pool.allocate()
            table.append(block)
            self.bus.emit(
                E.BlockAllocated, req=req_id, logical=len(table) - 1, physical=block.block_id
            )
        return True

    def commit(self, req: Request, num_tokens: int) -> None:
        """This step's forward computes ``req``'s tokens up to ``num_tokens``: cache the blocks
        full by then (prefix caching only), announcing each with a ``BlockStored`` event.
        Caching them before the forward is safe: every layer stores the whole step's K/V
        before any attention reads it, so a request admitted later in the same step may
        already share them (16 requests with one system prompt compute it once)."""
        if not self.enable_prefix_caching:
            return
        bs, table, chain = self.block_size, self.tables[req.req_id], self.hashes[req.req_id]
        if len(chain) >= num_tokens // bs:  # a decode step that fills no block
            return
        tokens = req.token_ids(0, num_tokens)
        parent = chain[-1] if chain else ROOT_HASH
        for i in range(len(chain), num_tokens // bs):
            ids = tokens[i * bs : (i + 1) * bs]
            h = block_hash(parent, ids)
            chain.append(h)
            if self.pool.cache(table[i], h):
                self.bus.emit(
                    E.BlockStored,
                    block_hash=h,
                    parent_block_hash=parent,
                    token_ids=tuple(ids),
                    block_size=bs,
                    physical=table[i].block_id,
                )
            parent = h

    def take_copies(self) -> list[tuple[int, int]]:
        """The copy-on-write copies scheduled since the last call (the runner makes them)."""
        out, self.pending_copies = self.pending_copies, []
        return out

    def take_swaps(self) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        """No CPU tier here (engine.core.swap.SwappingPagedAllocator has one): nothing moves."""
        return [], []

    def swap_out(self, req_id: str) -> list[tuple[int, int]] | None:
        """No CPU tier: a preempted request is recomputed."""
        return None

    def _evicted(self, block: Block, old_hash: str) -> None:
        self.bus.emit(E.BlockEvicted, block_hash=old_hash, physical=block.block_id)

    def release(self, req_id: str) -> None:
        # Tail first: the blocks least likely to be shared go back to the pool first (and, with
        # prefix caching, are evicted first).
        self.hashes.pop(req_id, None)
        for block in reversed(self.tables.pop(req_id)):
            refs = self.pool.release(block)
            self.bus.emit(E.BlockFreed, req=req_id, physical=block.block_id, ref_count=refs)

    def block_table(self, req_id: str) -> list[int]:
        return [b.block_id for b in self.tables[req_id]]

    def slot(self, req_id: str, pos: int) -> int:
        return (
            self.tables[req_id][pos // self.block_size].block_id * self.block_size
            + pos % self.block_size
        )

    def slots(self, req_id: str, start: int, end: int) -> list[int]:
        table, bs = self.tables[req_id], self.block_size
        return [table[p // bs].block_id * bs + p % bs for p in range(start, end)]


class ContiguousAllocator:
    """Preallocation: one contiguous run of slots per request, reserved whole at admission.
    ``policy`` sets the run's length:

    - ``max``: the most the request may ever need, its prompt plus ``max_tokens`` (capped at
      ``max_model_len``); a request that declares no bound reserves ``max_model_len``;
    - ``pow2``: its prompt plus the next power of two >= its true output (the slots its output
      fills), so the output is over-reserved by less than 2x, as in the vLLM paper's Orca (Pow2)
      (capped at ``max_model_len``);
    - ``oracle``: exactly its true final length.

    ``placement`` (engine.core.placement) finds the hole: ``first-fit`` takes exactly the run,
    ``buddy`` rounds it up to a power-of-two block. Events carry the run itself (``start``,
    ``length``); a buddy block's rounding slack past the run is in no request's run, so an
    event fold sees it as free space that nobody can use (``slack_slots`` counts it).

    A request whose run fits in no hole waits even when the free total would do: the refusal's
    reason is then ``no_hole`` - external fragmentation.

    Runs are never shared, copied or swapped: a parallel sample reserves and computes its own
    prompt, and a preempted request is recomputed."""

    grows_from_free = False
    can_share = False

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        max_model_len: int,
        policy: str,
        bus: E.EventBus,
        placement: str = "first-fit",
    ) -> None:
        if policy not in ("max", "pow2", "oracle"):
            raise InvalidConfigError(f"unknown contiguous policy {policy!r}")
        self.name = policy
        self.view_block_size = 1
        self.num_slots = num_blocks * block_size
        self.max_model_len = max_model_len
        self.bus = bus
        self.placement = make_placement(placement, self.num_slots)
        self.runs: dict[str, tuple[int, int]] = {}
        self._slack = 0  # sum of footprint - length over the runs (read every dry-run step)

    @property
    def holes(self) -> list[tuple[int, int]]:
        """Free runs, sorted ``(start, length)``."""
        return self.placement.holes()

    @property
    def free_slots(self) -> int:
        return self.placement.free_slots

    @property
    def largest_hole(self) -> int:
        return self.placement.largest_hole

    @property
    def slack_slots(self) -> int:
        """Slots placed but outside every run: buddy rounding slack (0 under first-fit)."""
        return self._slack

    def reservation(self, req: Request) -> int:
        if self.name == "max":
            return min(self.max_model_len, req.max_final_len)
        final = req.true_final_len
        if self.name == "oracle":
            return final
        output = max(0, final - req.prompt_len)
        rounded = req.prompt_len + (next_pow2(output) if output else 0)
        return min(max(self.max_model_len, final), rounded)

    def slots_needed(self, req: Request) -> int:
        """Slots the placed run takes. Raises InvalidConfigError when the placement could not
        hold it even in an empty arena (a buddy's largest block is below the arena size)."""
        need = self.placement.footprint(self.reservation(req))
        if need > self.placement.max_run and self.placement.max_run < self.num_slots:
            raise InvalidConfigError(
                f"request {req.req_id} needs a {need}-slot block but the largest "
                f"{self.placement.name} block in a {self.num_slots}-slot arena is "
                f"{self.placement.max_run}"
            )
        return need

    def run_length(self, req: Request, num_tokens: int) -> int:
        """The run admission reserves for ``req`` holding ``num_tokens``: its policy's
        reservation, unless the request already outgrew that (a pow2 or oracle final length
        that proved short, as when the model stops later than the run that taught it): then
        the max policy's, rather than one slot more at each readmission, though never more
        than the placement can hold in an empty arena (a bound past the arena, accepted on a
        short hint, waited forever for a hole no arena has; a longest run may still do)."""
        r = self.reservation(req)
        if num_tokens <= r:
            return r
        bound = min(self.max_model_len, req.max_final_len, self.placement.max_run)
        return max(num_tokens, bound)

    def check_admit(self, req: Request, num_tokens: int) -> AdmitRefusal | None:
        need = self.placement.footprint(self.run_length(req, num_tokens))
        largest = self.largest_hole
        if need <= largest:
            return None
        free = self.free_slots
        reason = E.BLOCKED_NO_HOLE if need <= free else E.BLOCKED_NO_SPACE
        return AdmitRefusal(reason, need, free, largest)

    def admit(self, req: Request, num_tokens: int) -> int:
        need = self.run_length(req, num_tokens)
        start = self.placement.place(need)
        if start is None:
            raise RuntimeError("admit() called without a successful check_admit()")
        self.runs[req.req_id] = (start, need)
        self._slack += self.placement.footprint(need) - need
        self.bus.emit(E.SlotsReserved, req=req.req_id, start=start, length=need)
        return 0  # a run is private: no prefix is ever shared, each request computes its own

    def commit(self, req: Request, num_tokens: int) -> None:
        """Nothing to cache: contiguous runs cannot share."""

    def grow(self, req: Request, num_tokens: int) -> bool:
        return num_tokens <= self.runs[req.req_id][1]

    def release(self, req_id: str) -> None:
        start, length = self.runs.pop(req_id)
        self._slack -= self.placement.footprint(length) - length
        self.placement.free(start, length)
        self.bus.emit(E.ReservationReleased, req=req_id, start=start, length=length)

    def block_table(self, req_id: str) -> Sequence[int]:
        # a range, not a list: the run spans max_model_len slots and the scheduler asks for it
        # every step of every request (the simulator's hottest line as a list)
        start, length = self.runs[req_id]
        return range(start, start + length)

    def slot(self, req_id: str, pos: int) -> int:
        return self.runs[req_id][0] + pos

    def slots(self, req_id: str, start: int, end: int) -> list[int]:
        base = self.runs[req_id][0]
        return list(range(base + start, base + end))

    def can_fork(self) -> bool:
        return False

    def fork(self, parent: Request, child: Request, num_tokens: int) -> int:
        raise RuntimeError("a contiguous run cannot be shared: admit the sample on its own")

    def take_copies(self) -> list[tuple[int, int]]:
        return []

    def take_swaps(self) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        return [], []

    def swap_out(self, req_id: str) -> list[tuple[int, int]] | None:
        return None


def make_allocator(
    name: str,
    num_blocks: int,
    block_size: int,
    max_model_len: int,
    bus: E.EventBus,
    placement: str = "first-fit",
    enable_prefix_caching: bool = False,
) -> Allocator:
    """Build the allocator ``name`` (one of ALLOCATORS) over an arena of ``num_blocks`` blocks;
    ``placement`` (first-fit or buddy) applies to the contiguous ones, prefix caching to paging
    only (a contiguous run is private to its request)."""
    check_allocator(name)
    check_block_size(block_size)
    if num_blocks <= 0:
        raise InvalidConfigError(f"the KV arena needs at least one block, got {num_blocks}")
    if name == "paged":
        return PagedAllocator(num_blocks, block_size, bus, enable_prefix_caching)
    return ContiguousAllocator(num_blocks, block_size, max_model_len, name, bus, placement)
