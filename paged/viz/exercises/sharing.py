"""Facts about blocks held by more than one request (share, copy-on-write) and about memory
taken back (preemption, swap), read from the fold as ``paged.viz.exercises.facts`` reads the
rest. Pure Python.
"""

from __future__ import annotations

from paged.viz.exercises.facts import Answer, name, table_text
from paged.viz.fold.reducer import Frame


def _others(frame: Frame, req: str) -> dict[str, tuple[int, ...]]:
    return {r: t for r, t in frame.block_tables.items() if r != req}


def _shared_blocks(nxt: Frame, req: str) -> tuple[int, ...]:
    mine = set(nxt.block_tables.get(req, ()))
    held = {b for t in _others(nxt, req).values() for b in t}
    return tuple(sorted(mine & held))


def _shared(seen: Frame, nxt: Frame, p: dict) -> Answer | None:
    return _shared_blocks(nxt, p["req"]) or None


def _shared_why(seen: Frame, nxt: Frame, p: dict) -> tuple[str, dict]:
    req = p["req"]
    common = set(_shared_blocks(nxt, req))
    with_ = [name(nxt, r) for r, t in _others(nxt, req).items() if common & set(t)]
    return "shared", {
        "req": name(nxt, req),
        "frame": nxt.index,
        "table": table_text(nxt.block_tables.get(req, ())),
        "others": ", ".join(with_),
        "blocks": ", ".join(f"#{b}" for b in sorted(common)),
    }


def _sibling_block(nxt: Frame, req: str, logical: int) -> tuple[str, int] | None:
    """Who still holds the block ``req``'s logical block ``logical`` was copied from: a table
    that agrees with ``req``'s below ``logical`` and differs at it."""
    mine = nxt.block_tables.get(req, ())
    if logical >= len(mine):
        return None
    order = {r: v.order for r, v in nxt.requests.items()}
    for other, t in sorted(_others(nxt, req).items(), key=lambda kv: order.get(kv[0], -1)):
        if len(t) > logical and t[:logical] == mine[:logical] and t[logical] != mine[logical]:
            return other, t[logical]
    return None


def _copied(seen: Frame, nxt: Frame, p: dict) -> Answer | None:
    found = _sibling_block(nxt, p["req"], p["logical"])
    return None if found is None else (found[1],)


def _copied_why(seen: Frame, nxt: Frame, p: dict) -> tuple[str, dict]:
    req, logical = p["req"], p["logical"]
    other, src = _sibling_block(nxt, req, logical) or ("?", -1)
    return "copied", {
        "req": name(nxt, req),
        "frame": nxt.index,
        "logical": logical,
        "dst": nxt.block_tables[req][logical],
        "src": src,
        "other": name(nxt, other),
    }


def _back_in_queue(seen: Frame, nxt: Frame) -> str | None:
    """The one request running before the step and waiting after it (None: none or several)."""
    back = [r for r in seen.running if r in nxt.requests and nxt.requests[r].status == "waiting"]
    return back[0] if len(back) == 1 else None


def _preempted(seen: Frame, nxt: Frame, p: dict) -> Answer | None:
    return _back_in_queue(seen, nxt)


def _preempted_why(seen: Frame, nxt: Frame, p: dict) -> tuple[str, dict]:
    req = _back_in_queue(seen, nxt) or ""
    return "preempted", {
        "req": name(nxt, req),
        "frame": nxt.index,
        "held": seen.requests[req].held if req in seen.requests else 0,
        "running": len(nxt.running),
    }


def _preempt_mode(seen: Frame, nxt: Frame, p: dict) -> Answer | None:
    return "swap" if nxt.cpu_tables.get(p["req"]) else "recompute"


def _preempt_mode_why(seen: Frame, nxt: Frame, p: dict) -> tuple[str, dict]:
    req = p["req"]
    filled = seen.requests[req].filled if req in seen.requests else 0
    values = {"req": name(nxt, req), "frame": nxt.index, "filled": filled}
    if _preempt_mode(seen, nxt, p) == "swap":
        return "mode_swap", {**values, "n": len(nxt.cpu_tables[req])}
    return "mode_recompute", values


def _cpu_blocks(seen: Frame, nxt: Frame, p: dict) -> Answer | None:
    return len(nxt.cpu_tables.get(p["req"], ()))


def _cpu_blocks_why(seen: Frame, nxt: Frame, p: dict) -> tuple[str, dict]:
    table = nxt.cpu_tables.get(p["req"], ())
    return "cpu_blocks", {
        "req": name(nxt, p["req"]),
        "frame": nxt.index,
        "n": len(table),
        "table": table_text(table, "c"),
    }
