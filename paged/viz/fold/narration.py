"""A lesson step's narration, filled from the frames at its keyframe.

Narration may quote numbers only through ``{placeholders}`` filled from the frames (see
``narration_context`` and ``paged.viz.fold.facts``): every number on screen comes from the engine's
events.

Narration must stay true for any scenario, not only the one it was written for. A paragraph
that starts with ``[if NAME]`` (or ``[unless NAME]``) is shown only when the named fact (see
``facts.CONDITIONS``) holds at the keyframe, so "paging finished in 40 steps instead of 40" is
never said. A step whose keyframe never comes says nothing of it: its text is the step's
``absent`` text (or a generic line), and the player greys it. Pure Python.
"""

from __future__ import annotations

import math
import string
from collections.abc import Iterable
from dataclasses import asdict, dataclass

from paged.engine.core import events as E
from paged.viz.data import fp8_accuracy
from paged.viz.fold.facts import (
    CONDITIONS,
    IF_TAG,
    EventFacts,
    NarrationContext,
    RequestFacts,
    SideFacts,
)
from paged.viz.fold.keyframes import rule_event
from paged.viz.fold.lesson import Lesson, Side
from paged.viz.fold.percent import percents
from paged.viz.fold.reducer import Frame
from paged.viz.fold.tier_facts import tier_facts
from paged.viz.safe import md_text
from paged.viz.ui_text import load as load_text


@dataclass(frozen=True)
class RenderedStep:
    """A step's text in one language, placeholders filled."""

    number: int
    title: str
    narration: str
    missing: tuple[str, ...] = ()


def req_label(frame: Frame, req: str) -> str:
    view = frame.requests.get(req)
    return view.name if view else req


def pct(x: float) -> str:
    """A share as a percentage; small ones keep a decimal so 0.4% does not read as nothing."""
    return f"{100 * x:.1f}%" if 0 < x < 0.095 else f"{100 * x:.0f}%"


def narration_context(lesson: Lesson, k: int) -> NarrationContext:
    """Values a step's narration may quote, taken at its keyframe (the last frame when the
    trace lacks one). Sides are ``L`` and ``R``; ``ev`` is the event that matched the rule."""
    kf = lesson.keyframes[k]
    i = kf if kf is not None else lesson.num_frames - 1
    ev = rule_event(lesson, i, lesson.spec.steps[k].rule)
    right = lesson.right.run
    return NarrationContext(
        L=_side_facts(lesson.left, i),
        R=_side_facts(lesson.right, i),
        frame=i,
        block_size=right.block_size,
        num_slots=right.num_slots,
        num_blocks=right.num_slots // right.block_size,
        max_model_len=lesson.left.run.max_model_len or right.max_model_len,
        ev=None if ev is None else EventFacts(ev.to_dict(), _request_facts(lesson, i, ev)),
        fp8=fp8_accuracy.narration_facts(),  # measured by bench/fp8_accuracy.py
    )


