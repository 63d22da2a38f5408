"""Presenter mode at a 1280x720 projector, from the back row: every shipped lesson, in both
languages, on every keyframe and a sample of the frames between. Geometry read from the page
(text boxes, the grids' label boxes), not pixels. The offline file is the app's own player."""

from __future__ import annotations

from pathlib import Path

import pytest

from paged.engine.trace import io as T
from paged.viz.export import lecture as export
from paged.viz.export.serve import wait_idle, wait_ready
from paged.viz.fold import chapters
from paged.viz.fold.kernel.frames import fold_kernel, load_kernel_spec
from paged.viz.fold.lesson import build
from paged.viz.fold.lesson_folder import LESSONS_DIR, load_spec, trace_path

pytestmark = [pytest.mark.browser]

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
LESSONS = sorted(p.parent.name for p in LESSONS_DIR.glob("*/lesson.toml"))
KERNEL = "inside-the-kernel"  # its own fold and renderer, the same player
SAMPLE = 12  # frames between keyframes, evenly spread


def _frames(name: str) -> list[int]:
    lesson = build(load_spec(name), T.read(trace_path(load_spec(name))))
    keys = {k for k in lesson.keyframes if k is not None}
    starts = {c.start for c in chapters.chapters(lesson)}
    n = lesson.num_frames
    spread = {round(k * (n - 1) / (SAMPLE - 1)) for k in range(SAMPLE)}
    return sorted(keys | starts | spread)


class _Exported(dict):
    """A lesson's offline file, exported the first time a test asks for it."""

    def __init__(self, out: Path) -> None:
        super().__init__()
        self.out = out

    def __missing__(self, name: str) -> Path:
        assert export.main(["--lesson", name, "--out", str(self.out), "--format", "html"]) == 0
        self[name] = self.out / f"{name}.html"
        return self[name]


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    return _Exported(tmp_path_factory.mktemp("legible"))


