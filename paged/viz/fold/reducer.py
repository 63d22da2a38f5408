"""The viewer's fold: allocator events in, one immutable ``Frame`` per engine step out.

``apply(state, ev) -> state`` is the pure contract (it never mutates its input); ``fold`` runs the
same transition in place, which is what the app uses on long traces. The queue, refusals, sharing
and the CPU tier come from ``paged.engine.core.accounting.Tally``; what this module adds is *where*
things are: which request owns each slot, which category each slot is in, block tables,
reservation ranges and what changed since the previous frame. A frame's category counts are its
cells counted, so the grid and the numbers are one classification; on every trace the reader
accepts they equal Tally's (the trace fuzzer checks that too).

Frame ``i`` is the state right after the ``i``-th ``step_end`` of a run, with one exception: a
request that finished in that step is drawn one last time as it held its memory (its tokens, and
the rest it never filled hatched as internal); its slots are free from the next frame on. The
fold never reads a final length before the ``finished`` event that tells it, so a live run and
the replay of its trace give the same frames. Until a request stops, what it holds past its
bound (prompt + max_tokens - 1, known since it arrived) is hatched as internal at once, and
its other unwritten slots are reserved. Pure Python, no torch.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from paged.engine.core import events as E
from paged.engine.core.accounting import StepAccount, Tally, strands_free
from paged.engine.trace.header import (
    CONTIGUOUS as CONTIGUOUS,  # the viewer's names for the two kinds
)
from paged.engine.trace.header import PAGED as PAGED
from paged.engine.trace.header import RunHeader

# One character per slot: compact, hashable, and cheap to compare between frames.
TOKEN, RESERVED, INTERNAL, FREE, HOLE = "T", "R", "I", "F", "H"
#: The accounting category (engine.core.accounting.CATEGORIES) each cell code draws.
CELL_CATEGORY = {
    TOKEN: "token_states",
    RESERVED: "reservation",
    INTERNAL: "internal",
    FREE: "free",
    HOLE: "external",
}


def label(order: int) -> str:
    """A display name from an arrival rank: A, B, ..., Z, AA, AB, ..."""
    s = ""
    order += 1
    while order:
        order, r = divmod(order - 1, 26)
        s = chr(65 + r) + s
    return s


def display_name(req: str, order: int) -> str:
    """Short engine ids (``A``, ``r7``) are shown as they are; long ones (uuids) by arrival
    letter, so a grid cell can hold the name, and so are ids with characters that are not
    printable: a bidi override (U+202E) in an id reversed the caption it was quoted in, and a
    zero-width space made ``A\u200b`` a second "A"."""
    return req if len(req) <= 4 and req.isprintable() and req == req.strip() else label(order)


@dataclass(frozen=True)
class RequestView:
    """One request as a frame sees it. ``order`` is its arrival rank (it picks the colour);
    ``name`` is what the viewer calls it."""

    req: str
    name: str
    order: int
    prompt_len: int
    max_tokens: int
    status: str  # waiting / running / finished
    filled: int  # K/V slots written so far
    held: int  # slots it holds in the arena
    final_len: int  # its final length, or its bound while that is unknown
    cpu_blocks: int = 0  # blocks it has on the CPU tier (swapped out), 0 if none


@dataclass(frozen=True)
class Frame:
    """The arena after one engine step. Treat every field as read-only.

    ``cells[s]`` is slot ``s``'s category code (TOKEN, RESERVED, INTERNAL, FREE, HOLE) and
    ``owners[s]`` the request holding it (None when free). ``changed`` lists slots whose owner or
    category differs from the previous frame (free <-> hole flips excluded: they follow the
    queue, not the slot). ``account`` is Tally's StepAccount for this step with its categories
    counted from ``cells``."""

    index: int
    step: int
    run: RunHeader
    cells: str
    owners: tuple[str | None, ...]
    changed: frozenset[int]
    block_tables: dict[str, tuple[int, ...]]
    reservations: dict[str, tuple[int, int]]
    running: tuple[str, ...]
    waiting: tuple[str, ...]
    blocked: tuple[E.AdmissionBlocked, ...]  # refusals of waiting requests this step
    requests: dict[str, RequestView]
    events: tuple[E.Event, ...]
    account: StepAccount
    #: swapped-out requests' CPU blocks, in logical order (Tally's ``cpu_tables``); empty
    #: without a CPU tier
    cpu_tables: dict[str, tuple[int, ...]] = field(default_factory=dict)
    #: slots shown one last time for a request that stopped this step -> token position there
    last_look: dict[int, int] = field(default_factory=dict)

    def count(self, code: str) -> int:
        return self.cells.count(code)

    def never_filled(self, req: str) -> int:
        """Slots drawn as ``req``'s that it never filled (hatched: it stopped in this frame)."""
        return sum(
            1 for o, c in zip(self.owners, self.cells, strict=True) if o == req and c == INTERNAL
        )

    def blocked_by(self, reason: str) -> E.AdmissionBlocked | None:
        return next((b for b in self.blocked if b.reason == reason), None)

    def holder(self, slot: int) -> RequestView:
        """The request holding ``slot``; a KeyError for a free slot."""
        owner = self.owners[slot]
        if owner is None:
            raise KeyError(f"slot {slot} is free")
        return self.requests[owner]