def _request_facts(lesson: Lesson, i: int, ev: E.Event) -> RequestFacts | None:
    match ev:
        case E.RequestEvent(req=req):
            pass
        case _:
            return None
    left, right = lesson.left.at(i), lesson.right.at(i)
    view = left.requests.get(req) or right.requests.get(req)
    run = left.reservations.get(req)
    # A request that stops in the step it is admitted in (its first token is its last)
    # reserves and releases its run within this one frame: the frame's reservations no
    # longer list it, but it was held, and the caption quotes these same events.
    mine = _own_events(lesson.left, i, req)
    got = next((e.length for e in E.of_kind(mine, E.SlotsReserved)), 0)
    let_go = next((e.length for e in E.of_kind(mine, E.ReservationReleased)), 0)
    table = right.block_tables.get(req) or _table_as_it_stopped(lesson.right, i, req)
    right_own = _own_events(lesson.right, i, req)
    match ev:  # a swap: device -> CPU blocks out, CPU -> device blocks in
        case E.SwappedOut():
            moves: str | None = ", ".join(f"#{a}→c{b}" for a, b in ev.block_map)
        case E.SwappedIn():
            moves = ", ".join(f"c{a}→#{b}" for a, b in ev.block_map)
        case _:
            moves = None
    return RequestFacts(
        req=view.name if view else req,
        req_id=req,
        left_reserved=run[1] if run else got,
        left_released=0 if run else let_go,
        left_never=left.never_filled(req),
        right_never=right.never_filled(req),
        hole_between=_hole_between(lesson, i, req),
        right_finished=any(E.of_kind(_own_events(lesson.right, i, req), E.Finished)),
        right_blocks=len(table),
        right_table=", ".join(f"{n}→#{p}" for n, p in enumerate(table)) or "-",
        prompt_len=view.prompt_len if view else None,
        max_tokens=view.max_tokens if view else None,
        prompt_blocks=math.ceil(view.prompt_len / lesson.right.run.block_size) if view else None,
        moves=moves,
        right_wrote=_span(p for e in E.of_kind(right_own, E.TokensWritten) for p in e.positions),
        right_shared_tokens=sum(e.num_tokens for e in E.of_kind(right_own, E.BlockShared)),
    )


def _span(positions: Iterable[int]) -> str:
    """Token positions as a run: "33", "32–33"; "-" for none."""
    got = sorted(positions)
    if not got:
        return "-"
    return str(got[0]) if got[0] == got[-1] else f"{got[0]}–{got[-1]}"


def _own_events(side: Side, i: int, req: str) -> list[E.RequestEvent]:
    """``req``'s events in frame ``i`` of ``side`` (none once that run has ended)."""
    if i >= len(side.frames):
        return []
    return [e for e in E.of_kind(side.frames[i].events, E.RequestEvent) if e.req == req]


def _table_as_it_stopped(side: Side, i: int, req: str) -> tuple[int, ...]:
    """The block table ``req`` held in frame ``i`` if it finished there (the grid still draws
    those blocks, hatched where never filled): its table of the frame before, with the
    entries this frame gave it. Empty for a request that did not stop in frame ``i``."""
    mine = _own_events(side, i, req)
    if not any(E.of_kind(mine, E.Finished)):
        return ()
    table = dict(enumerate(side.frames[i - 1].block_tables.get(req, ()))) if i > 0 else {}
    for e in mine:
        match e:
            case E.Preempted():
                table = {}
            case E.BlockAllocated() | E.BlockShared():
                table[e.logical] = e.physical
            case E.BlockCopied():
                table[e.logical] = e.dst
    return tuple(table[n] for n in sorted(table))


def _hole_between(lesson: Lesson, i: int, req: str) -> bool:
    """Whether the left run ``req`` held just before frame ``i`` (and no longer holds) lies
    between two runs still alive at ``i``."""
    if i == 0 or i >= len(lesson.left.frames):
        return False
    gone = lesson.left.frames[i - 1].reservations.get(req)
    live = lesson.left.frames[i].reservations
    if gone is None or req in live:
        return False
    start, length = gone
    return any(s + n <= start for s, n in live.values()) and any(
        s >= start + length for s, n in live.values()
    )