# On each frame asked for: every visible text's line box under 17 px (HTML text runs and the
# grids' SVG labels), every text cut by the viewport or by a box that clips its overflow, two
# labels of one grid drawn over each other, and whether each side's block tables (or
# reservations) panel is on screen with its rows.
LEGIBLE_JS = """([frames, gridsOnly, kernel]) => {
  const p = window.pkPlayer,
    out = {small: [], clipped: [], overlap: [], tables: [], seen: 0, condensed: 0};
  const inside = (a, b) => a.left >= b.left - 0.5 && a.right <= b.right + 0.5
    && a.top >= b.top - 0.5 && a.bottom <= b.bottom + 0.5;
  const meets = (a, b) => Math.min(a.right, b.right) - Math.max(a.left, b.left) > 0.5
    && Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top) > 0.5;
  const view = {left: 0, top: 0, right: innerWidth, bottom: innerHeight};
  const clipper = (el) => { for (let e = el.parentElement; e; e = e.parentElement) {
      const s = getComputedStyle(e);
      if (s.overflowX !== 'visible' || s.overflowY !== 'visible') return e; }
    return null; };
  for (const i of frames) {
    p.go(i);
    if (gridsOnly && document.querySelector('#pk-sides').hidden) continue;
    for (const svg of document.querySelectorAll('#pk-player svg.pk-arena, #pk-player svg.pk-k-arena,'
                                                + ' #pk-player svg.pk-k-tiles')) {
      const box = svg.getBoundingClientRect();
      if (!box.width) continue;
      const shown = [];
      for (const t of svg.querySelectorAll('text')) {
        const r = t.getBoundingClientRect();
        if (!r.width || getComputedStyle(t).display === 'none') continue;
        out.seen++;
        if (r.height < 17) out.small.push([i, t.textContent, +r.height.toFixed(1)]);
        if (!inside(r, box) || !inside(r, view)) out.clipped.push([i, t.textContent]);
        for (const [s, q] of shown) if (meets(r, q)) out.overlap.push([i, s, t.textContent]);
        shown.push([t.textContent, r]);
      }
    }
    const walk = document.createTreeWalker(document.querySelector('#pk-player'),
                                           NodeFilter.SHOW_TEXT);
    for (let n = walk.nextNode(); n; n = walk.nextNode()) {
      const el = n.parentElement, text = n.textContent.trim();
      if (!text || el.closest('svg') || el.closest('[hidden]')) continue;
      if (getComputedStyle(el).visibility === 'hidden') continue;
      const range = document.createRange();
      range.selectNodeContents(n);
      const c = clipper(el), cb = c && c.getBoundingClientRect();
      for (const r of range.getClientRects()) {
        if (!r.width) continue;
        if (cb && !meets(r, cb)) continue;  // wholly under its box's edge: not drawn
        out.seen++;
        if (r.height < 17) out.small.push([i, text.slice(0, 24), +r.height.toFixed(1)]);
        if (!inside(r, view) || (cb && !inside(r, cb))) out.clipped.push([i, text.slice(0, 24)]);
      }
    }
    if (kernel) {  // its block table on screen; no panel's table has a column cut off whole
      const t = document.querySelector('#pk-lp .pk-k-table'), r = t && t.getBoundingClientRect();
      if (!r || !r.height || !inside(r, view)) out.tables.push([i, '#pk-lp']);
      for (const k of document.querySelectorAll('#pk-player .pk-k-table')) {
        const c = clipper(k), kb = k.getBoundingClientRect();
        if (kb.height && c && !inside(kb, c.getBoundingClientRect())) out.clipped.push([i, 'table']);
      }
    } else if (!document.querySelector('#pk-sides').hidden) {
      for (const side of ['#pk-lp', '#pk-rp']) {
        const t = document.querySelector(side + ' .pk-tables');
        const r = t && t.getBoundingClientRect();
        const rows = t ? [...t.querySelectorAll(':scope > .pk-row')] : [];
        const drawn = rows.filter((e) => e.getBoundingClientRect().height > 0);
        if (!r || !r.height || !inside(r, view) || (rows.length && !drawn.length))
          out.tables.push([i, side]);
        // condensed or not, the rows this frame changed and the blocked reasons stay
        const kept = [...document.querySelectorAll(side + ' .pk-hot, ' + side + ' .pk-why')];
        if (kept.some((e) => e.getBoundingClientRect().height === 0)) out.tables.push([i, side, 'hot']);
        if (document.querySelector(side + ' .pk-cut')) out.condensed++;
      }
    }
  }
  return out; }"""


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_presenter_mode_reads_from_the_back_row_at_1280x720(browser, files, lang):
    """At 1280x720 the numbers a lesson is about were 9-12 px (the shares, the queue counts,
    the legend, the grids' x4 and S.0 labels, some of them narrowed past reading), and the
    block tables and the queue were hidden. Every text is now at least a 17 px line, none is
    cut, and each side's block tables or reservations are on screen beside its grid."""
    ctx = browser.new_context(viewport={"width": 1280, "height": 720})
    try:
        for name in LESSONS:
            page = ctx.new_page()
            page.goto(files[name].as_uri() + f"#frame=0&lang={lang}&present=1")
            wait_ready(page)
            frames = _frames(name)
            got = page.evaluate(LEGIBLE_JS, [frames, False, False])
            if name == "parallel-sampling":
                page.evaluate("() => window.pkPlayer.go(1)")
                page.screenshot(path=str(ARTIFACTS / f"present-1280-{name}-{lang}.png"))
            assert got["seen"] > 40 * len(frames), (name, got["seen"])
            for k in ("small", "clipped", "overlap", "tables"):
                assert got[k] == [], (name, k, got[k][:8])
            page.close()
    finally:
        ctx.close()


def _kernel_frames() -> list[int]:
    """Every frame (42: the walk is cheap), having checked that they hold every chapter and
    every caption kind (a tile that raised the running max has its own caption)."""
    spec = load_kernel_spec(KERNEL)
    lesson = fold_kernel(spec, T.read(spec.folder / spec.trace_file))
    first: dict[str, int] = {}
    for i, f in enumerate(lesson.frames):
        kind = "tile_up" if f.stage == "tile" and f.facts.get("m_rose") else f.stage
        first.setdefault(kind, i)
    assert set(first) == {"table", "tile", "tile_up", "final", "heat", "gqa", "split"}, first
    assert {f.chapter for f in lesson.frames} == {"table", "walk", "heat", "gqa"}
    return list(range(lesson.num_frames))