@dataclass
class ArenaState:
    """The fold's working state. ``last_frame`` is set at every ``step_end``.

    ``tally`` is the one fold of requests, queue, refusals and slot counts; this state adds
    only where each slot sits (owners, positions, block tables, runs) and reads the rest."""

    run: RunHeader
    tally: Tally
    owners: list[str | None]
    pos: list[int]  # token position each held slot stands for
    written: list[bool]
    block_tables: dict[str, list[int]] = field(default_factory=dict)
    reservations: dict[str, tuple[int, int]] = field(default_factory=dict)
    step_events: list[E.Event] = field(default_factory=list)
    # slots each request released this step, as (slot, written, position): drawn once more if
    # it finished
    released: dict[str, list[tuple[int, bool, int]]] = field(default_factory=dict)
    last_frame: Frame | None = None
    num_frames: int = 0
    # each request as the last frame showed it, and the requests events named since: only
    # those can look different now (a view reads only what events about its request change)
    views: dict[str, RequestView] = field(default_factory=dict)
    touched: set[str] = field(default_factory=set)

    @classmethod
    def empty(cls, run: RunHeader) -> ArenaState:
        """A fresh arena. Each request's bound stands in for its final length until its
        ``finished`` event: nobody knows it sooner."""
        n = run.num_slots
        tally = Tally(
            num_slots=n,
            block_size=run.block_size,
            num_cpu_blocks=run.num_cpu_blocks,
            show_finishing=True,
        )
        return cls(run=run, tally=tally, owners=[None] * n, pos=[-1] * n, written=[False] * n)

    def clone(self) -> ArenaState:
        frame, self.last_frame = self.last_frame, None  # frames are immutable: share, don't copy
        try:
            twin = copy.deepcopy(self)
        finally:
            self.last_frame = frame
        twin.last_frame = frame
        return twin


def apply(state: ArenaState, ev: E.Event) -> ArenaState:
    """Pure transition: the state after ``ev``. ``state`` is left untouched."""
    nxt = state.clone()
    step_in_place(nxt, ev)
    return nxt


def step_in_place(s: ArenaState, ev: E.Event) -> None:
    """The transition itself, mutating ``s`` (``fold`` uses it; ``apply`` wraps it)."""
    s.tally.apply(ev)
    match ev:
        case E.StepEnd():
            s.last_frame = _close(s, ev.step)
            s.step_events = []
            s.released = {}
            return
        case E.RequestEvent():
            s.touched.add(ev.req)
    s.step_events.append(ev)
    _HANDLERS[type(ev)](s, ev)


