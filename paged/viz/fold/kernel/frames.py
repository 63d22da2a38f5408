"""Inside the kernel: a run's ``attention_read`` events folded into the lesson's frames.

A kernel lesson (``paged/lessons/<name>/kernel.toml``) follows one request of one paged run. Its
frames come in four chapters:

1. ``table``: the request's logical blocks one by one, each to the physical block it landed in
   (a block other tables hold too is marked shared);
2. ``walk``: one decode step zoomed in, one frame per tile (one tile per block) with the
   translation of the tile's positions and the online softmax's (m, l) after it, and a last
   frame with the walk's (m, l) beside the softmax over all scores at once;
3. ``heat``: every decode step the trace recorded, the share of attention per physical block;
4. ``gqa``: the query heads sharing a KV head read each block once; split-K's partial (m, l).

Every number a frame shows is a field of an event (or of the arena frame at that step),
formatted here and nowhere else: ``facts`` holds them as text. Pure Python, no torch.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from paged.engine.core import events as E
from paged.engine.trace.io import Trace, TraceError
from paged.viz.fold.lesson_folder import LANGS, LESSONS_DIR, LessonError, read_lesson_toml, texts
from paged.viz.fold.reducer import Frame, replay
from paged.viz.safe import md_text

SPEC_FILE = "kernel.toml"
CHAPTERS = ("table", "walk", "heat", "gqa")
#: What a frame shows, one caption template each (``kernel.toml`` ``[captions]``)
KINDS = ("table", "tile", "tile_up", "final", "heat", "gqa", "split")


@dataclass(frozen=True)
class KernelSpec:
    """What ``kernel.toml`` says: titles, the run and request followed, and per chapter its
    title and narration and per frame kind its captions (left and right), by language."""

    name: str
    folder: Path
    title: dict[str, str]
    summary: dict[str, str]
    trace_file: str
    run: str
    request: str
    chapter_titles: dict[str, dict[str, str]]
    narration: dict[str, dict[str, str]]
    captions: dict[str, dict[str, tuple[str, str]]]  # kind -> lang -> (left, right)
    side_titles: dict[str, dict[str, str]]  # left / right -> lang -> text

    @property
    def steps(self) -> tuple[str, ...]:
        """The chapters, as a side-by-side lesson's steps are counted (one figure each)."""
        return CHAPTERS


def chapter_keyframe(lesson: KernelLesson, chapter: str) -> int:
    """The frame a chapter's figure shows: the table's first block, the walk's result, the
    last step's heat, the split-K merge."""
    start, end = lesson.chapter_range(chapter)
    return {"table": start, "walk": end, "heat": end, "gqa": end}[chapter]


def kernel_lessons(root: Path = LESSONS_DIR) -> list[str]:
    """Kernel lesson names, sorted: folders with a ``kernel.toml``."""
    return sorted(p.parent.name for p in root.glob(f"*/{SPEC_FILE}"))


def load_kernel_spec(name: str, root: Path = LESSONS_DIR) -> KernelSpec:
    """Parse ``root/name/kernel.toml``; one-line LessonError when it is unusable."""
    folder, doc = read_lesson_toml(name, SPEC_FILE, root, LessonError)
    try:
        chapters = {c["id"]: c for c in doc["chapters"]}
        if tuple(chapters) != CHAPTERS:
            raise LessonError(f"lessons/{name}/{SPEC_FILE}: chapters must be {', '.join(CHAPTERS)}")
        caps = doc["captions"]
        return KernelSpec(
            name=name,
            folder=folder,
            title=texts(doc["title"]),
            summary=texts(doc["summary"]),
            trace_file=doc.get("trace", "trace.jsonl"),
            run=str(doc["run"]),
            request=str(doc["request"]),
            chapter_titles={k: texts(c["title"]) for k, c in chapters.items()},
            narration={k: texts(c["narration"]) for k, c in chapters.items()},
            captions={
                kind: {
                    lg: (texts(caps[kind]["left"])[lg], texts(caps[kind]["right"])[lg])
                    for lg in LANGS
                }
                for kind in KINDS
            },
            side_titles={side: texts(doc[side]["title"]) for side in ("left", "right")},
        )
    except (KeyError, TypeError) as e:
        raise LessonError(f"lessons/{name}/{SPEC_FILE} lacks {e}") from None
    except tomllib.TOMLDecodeError as e:  # pragma: no cover - read_lesson_toml parsed it
        raise LessonError(str(e)) from None