@pytest.mark.parametrize("height", [720, 580])
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_kernel_lesson_reads_from_the_back_row_at_1280x720(browser, files, lang, height):
    """The kernel lesson is drawn by its own renderer: its arena labels, tile notes, panels
    and strips were set for a desk. In presenter mode at 1280x720, and at 1280x580 (a
    projector under a browser's bars, where the block table's last rows ran under the
    legend), every text of every frame kind is at least a 17 px line, none is cut, and its
    block table is on screen."""
    ctx = browser.new_context(viewport={"width": 1280, "height": height})
    try:
        page = ctx.new_page()
        page.goto(files[KERNEL].as_uri() + f"#frame=0&lang={lang}&present=1")
        wait_ready(page)
        frames = _kernel_frames()
        got = page.evaluate(LEGIBLE_JS, [frames, False, True])
        page.evaluate(f"() => window.pkPlayer.go({frames[-1]})")
        page.screenshot(path=str(ARTIFACTS / f"present-1280x{height}-{KERNEL}-{lang}.png"))
        assert got["seen"] > 20 * len(frames), got["seen"]
        for k in ("small", "clipped", "overlap", "tables"):
            assert got[k] == [], (k, len(got[k]), got[k][:8])
    finally:
        ctx.close()


FLASH_JS = """() => { const f = document.querySelector('#pk-flash');
  const r = f.getBoundingClientRect();
  return {shown: !f.hidden && r.height > 0, text: f.textContent,
          fps: document.querySelector('#pk-speed').dataset.fps,
          playing: document.querySelector('#pk-player').dataset.playing}; }"""
THEME_JS = """() => { const root = document.querySelector('#pk-player');
  const help = [...document.querySelectorAll('#pk-help kbd')].map((k) => k.textContent);
  return {bg: getComputedStyle(root).backgroundColor, ink: getComputedStyle(
            document.querySelector('#pk-cap-l')).color, theme: root.dataset.theme, help}; }"""


def test_space_and_speed_keys_answer_on_screen_and_t_switches_the_projector_theme(browser, files):
    """Presenter mode hides the play button and the speed, so Space and + / − changed nothing
    a lecturer could see. Each now shows what it did for a moment. T turns the projector
    theme (light on dark) on and off, and the help lists it."""
    ctx = browser.new_context(viewport={"width": 1280, "height": 720})
    try:
        page = ctx.new_page()
        page.goto(files["six-steps"].as_uri() + "#frame=0&present=1")
        wait_ready(page)
        page.keyboard.press("Space")
        got = page.evaluate(FLASH_JS)
        assert got["shown"] and got["playing"] == "1" and f" {got['fps']} " in got["text"], got
        page.keyboard.press("+")
        faster = page.evaluate(FLASH_JS)
        assert int(faster["fps"]) > int(got["fps"]), (got, faster)
        assert faster["shown"] and f" {faster['fps']} " in faster["text"], faster
        page.keyboard.press("Space")
        paused = page.evaluate(FLASH_JS)
        assert paused["playing"] == "0" and paused["text"] != faster["text"], paused
        page.wait_for_function("() => document.querySelector('#pk-flash').hidden", timeout=5000)
        plain = page.evaluate(THEME_JS)
        page.keyboard.press("t")
        dark = page.evaluate(THEME_JS)
        assert dark["theme"] == "hc" and dark["bg"] == "rgb(5, 7, 10)", dark
        assert dark["ink"] == "rgb(255, 255, 255)" and plain["ink"] != dark["ink"], (plain, dark)
        assert "T" in dark["help"]
        page.screenshot(path=str(ARTIFACTS / "present-1280-projector-theme.png"))
        page.keyboard.press("t")
        assert page.evaluate(THEME_JS)["bg"] == plain["bg"]
    finally:
        ctx.close()


def test_a_panel_too_long_for_the_screen_keeps_the_rows_the_frame_changed(browser, files):
    """On a shorter screen (a 1280x720 projector less the browser's own bars) the block tables
    of recompute-or-swap run past the bottom edge. The unchanged rows make way, counted in
    one line; the rows the frame changed and a blocked request's reason stay, and no text is
    cut or under a 17 px line."""
    ctx = browser.new_context(viewport={"width": 1280, "height": 580})
    try:
        page = ctx.new_page()
        page.goto(files["recompute-or-swap"].as_uri() + "#frame=0&present=1")
        wait_ready(page)
        frames = _frames("recompute-or-swap")
        got = page.evaluate(LEGIBLE_JS, [frames, True, False])  # the scoreboard shrinks to fit here
        assert got["condensed"] > 0, got["condensed"]
        for k in ("small", "clipped", "overlap", "tables"):
            assert got[k] == [], (k, got[k][:8])
        rest = page.evaluate(
            "() => [...document.querySelectorAll('.pk-rest')].filter((e) => !e.hidden)"
            ".map((e) => e.textContent)"
        )
        page.screenshot(path=str(ARTIFACTS / "present-1280x580-condensed.png"))
        assert all(r.startswith("+") and r.endswith("unchanged") for r in rest), rest
    finally:
        ctx.close()


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_presenter_mode_in_the_app_reads_from_the_back_row_too(app_url, page, lang):
    """The app draws the same player in Streamlit's own type, whose line is taller: the
    strip's share labels ran past their bar's clipped edge there, not in the offline file.
    One lesson's sampled frames and keyframes, in the app, at 1280x720."""
    page.set_viewport_size({"width": 1280, "height": 720})
    page.goto(
        f"{app_url}/?lesson=parallel-sampling&frame=0&present=1&lang={lang}",
        wait_until="domcontentloaded",
    )
    wait_idle(page, 240_000)
    page.wait_for_function(
        "() => window.pkPlayer && document.querySelector('#pk-player').dataset.ready === '1'"
        " && window.pkPlayer.data.lang === " + repr(lang),
        timeout=120_000,
    )
    frames = _frames("parallel-sampling")
    got = page.evaluate(LEGIBLE_JS, [frames, False, False])
    assert got["seen"] > 40 * len(frames), got["seen"]
    for k in ("small", "clipped", "overlap", "tables"):
        assert got[k] == [], (k, got[k][:8])