def _block_allocated(s: ArenaState, ev: E.BlockAllocated) -> None:
    table = s.block_tables.setdefault(ev.req, [])
    table.extend([-1] * (ev.logical + 1 - len(table)))
    table[ev.logical] = ev.physical
    bs = s.run.block_size
    base = ev.physical * bs
    if s.owners[base] is None:  # a shared block belongs to its first holder, as in Tally
        for i in range(bs):
            s.owners[base + i] = ev.req
            s.pos[base + i] = ev.logical * bs + i
            s.written[base + i] = False


def _block_shared(s: ArenaState, ev: E.BlockShared) -> None:
    table = s.block_tables.setdefault(ev.req, [])
    table.extend([-1] * (ev.logical + 1 - len(table)))
    table[ev.logical] = ev.physical
    base = ev.physical * s.run.block_size
    if s.owners[base] is None:  # a cached block taken back from the free pool
        _own(s, ev.req, ev.physical, ev.logical, ev.num_tokens)


def _block_copied(s: ArenaState, ev: E.BlockCopied) -> None:
    table = s.block_tables.get(ev.req)
    if table and ev.logical < len(table):
        table[ev.logical] = ev.dst
    _own(s, ev.req, ev.dst, ev.logical, ev.num_tokens)
    if s.owners[ev.src * s.run.block_size] == ev.req:
        _hand_over(s, ev.src)


def _own(s: ArenaState, req: str, physical: int, logical: int, written: int) -> None:
    bs = s.run.block_size
    for i in range(bs):
        slot = physical * bs + i
        s.owners[slot], s.pos[slot], s.written[slot] = req, logical * bs + i, i < written


def _hand_over(s: ArenaState, physical: int) -> None:
    """The slots' owner let go of a block others still hold: the next holder draws it."""
    heir = next((r for r, t in s.block_tables.items() if physical in t), None)
    bs = s.run.block_size
    for i in range(bs):
        s.owners[physical * bs + i] = heir


def _slots_reserved(s: ArenaState, ev: E.SlotsReserved) -> None:
    s.reservations[ev.req] = (ev.start, ev.length)
    for i in range(ev.length):
        slot = ev.start + i
        s.owners[slot], s.pos[slot], s.written[slot] = ev.req, i, False


def _tokens_written(s: ArenaState, ev: E.TokensWritten) -> None:
    for slot in ev.slots:
        s.written[slot] = True


def _block_freed(s: ArenaState, ev: E.BlockFreed) -> None:
    table = s.block_tables.get(ev.req)
    if table and ev.physical in table:
        table.remove(ev.physical)
        if not table:
            del s.block_tables[ev.req]
    if ev.ref_count == 0:
        _clear(s, ev.physical * s.run.block_size, s.run.block_size, ev.req)
    elif s.owners[ev.physical * s.run.block_size] == ev.req:
        _hand_over(s, ev.physical)


def _reservation_released(s: ArenaState, ev: E.ReservationReleased) -> None:
    s.reservations.pop(ev.req, None)
    _clear(s, ev.start, ev.length, ev.req)


def _swapped_in(s: ArenaState, ev: E.SwappedIn) -> None:
    # its tokens came back into new blocks (Tally has restored its count): mark them written
    bs, filled = s.run.block_size, s.tally.filled.get(ev.req, 0)
    for i, (_, device) in enumerate(ev.block_map):
        for j in range(max(0, min(bs, filled - i * bs))):
            s.written[device * bs + j] = True


def _clear(s: ArenaState, start: int, length: int, releaser: str | None = None) -> None:
    gone = s.released.setdefault(releaser, []) if releaser is not None else []
    for slot in range(start, start + length):
        gone.append((slot, s.written[slot], s.pos[slot]))
        s.owners[slot], s.pos[slot], s.written[slot] = None, -1, False


def _in_place(s: ArenaState, ev: E.Event) -> None:
    """Events that move no slot (the queue, refusals and counts are Tally's)."""


