"""Shares shown as percentages that add up: the five categories of a frame always cover the
arena, so the numbers printed beside them must sum to exactly 100 %.

Rounding each share on its own does not promise that (three thirds print as 33 + 33 + 33).
``percents`` rounds by largest remainder: every value is floored at the chosen precision, then
the units still missing go to the largest remainders. Each printed value is then within one unit
of its exact share, and the printed values sum to 100. Pure Python.
"""

from __future__ import annotations

import math
from collections.abc import Mapping


def percents(shares: Mapping[str, float], decimals: int = 0) -> dict[str, str]:
    """``{key: "12%"}`` (or ``"12.3%"`` with ``decimals=1``) for shares that sum to 1; the
    printed numbers sum to exactly 100. All-zero shares (an empty run) print as zeros. Raises
    ValueError when the shares sum to anything else but 1."""
    total = sum(shares.values())
    if total == 0:
        return {k: f"{0:.{decimals}f}%" for k in shares}
    if not math.isclose(total, 1.0, abs_tol=1e-6):
        raise ValueError(f"shares sum to {total}, not 1")
    unit = 10**decimals
    scaled = {k: max(0.0, v) * 100 * unit for k, v in shares.items()}
    floors = {k: math.floor(v + 1e-9) for k, v in scaled.items()}
    missing = 100 * unit - sum(floors.values())
    by_remainder = sorted(scaled, key=lambda k: (floors[k] - scaled[k], list(shares).index(k)))
    for k in by_remainder[: max(0, missing)]:
        floors[k] += 1
    return {k: f"{floors[k] / unit:.{decimals}f}%" for k in shares}
