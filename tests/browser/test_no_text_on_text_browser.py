"""No text drawn over other text, on every keyframe of every lesson, in English and Chinese,
in presenter mode and out of it, at 1280x720: a callout's sentence over the block labels it
talks about (parallel sampling's frame 1; recompute-or-swap's 34, 50 and 56) hid them."""

from __future__ import annotations

from pathlib import Path

import pytest

from paged.engine.trace import io as T
from paged.viz.export import lecture as export
from paged.viz.export.serve import wait_ready
from paged.viz.fold import chapters
from paged.viz.fold.kernel.frames import fold_kernel, kernel_lessons, load_kernel_spec
from paged.viz.fold.lesson import build
from paged.viz.fold.lesson_folder import LESSONS_DIR, available, load_spec, trace_path

pytestmark = [pytest.mark.browser]

LESSONS = sorted(available(LESSONS_DIR))
KERNELS = kernel_lessons(LESSONS_DIR)

# Every visible text's boxes on the player (an HTML text run's line boxes, an SVG label's
# box; nothing a screen reader alone reads), and each pair of texts from two elements, neither
# inside the other, whose boxes share more than a pixel each way.
OVERLAPS_JS = """(frames) => {
  const p = window.pkPlayer, out = [];
  const root = document.querySelector('#pk-player');
  const meets = (a, b) => Math.min(a.right, b.right) - Math.max(a.left, b.left) > 1
    && Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top) > 1;
  const shown = (el) => !el.closest('[hidden], .pk-sr') && getComputedStyle(el).display !== 'none'
    && getComputedStyle(el).visibility !== 'hidden';
  for (const i of frames) {
    p.go(i);
    const texts = [];
    const walk = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
    for (let n = walk.nextNode(); n; n = walk.nextNode()) {
      const el = n.parentElement;
      if (!n.textContent.trim() || el.closest('svg, style') || !shown(el)) continue;
      const range = document.createRange();
      range.selectNodeContents(n);
      for (const r of range.getClientRects()) if (r.width > 0.5) texts.push([el, n.textContent, r]);
    }
    for (const t of root.querySelectorAll('svg text')) {
      if (!t.textContent.trim() || !shown(t)) continue;
      const r = t.getBoundingClientRect();
      if (r.width > 0.5) texts.push([t, t.textContent, r]);
    }
    for (let a = 0; a < texts.length; a++) for (let b = a + 1; b < texts.length; b++) {
      const [ea, ta, ra] = texts[a], [eb, tb, rb] = texts[b];
      if (ea.contains(eb) || eb.contains(ea)) continue;
      if (meets(ra, rb)) out.push([i, ta.trim().slice(0, 30), tb.trim().slice(0, 30)]);
    }
  }
  return out;
}"""


def _keyframes(name: str) -> list[int]:
    """A lesson's keyframes and chapter starts; every frame of a kernel lesson (42)."""
    if name in KERNELS:
        spec = load_kernel_spec(name)
        return list(range(fold_kernel(spec, T.read(spec.folder / spec.trace_file)).num_frames))
    lesson = build(load_spec(name), T.read(trace_path(load_spec(name))))
    keys = {k for k in lesson.keyframes if k is not None}
    return sorted(keys | {c.start for c in chapters.chapters(lesson)})


@pytest.fixture(scope="module")
def offline(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("overlap")
    for name in LESSONS + KERNELS:
        assert export.main(["--lesson", name, "--out", str(out), "--format", "html"]) == 0
    return {name: out / f"{name}.html" for name in LESSONS + KERNELS}


@pytest.mark.parametrize("present", [False, True], ids=["normal", "presenter"])
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_no_text_is_drawn_over_other_text_on_any_keyframe(browser, offline, lang, present):
    ctx = browser.new_context(viewport={"width": 1280, "height": 720})
    try:
        page = ctx.new_page()
        found, seen = [], 0
        for name, path in offline.items():
            page.goto(path.as_uri() + f"#frame=0&lang={lang}" + ("&present=1" if present else ""))
            wait_ready(page)
            frames = _keyframes(name)
            seen += len(frames)
            found += [[name, *o] for o in page.evaluate(OVERLAPS_JS, frames)]
        assert seen > 60
        assert found == [], found[:8]
    finally:
        ctx.close()