#: What each event does to where slots sit.
_HANDLERS = E.handler_table(
    {
        E.BlockAllocated: _block_allocated,
        E.SlotsReserved: _slots_reserved,
        E.TokensWritten: _tokens_written,
        E.BlockFreed: _block_freed,
        E.ReservationReleased: _reservation_released,
        E.SwappedIn: _swapped_in,
        E.BlockShared: _block_shared,
        E.BlockCopied: _block_copied,
    },
    default=_in_place,
)


def _close(s: ArenaState, step: int) -> Frame:
    last_look = _finishing_cells(s)  # read before close_step forgets who finished
    account = s.tally.close_step(step)  # also fixes this step's refusals
    # free cells are drawn as a hole only under the accounting's one rule
    cells_list = _cells(s, any(strands_free(b.reason) for b in s.tally.refusals))
    owners_list = list(s.owners)
    for slot, (req, code, _) in last_look.items():
        cells_list[slot], owners_list[slot] = code, req
    cells, owners = "".join(cells_list), tuple(owners_list)
    # the numbers count the cells drawn: one classification, even where a trace slipped past
    # the reader with Tally's per-request sums and the per-slot picture apart
    account = dataclasses.replace(
        account, **{category: cells.count(code) for code, category in CELL_CATEGORY.items()}
    )
    prev = s.last_frame
    t = s.tally
    frame = Frame(
        index=s.num_frames,
        step=step,
        run=s.run,
        cells=cells,
        owners=owners,
        changed=_changed(prev, cells, owners),
        block_tables={r: tuple(t) for r, t in s.block_tables.items()},
        reservations=dict(s.reservations),
        running=tuple(t.running),
        waiting=tuple(t.waiting),
        blocked=t.refusals,
        requests=_request_views(s),
        events=tuple(s.step_events),
        account=account,
        cpu_tables=dict(t.cpu_tables),
        last_look={slot: pos for slot, (_, _, pos) in last_look.items()},
    )
    s.num_frames += 1
    return frame


def _finishing_cells(s: ArenaState) -> dict[int, tuple[str, str, int]]:
    """The slots of requests that finished this step (Tally.finishing), as they held them:
    written ones as tokens, the rest never filled, with their token positions. Slots handed
    out again are not among them."""
    out = {}
    for req in s.tally.finishing:
        for slot, written, pos in s.released.get(req, ()):
            if s.owners[slot] is None:
                out[slot] = (req, TOKEN if written else INTERNAL, pos)
    return out


_CHUNK = 64  # slots compared or filled at once where a stretch is uniform
UNKNOWN = sys.maxsize  # a final length not yet known: past every token position


def _cells(s: ArenaState, hole: bool) -> list[str]:
    """Every slot's category code. One pass over the arena for every frame, so each owner's
    threshold (slots below it are still to be written) is looked up once, not once per slot."""
    empty = HOLE if hole else FREE
    t = s.tally
    final: dict[str, int] = {}
    out: list[str] = []
    owners, written, positions = s.owners, s.written, s.pos
    n = len(owners)
    if len(written) != n or len(positions) != n:
        raise ValueError("owners, written and positions cover the same arena")
    for lo in range(0, n, _CHUNK):  # whole free or whole written chunks at C speed
        hi = min(lo + _CHUNK, n)
        nobody = owners[lo:hi].count(None)
        if nobody == hi - lo:
            out.extend(empty * (hi - lo))
            continue
        if nobody == 0 and all(written[lo:hi]):
            out.extend(TOKEN * (hi - lo))
            continue
        for i in range(lo, hi):
            owner = owners[i]
            if owner is None:
                out.append(empty)
            elif written[i]:
                out.append(TOKEN)
            else:
                f = final.get(owner)
                if f is None:
                    # until it stops its final length is unknown, but not its bound: a slot
                    # past that is never filled, one below it reserved (Tally counts the same)
                    known = t.final_lens.get(owner)
                    if known is None:
                        info = t.requests.get(owner)
                        known = info.bound if info is not None else UNKNOWN
                    f = max(known, t.filled.get(owner, 0))
                    final[owner] = f
                out.append(RESERVED if positions[i] < f else INTERNAL)
    return out


