"""What a question asks, read from the fold: each fact's answer and the numbers of its "why".

A fact is a function of two frames of one side, the one the student sees (``seen``) and the
next one (``nxt``), and the question's parameters. Its answer comes from ``nxt`` (and, for
"what changed", from comparing it with ``seen``): block tables, the queue, the cells, the CPU
tier, never from the event that made it true. A reader returns None where the frames cannot
say (a hostile trace that slipped past the reader): no question is asked then. Pure Python.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from paged.viz.fold.reducer import FREE, HOLE, PAGED, Frame

#: Question forms: how the student answers.
YESNO, CHOOSE, NUMBER, CELLS = "yesno", "choose", "number", "cells"
#: What a click on the grid names: a physical block (paging) or a slot (contiguous).
BLOCK, SLOT = "block", "slot"

Answer = str | int | tuple[int, ...]


@dataclass(frozen=True)
class Fact:
    """One form of question: how it is answered, its answer from the fold, and the numbers
    its one sentence of why quotes (``why`` returns the text key and its values)."""

    form: str
    read: Callable[[Frame, Frame, dict], Answer | None]
    why: Callable[[Frame, Frame, dict], tuple[str, dict]]
    unit: str = ""


def name(frame: Frame, req: str) -> str:
    view = frame.requests.get(req)
    return view.name if view else "?"


def free_blocks(frame: Frame) -> int:
    return (frame.count(FREE) + frame.count(HOLE)) // frame.run.block_size


def largest_hole(frame: Frame) -> int:
    best = run = 0
    for c in frame.cells:
        run = run + 1 if c in (FREE, HOLE) else 0
        best = max(best, run)
    return best


def table_text(table: tuple[int, ...], prefix: str = "#") -> str:
    return ", ".join(f"{i}→{prefix}{b}" for i, b in enumerate(table)) or "-"


def _table(frame: Frame, req: str) -> tuple[int, ...]:
    return frame.block_tables.get(req, ())


# --- admission -------------------------------------------------------------------------------


def _admitted(seen: Frame, nxt: Frame, p: dict) -> Answer | None:
    view = nxt.requests.get(p["req"])
    return None if view is None else ("no" if view.status == "waiting" else "yes")


def _admitted_why(seen: Frame, nxt: Frame, p: dict) -> tuple[str, dict]:
    req, frame = p["req"], nxt.index
    n = {"req": name(nxt, req), "frame": frame}
    if _admitted(seen, nxt, p) == "yes":
        if nxt.run.allocator == PAGED:
            return "admitted_yes_paged", {
                **n,
                "table": table_text(_table(nxt, req)),
                "free": free_blocks(seen),
            }
        start, length = nxt.reservations.get(req, (0, 0))
        return "admitted_yes_contig", {
            **n,
            "need": length,
            "hole": largest_hole(seen),
            "first": start,
            "last": start + length - 1,
        }
    refused = next((b for b in nxt.blocked if b.req == req), None)
    if refused is None:
        return "admitted_no_waits", {**n, "running": len(nxt.running)}
    if nxt.run.allocator == PAGED:
        return "admitted_no_paged", {**n, "need": refused.need_slots, "free": refused.free_slots}
    return "admitted_no_refused", {
        **n,
        "need": refused.need_slots,
        "free": refused.free_slots,
        "hole": refused.largest_hole,
    }


def _external(seen: Frame, nxt: Frame, p: dict) -> Answer | None:
    return nxt.count(HOLE)


def _external_why(seen: Frame, nxt: Frame, p: dict) -> tuple[str, dict]:
    refused = next((b for b in nxt.blocked if b.req == p["req"]), None)
    return "external", {
        "req": name(nxt, p["req"]),
        "frame": nxt.index,
        "free": nxt.count(FREE) + nxt.count(HOLE),
        "hole": largest_hole(nxt),
        "need": refused.need_slots if refused else "?",
        "n": nxt.count(HOLE),
    }


# --- allocation ------------------------------------------------------------------------------


def _next_block(seen: Frame, nxt: Frame, p: dict) -> Answer | None:
    table = _table(nxt, p["req"])
    return (table[p["logical"]],) if p["logical"] < len(table) else None


def _next_block_why(seen: Frame, nxt: Frame, p: dict) -> tuple[str, dict]:
    block = _table(nxt, p["req"])[p["logical"]]
    return "next_block", {
        "req": name(nxt, p["req"]),
        "frame": nxt.index,
        "logical": p["logical"],
        "block": block,
        "free": free_blocks(seen),
    }


def _next_slot(seen: Frame, nxt: Frame, p: dict) -> Answer | None:
    run, view = nxt.reservations.get(p["req"]), nxt.requests.get(p["req"])
    if run is None or view is None or not 0 < view.filled <= run[1]:
        return None
    return (run[0] + view.filled - 1,)


def _next_slot_why(seen: Frame, nxt: Frame, p: dict) -> tuple[str, dict]:
    start = nxt.reservations[p["req"]][0]
    filled = nxt.requests[p["req"]].filled
    return "next_slot", {
        "req": name(nxt, p["req"]),
        "frame": nxt.index,
        "first": start,
        "filled": filled,
        "slot": start + filled - 1,
    }


def _blocks_held(seen: Frame, nxt: Frame, p: dict) -> Answer | None:
    return len(_table(nxt, p["req"]))


def _blocks_held_why(seen: Frame, nxt: Frame, p: dict) -> tuple[str, dict]:
    table = _table(nxt, p["req"])
    return "blocks_held", {
        "req": name(nxt, p["req"]),
        "frame": nxt.index,
        "n": len(table),
        "table": table_text(table),
    }
