"""Drawn area follows bytes: a run whose slot holds fewer bytes is drawn in shorter rows.

Two runs shown side by side may store K/V in different element types: bf16 on the left, fp8 on
the right, the same bytes in all. Each slot is drawn at an area proportional to its bytes
(``RunHeader.block_bytes / block_size``, which the engine took from its own arena tensor): the
heaviest at full size, a lighter one in rows ``ratio`` as tall, each block still in one row. So
two arenas of equal bytes cover equal area. Where a header does not say (``block_bytes`` 0) or
both slots weigh the same, both sides share one square-cell layout, exactly as before. So do
two runs whose slots differ more than ``MAX_RATIO`` times in bytes (no element type the engine
stores does): rows that thin would not draw, and a trace that claims it is drawn unscaled.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from fractions import Fraction

from paged.engine.trace.header import RunHeader
from paged.viz import ui_text
from paged.viz.fold.tier_facts import dtype_name
from paged.viz.render.layout import GridLayout, grid_layout

TEXT = ui_text.load("to_scale")
#: The largest ratio of slot bytes drawn to scale: fp32 beside fp8 is 4.
MAX_RATIO = 16
MIN_TEXT = 0.6  # in-cell text shrunk below 60 % of its size is too small to read: left out


def slot_bytes(run: RunHeader) -> float:
    """K and V bytes of one slot over all layers; 0 when the header does not say."""
    return run.block_bytes / run.block_size if run.block_bytes > 0 and run.block_size > 0 else 0


def area_scales(runs: Sequence[RunHeader]) -> list[float]:
    """Each run's slot area as a share of the heaviest slot's; all 1.0 when any is unknown or
    when the slots differ more than ``MAX_RATIO`` times."""
    sizes = [slot_bytes(r) for r in runs]
    if not sizes or min(sizes) <= 0 or max(sizes) > MAX_RATIO * min(sizes):
        return [1.0] * len(sizes)
    top = max(sizes)
    return [b / top for b in sizes]


def side_layouts(left: RunHeader, right: RunHeader) -> tuple[GridLayout, GridLayout]:
    """Both sides' layouts: the paged side's columns for both; a lighter side's rows shorter.
    Each side then gets the rows that fill one common drawn height, so both are drawn at one
    scale. Unscaled, both are the one layout ``grid_layout`` always gave."""
    base = grid_layout(right.num_slots, right.block_size)
    scales = area_scales([left, right])
    if all(s == 1.0 for s in scales):
        return base, base
    height = drawn_rows((left, right), [replace(base, row_scale=s) for s in scales])
    out = [replace(base, rows=math.ceil(height / s - 1e-9), row_scale=s) for s in scales]
    return out[0], out[1]


def drawn_rows(runs: Sequence[RunHeader], layouts: Sequence[GridLayout]) -> float:
    """How tall the taller side's own rows are, in full-height rows: the height both sides
    are drawn to, so both are drawn at one scale."""
    pairs = zip(runs, layouts, strict=True)
    return max(-(-r.num_slots // lay.cols) * lay.row_scale for r, lay in pairs)


def text_scale(layout: GridLayout) -> float | None:
    """How much to shrink text drawn inside a cell of this layout's rows; None: leave it out.
    A half-height row keeps its labels at 80 %: the glyphs fit, the cell does not crowd."""
    t = min(1.0, 1.6 * layout.row_scale)
    return t if t >= MIN_TEXT else None


def notes(left: RunHeader, right: RunHeader, lang: str = "en") -> tuple[list[str], list[str]]:
    """The lines under each side's grid: on a side drawn smaller than the heaviest, what the
    scale is and the bytes it comes from; none on a full-size side or an unscaled pair."""
    runs = (left, right)
    scales = area_scales(runs)
    ref = runs[scales.index(max(scales))]
    w = TEXT.get(lang, TEXT["en"])
    out: list[list[str]] = []
    for run, s in zip(runs, scales, strict=True):
        if s == 1.0:
            out.append([])
            continue
        vals = dict(
            dtype=_name(run),
            ref=_name(ref),
            ratio=_ratio(s),
            slot=_kib(slot_bytes(run)),
            ref_slot=_kib(slot_bytes(ref)),
        )
        out.append([w["scale"].format(**vals), w["bytes"].format(**vals)])
    return out[0], out[1]


def _name(run: RunHeader) -> str:
    return dtype_name(run.kv_cache_dtype) if run.kv_cache_dtype else run.name


def _ratio(s: float) -> str:
    """A simple fraction when the ratio is one (1/2, 3/4), else a percentage."""
    f = Fraction(s).limit_denominator(16)
    return f"{f.numerator}/{f.denominator}" if abs(float(f) - s) < 1e-9 else f"{s:.0%}"


def _kib(nbytes: float) -> str:
    return f"{nbytes / 1024:.4g} KiB" if nbytes >= 1024 else f"{nbytes:.4g} B"
