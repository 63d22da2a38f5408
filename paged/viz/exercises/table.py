"""Every fact a question may ask, by the name a lesson's ``[[exercises]]`` gives it (``ask``):
how it is answered and which readers (``paged.viz.exercises.facts``, ``.sharing``) give its
answer and its why. Pure Python.
"""

from __future__ import annotations

from paged.viz.exercises import facts as F
from paged.viz.exercises import sharing as S

FACTS: dict[str, F.Fact] = {
    "admitted": F.Fact(F.YESNO, F._admitted, F._admitted_why),
    "external": F.Fact(F.NUMBER, F._external, F._external_why),
    "next_block": F.Fact(F.CELLS, F._next_block, F._next_block_why, F.BLOCK),
    "next_slot": F.Fact(F.CELLS, F._next_slot, F._next_slot_why, F.SLOT),
    "blocks_held": F.Fact(F.NUMBER, F._blocks_held, F._blocks_held_why),
    "shared": F.Fact(F.CELLS, S._shared, S._shared_why, F.BLOCK),
    "copied": F.Fact(F.CELLS, S._copied, S._copied_why, F.BLOCK),
    "preempted": F.Fact(F.CHOOSE, S._preempted, S._preempted_why),
    "preempt_mode": F.Fact(F.CHOOSE, S._preempt_mode, S._preempt_mode_why),
    "cpu_blocks": F.Fact(F.NUMBER, S._cpu_blocks, S._cpu_blocks_why),
}
