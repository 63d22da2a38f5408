"""Where each arena slot sits on screen: the grid both renderers (plotly and SVG) share.

Plotly-free, so the SVG renderer does not pay for plotly's import.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: Past this many slots a grid carries no per-cell hover text: it would outweigh the picture.
HOVER_MAX_SLOTS = 512


@dataclass(frozen=True)
class GridLayout:
    """Slots laid out row-major, whole blocks per row, rows about as many as columns.

    ``row_scale`` is a row's height as a share of a full cell's: a run whose slot holds fewer
    bytes than the other side's is drawn in shorter rows, so drawn area follows bytes
    (paged/viz/render/to_scale.py). 1.0, the default, draws square cells exactly as before."""

    num_slots: int
    block_size: int
    cols: int
    rows: int
    row_scale: float = 1.0

    def xy(self, slot: int) -> tuple[int, int]:
        return slot % self.cols, slot // self.cols

    @property
    def scaled(self) -> bool:
        return self.row_scale != 1.0


def grid_layout(num_slots: int, block_size: int) -> GridLayout:
    """Both sides use the layout of the paged side's block size: same scale, same arena."""
    num_blocks = math.ceil(num_slots / block_size)
    per_row = max(1, round(math.sqrt(num_blocks / block_size)))
    cols = block_size * per_row
    return GridLayout(num_slots, block_size, cols, math.ceil(num_slots / cols))


def changed_runs(slots: list[int], layout: GridLayout) -> list[tuple[int, int, int]]:
    """Consecutive changed slots merged into (row, first column, last column) runs."""
    out: list[tuple[int, int, int]] = []
    for s in slots:
        x, y = layout.xy(s)
        if out and out[-1][0] == y and out[-1][2] == x - 1:
            out[-1] = (y, out[-1][1], x)
        else:
            out.append((y, x, x))
    return out
