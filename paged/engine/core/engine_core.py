"""The step loop: schedule, run the model (or a stand-in), record tokens, repeat."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Protocol

from paged.engine.core import events as E
from paged.engine.core.allocators import Allocator, make_allocator
from paged.engine.core.request import Batch, Request
from paged.engine.core.scheduler import Scheduler
from paged.engine.core.swap import SwappingPagedAllocator
from paged.engine.errors import InvalidConfigError, InvalidRequestError


class Runner(Protocol):
    def execute(self, batch: Batch) -> list[int]:
        """Run one step's block copies (``batch.swap_out`` then ``swap_in``) and its forward
        pass; return one next token per scheduled sequence."""

    def forget(self, req_id: str) -> None:
        """Drop whatever the runner keeps for a request that has finished."""


@dataclass(frozen=True)
class EngineConfig:
    """What an engine core is built from: the allocator by name over an arena of ``num_blocks``
    blocks of ``block_size`` slots, and the scheduler's limits. Made only by
    ``EngineArgs.create_engine_config``, which has checked every field: nothing here checks
    again."""

    allocator: str
    num_blocks: int
    block_size: int
    max_model_len: int
    max_num_seqs: int = 256
    max_num_batched_tokens: int | None = None
    placement: str = "first-fit"  # where a contiguous run goes: first-fit or buddy
    preemption_mode: str = "recompute"  # or swap (paged only): paged/engine/core/swap.py
    num_cpu_blocks: int = 0  # the CPU tier swap preemption moves blocks to
    #: Paging only. Off by default: the lessons' traces and the essay's baseline have no sharing.
    enable_prefix_caching: bool = False
    #: The arena's element type by name (auto: the model's); the model side resolves it.
    kv_cache_dtype: str = "auto"

    @property
    def num_slots(self) -> int:
        return self.num_blocks * self.block_size


def build_core(
    config: EngineConfig,
    runner: Runner,
    eos_token_id: int | Collection[int] | None,
    bus: E.EventBus | None = None,
) -> EngineCore:
    """The one assembly of an engine: a bus (``bus`` or a fresh one), the allocator named by
    ``config`` emitting on it, and an EngineCore driving ``runner`` over both."""
    bus = bus if bus is not None else E.EventBus()
    alloc: Allocator
    if config.preemption_mode == "swap":
        alloc = SwappingPagedAllocator(
            config.num_blocks,
            config.block_size,
            bus,
            config.num_cpu_blocks,
            config.enable_prefix_caching,
        )
    else:
        alloc = make_allocator(
            config.allocator,
            config.num_blocks,
            config.block_size,
            config.max_model_len,
            bus,
            config.placement,
            config.enable_prefix_caching,
        )
    return EngineCore(
        alloc,
        runner,
        bus,
        max_model_len=config.max_model_len,
        max_num_seqs=config.max_num_seqs,
        max_num_batched_tokens=config.max_num_batched_tokens,
        eos_token_id=eos_token_id,
        preemption_mode=config.preemption_mode,
    )


class EngineCore:
    """Owns a scheduler over one allocator and drives ``runner`` one step at a time.

    ``add_request`` refuses (InvalidRequestError / InvalidConfigError) anything that could never
    finish: an empty prompt, a prompt longer than ``max_model_len``, or a request the whole arena
    cannot hold. ``max_tokens`` is clipped so the K/V slots a request fills (prompt plus output
    minus one: the last token's K/V is never computed) never exceed ``max_model_len``; vLLM
    stops at the same token."""

    def __init__(
        self,
        allocator: Allocator,
        runner: Runner,
        bus: E.EventBus | None = None,
        *,
        max_model_len: int,
        max_num_seqs: int = 256,
        max_num_batched_tokens: int | None = None,
        eos_token_id: int | Collection[int] | None = None,
        preemption_mode: str = "recompute",
    ) -> None:
        self.bus = bus if bus is not None else allocator.bus
        self.allocator = allocator
        self.runner = runner
        self.max_model_len = max_model_len
        self.scheduler = Scheduler(
            allocator,
            self.bus,
            max_num_seqs,
            # given: as given (a step always admits one prompt, so any budget runs); else
            # vLLM's default without chunked prefill. A given value is not raised to this
            # floor: that would make anything up to max_model_len do nothing.
            max(max_model_len, 2048) if max_num_batched_tokens is None else max_num_batched_tokens,
            eos_token_id,
            preemption_mode,
        )
        self.step_count = 0

    @property
    def num_preemptions(self) -> int:
        return self.scheduler.num_preemptions

    @property
    def prefill_tokens_computed(self) -> int:
        """Tokens fed to the model on admission (prompts and recomputes), cached ones excluded."""
        return self.scheduler.prefill_tokens_computed

    @property
    def prefix_cache_hit_tokens(self) -> int:
        """Tokens admission found in the arena already (prefix cache hits and forked samples)."""
        return self.scheduler.prefix_cache_hit_tokens

    def add_request(self, req: Request) -> Request:
        if self.scheduler.knows(req.req_id):
            # its events would mix with the first one's: tables overwritten, blocks leaked
            raise InvalidRequestError(f"request {req.req_id}: this engine already has that id")
        if req.prompt_len == 0:
            raise InvalidRequestError(f"request {req.req_id}: the prompt is empty")
        if req.prompt_len > self.max_model_len:
            raise InvalidRequestError(
                f"request {req.req_id}: prompt of {req.prompt_len} tokens exceeds the maximum "
                f"model length of {self.max_model_len}"
            )
        room = self.max_model_len - req.prompt_len + 1
        if req.params.max_tokens > room:
            req.params = dataclasses.replace(req.params, max_tokens=room)
        need = self.allocator.slots_needed(req)
        if need > self.allocator.num_slots:
            raise InvalidConfigError(
                f"request {req.req_id} needs {need} KV slots but the arena holds only "
                f"{self.allocator.num_slots}; raise --num-blocks or --kv-budget-mb"
            )
        self.scheduler.add(req)
        return req

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished()

    def step(self) -> list[Request]:
        """One engine step. Returns the requests that finished in it."""
        self.bus.step = self.step_count
        batch = self.scheduler.schedule(self.step_count)
        # a step may only move blocks (a swap-out with nothing left to run): execute anyway
        busy = batch.seqs or batch.swap_out or batch.swap_in
        tokens = self.runner.execute(batch) if busy else []
        finished = self.scheduler.update(batch, tokens)
        for req in finished:
            self.runner.forget(req.req_id)
        self.bus.emit(
            E.StepEnd,
            num_running=len(self.scheduler.running),
            num_waiting=len(self.scheduler.waiting),
        )
        self.step_count += 1
        return finished

    def run_to_completion(self, on_step: Callable[[EngineCore], None] | None = None) -> None:
        while self.has_unfinished():
            self.step()
            if on_step is not None:
                on_step(self)
