"""Where to ask: rules per event kind that turn a side's next frame into questions about it.

Each rule looks at the events folded into frame ``i + 1`` of one side (admission, refusal,
allocation, copy-on-write, share, preemption, swap) and proposes a ``Candidate``: a fact
(``paged.viz.exercises.table``) and its parameters, asked at frame ``i``. The rules only say *where* something
instructive happens; what the answer is, the fact reads from the fold. Deterministic: frames
in order, then sides, then events in the order they were recorded. Pure Python.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from paged.engine.core import events as E
from paged.viz.fold.lesson_model import Lesson
from paged.viz.fold.reducer import PAGED, Frame


@dataclass(frozen=True)
class Candidate:
    """A question to ask at lesson frame ``frame`` about the next frame of ``side``; ``event``
    is the kind of event that makes it true (a lesson picks by it)."""

    fact: str
    side: str
    frame: int
    event: str
    req: str
    logical: int = -1

    @property
    def params(self) -> dict:
        return {"req": self.req, "logical": self.logical}


def candidates(lesson: Lesson) -> list[Candidate]:
    """Every place in the lesson where a rule would ask, in frame order."""
    per_side = {side: list(_side(lesson, side)) for side in ("left", "right")}
    out = [c for cs in per_side.values() for c in cs]
    out.sort(key=lambda c: (c.frame, c.side != "left"))  # stable: event order within a frame
    return out


def _side(lesson: Lesson, side: str) -> Iterator[Candidate]:
    frames = lesson.side(side).frames
    refused: set[tuple[str, str]] = set()  # a request refused for one reason is asked once
    first_decode: set[str] = set()
    for i in range(len(frames) - 1):
        seen, nxt = frames[i], frames[i + 1]
        yield from _rules(side, seen, nxt, refused, first_decode)


def _rules(
    side: str, seen: Frame, nxt: Frame, refused: set[tuple[str, str]], first_decode: set[str]
) -> Iterator[Candidate]:
    paged = nxt.run.allocator == PAGED
    at = seen.index
    evs = nxt.events
    preempted = [e.req for e in E.of_kind(evs, E.Preempted)]
    admitted = {e.req for e in E.of_kind(evs, E.Admitted)}
    for e in evs:
        match e:
            case E.Admitted():
                yield Candidate("admitted", side, at, e.kind, e.req)
                if paged:
                    yield Candidate("blocks_held", side, at, e.kind, e.req)
            case E.AdmissionBlocked() if e.req not in admitted:
                if (e.req, e.reason) in refused:
                    continue
                refused.add((e.req, e.reason))
                yield Candidate("admitted", side, at, e.kind, e.req)
                if not paged and e.reason == E.BLOCKED_NO_HOLE:
                    yield Candidate("external", side, at, e.kind, e.req)
            case E.BlockAllocated():
                table = seen.block_tables.get(e.req, ())
                grows = e.req in seen.running and e.logical == len(table)
                if grows and e.logical > 0:  # a decode step filled its last block
                    yield Candidate("next_block", side, at, e.kind, e.req, e.logical)
                    yield Candidate("blocks_held", side, at, e.kind, e.req)
            case E.TokensWritten() if not paged:
                decode = len(e.slots) == 1 and e.req in seen.running
                if decode and e.req not in first_decode:
                    first_decode.add(e.req)
                    yield Candidate("next_slot", side, at, e.kind, e.req)
            case E.BlockCopied():
                yield Candidate("copied", side, at, e.kind, e.req, e.logical)
            case E.BlockShared() if e.logical == 0:  # once per request sharing
                yield Candidate("shared", side, at, e.kind, e.req)
            case E.Preempted():
                if len(preempted) == 1:
                    yield Candidate("preempted", side, at, e.kind, e.req)
                yield Candidate("preempt_mode", side, at, e.kind, e.req)
            case E.SwappedOut():
                yield Candidate("cpu_blocks", side, at, e.kind, e.req)
