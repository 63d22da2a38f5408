"""One line per frame saying what happened in it, folded from that frame's own events.

``side_caption(frame, lang)`` turns one side's events into short phrases ("C's block 2 is full:
logical 3 → physical #7", "D waits: needs 100 slots, 112 free, largest hole 80"); ``caption``
joins both sides. Every number comes from the frame's events or its account, so a caption is
true of the frame it is shown on by construction. Templates: paged/viz/text/captions.toml. Pure Python.
"""

from __future__ import annotations

from collections import Counter

from paged.engine.core import events as E
from paged.engine.core.accounting import strands_free
from paged.viz import ui_text
from paged.viz.fold.lesson import Lesson
from paged.viz.fold.percent import percents
from paged.viz.fold.reducer import PAGED, Frame

MAX_PHRASES = 3  # per side; the rest are counted ("+2 more")


def text(lang: str) -> dict[str, str]:
    tables = ui_text.load("captions")
    return tables.get(lang, tables["en"])


def _name(frame: Frame, req: str) -> str:
    view = frame.requests.get(req)
    return view.name if view else req


def _one(key: str, n: int) -> str:
    """The singular template for a count of one (English needs it; Chinese has the same)."""
    return f"{key}_one" if n == 1 else key


def side_phrases(frame: Frame, lang: str = "en") -> list[str]:
    """What happened on one side in this frame, most telling first."""
    return _phrases(frame, lang)[0]


def _phrases(frame: Frame, lang: str) -> tuple[list[str], set[int]]:
    """``side_phrases`` and which of them are routine (a first admission, a block filled): the
    ones a short caption may count instead of saying."""
    t = text(lang)
    paged = frame.run.allocator == PAGED
    evs = frame.events
    admitted = list(E.of_kind(evs, E.Admitted))
    admitted_ids = {e.req for e in admitted}
    # a table's new entries: fresh blocks, and shared ones (a cache hit, a fork)
    blocks = Counter(e.req for e in E.of_kind(evs, E.BlockAllocated, E.BlockShared))
    # still shared when the frame ends: a block copied on write (a fork writing into the
    # shared, partly filled last block) is the request's own by then
    copies = list(E.of_kind(evs, E.BlockCopied))
    shared = Counter(e.req for e in E.of_kind(evs, E.BlockShared))
    shared.subtract(e.req for e in copies)
    # back to the pool only when no other table holds it any more
    freed = Counter(e.req for e in E.of_kind(evs, E.BlockFreed) if e.ref_count == 0)
    out_blocks = {e.req: len(e.block_map) for e in E.of_kind(evs, E.SwappedOut)}
    released = {e.req: e for e in E.of_kind(evs, E.ReservationReleased)}
    reserved = {e.req: e for e in E.of_kind(evs, E.SlotsReserved)}
    swapped_out = {e.req for e in E.of_kind(evs, E.SwappedOut)}
    out: list[str] = []
    routine: set[int] = set()
    for e in evs:
        match e:
            case E.Finished():
                name, never = _name(frame, e.req), frame.never_filled(e.req)
                # its tokens are the prompt and every output token; final_len counts K/V slots,
                # one fewer (the last token's K/V is never computed)
                view = frame.requests.get(e.req)
                tokens = view.prompt_len + e.num_generated if view else e.final_len + 1
                if paged:
                    n = freed.get(e.req, 0)
                    key = _one("finished_paged", n) + ("_never" if never else "")
                    out.append(
                        t[key].format(
                            req=name, tokens=tokens, length=e.final_len, blocks=n, never=never
                        )
                    )
                else:
                    held = released[e.req].length if e.req in released else 0
                    key = "finished_contig_never" if never else "finished_contig"
                    out.append(
                        t[key].format(
                            req=name, tokens=tokens, length=e.final_len, held=held, never=never
                        )
                    )
            case E.Preempted():
                key = "swapped_out" if e.req in swapped_out else "preempted"
                n = out_blocks[e.req] if key == "swapped_out" else e.num_generated
                # recompute runs the prompt again too: every token but the last generated one had
                # its K/V written, and all of it is dropped
                view = frame.requests.get(e.req)
                prompt = view.prompt_len if view else 0
                slots = prompt + e.num_generated - 1 if view else 0
                out.append(t[key].format(req=_name(frame, e.req), n=n, prompt=prompt, slots=slots))
            case E.SwappedIn():
                back = ", ".join(f"#{d}" for _, d in e.block_map)
                out.append(t["swapped_in"].format(req=_name(frame, e.req), blocks=back))
    for a in admitted:
        view = frame.requests.get(a.req)
        prompt = view.prompt_len if view else a.num_tokens
        if paged:
            n, k = blocks.get(a.req, 0), max(0, shared.get(a.req, 0))
            # back after a preemption or a swap: it holds its output so far too
            key = "readmitted_paged" if a.num_tokens > prompt else "admitted_paged"
            if key == "admitted_paged":
                routine.add(len(out))
            # a count of shared blocks says "blocks", so it never reads as a block's number
            shares = t[_one("shared_n", k)].format(n=k)
            out.append(
                t[_one(key + ("_shared" if k else ""), n)].format(
                    req=_name(frame, a.req),
                    prompt=prompt,
                    tokens=a.num_tokens,
                    blocks=n,
                    shared=shares,
                )
            )
        elif a.req in reserved:
            r = reserved[a.req]
            routine.add(len(out))
            out.append(
                t["admitted_contig"].format(req=_name(frame, a.req), start=r.start, length=r.length)
            )
    for c in copies:
        out.append(
            t["copied"].format(req=_name(frame, c.req), src=c.src, dst=c.dst, logical=c.logical)
        )
    for b in frame.blocked:
        key = {E.BLOCKED_NO_HOLE: "blocked_hole", E.BLOCKED_BATCH_FULL: "blocked_batch"}.get(
            b.reason, "blocked_space"
        )
        out.append(
            t[key].format(
                req=_name(frame, b.req), need=b.need_slots, free=b.free_slots, hole=b.largest_hole
            )
        )
    for e in E.of_kind(evs, E.BlockAllocated):
        if e.req not in admitted_ids and e.logical > 0:
            routine.add(len(out))
            out.append(
                t["block_full"].format(
                    req=_name(frame, e.req),
                    prev=e.logical - 1,
                    logical=e.logical,
                    physical=e.physical,
                )
            )
    if not out:
        writers = {e.req for e in E.of_kind(evs, E.TokensWritten)}
        # the left's pale cells are a guess at what will be written: say when it is settled
        decode = "decode" if paged or not frame.reservations else "decode_contig"
        out.append(t[_one(decode, len(writers))].format(n=len(writers)) if writers else t["idle"])
    return out, routine


