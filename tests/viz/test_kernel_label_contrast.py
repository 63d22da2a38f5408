"""Every label the kernel lesson draws in its SVGs (the arena's block numbers and L0 · 12%
marks, the tiles' names and notes) reads at WCAG AA's 4.5:1 against what it is drawn on, on
every frame: axe-core checks the page's HTML text but not text inside an SVG."""

from __future__ import annotations

import re

import pytest

from paged.engine.trace.io import read
from paged.viz.fold.kernel.frames import fold_kernel, load_kernel_spec
from paged.viz.render.kernel import arena_svg, contrast, tiles_svg

RECT = re.compile(
    r"<rect x='([\d.]+)' y='([\d.]+)' width='([\d.]+)' height='([\d.]+)'[^>]*?fill='(#[0-9A-Fa-f]{6})'"
)
TEXT = re.compile(r"<text x='([\d.]+)' y='([\d.]+)'([^>]*)>([^<]*)</text>")
INKS = {"white": "#FFFFFF"}


@pytest.fixture(scope="module")
def lesson():
    spec = load_kernel_spec("inside-the-kernel")
    return fold_kernel(spec, read(spec.folder / spec.trace_file))


def _worst(svg: str) -> tuple[float, str]:
    """The lowest contrast of any label with the fill under the start of its text (the last
    rect drawn there; white paper where none is)."""
    rects = [(m.start(), *map(float, m.groups()[:4]), m.group(5)) for m in RECT.finditer(svg)]
    worst = (99.0, "")
    for t in TEXT.finditer(svg):
        x, y, attrs, label = float(t.group(1)), float(t.group(2)), t.group(3), t.group(4)
        ink = re.search(r"fill='([^']+)'", attrs).group(1)
        ink = INKS.get(ink, ink)
        if "text-anchor='middle'" in attrs:
            x -= 3 * len(label)  # a centred label starts left of its anchor
        px, py = x + 3, y - 5  # inside the first glyph
        under = [
            f
            for at, rx, ry, w, h, f in rects
            if at < t.start() and rx <= px <= rx + w and ry <= py <= ry + h
        ]
        ratio = contrast(ink, under[-1] if under else "#FFFFFF")
        if ratio < worst[0]:
            worst = (ratio, f"{label!r} in {ink} on {under[-1] if under else 'white'}")
    return worst


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_every_kernel_label_reads_at_4_5_to_1_on_every_frame(lesson, lang):
    seen = 0
    for i in range(lesson.num_frames):
        for svg in (arena_svg(lesson, i, lang), tiles_svg(lesson, i, lang)):
            ratio, what = _worst(svg)
            seen += 1
            assert ratio >= 4.5, f"frame {i}: {what} is {ratio:.2f}:1"
    assert seen == 2 * lesson.num_frames


def test_the_check_sees_a_label_that_fails():
    """White on the pale reserved blue, as the arena once drew its L0 marks."""
    svg = "<rect x='0' y='0' width='40' height='24' fill='#A6CCEB'/><text x='4' y='17' fill='white'>L0</text>"
    assert _worst(svg)[0] < 2