# The first frame asked for whose panel left out a request's row that has a block table,
# with that request and the side.
CUT_ROW_JS = """(frames) => { const p = window.pkPlayer;
  for (const i of frames) {
    p.go(i);
    for (const side of ['l', 'r']) {
      const row = document.querySelector('#pk-' + side + 'p .pk-row.pk-cut[data-req]');
      if (row && row.querySelector('[data-block]')
          && document.querySelector('#pk-' + side + "g rect[data-req='" + row.dataset.req + "']"))
        return {i, side, req: row.dataset.req};
    }
  }
  return null; }"""

# A point on the grid where a person's pointer lands on the request's cells (not on the
# white lines drawn over a run).
POINT_AT_JS = """({side, req}) => {
  for (const r of document.querySelectorAll('#pk-' + side + "g rect[data-req='" + req + "']")) {
    const b = r.getBoundingClientRect();
    for (let x = b.left + 1; x < b.right; x += 2) {
      const y = (b.top + b.bottom) / 2, hit = document.elementFromPoint(x, y);
      if (hit && hit.closest('[data-req]') && hit.closest('[data-req]').dataset.req === req)
        return {x, y};
    }
  }
  return null; }"""

# Per side: is the request's row drawn, how many blocks its entries name, how many arrows
# start from its own entries.
FOCUS_ROW_JS = """(req) => { const out = {};
  for (const side of ['l', 'r']) {
    const row = [...document.querySelectorAll('#pk-' + side + 'p .pk-row[data-req]')]
      .find((e) => e.dataset.req === req);
    const blocks = row ? [...row.querySelectorAll('[data-block], [data-blocks]')]
      .flatMap((e) => (e.dataset.block ?? e.dataset.blocks).split(' ')).length : 0;
    out[side] = {drawn: !!row && row.getBoundingClientRect().height > 0, blocks};
  }
  out.arrows = [...document.querySelectorAll('.pk-pt-arrow:not(.pk-pt-shared)')]
    .filter((a) => a.dataset.req === req).length;
  return out; }"""


def test_a_request_pointed_at_in_a_condensed_panel_gets_its_row_and_arrows_back(browser, files):
    """Presenter mode leaves unchanged rows out of a panel too long for the screen; pointing
    at a request whose row was left out brings the row back, so each of its block-table
    entries has its arrow to the grid, as it has at a desk."""
    ctx = browser.new_context(viewport={"width": 1280, "height": 580})
    try:
        page = ctx.new_page()
        page.goto(files["recompute-or-swap"].as_uri() + "#frame=0&present=1")
        wait_ready(page)
        found = page.evaluate(CUT_ROW_JS, _frames("recompute-or-swap"))
        assert found is not None  # the run has such a frame: otherwise this tests nothing
        at = page.evaluate(POINT_AT_JS, found)
        assert at is not None, found
        page.mouse.move(at["x"], at["y"])
        got = page.evaluate(FOCUS_ROW_JS, found["req"])
        assert got[found["side"]]["drawn"], got
        drawn = [s for s in ("l", "r") if got[s]["drawn"]]
        assert got["arrows"] == sum(got[s]["blocks"] for s in drawn) > 0, got
        page.screenshot(path=str(ARTIFACTS / "present-condensed-pointed.png"))
        page.mouse.move(2, 2)  # pointing at nothing: the panel is condensed again
        assert not page.evaluate(FOCUS_ROW_JS, found["req"])[found["side"]]["drawn"]
    finally:
        ctx.close()
