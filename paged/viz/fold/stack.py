"""The essay's stack, layer by layer, each with the number it buys, measured by the engine.

PagedAttention at the bottom; FP8 KV blocks, offloading to a CPU tier and prefix caching above
it, each possible because the unit of KV memory is a block. Every layer has a lesson whose
recorded trace shows it; this module folds those traces (and the FP8 and bf16 accuracy data
files) into the few numbers the stack page quotes. Nothing here is typed in: a number comes from a
trace's events or header, or from ``paged/viz/data/{fp8,bf16}_accuracy.json``. Pure Python (no
Streamlit, no torch).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from paged.engine.core import events as E
from paged.engine.trace.io import TraceError
from paged.engine.trace.io import read as read_trace
from paged.viz.data import bf16_accuracy, fp8_accuracy
from paged.viz.fold.lesson import Lesson, build
from paged.viz.fold.lesson_folder import LESSONS_DIR, LessonError, load_spec, trace_path
from paged.viz.fold.narration import pct
from paged.viz.fold.tier_facts import tier_facts


@dataclass(frozen=True)
class Layer:
    """One layer of the stack: its key in the page text, the lesson that shows it, and the
    numbers its text quotes (empty with ``problem`` set when the lesson cannot be read)."""

    key: str
    lesson: str
    numbers: dict[str, object] = field(default_factory=dict)
    problem: str = ""


#: Bottom to top, as the essay stacks them: (text key, lesson folder).
LAYERS = (
    ("paged", "six-steps"),
    ("fp8", "fp8-twice"),
    ("offload", "recompute-or-swap"),
    ("prefix", "shared-prompt"),
)


def _paged(lesson: Lesson) -> dict[str, object]:
    left, right = lesson.left.summary, lesson.right.summary
    return {
        "left_running": left.max_running,
        "right_running": right.max_running,
        "left_tokens": pct(left.shares["token_states"]),
        "right_tokens": pct(right.shares["token_states"]),
    }


def _fp8(lesson: Lesson) -> dict[str, object]:
    lr, rr = lesson.left.run, lesson.right.run
    lf = tier_facts(lr, lesson.left.frames, len(lesson.left.frames) - 1)
    rf = tier_facts(rr, lesson.right.frames, len(lesson.right.frames) - 1)
    out: dict[str, object] = {
        "left_dtype": lf.kv_dtype,
        "right_dtype": rf.kv_dtype,
        "left_blocks": lf.num_blocks,
        "right_blocks": rf.num_blocks,
        "ratio": f"{rf.num_blocks / lf.num_blocks:.1f}" if lf.num_blocks else "?",
        "left_mib": lf.arena_mib,
        "right_mib": rf.arena_mib,
        "left_mean": f"{lesson.left.summary.mean_running:.1f}",
        "right_mean": f"{lesson.right.summary.mean_running:.1f}",
        "left_steps": lesson.left.summary.steps,
        "right_steps": lesson.right.summary.steps,
    }
    acc = fp8_accuracy.narration_facts()
    out["top1"] = acc.e4m3_top1 if acc else "?"
    out["prefix"] = acc.e4m3_prefix if acc else "?"
    out["new_tokens"] = acc.new_tokens if acc else "?"
    out["reference"] = acc.reference if acc else "?"
    out.update(_wider_arenas(lr.block_bytes, lf.num_blocks, lf.elem_bytes))
    out.update(bf16_accuracy.quotes())
    return out


def _wider_arenas(block_bytes: int, num_blocks: int, elem_bytes: int) -> dict[str, object]:
    """How many blocks the same arena holds stored as bf16 and as fp32, from the recorded
    block's bytes and element width (``?`` when the header does not say them)."""
    if not block_bytes or not elem_bytes:
        return dict.fromkeys(("bf16_blocks", "fp32_blocks", "bf16_ratio"), "?")
    arena = block_bytes * num_blocks
    bf16 = arena // (block_bytes * 2 // elem_bytes)
    fp32 = arena // (block_bytes * 4 // elem_bytes)
    ratio = f"{bf16 / fp32:.1f}" if fp32 else "?"  # an arena smaller than one fp32 block
    return {"bf16_blocks": bf16, "fp32_blocks": fp32, "bf16_ratio": ratio}


def _offload(lesson: Lesson) -> dict[str, object]:
    lf = tier_facts(lesson.left.run, lesson.left.frames, len(lesson.left.frames) - 1)
    rf = tier_facts(lesson.right.run, lesson.right.frames, len(lesson.right.frames) - 1)
    return {
        "left_recomputed": lf.recomputed,
        "right_recomputed": rf.recomputed,
        "spared": max(0, lf.recomputed - rf.recomputed),
        "blocks_moved": rf.blocks_moved,
        "bytes_moved": rf.bytes_moved,
        # the bytes are the arena's element type's: a float8 arena would move a quarter
        "kv_dtype": lesson.right.run.kv_cache_dtype,
    }


def _prefix(lesson: Lesson) -> dict[str, object]:
    hits = [e for f in lesson.right.frames for e in E.of_kind(f.events, E.CacheHit)]
    prompts = sum(v.prompt_len for v in lesson.right.frames[-1].requests.values())
    return {
        "hit_tokens": sum(e.tokens_saved for e in hits),
        "hits": len(hits),
        "prompt_tokens": prompts,
        "requests": len(lesson.right.frames[-1].requests),
    }


_NUMBERS = {"paged": _paged, "fp8": _fp8, "offload": _offload, "prefix": _prefix}


def layers(root: Path = LESSONS_DIR) -> list[Layer]:
    """Every layer with its numbers, bottom first. A lesson that is missing or whose trace is
    unusable gives its layer a one-line ``problem`` instead of numbers."""
    out = []
    for key, name in LAYERS:
        try:
            spec = load_spec(name, root)
            lesson = build(spec, read_trace(trace_path(spec)))
            out.append(Layer(key, name, _NUMBERS[key](lesson)))
        except (LessonError, TraceError, OSError) as e:
            out.append(Layer(key, name, problem=str(e).splitlines()[0][:200]))
    return out
