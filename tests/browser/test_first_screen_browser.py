"""The first screen of every lesson at a 1280x720 window, out of presenter mode: a newcomer
sees the step controls, the caption and both grids whole without scrolling or knowing F, and
no grid label is under 12 px (the grids started at y = 572 with 7-9 px labels)."""

from __future__ import annotations

import pytest

from paged.viz.export.serve import wait_idle, wait_ready
from paged.viz.fold.kernel.frames import kernel_lessons
from paged.viz.fold.lesson_folder import LESSONS_DIR, available

pytestmark = [pytest.mark.browser]

LESSONS = sorted(available(LESSONS_DIR)) + kernel_lessons(LESSONS_DIR)
SIZE = {"width": 1280, "height": 720}

# Boxes of what must be on the first screen, and the smallest grid label's type size in px
# (its font size times the scale its SVG is drawn at).
SCREEN_JS = """() => {
  const box = (e) => { const r = e.getBoundingClientRect();
    return {top: r.top, bottom: r.bottom, left: r.left, right: r.right, h: r.height}; };
  const grids = [...document.querySelectorAll(
    '#pk-player svg.pk-arena, #pk-player svg.pk-k-arena, #pk-player svg.pk-k-tiles')];
  let least = Infinity, label = '';
  for (const t of document.querySelectorAll(
      '#pk-player svg.pk-arena text, #pk-player svg.pk-k-arena text, #pk-player svg.pk-k-tiles text')) {
    if (!t.getBoundingClientRect().width || getComputedStyle(t).display === 'none') continue;
    const px = parseFloat(getComputedStyle(t).fontSize) * t.getScreenCTM().a;
    if (px < least) { least = px; label = t.textContent; }
  }
  return {grids: grids.map(box), caption: box(document.querySelector('#pk-caption')),
          controls: box(document.querySelector('.pk-p-ctl')),
          steps: box(document.querySelector('#pk-p-nav')),
          present: document.querySelector('#pk-player').dataset.present,
          least, label, height: innerHeight, scrolled: scrollY};
}"""


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_every_lessons_first_screen_shows_both_grids_whole_with_12px_labels(app_url, page, lang):
    page.set_viewport_size(SIZE)
    for name in LESSONS:
        page.goto(f"{app_url}/?lesson={name}&lang={lang}", wait_until="domcontentloaded")
        wait_ready(page)
        wait_idle(page, 120_000)
        got = page.evaluate(SCREEN_JS)
        assert got["present"] != "1" and got["scrolled"] == 0, (name, got)
        assert len(got["grids"]) == 2, (name, got["grids"])
        for what in [*got["grids"], got["caption"], got["controls"], got["steps"]]:
            assert what["h"] > 0 and what["top"] >= 0 and what["bottom"] <= SIZE["height"], (
                name,
                what,
            )
        assert got["least"] >= 12, (name, got["label"], round(got["least"], 2))
