"""The scheduler's rules, one test each, on a tiny paged arena stepped by hand: who is admitted,
who is preempted when memory runs out, and what swap keeps that recompute throws away."""

from __future__ import annotations

from paged.engine.core import events as E
from paged.engine.core.allocators import PagedAllocator
from paged.engine.core.request import Request, SamplingParams, Status
from paged.engine.core.scheduler import Scheduler
from paged.engine.core.swap import SwappingPagedAllocator

BLOCK = 4
TOKEN = 7  # what every step samples: never a stop token here


def scheduler(
    num_blocks: int, *, cpu_blocks: int | None = None, max_num_seqs: int = 256
) -> tuple[Scheduler, list[E.Event]]:
    """A scheduler over ``num_blocks`` blocks of ``BLOCK`` tokens (and a CPU tier of
    ``cpu_blocks`` when given, preempting by swap), and the list its events land in."""
    bus, seen = E.EventBus(), []
    bus.subscribe(seen.append)
    if cpu_blocks is None:
        alloc: PagedAllocator = PagedAllocator(num_blocks, BLOCK, bus)
        mode = "recompute"
    else:
        alloc, mode = SwappingPagedAllocator(num_blocks, BLOCK, bus, cpu_blocks), "swap"
    return Scheduler(alloc, bus, max_num_seqs=max_num_seqs, preemption_mode=mode), seen


def add(s: Scheduler, req_id: str, prompt_len: int) -> Request:
    req = Request(req_id, [1] * prompt_len, SamplingParams(max_tokens=64, ignore_eos=True))
    s.add(req)
    return req


def step(s: Scheduler, n: int) -> None:
    batch = s.schedule(n)
    s.update(batch, [TOKEN] * len(batch.seqs))


def ids(events, kind: type[E.RequestEvent]) -> list[str]:
    return [ev.req for ev in E.of_kind(events, kind)]


def test_a_blocked_head_of_the_queue_blocks_a_request_behind_it_that_would_fit():
    s, seen = scheduler(4)
    add(s, "a", 10)  # 3 blocks
    add(s, "b", 8)  # 2 blocks: one is free
    add(s, "c", 2)  # 1 block: would fit, but waits behind b
    step(s, 0)
    assert [r.req_id for r in s.running] == ["a"]
    assert [r.req_id for r in s.waiting] == ["b", "c"]
    [blocked] = E.of_kind(seen, E.AdmissionBlocked)
    assert (blocked.req, blocked.reason) == ("b", E.BLOCKED_NO_FREE_BLOCK)


def test_admission_stops_at_max_num_seqs_though_memory_is_left():
    s, seen = scheduler(16, max_num_seqs=2)
    for name in "abc":
        add(s, name, 2)
    step(s, 0)
    assert ids(seen, E.Admitted) == ["a", "b"]
    [blocked] = E.of_kind(seen, E.AdmissionBlocked)
    assert (blocked.req, blocked.reason) == ("c", E.BLOCKED_BATCH_FULL)
    assert s.allocator.free_slots > 0


def test_when_memory_runs_out_the_latest_admitted_request_is_preempted():
    s, seen = scheduler(3)
    reqs = [add(s, name, BLOCK) for name in "abc"]  # one full block each: all three fit
    step(s, 0)
    step(s, 1)  # a's next token needs a second block and none is free
    # c (admitted last) makes room for a; b then needs a block too, and is itself the latest
    assert ids(seen, E.Preempted) == ["c", "b"]
    assert reqs[0].status is Status.RUNNING
    assert [r.req_id for r in s.waiting] == ["b", "c"]  # back at the front, in admission order


def test_no_request_is_admitted_in_a_step_that_preempted():
    s, seen = scheduler(3)
    for name in "abc":
        add(s, name, BLOCK)
    step(s, 0)
    admitted = len(ids(seen, E.Admitted))
    step(s, 1)
    assert ids(seen, E.Preempted) and len(ids(seen, E.Admitted)) == admitted


def test_recompute_frees_the_victims_blocks_and_starts_it_again_from_its_prompt():
    s, seen = scheduler(3)
    reqs = [add(s, name, BLOCK) for name in "abc"]
    step(s, 0)
    step(s, 1)
    victim = reqs[2]
    assert victim.num_computed == 0 and victim.req_id not in s.allocator.tables
    assert not ids(seen, E.SwappedOut)


def test_swap_moves_the_victims_blocks_to_the_cpu_tier_and_keeps_what_it_computed():
    s, seen = scheduler(3, cpu_blocks=3)
    reqs = [add(s, name, BLOCK) for name in "abc"]
    step(s, 0)
    step(s, 1)
    victim = reqs[2]
    assert ids(seen, E.Preempted)[0] == ids(seen, E.SwappedOut)[0] == "c"
    assert victim.num_computed == BLOCK  # its K/V wait on the CPU tier, not computed again
    out = next(E.of_kind(seen, E.SwappedOut))
    assert len(out.block_map) == 1 and s.allocator.cpu_tables["c"]


def test_swap_falls_back_to_recompute_when_the_cpu_tier_has_no_room():
    s, seen = scheduler(3, cpu_blocks=0)
    reqs = [add(s, name, BLOCK) for name in "abc"]
    step(s, 0)
    step(s, 1)
    assert ids(seen, E.SwapFallback)[0] == "c" and not ids(seen, E.SwappedOut)
    assert reqs[2].num_computed == 0
