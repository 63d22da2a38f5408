"""Every set of shares the six-step lesson prints adds up to 100 %, on every frame of both sides:
the metrics strip, the figure's metrics line, the scoreboard card and step 6's narration."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from paged.engine.trace.io import read
from paged.viz.fold.lesson import Lesson, build
from paged.viz.fold.lesson_folder import load_spec
from paged.viz.fold.narration import render_step
from paged.viz.fold.percent import percents
from paged.viz.render import figures, html

SIX = Path(__file__).resolve().parents[2] / "paged" / "lessons" / "six-steps"
NUMBER = re.compile(r"(\d+(?:\.\d+)?)%")


@pytest.fixture(scope="module")
def lesson() -> Lesson:
    return build(load_spec("six-steps"), read(SIX / "trace.jsonl"))


def _sum(texts: list[str]) -> float:
    return round(sum(float(NUMBER.fullmatch(t).group(1)) for t in texts), 6)


def test_metrics_strip_and_metrics_line_add_up_on_every_frame(lesson):
    for side in (lesson.left, lesson.right):
        for frame in side.frames:
            strip = html.metrics_strip(frame)
            nums = re.findall(r"<b>(\d+(?:\.\d+)?%)</b>", strip)
            assert len(nums) == 5 and _sum(nums) == 100, (side.run.name, frame.index, nums)
            line = figures._metrics_line(frame, "en").split("|")[0]
            assert _sum([m + "%" for m in NUMBER.findall(line)]) == 100


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_scoreboard_narration_lists_every_category_and_each_side_adds_up(lesson, lang):
    text = render_step(lesson, len(lesson.spec.steps) - 1, lang).narration
    left, right = text.split("\n\n")[1:3]
    for part in (left, right):
        shares = NUMBER.findall(part)
        assert len(shares) == 5, part
        assert _sum([s + "%" for s in shares]) == 100


def test_scoreboard_card_adds_up(lesson):
    for side in (lesson.left, lesson.right):
        card = html.scoreboard_card(side.summary)
        rows = re.findall(r"<b>(\d+(?:\.\d+)?%)</b></div>", card)
        assert len(rows) == 5 and _sum(rows) == 100


@given(st.lists(st.integers(0, 1000), min_size=1, max_size=6).filter(any), st.sampled_from([0, 1]))
def test_largest_remainder_sums_to_100_and_stays_within_one_unit(weights, decimals):
    total = sum(weights)
    shares = {str(i): w / total for i, w in enumerate(weights)}
    shown = percents(shares, decimals)
    values = {k: float(v.rstrip("%")) for k, v in shown.items()}
    assert round(sum(values.values()), 6) == 100
    for k, v in values.items():
        assert abs(v - 100 * shares[k]) < 10**-decimals + 1e-9


LESSONS = SIX.parent
# the side-by-side lessons (the kernel lesson has one run and no sides)
RECORDED = sorted(
    p.name
    for p in LESSONS.iterdir()
    if (p / "trace.jsonl").is_file() and (p / "lesson.toml").is_file()
)


@pytest.mark.parametrize("name", RECORDED)
def test_paging_never_draws_an_unusable_hole(name):
    """Any free block serves any request, so a paged side has no external fragmentation, even
    while a request waits for more blocks than are free; the contiguous side keeps its holes."""
    from paged.viz.fold.reducer import HOLE

    lesson = build(load_spec(name), read(LESSONS / name / "trace.jsonl"))
    for side in (lesson.left, lesson.right):
        frames = [side.at(i) for i in range(lesson.num_frames)]
        if side.run.allocator == "paged":
            assert all(f.account.external == 0 and f.count(HOLE) == 0 for f in frames)
        waits = [f for f in frames if f.blocked and f.account.free + f.account.external > 0]
        if name == "recompute-or-swap":  # the case that once drew crosses on free blocks
            assert side.run.allocator == "paged" and waits
            assert all(f.count("F") == f.account.free > 0 for f in waits)
