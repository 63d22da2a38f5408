"""What each side's text panels say, as data: block tables or reservation ranges, the queue and
the metrics strip. The app renders these rows as HTML, the lecture figure as plotly annotations,
so both always say the same thing. Pure Python."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from paged.engine.core import events as E
from paged.viz import ui_text
from paged.viz.fold.reducer import PAGED, Frame


@dataclass(frozen=True)
class Mapping:
    logical: int
    physical: int
    new: bool  # allocated in this frame


@dataclass(frozen=True)
class TableRow:
    """One running request's memory: its block table (paging) or its run (contiguous)."""

    req: str
    label: str
    order: int
    filled: int
    held: int
    final_len: int
    mappings: tuple[Mapping, ...] = ()
    run: tuple[int, int] | None = None  # (start, length)
    new: bool = False


@dataclass(frozen=True)
class QueueEntry:
    req: str
    label: str
    order: int
    state: str  # running / waiting / blocked
    why: str = ""


def label_starts(frame: Frame) -> list[tuple[int, str, str]]:
    """Where the grid names an owner: ``(slot, label, request id)`` at the first slot of each
    block (label with its logical index, e.g. ``A1``) or of each contiguous run (``A``), a
    request that stopped in this frame included (``Frame.last_look``)."""
    bs = frame.run.block_size
    last = [
        (slot, owner, pos)
        for slot, pos in frame.last_look.items()
        if (owner := frame.owners[slot]) is not None
    ]
    if frame.run.allocator == PAGED:
        # a shared block is named once, by its earliest holder (the grid's xN says how many
        # share it): every holder's name in one cell printed over each other, unreadable
        out: dict[int, tuple[int, str, str]] = {}
        for r in sorted(frame.block_tables, key=lambda r: frame.requests[r].order):
            for i, phys in enumerate(frame.block_tables[r]):
                out.setdefault(phys * bs, (phys * bs, f"{frame.requests[r].name}{i}", r))
        for s, r, p in last:
            if p % bs == 0:
                out.setdefault(s, (s, f"{frame.requests[r].name}{p // bs}", r))
        return list(out.values())
    held = [(start, frame.requests[r].name, r) for r, (start, _) in frame.reservations.items()]
    return held + [(s, frame.requests[r].name, r) for s, r, p in last if p == 0]


def table_rows(frame: Frame) -> list[TableRow]:
    new_blocks = {(e.req, e.logical) for e in E.of_kind(frame.events, E.BlockAllocated)}
    new_runs = {e.req for e in E.of_kind(frame.events, E.SlotsReserved)}
    rows = []
    holders = frame.block_tables if frame.run.allocator == PAGED else frame.reservations
    for req in sorted(holders, key=lambda r: frame.requests[r].order):
        v = frame.requests[req]
        row = TableRow(
            req=req,
            label=v.name,
            order=v.order,
            filled=v.filled,
            held=v.held,
            final_len=v.final_len,
        )
        if frame.run.allocator == PAGED:
            maps = tuple(
                Mapping(i, p, (req, i) in new_blocks) for i, p in enumerate(frame.block_tables[req])
            )
            rows.append(dataclasses.replace(row, mappings=maps))
        else:
            rows.append(dataclasses.replace(row, run=frame.reservations[req], new=req in new_runs))
    return rows


def queue_entries(frame: Frame, lang: str = "en") -> list[QueueEntry]:
    styles = ui_text.load("style")  # the words the drawings use: one table for both
    w = styles.get(lang, styles["en"])
    blocked = {b.req: b for b in frame.blocked}
    out = [
        QueueEntry(r, frame.requests[r].name, frame.requests[r].order, "running")
        for r in frame.running
    ]
    for r in frame.waiting:
        b = blocked.get(r)
        order, name = frame.requests[r].order, frame.requests[r].name
        if b is None:
            out.append(QueueEntry(r, name, order, "waiting"))
            continue
        detail = (
            w["need_paged"].format(need=b.need_slots, free=b.free_slots)
            if frame.run.allocator == PAGED
            else w["need"].format(need=b.need_slots, free=b.free_slots, hole=b.largest_hole)
        )
        colon = "：" if lang == "zh" else ": "
        why = f"{w['reasons'].get(b.reason, b.reason)}{colon}{detail}"
        out.append(QueueEntry(r, name, order, "blocked", why))
    return out


def finished_labels(frame: Frame) -> list[str]:
    return [
        v.name
        for v in sorted(frame.requests.values(), key=lambda v: v.order)
        if v.status == "finished"
    ]