def _side_facts(side: Side, i: int) -> SideFacts:
    f = side.at(i)
    a, s = f.account, side.summary
    blocked = f.blocked[0] if f.blocked else None
    # Shares as the strip (whole) and the scoreboard (one decimal) print them: each set sums to 100.
    now, avg = percents(a.shares()), percents(s.shares, 1)
    hit_tokens, copies = _sharing_so_far(side, i)
    return SideFacts(
        running=len(f.running),
        waiting=len(f.waiting),
        step=f.step,
        token_share=now["token_states"],
        reservation_share=now["reservation"],
        internal_share=now["internal"],
        external_share=now["external"],
        free_share=now["free"],
        token_states=a.token_states,
        reservation=a.reservation,
        internal=a.internal,
        external=a.external,
        free=a.free,
        waste=a.reservation + a.internal + a.external,
        blocks=sum(len(t) for t in f.block_tables.values()),
        avg_token_share=avg["token_states"],
        avg_waste_share=f"{100 - float(avg['token_states'].rstrip('%')):.1f}%",
        avg_reservation_share=avg["reservation"],
        avg_internal_share=avg["internal"],
        avg_external_share=avg["external"],
        avg_free_share=avg["free"],
        max_running=s.max_running,
        mean_running=f"{s.mean_running:.1f}",
        steps=s.steps,
        blocked_req=req_label(f, blocked.req) if blocked else "-",
        blocked_reason=blocked.reason if blocked else "-",
        shared=a.shared,
        saved=a.saved,
        saved_share=pct(a.saved / a.num_slots if a.num_slots else 0.0),
        hit_tokens=hit_tokens,
        copies=copies,
        **asdict(tier_facts(side.run, side.frames, i)),
    )


def _sharing_so_far(side: Side, i: int) -> tuple[int, int]:
    """Prefill tokens the cache spared and blocks copied on write, up to frame ``i``."""
    hit = copies = 0
    for f in side.frames[: i + 1]:
        for ev in f.events:
            match ev:
                case E.CacheHit():
                    hit += ev.tokens_saved
                case E.BlockCopied():
                    copies += 1
    return hit, copies


class SafeFormatter(string.Formatter):
    """Fills what it can; a placeholder the frames cannot answer shows as ``?`` and is listed,
    so a lesson that quotes a missing number degrades instead of crashing the page."""

    def __init__(self) -> None:
        self.missing: list[str] = []

    def get_field(self, field_name, args, kwargs):
        try:
            return super().get_field(field_name, args, kwargs)
        except (KeyError, AttributeError, IndexError):
            self.missing.append(field_name)
            return "?", field_name

    def format_field(self, value, format_spec):
        # Strings here come from the trace (request ids, reasons): text, never markdown.
        text = super().format_field(value, format_spec)
        return md_text(text) if isinstance(value, str) else text


def _keep_true_paragraphs(text: str, ctx: NarrationContext) -> str:
    """Drop each paragraph whose ``[if NAME]`` is false (or ``[unless NAME]`` true)."""
    out = []
    for para in text.split("\n\n"):
        m = IF_TAG.match(para)
        if m:
            holds = CONDITIONS[m.group(2)](ctx)
            if holds != (m.group(1) == "if"):
                continue
            para = para[m.end() :]
        out.append(para)
    return "\n\n".join(out)


def render_step(lesson: Lesson, k: int, lang: str) -> RenderedStep:
    """Step ``k``'s narration filled from its keyframe. A step the trace never shows says so
    (its ``absent`` text) and claims nothing of it."""
    step = lesson.spec.steps[k]
    if lesson.keyframes and lesson.keyframes[k] is None:
        absent = step.absent[lang] if step.absent else load_text("captions")[lang]["step_absent"]
        return RenderedStep(k + 1, step.title[lang], _unwrap(absent, lang))
    fmt = SafeFormatter()
    ctx = narration_context(lesson, k)
    text = _keep_true_paragraphs(_unwrap(step.narration[lang], lang), ctx)
    text = fmt.vformat(text, (), ctx.names())
    return RenderedStep(k + 1, step.title[lang], text, tuple(fmt.missing))


def _unwrap(text: str, lang: str) -> str:
    """Join the TOML's hard-wrapped lines into paragraphs (Chinese needs no space between
    lines; a space there would show as a gap between characters)."""
    glue = "" if lang == "zh" else " "
    paras = [glue.join(line.strip() for line in p.splitlines()) for p in text.strip().split("\n\n")]
    return "\n\n".join(p for p in paras if p)
