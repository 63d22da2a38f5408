"""Exercises for the kernel lesson (``paged.viz.fold.kernel``): predict what the next frame of
the walk shows, answered by that frame's own ``attention_read`` fields.

The rules, one per frame kind, each asking about exactly one fact of the next frame:

- ``physical``: at a table frame, which physical block holds the next logical block;
- ``m_rises``: at a tile frame, whether the followed head's running max rises at the next tile
  (never across a split-K boundary, where the next tile starts a walk of its own);
- ``top_block``: at a heat frame, which logical block gets the largest share of attention at
  the next step recorded (only where one block leads: a tie has no one answer);
- ``gqa_reads``: before the group chapter, how many block reads the query heads of one KV head
  need together;
- ``splits``: before the split-K frame, how many splits the walk is cut into.

The questions are ``Question``s, so the payload and the player's exercise mode take them as
they take a side-by-side lesson's. Pure Python, no torch.
"""

from __future__ import annotations

from collections.abc import Callable

from paged.viz.exercises.facts import NUMBER, YESNO, Answer
from paged.viz.exercises.question import Question, text
from paged.viz.fold.kernel.frames import KernelFrame, KernelLesson, pct
from paged.viz.fold.lesson_folder import LANGS

EVENT = "attention_read"
PER_FACT = 3  # questions of one fact: the heat chapter alone has dozens of frames
#: Which side's panels a fact is about: the arena's block table (left) or the kernel (right)
SIDE = {"physical": "left", "m_rises": "right", "top_block": "right"}
SIDE.update({"gqa_reads": "right", "splits": "right"})


def _physical(seen: KernelFrame, nxt: KernelFrame) -> Answer | None:
    if seen.stage != "table" or nxt.stage != "table" or nxt.logical is None:
        return None
    return nxt.read.physical[nxt.logical]


def _m_rises(seen: KernelFrame, nxt: KernelFrame) -> Answer | None:
    if seen.stage != "tile" or nxt.stage != "tile" or not nxt.facts.get("m_before"):
        return None  # the next tile starts a split: its max has no "before" to rise from
    return "yes" if nxt.facts.get("m_rose") else "no"


def _top_block(seen: KernelFrame, nxt: KernelFrame) -> Answer | None:
    if seen.stage != "heat" or nxt.stage != "heat":
        return None
    mass = list(nxt.read.mass)
    top = max(mass, default=0.0)
    return mass.index(top) if mass.count(top) == 1 else None


def _gqa_reads(seen: KernelFrame, nxt: KernelFrame) -> Answer | None:
    return int(nxt.facts["reads_shared"]) if nxt.stage == "gqa" else None


def _splits(seen: KernelFrame, nxt: KernelFrame) -> Answer | None:
    return int(nxt.facts["splits"]) if nxt.stage == "split" else None


READERS: dict[str, tuple[str, Callable[[KernelFrame, KernelFrame], Answer | None]]] = {
    "physical": (NUMBER, _physical),
    "m_rises": (YESNO, _m_rises),
    "top_block": (NUMBER, _top_block),
    "gqa_reads": (NUMBER, _gqa_reads),
    "splits": (NUMBER, _splits),
}


def _values(lesson: KernelLesson, fact: str, i: int) -> dict[str, object]:
    """What the prompt and the why quote: the next frame's own numbers."""
    nxt = lesson.frames[i + 1]
    r, head = nxt.read, nxt.read.heads[lesson.head]
    top = max(range(len(r.mass)), key=lambda k: r.mass[k]) if r.mass else 0
    return {
        "req": r.req,
        "step": r.step,
        "logical": nxt.logical or 0,
        "tile": (nxt.logical or 0) + 1,
        "head": head,
        "block": nxt.facts.get("physical", ""),
        "m_before": nxt.facts.get("m_before", ""),
        "m": nxt.facts.get("tile_m", ""),
        "top": top,
        "share": pct(r.mass[top]) if r.mass else "",
        "blocks": nxt.facts.get("blocks", ""),
        "group": nxt.facts.get("group", ""),
        "apart": nxt.facts.get("reads_apart", ""),
        "split_tiles": nxt.facts.get("split_tiles", ""),
        "splits": nxt.facts.get("splits", ""),
    }


def read_answer(lesson: KernelLesson, q: Question) -> Answer | None:
    """``q``'s answer as the fold of its next frame says it, read afresh."""
    if q.fact not in READERS or not 0 <= q.frame < lesson.num_frames - 1:
        return None
    return READERS[q.fact][1](lesson.frames[q.frame], lesson.frames[q.frame + 1])


def kernel_questions(lesson: KernelLesson) -> list[Question]:
    """The kernel lesson's questions in frame order: of each fact at most ``PER_FACT``, spread
    over the frames that could ask it (the first few tiles alone would all answer "yes")."""
    where: dict[str, list[tuple[int, Answer]]] = {fact: [] for fact in READERS}
    for i in range(lesson.num_frames - 1):
        for fact, (_, reader) in READERS.items():
            answer = reader(lesson.frames[i], lesson.frames[i + 1])
            if answer is not None:
                where[fact].append((i, answer))
    picked = sorted((i, fact, a) for fact, found in where.items() for i, a in _spread(found))
    return [_question(lesson, n, i, fact, a) for n, (i, fact, a) in enumerate(picked)]


def _spread(found: list[tuple[int, Answer]]) -> list[tuple[int, Answer]]:
    if len(found) <= PER_FACT:
        return found
    last = len(found) - 1
    return [found[round(k * last / (PER_FACT - 1))] for k in range(PER_FACT)]


def _question(lesson: KernelLesson, n: int, i: int, fact: str, answer: Answer) -> Question:
    words = text()
    form = READERS[fact][0]
    values = _values(lesson, fact, i)
    why = f"k_{fact}_{answer}" if form == YESNO else f"k_{fact}"
    yesno = form == YESNO
    return Question(
        id=f"k{n}",
        fact=fact,
        side=SIDE[fact],
        frame=i,
        event=EVENT,
        form=form,
        answer=answer,
        prompt={lg: words[lg][f"q_k_{fact}"].format(**values) for lg in LANGS},
        why={lg: words[lg][why].format(**values) for lg in LANGS},
        choices=("yes", "no") if yesno else (),
        labels={lg: (words[lg]["yes"], words[lg]["no"]) for lg in LANGS} if yesno else {},
        req=lesson.frames[i + 1].read.req,
    )