@dataclass(frozen=True)
class KernelFrame:
    """One frame of the lesson: the arena at ``arena.step``, the read it shows, what it
    highlights (a logical block, a tile), and its numbers as text (``facts``)."""

    chapter: str
    stage: str
    arena: Frame
    read: E.AttentionRead
    logical: int | None = None  # the block highlighted (chapter 1) or the tile read (2)
    facts: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class KernelLesson:
    spec: KernelSpec
    block_size: int
    num_blocks: int
    frames: tuple[KernelFrame, ...]
    reads: tuple[E.AttentionRead, ...]
    zoom: E.AttentionRead  # the decode step chapters 1, 2 and 4 look at
    head: int  # the index in ``zoom.heads`` of the query head chapter 2 follows
    origin: tuple[tuple[str, str], ...] = ()

    @property
    def num_frames(self) -> int:
        return len(self.frames)

    def chapter_range(self, chapter: str) -> tuple[int, int]:
        idx = [i for i, f in enumerate(self.frames) if f.chapter == chapter]
        return idx[0], idx[-1]


def num(x: float, digits: int = 3) -> str:
    """A real number as the lesson prints it (m and l: three decimals)."""
    return f"{x:.{digits}f}"


def _bracketed(x: float) -> str:
    return f"({num(x)})" if x < 0 else num(x)


def pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def sci(x: float) -> str:
    """A difference near zero: 3.0e-08, never rounded to 0."""
    return f"{x:.1e}"


def _positions(read: E.AttentionRead, t: int, bs: int) -> tuple[int, int]:
    return t * bs, min((t + 1) * bs, read.position + 1) - 1


def _shared_with(arena: Frame, req: str, physical: int) -> list[str]:
    return sorted(r for r, table in arena.block_tables.items() if r != req and physical in table)


def follow_head(read: E.AttentionRead) -> int:
    """The query head of the group chapter 2 follows: the one whose running max rises at the
    most tiles (the rescaling is what the chapter shows), the first of equals."""
    rises = [
        sum(b[g] > a[g] for a, b in zip(read.tile_m, read.tile_m[1:], strict=False))
        for g in range(len(read.heads))
    ]
    return rises.index(max(rises))


def _base_facts(read: E.AttentionRead, bs: int, h: int) -> dict[str, str]:
    return {
        "req": read.req,
        "step": str(read.step),
        "position": str(read.position),
        "context": str(read.position + 1),
        "block_size": str(bs),
        "blocks": str(len(read.physical)),
        "table": " ".join(str(b) for b in read.physical),
        "layer": str(read.layer),
        "kv_head": str(read.kv_head),
        "head": str(read.heads[h]),
        "heads": ", ".join(str(x) for x in read.heads),
        "group": str(len(read.heads)),
        "first_mass": pct(read.mass[0]),
        "last_mass": pct(read.mass[-1]),
        "middle_mass": pct(sum(read.mass[1:-1])),
        # the walk's end: its splits' (m, l) merged (one split: the last tile's own)
        "m": num(read.merged_m[h]),
        "l": num(read.merged_l[h]),
        "full_m": num(read.full_m[h]),
        "full_l": num(read.full_l[h]),
        "merged_m": num(read.merged_m[h]),
        "merged_l": num(read.merged_l[h]),
        "max_diff": sci(read.max_diff),
        "out_diff": sci(read.out_diff),
        "reads_shared": str(len(read.physical)),
        "reads_apart": str(len(read.physical) * len(read.heads)),
        **source_facts(read, bs),
    }


