"""Two ways to hand out the same KV arena of ``num_blocks * block_size`` token slots.

Both allocators implement the ``Allocator`` protocol, the one interface the scheduler and the
engine core use. They emit allocator events on the bus; the scheduler emits the rest.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from engine import events as E
from engine.block_pool import Block, BlockPool
from engine.buddy import next_pow2
from engine.placement import make_placement
from engine.request import InvalidConfigError, Request

ALLOCATORS = ("paged", "max", "pow2", "oracle")


def check_allocator(name: str) -> str:
    """``name`` if it is one of ALLOCATORS, else InvalidConfigError (the one place this is
    checked)."""
    if name not in ALLOCATORS:
        raise InvalidConfigError(
            f"unknown allocator {name!r}; choose one of {', '.join(ALLOCATORS)}"
        )
    return name


def check_block_size(block_size: int) -> int:
    """``block_size`` if positive, else InvalidConfigError (the one place this is checked)."""
    if block_size <= 0:
        raise InvalidConfigError(f"block size must be positive, got {block_size}")
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
    - ``admit(req, num_tokens)`` reserves what admission needs (call only after a None check);
    - ``grow(req, num_tokens) -> bool``: room for ``num_tokens`` tokens, False if impossible now;
    - ``release(req_id)``: give everything back;
    - ``block_table(req_id)``: physical blocks in units of ``view_block_size`` (1 for contiguous:
      a run of slots is a table of one-slot blocks, so attention has a single entry point);
    - ``slot(req_id, pos)``: the flat arena slot of a logical position;
    - ``slots_needed(req)``: the most slots ``req`` could ever hold (feasibility check);
    - ``free_slots`` / ``largest_hole``: the free total and the largest run one request could
      be given (for paging any free block will do, so the two are equal)."""

    name: str
    view_block_size: int
    num_slots: int
    bus: E.EventBus

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

    def admit(self, req: Request, num_tokens: int) -> None: ...

    def grow(self, req: Request, num_tokens: int) -> bool: ...

    def release(self, req_id: str) -> None: ...

    def block_table(self, req_id: str) -> list[int]: ...

    def slot(self, req_id: str, pos: int) -> int: ...


class PagedAllocator:
    """Paging: a per-request block table grows by one block only when its last block is full;
    blocks come from anywhere in the pool and go back to it when the request ends."""

    name = "paged"

    def __init__(self, num_blocks: int, block_size: int, bus: E.EventBus) -> None:
        self.block_size = block_size
        self.view_block_size = block_size
        self.num_slots = num_blocks * block_size
        self.pool = BlockPool(num_blocks)
        self.tables: dict[str, list[Block]] = {}
        self.bus = bus

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

    def check_admit(self, req: Request, num_tokens: int) -> AdmitRefusal | None:
        need = cdiv(num_tokens, self.block_size)
        if need <= self.pool.num_free:
            return None
        return AdmitRefusal(
            E.BLOCKED_NO_FREE_BLOCK, need * self.block_size, self.free_slots, self.largest_hole
        )

    def admit(self, req: Request, num_tokens: int) -> None:
        self.tables[req.req_id] = []
        if not self.grow(req, num_tokens):
            raise RuntimeError("admit() called without a successful check_admit()")

    def grow(self, req: Request, num_tokens: int) -> bool:
        table = self.tables[req.req_id]
        need = cdiv(num_tokens, self.block_size) - len(table)
        if need > self.pool.num_free:
            return False
        for _ in range(need):
            block = self.pool.allocate()
            table.append(block)
            self.bus.emit(
                E.BlockAllocated, req=req.req_id, logical=len(table) - 1, physical=block.block_id
            )
        return True

    def release(self, req_id: str) -> None:
        # Tail first: the blocks least likely to be shared go back to the pool first.
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


class ContiguousAllocator:
    """Preallocation: one contiguous run of slots per request, reserved whole at admission.
    ``policy`` sets the run's length:

    - ``max``: the most the request may ever need, its prompt plus ``max_tokens`` (capped at
      ``max_model_len``); a request that declares no bound reserves ``max_model_len``;
    - ``pow2``: its prompt plus the next power of two >= its true output (the slots its output
      fills), so the output is over-reserved by less than 2x, as in the vLLM paper's Orca (Pow2)
      (capped at ``max_model_len``);
    - ``oracle``: exactly its true final length.

    ``placement`` (engine.placement) finds the hole: ``first-fit`` takes exactly the run,
    ``buddy`` rounds it up to a power-of-two block. Events carry the run itself (``start``,
    ``length``); a buddy block's rounding slack past the run is in no request's run, so an
    event fold sees it as free space that nobody can use (``slack_slots`` counts it).

    A request whose run fits in no hole waits even when the free total would do: the refusal's
    reason is then ``no_hole`` - external fragmentation."""

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
        return sum(self.placement.footprint(n) - n for _, n in self.runs.values())

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

    def check_admit(self, req: Request, num_tokens: int) -> AdmitRefusal | None:
        need = self.placement.footprint(max(self.reservation(req), num_tokens))
        if need <= self.largest_hole:
            return None
        reason = E.BLOCKED_NO_HOLE if need <= self.free_slots else E.BLOCKED_NO_SPACE
        return AdmitRefusal(reason, need, self.free_slots, self.largest_hole)

    def admit(self, req: Request, num_tokens: int) -> None:
        need = max(self.reservation(req), num_tokens)
        start = self.placement.place(need)
        if start is None:
            raise RuntimeError("admit() called without a successful check_admit()")
        self.runs[req.req_id] = (start, need)
        self.bus.emit(E.SlotsReserved, req=req.req_id, start=start, length=need)

    def grow(self, req: Request, num_tokens: int) -> bool:
        return num_tokens <= self.runs[req.req_id][1]

    def release(self, req_id: str) -> None:
        start, length = self.runs.pop(req_id)
        self.placement.free(start, length)
        self.bus.emit(E.ReservationReleased, req=req_id, start=start, length=length)

    def block_table(self, req_id: str) -> list[int]:
        start, length = self.runs[req_id]
        return list(range(start, start + length))

    def slot(self, req_id: str, pos: int) -> int:
        return self.runs[req_id][0] + pos


def make_allocator(
    name: str,
    num_blocks: int,
    block_size: int,
    max_model_len: int,
    bus: E.EventBus,
    placement: str = "first-fit",
) -> Allocator:
    """Build the allocator ``name`` (one of ALLOCATORS) over an arena of ``num_blocks`` blocks;
    ``placement`` (first-fit or buddy) applies to the contiguous ones."""
    check_allocator(name)
    check_block_size(block_size)
    if num_blocks <= 0:
        raise InvalidConfigError(f"the KV arena needs at least one block, got {num_blocks}")
    if name == "paged":
        return PagedAllocator(num_blocks, block_size, bus)
    return ContiguousAllocator(num_blocks, block_size, max_model_len, name, bus, placement)