def _changed(prev: Frame | None, cells: str, owners: tuple) -> frozenset[int]:
    if prev is None:
        return frozenset(i for i, o in enumerate(owners) if o is not None)
    if cells == prev.cells and owners == prev.owners:  # most steps of a long run touch nothing
        return frozenset()
    out = []
    pcells, powners = prev.cells, prev.owners
    n = len(cells)
    if len(pcells) != n or len(powners) != len(owners):
        raise ValueError("frames of one run cover the same arena")
    # a step touches a few blocks: compare in chunks (C speed), walk slot by slot only where
    # a chunk differs
    for lo in range(0, n, _CHUNK):
        hi = lo + _CHUNK
        if cells[lo:hi] == pcells[lo:hi] and owners[lo:hi] == powners[lo:hi]:
            continue
        for i in range(lo, min(hi, n)):
            c, p = cells[i], pcells[i]
            if owners[i] != powners[i] or (c != p and not (c in "FH" and p in "FH")):
                out.append(i)
    return frozenset(out)


def _request_views(s: ArenaState) -> dict[str, RequestView]:
    """Every request the run has seen, in arrival order, as of this step. Why only the touched
    ones are rebuilt: a long trace has every request in every frame (80 requests x 4,000
    frames: a third of folding an upload went to rebuilding views that had not changed)."""
    t, views = s.tally, s.views
    for r in itertools.islice(t.requests, len(views), None):  # arrivals, in their order
        views[r] = _request_view(t, r)
    for r in s.touched:
        if r in t.requests:
            views[r] = _request_view(t, r)
    s.touched.clear()
    return dict(views)


def _request_view(t: Tally, r: str) -> RequestView:
    d = t.requests[r]
    return RequestView(
        req=r,
        name=display_name(r, d.order),
        order=d.order,
        prompt_len=d.prompt_len,
        max_tokens=d.max_tokens,
        status=d.status,
        filled=t.filled.get(r, 0),
        held=t.held.get(r, 0),
        final_len=t.final_len(r),
        cpu_blocks=len(t.cpu_tables.get(r, ())),
    )


def fold(
    events: Iterable[E.Event], run: RunHeader, state: ArenaState | None = None
) -> Iterator[Frame]:
    """Yield one Frame per ``step_end``, folding in place (same transition as ``apply``) into
    ``state`` (a fresh arena when None)."""
    state = ArenaState.empty(run) if state is None else state
    for ev in events:
        step_in_place(state, ev)
        match ev:
            case E.StepEnd() if state.last_frame is not None:
                yield state.last_frame


def replay(events: list[E.Event], run: RunHeader) -> list[Frame]:
    """All frames of a run, exactly as they were folded while it ran: no final length is read
    ahead of the ``finished`` event that tells it."""
    return list(fold(events, run))


def replay_settled(events: list[E.Event], run: RunHeader) -> tuple[list[Frame], Frame | None]:
    """``replay``, and the arena as the run left it (``settle``): what its side shows once its
    last step is over while the other side still steps."""
    state = ArenaState.empty(run)
    frames = list(fold(events, run, state))
    return frames, settle(state)


def settle(s: ArenaState) -> Frame | None:
    """The arena after the last frame, with no step taken: the requests that finished in it,
    drawn there one last time as they held their memory, have let go of it (their slots are
    free from the next frame on, and for a run that has ended that is every frame after its
    last). Tally closes once more, with nothing new: those slots count as free and no refusal
    stands. A run cut short keeps what its running requests still hold, and one cut inside a
    step (events after its last ``step_end``) keeps its last frame: the fold is past it. Same
    step and index as the last frame: it is that step's aftermath, not another step. None
    before any step."""
    last = s.last_frame
    if last is None or not last.last_look or s.step_events:
        return last
    twin = s.clone()
    twin.step_events, twin.num_frames = [], last.index
    return _close(twin, last.step)