def source_facts(read: E.AttentionRead, bs: int) -> dict[str, str]:
    """Who walked the tiles and how: the kernel's own record (``cpu``) or the reference's walk
    replayed (a backend that reports none); the split-K split the kernel cut at."""
    tiles = len(read.physical)
    split = read.split or tiles
    splits = -(-tiles // split)
    return {
        "source": read.source,
        "cpu_walk": "1" if read.source == "cpu" else "",
        "reference_walk": "" if read.source == "cpu" else "1",
        "split_tiles": str(split),
        "split_positions": str(split * bs),
        "splits": str(splits),
        "one_split": "1" if splits == 1 else "",
        "many_splits": "1" if splits > 1 else "",
    }


def _tile_facts(read: E.AttentionRead, t: int, bs: int, h: int) -> dict[str, str]:
    first, last = _positions(read, t, bs)
    going = t % (read.split or len(read.physical)) != 0  # not its split's first tile
    return {
        "tile": str(t + 1),
        "logical": str(t),
        "physical": str(read.physical[t]),
        "first": str(first),
        "last": str(last),
        "first_offset": str(first % bs),
        "last_offset": str(last % bs),
        "first_slot": str(read.physical[t] * bs + first % bs),
        "tile_m": num(read.tile_m[t][h]),
        "tile_l": num(read.tile_l[t][h]),
        "part_m": num(read.part_m[t][h]),
        "part_l": num(read.part_l[t][h]),
        "tile_mass": pct(read.mass[t]),
        # a tile that raised its split's max: what was summed before is rescaled by
        # exp(m_old - m_new); a split's first tile starts a walk of its own
        "m_rose": "1" if going and read.tile_m[t][h] > read.tile_m[t - 1][h] else "",
        "m_before": num(read.tile_m[t - 1][h]) if going else "",
        # subtracted in the caption: a negative one in brackets, never "− -3.055"
        "tile_m_sub": _bracketed(read.tile_m[t][h]),
    }


def fold_kernel(spec: KernelSpec, trace: Trace) -> KernelLesson:
    """The lesson's frames from ``trace``; TraceError (one line) for a trace without the run
    or without any ``attention_read`` of the request followed."""
    if spec.run not in trace.run_names:
        raise TraceError(f"this trace has no run {spec.run!r:.40} to look inside")
    info = trace.run_header(spec.run)
    events = trace.runs[spec.run]
    reads = tuple(e for e in E.of_kind(events, E.AttentionRead) if e.req == spec.request)
    if not reads:
        raise TraceError(
            f"run {spec.run!r:.40} recorded no attention reads of request {spec.request!r:.40}"
            " (record it with [attention] in the scenario)"
        )
    by_step = {f.step: f for f in replay(events, info)}
    bs = info.block_size
    # the step zoomed into: one where the table holds a shared block if any does, then the
    # longest table, then the latest step
    # (a read in the step its request finished shows an arena that has let its blocks go)
    held = [r for r in reads if r.req in by_step[r.step].block_tables] or list(reads)
    zoom = max(
        held,
        key=lambda r: (
            any(_shared_with(by_step[r.step], r.req, b) for b in r.physical),
            len(r.physical),
            r.step,
        ),
    )
    arena = by_step[zoom.step]
    head = follow_head(zoom)
    base = _base_facts(zoom, bs, head)
    sharing = {b: _shared_with(arena, zoom.req, b) for b in zoom.physical}
    base["shared_blocks"] = " ".join(str(b) for b in zoom.physical if sharing[b])
    base["sharers"] = ", ".join(sorted({r for rs in sharing.values() for r in rs}))
    frames: list[KernelFrame] = []
    for i, b in enumerate(zoom.physical):
        shared = _shared_with(arena, zoom.req, b)
        facts = {
            **base,
            "logical": str(i),
            "physical": str(b),
            "shared_with": ", ".join(shared),
            "first": str(i * bs),
            "last": str(min((i + 1) * bs, zoom.position + 1) - 1),
        }
        frames.append(KernelFrame("table", "table", arena, zoom, i, facts))
    for t in range(len(zoom.physical)):
        facts = {**base, **_tile_facts(zoom, t, bs, head)}
        frames.append(KernelFrame("walk", "tile", arena, zoom, t, facts))
    frames.append(KernelFrame("walk", "final", arena, zoom, None, base))
    for r in reads:
        facts = _base_facts(r, bs, head)
        frames.append(KernelFrame("heat", "heat", by_step[r.step], r, None, facts))
    frames.append(KernelFrame("gqa", "gqa", arena, zoom, None, base))
    frames.append(KernelFrame("gqa", "split", arena, zoom, None, base))
    origin = trace.info.origin(("model", "device", "created"))
    return KernelLesson(spec, bs, info.num_slots // bs, tuple(frames), reads, zoom, head, origin)


def caption(lesson: KernelLesson, i: int, lang: str) -> tuple[str, str]:
    """Frame ``i``'s two captions, filled from its facts."""
    f = lesson.frames[i]
    # a tile that raised the running max says what that did to the sum so far
    kind = "tile_up" if f.stage == "tile" and f.facts.get("m_rose") else f.stage
    left, right = lesson.spec.captions[kind][lang]
    return fill(left, f.facts), fill(right, f.facts)


def narration(lesson: KernelLesson, i: int, lang: str) -> str:
    """The narration of frame ``i``'s chapter, filled from the facts of the chapter's first
    frame (a chapter's text is true on every frame of it: per-frame numbers are captions)."""
    f = lesson.frames[i]
    first = lesson.frames[lesson.chapter_range(f.chapter)[0]]
    facts = dict(first.facts)
    for key in ("req", "sharers"):  # a trace's ids are text, never markup
        facts[key] = md_text(facts[key]) if facts.get(key) else ""
    if f.chapter == "heat":  # the chapter's text speaks of its whole range of steps
        facts.update(_heat_facts(lesson))
    return fill(lesson.spec.narration[f.chapter][lang], facts)


def _heat_facts(lesson: KernelLesson) -> dict[str, str]:
    reads = lesson.reads
    first = [r.mass[0] for r in reads]
    last = [r.mass[-1] for r in reads]
    return {
        "heat_steps": str(len(reads)),
        "heat_first_step": str(reads[0].step),
        "heat_last_step": str(reads[-1].step),
        "sink_min": pct(min(first)),
        "sink_max": pct(max(first)),
        "recent_min": pct(min(last)),
        "recent_max": pct(max(last)),
        "outside_min": pct(
            min(
                1 - a - b if len(r.mass) > 1 else 0.0
                for r, a, b in zip(reads, first, last, strict=True)
            )
        ),
        "outside_max": pct(
            max(
                1 - a - b if len(r.mass) > 1 else 0.0
                for r, a, b in zip(reads, first, last, strict=True)
            )
        ),
    }


def fill(template: str, facts: dict[str, str]) -> str:
    """``{name}`` placeholders from ``facts``; a paragraph starting ``[if name]`` is kept only
    when that fact is non-empty. An unknown name is a LessonError (the lesson's file is wrong,
    not the trace)."""
    out = []
    for para in template.strip().split("\n\n"):
        if para.startswith("[if "):
            key, _, para = para[4:].partition("]")
            if not facts.get(key.strip()):
                continue
        try:
            out.append(para.strip().format_map(facts))
        except (KeyError, IndexError, ValueError) as e:
            raise LessonError(f"narration names an unknown number {e}") from None
    return "\n\n".join(out)
