"""One definition of external fragmentation: free slots are external only while a waiting request
is refused for want of a hole (``no_hole``); with too little free in total (``no_space``) they are
free. The engine's fold, ``simulate``'s and the viewer's all classify through ``strands_free``."""

from __future__ import annotations

from paged.engine.core import events as E
from paged.engine.core.accounting import Tally, strands_free
from paged.engine.sim.simulate import build_requests, run_policy
from paged.engine.sim.workload import WorkItem


def _one_step(reason: str, need: int) -> tuple[int, int]:
    """A 40-slot arena, A holding [10, 20) with 4 tokens written, and C refused for ``reason``:
    the step's (external, free)."""
    t = Tally(num_slots=40, block_size=1)
    evs = [
        E.RequestArrived(step=0, seq=0, req="A", prompt_len=4, max_tokens=7),
        E.Admitted(step=0, seq=1, req="A", num_tokens=4),
        E.SlotsReserved(step=0, seq=2, req="A", start=10, length=10),
        E.TokensWritten(step=0, seq=3, req="A", positions=(0, 1, 2, 3), slots=(10, 11, 12, 13)),
        E.RequestArrived(step=0, seq=4, req="C", prompt_len=need, max_tokens=1),
        E.AdmissionBlocked(
            step=0, seq=5, req="C", reason=reason, need_slots=need, free_slots=30, largest_hole=20
        ),
    ]
    for ev in evs:
        t.apply(ev)
    a = t.close_step(0)
    assert a.token_states == 4 and a.reservation == 6
    return a.external, a.free


def test_a_request_refused_for_want_of_a_hole_makes_the_free_slots_external():
    assert _one_step(E.BLOCKED_NO_HOLE, 25) == (30, 0)


def test_a_request_refused_for_want_of_space_leaves_the_free_slots_free():
    assert _one_step(E.BLOCKED_NO_SPACE, 35) == (0, 30)


def test_only_no_hole_strands_free_slots():
    reasons = (E.BLOCKED_NO_HOLE, E.BLOCKED_NO_SPACE, E.BLOCKED_NO_FREE_BLOCK, E.BLOCKED_BATCH_FULL)
    assert [strands_free(r) for r in reasons] == [True, False, False, False]


def test_simulate_counts_a_no_space_wait_as_free():
    """Max reserves 32 of 48 slots for A; B needs 32 too with 16 free: no_space, not a hole.
    Every waiting step of the dry run shows those 16 slots free, none external."""
    items = [WorkItem(input_len=4, output_len=20), WorkItem(input_len=4, output_len=3)]
    res = run_policy("max", build_requests(items, 32), 48, 1, 32)
    waits = [a for a in res.accounts if a.waiting]
    assert waits and all(a.external == 0 and a.free == 16 for a in waits)