def side_caption(frame: Frame, lang: str = "en", ended: bool = False) -> str:
    t = text(lang)
    if ended:
        return t["ended"]
    phrases, routine = _phrases(frame, lang)
    if len(phrases) > MAX_PHRASES:
        # what the frame is about (a copy-on-write, a swap, a re-admission, a request that
        # waits) is always said; only routine phrases past the first few are counted
        room = MAX_PHRASES - (len(phrases) - len(routine))
        keep = []
        for k in range(len(phrases)):
            if k in routine:
                if room <= 0:
                    continue
                room -= 1
            keep.append(k)
        if len(keep) < len(phrases):
            phrases = [phrases[k] for k in keep] + [t["more"].format(n=len(phrases) - len(keep))]
    return "; ".join(phrases) if lang == "en" else "；".join(phrases)


def caption(lesson: Lesson, i: int, lang: str = "en") -> tuple[str, str]:
    """Frame ``i``'s caption for the left and the right side."""
    out = []
    for s in (lesson.left, lesson.right):
        ended = i >= len(s.frames)
        out.append(side_caption(s.at(i), lang, ended))
    return out[0], out[1]


def score_headline(lesson: Lesson, lang: str = "en") -> str:
    """The scoreboard's result in one line, with its cards' own numbers: each run's requests
    finished, engine steps taken and time-averaged token share (one decimal, as the cards)."""
    t = text(lang)
    left, right = lesson.left.summary, lesson.right.summary
    tokens = {
        side: percents(s.shares, 1)["token_states"]
        for side, s in (("left", left), ("right", right))
    }
    key = "score_headline_same" if left.finished == right.finished else "score_headline"
    return t[key].format(
        n=right.finished,
        left_n=left.finished,
        right_n=right.finished,
        left_steps=left.steps,
        right_steps=right.steps,
        left_tokens=tokens["left"],
        right_tokens=tokens["right"],
    )


def state_line(frame: Frame, lang: str = "en") -> str:
    """The side's state in this frame, in one sentence (the chapter text between keyframes)."""
    t = text(lang)
    a = frame.account
    b = next((b for b in frame.blocked if strands_free(b.reason)), None)
    if b is not None:
        return t["state_hole"].format(
            running=len(frame.running),
            waiting=len(frame.waiting),
            free=b.free_slots,
            hole=b.largest_hole,
        )
    shown = percents(a.shares())  # the metrics strip's numbers: one number per quantity
    return t["state"].format(
        running=len(frame.running),
        waiting=len(frame.waiting),
        tokens=shown["token_states"],
        free=shown["free"],
    )
