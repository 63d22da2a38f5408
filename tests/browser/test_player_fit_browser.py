"""The player at a lecturer's projector and on a student's screen, from the offline file (the
app's own player, no server to wait for): the grids hold still while the lecturer steps, both
sides keep one scale, and presenter mode is readable from the back row. Geometry, not pixels:
bounding boxes, computed font sizes and scroll sizes."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from paged.viz.export import lecture as export
from paged.viz.export.serve import wait_painted, wait_ready

pytestmark = [
    pytest.mark.browser,
]

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
LESSONS = ("six-steps", "recompute-or-swap", "fp8-twice")


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("fit")
    for name in LESSONS:
        assert export.main(["--lesson", name, "--out", str(out), "--format", "html"]) == 0
    return {name: out / f"{name}.html" for name in LESSONS}


def _open(browser, path: Path, size: tuple[int, int], hash_: str, scale: float = 1):
    ctx = browser.new_context(
        viewport={"width": size[0], "height": size[1]}, device_scale_factor=scale
    )
    page = ctx.new_page()
    page.goto(path.as_uri() + hash_)
    wait_ready(page)
    return ctx, page


# Every frame's two grid boxes, rounded to a pixel (one evaluate: no round trip per frame).
GRIDS_JS = """(n) => { const out = [];
  for (let i = 0; i < n; i++) { window.pkPlayer.go(i);
    const g = [...document.querySelectorAll('#pk-lg svg, #pk-rg svg')].map((s) => {
      const r = s.getBoundingClientRect();
      return [Math.round(r.left), Math.round(r.top), Math.round(r.width), Math.round(r.height)];
    });
    if (g.every((r) => r[2] > 0)) out.push([i, g]); }
  return out; }"""


# Resolves once a resize has been answered: the observer's callback, then the animation frame
# it measures in.
SETTLED_JS = """() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(
  () => requestAnimationFrame(r))))"""


# The left grid's top, or None on the scoreboard (no grid shown).
TOP_JS = """() => { const r = document.querySelector('#pk-lg svg').getBoundingClientRect();
  return r.width ? Math.round(r.top) : null; }"""


def _grids(page) -> list:
    n = page.evaluate("() => window.pkPlayer.frames.length")
    return page.evaluate(GRIDS_JS, n)


@pytest.mark.parametrize(
    ("lesson", "lang", "size", "present"),
    [
        ("six-steps", "en", (1280, 720), True),  # a caption wraps to two lines on some frames
        ("recompute-or-swap", "zh", (1920, 1080), True),  # one side's counts wrap on some
        ("six-steps", "en", (1024, 768), False),  # the left title wraps, the right one not
    ],
)
def test_the_grids_hold_still_and_share_one_scale_while_stepping(
    browser, files, lesson, lang, size, present
):
    """A caption, chapter title or metrics line that wraps on some frames pushed the grids
    down (and, in presenter mode, shrank them) under the lecturer's pointer; a side whose
    title or counts wrapped drew its arena smaller than the other's, on a page that compares
    the two at one scale."""
    ctx, page = _open(browser, files[lesson], size, f"#frame=0&lang={lang}")
    try:
        if present:  # as a lecturer turns it on: the rows are measured again at the new size
            page.keyboard.press("f")
            page.evaluate(SETTLED_JS)
        shown = _grids(page)
        assert len(shown) > 5
        first = shown[0][1]
        moved = [(i, g) for i, g in shown if g != first]
        assert not moved, (first, moved[:3])
        left, right = first
        assert left[1] == right[1] and left[3] == right[3], (left, right)  # same top, same height
        if present:  # held still, not shrunk: the rows above take no more than they need
            assert left[3] >= 0.6 * size[1], left
    finally:
        ctx.close()


def test_one_long_caption_does_not_take_the_grids_room_on_every_frame(browser, files):
    """fp8-twice has one caption of 325 characters (four requests stopping in one step), eight
    lines in presenter mode on a 1024x576 screen zoomed to 150 %: held for every frame, it left
    the grids 17 px tall throughout. The captions' row is held for its tallest caption only
    up to 15 % of the screen's height, or as far as 90 % of the frames need: the rare longer
    caption pushes the grids down on its own frame."""
    ctx, page = _open(browser, files["fp8-twice"], (683, 384), "#frame=0&present=1", scale=1.5)
    try:
        shown = _grids(page)
        boxes = Counter(tuple(map(tuple, g)) for _, g in shown)
        (common, n), *_ = boxes.most_common(1)
        assert n >= 0.85 * len(shown), boxes
        assert common[0][3] >= 0.25 * 384, common
    finally:
        ctx.close()


def test_a_reader_scrolled_to_the_end_of_the_page_sees_the_grids_hold_still(browser, files):
    """Outside presenter mode the page scrolls. A reader who scrolled to its end (at 1280x720
    the player's grids, narration and timeline do not fit together) saw the grids jump 58 px
    down on each frame whose narration or panels were shorter than the last one's: the page got
    shorter and the browser pulled the scroll position back. Keys step as a reader does, one
    painted frame at a time."""
    ctx, page = _open(browser, files["six-steps"], (1280, 720), "#frame=0")
    try:
        page.evaluate("() => window.scrollTo(0, document.documentElement.scrollHeight)")
        page.evaluate(SETTLED_JS)
        tops = []
        for frame in range(1, page.evaluate("() => window.pkPlayer.frames.length")):
            page.keyboard.press("ArrowRight")
            wait_painted(page, frame)
            tops.append(page.evaluate(TOP_JS))
        shown = [t for t in tops if t is not None]
        assert len(shown) > 90 and len(set(shown)) == 1, Counter(tops)
    finally:
        ctx.close()


# Divs created while one key is handled: fitRows builds its off-screen probes with them, go()
# never does (it swaps innerHTML).
DIVS_IN_KEY_JS = """() => { const make = document.createElement.bind(document);
  window.pkDivs = 0;
  document.createElement = (t, o) => { if (String(t).toLowerCase() === 'div') window.pkDivs++;
                                       return make(t, o); }; }"""


@pytest.mark.parametrize("present", [False, True])
def test_stepping_back_from_the_scoreboard_measures_nothing_on_the_key(browser, files, present):
    """The scoreboard hides the sides, so the rows measured there (on opening a link to it, on
    a resize, on turning presenter mode on or off) were left stale and measured by the next key
    that showed the grids: 20-60 ms of off-screen layout on that one key, over the 16 ms a
    step may take. They are measured where the resize is answered, the sides shown unseen."""
    ctx, page = _open(browser, files["six-steps"], (1280, 720), "#frame=99999")
    try:
        last = page.evaluate("() => window.pkPlayer.frames.length - 1")
        assert page.evaluate("() => document.querySelector('#pk-player').dataset.score") == "1"
        if present:
            page.keyboard.press("f")
        else:
            page.set_viewport_size({"width": 900, "height": 720})
        page.evaluate(SETTLED_JS)
        fitted = page.evaluate(
            "() => [document.querySelector('#pk-caption > div').style.minHeight,"
            " window.pkPlayer.rowsStale]"
        )
        assert fitted[0] and not fitted[1], fitted
        page.evaluate(DIVS_IN_KEY_JS)
        page.keyboard.press("ArrowLeft")
        wait_painted(page, last - 1)
        assert page.evaluate("() => window.pkDivs") == 0
        top = page.evaluate(TOP_JS)
        page.evaluate(f"() => window.pkPlayer.go({last // 2})")
        assert top is not None and page.evaluate(TOP_JS) == top
    finally:
        ctx.close()


def test_a_live_runs_next_frames_keep_the_page_as_tall_as_it_was(browser, files):
    """A live run sends the same trace with more frames every 0.75 s, and each payload let go
    of the height held while stepping: for a reader scrolled to the end of the page, it got
    134 px shorter and the grids jumped down, on every payload. The next payload is given as
    the page gives it (the same content: the frame shown is kept)."""
    ctx, page = _open(browser, files["six-steps"], (1280, 720), "#frame=0")
    try:
        for _ in range(60):
            page.keyboard.press("ArrowRight")
        wait_painted(page, 60)
        page.evaluate("() => window.scrollTo(0, document.documentElement.scrollHeight)")
        page.evaluate(SETTLED_JS)
        before = page.evaluate(TOP_JS), page.evaluate("() => scrollY")
        page.evaluate(
            "async () => { const p = window.pkPlayer;"
            " await p.load({...p.data, id: p.data.id + ':more'}, null, false); }"
        )
        page.evaluate(SETTLED_JS)
        assert page.evaluate("() => window.pkPlayer.i") == 60
        assert (page.evaluate(TOP_JS), page.evaluate("() => scrollY")) == before
    finally:
        ctx.close()


# Every text the player shows in HTML (the grids' SVG labels scale with the arena and are left
# out): its computed size, and the caption's.
FONTS_JS = """() => {
  const out = [];
  for (const el of document.querySelectorAll('#pk-player *')) {
    if (el instanceof SVGElement) continue;
    const own = [...el.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim());
    const r = el.getBoundingClientRect();
    if (!own || (r.width === 0 && r.height === 0) || el.closest('[hidden]')) continue;
    out.push([el.textContent.trim().slice(0, 30), parseFloat(getComputedStyle(el).fontSize)]);
  }
  const cap = parseFloat(getComputedStyle(document.querySelector('#pk-cap-l')).fontSize);
  return {texts: out, caption: cap};
}"""


@pytest.mark.parametrize("size", [(1024, 768), (1280, 720), (1920, 1080)])
def test_presenter_text_reads_from_the_back_row(browser, files, size):
    """Presenter mode sized its text by the width alone: a 4:3 projector (1024x768) got 14 px
    captions over a fifth of the screen left empty, and the secondary labels (the bar's shares,
    the engine step, the legend; on the scoreboard its heading and the captions of the big
    numbers, fixed pixel sizes) went down to 8-12 px, 12 px even at 1920x1080. Now the caption
    is at least 2.2 % of the screen's height, and nothing is under three quarters of it."""
    ctx, page = _open(browser, files["six-steps"], size, "#frame=9&present=1")
    try:
        last = page.evaluate("() => window.pkPlayer.frames.length - 1")
        for frame in (9, last):  # the grids, then the scoreboard
            page.evaluate(f"() => window.pkPlayer.go({frame})")
            wait_painted(page, frame)
            got = page.evaluate(FONTS_JS)
            assert got["caption"] >= 0.022 * size[1] - 0.5, (frame, got["caption"])
            small = [t for t in got["texts"] if t[1] < 0.75 * got["caption"] - 0.05]
            assert not small, (frame, got["caption"], small[:6])
    finally:
        ctx.close()


# Each text's box, and whether it lies inside the viewport (to half a pixel).
OUTSIDE_JS = """() => {
  const out = [];
  for (const el of document.querySelectorAll('#pk-player *')) {
    const own = [...el.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim());
    const r = el.getBoundingClientRect();
    if (!own || (r.width === 0 && r.height === 0) || el.closest('[hidden]')) continue;
    if (getComputedStyle(el).visibility === 'hidden') continue;
    if (r.left < -0.5 || r.top < -0.5 || r.right > innerWidth + 0.5 || r.bottom > innerHeight + 0.5)
      out.push([el.textContent.trim().slice(0, 30), Math.round(r.bottom), Math.round(r.right)]);
  }
  return out;
}"""
OVERLAP_JS = """() => {
  const a = document.querySelector('#pk-legend').getBoundingClientRect();
  const b = document.querySelector('#pk-score').getBoundingClientRect();
  const shown = (r) => r.width > 0 && r.height > 0;
  return shown(a) && shown(b) && a.top < b.bottom - 1 && b.top < a.bottom - 1;
}"""


@pytest.mark.parametrize("size", [(683, 384), (853, 480)])
def test_the_scoreboard_fits_a_zoomed_projector_screen(browser, files, size):
    """A browser zoomed to 150 % on a 1024x576 projector (683x384 CSS pixels): the scoreboard
    ran past the screen's bottom edge (the captions of its big numbers cut off), and the grid
    legend, a line the scoreboard has no use for, was drawn over its last rows. 853x480 (a
    1280x720 projector at 150 %) fitted already and must go on fitting."""
    ctx, page = _open(browser, files["six-steps"], size, "#frame=0&present=1", scale=1.5)
    try:
        last = page.evaluate("() => window.pkPlayer.frames.length - 1")
        page.keyboard.press("End")
        wait_painted(page, last)
        page.evaluate(SETTLED_JS)
        page.screenshot(path=str(ARTIFACTS / f"present-score-{size[0]}x{size[1]}.png"))
        assert page.evaluate(OUTSIDE_JS) == []
        assert not page.evaluate(OVERLAP_JS)
        page.keyboard.press("f")  # out of presenter mode: the page's own sizes again
        assert page.evaluate("() => document.querySelector('#pk-score').style.fontSize") == ""
    finally:
        ctx.close()


# The room under the caption in presenter mode, and the scoreboard's height in it.
SCORE_ROOM_JS = """() => [document.getElementById('pk-main').clientHeight,
  document.getElementById('pk-score').getBoundingClientRect().height]"""


@pytest.mark.parametrize("size", [(1280, 720), (1024, 768), (1920, 1080)])
def test_the_scoreboard_takes_a_projectors_screen_not_its_top_two_thirds(browser, files, size):
    """At 1280x720 the scoreboard left the bottom third of the screen empty: it grows into
    the room under the caption now, and still never runs past it."""
    ctx, page = _open(browser, files["six-steps"], size, "#frame=0&present=1")
    try:
        last = page.evaluate("() => window.pkPlayer.frames.length - 1")
        page.keyboard.press("End")
        wait_painted(page, last)
        page.wait_for_function(  # settled: the same size two frames running
            """() => new Promise((r) => requestAnimationFrame(() => { const a =
              document.getElementById('pk-score').style.fontSize; requestAnimationFrame(() =>
              r(a === document.getElementById('pk-score').style.fontSize)); }))"""
        )
        room, used = page.evaluate(SCORE_ROOM_JS)
        assert 0.8 * room <= used <= room + 0.5, (room, used)
        assert page.evaluate(OUTSIDE_JS) == []
    finally:
        ctx.close()


# Text boxes that end past the viewport's right edge, and each grid's width.
PHONE_JS = """() => {
  const out = [];
  for (const el of document.querySelectorAll('#pk-player *')) {
    const own = [...el.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim());
    const r = el.getBoundingClientRect();
    if (!own || (r.width === 0 && r.height === 0) || el.closest('[hidden]')) continue;
    if (r.right > innerWidth + 0.5) out.push([el.textContent.trim().slice(0, 30), r.right]);
  }
  const grids = [...document.querySelectorAll('#pk-lg svg, #pk-rg svg')].map(
    (s) => s.getBoundingClientRect().width);
  return {past: out, grids, scroll: document.documentElement.scrollWidth, width: innerWidth};
}"""


@pytest.mark.parametrize("lesson", LESSONS)
def test_a_phone_shows_one_side_under_the_other(browser, files, lesson):
    """On a phone (390x844) both sides were squeezed side by side: 86 px grids, and block
    tables and queue chips running past the screen's right edge (the page scrolled sideways,
    or in the app was cut off). Narrow screens stack the sides, and each grid over its
    panel."""
    ctx, page = _open(browser, files[lesson], (390, 844), "#frame=0", scale=2)
    try:
        page.keyboard.press("PageDown")  # the lesson's next step: grids, not the scoreboard
        frame = page.evaluate("() => window.pkPlayer.i")
        wait_painted(page, frame)
        got = page.evaluate(PHONE_JS)
        page.screenshot(path=str(ARTIFACTS / f"phone-{lesson}.png"), full_page=True)
        assert got["past"] == [] and got["scroll"] <= got["width"], got
        assert min(got["grids"]) >= 300, got["grids"]
    finally:
        ctx.close()


# Every share label shown on any frame that is cut by its segment's edge: a label drawn in its
# segment must lie wholly inside it (a label pushed out of the segment's box is not drawn).
CUT_JS = """(n) => { const cut = []; let whole = 0;
  const check = (i) => {
    for (const seg of document.querySelectorAll('#pk-player .pk-bar > div')) {
      const s = seg.getBoundingClientRect();
      if (!s.width || seg.closest('[hidden]') || !seg.textContent.trim()) continue;
      const range = document.createRange();
      range.selectNodeContents(seg);
      const t = range.getBoundingClientRect();
      const w = Math.min(t.right, s.right) - Math.max(t.left, s.left);
      const h = Math.min(t.bottom, s.bottom) - Math.max(t.top, s.top);
      const drawn = w > 0.5 && h > 0.5;
      const inside = t.left >= s.left - 0.5 && t.right <= s.right + 0.5
        && t.top >= s.top - 0.5 && t.bottom <= s.bottom + 0.5;
      if (drawn && !inside) cut.push([i, seg.textContent.trim(), Math.round(s.width),
                                      Math.round(t.width)]);
      if (drawn && inside) whole += 1;
    }
  };
  for (let i = 0; i < n; i++) { window.pkPlayer.go(i); check(i); }
  return {cut, whole}; }"""


@pytest.mark.parametrize(
    ("lesson", "size"),
    [
        ("six-steps", (390, 844)),
        ("fp8-twice", (390, 844)),
        ("fp8-twice", (1024, 768)),
        ("recompute-or-swap", (700, 900)),
    ],
)
def test_a_share_label_fits_its_segment_or_is_not_drawn_in_it(browser, files, lesson, size):
    """A segment only a little wider (or narrower) than its label cut the label at its edges:
    "10.5%" on the scoreboard at narrow widths, "9%" on a phone. Whether a label fits depends
    on the screen's width, so the page decides: a label that does not fit whole is not drawn
    (its share stays in the segment's title and in the numbers under the bar)."""
    ctx, page = _open(browser, files[lesson], size, "#frame=0", scale=2)
    try:
        n = page.evaluate("() => window.pkPlayer.frames.length")
        got = page.evaluate(CUT_JS, n)
        assert got["cut"] == [], got["cut"][:8]
        assert got["whole"] > n, got["whole"]  # the labels that fit are still drawn
    finally:
        ctx.close()


# On each chapter's first frame: the timeline's step numbers that are drawn (their boxes, in
# order), the pairs of them that overlap, and the number marked as the step on screen.
STEPS_JS = """() => { const out = [];
  for (const ch of window.pkPlayer.data.chapters) { window.pkPlayer.go(ch.start);
    const shown = [...document.querySelectorAll('#pk-tl-box .pk-tl-steps span')]
      .filter((s) => getComputedStyle(s).visibility !== 'hidden')
      .map((s) => [s.textContent, s.getBoundingClientRect(), s.classList.contains('on')]);
    const overlaps = [];
    shown.forEach(([a, ra], k) => shown.slice(k + 1).forEach(([b, rb]) => {
      if (ra.left < rb.right && rb.left < ra.right) overlaps.push([a, b]); }));
    const nav = document.querySelector('.pk-p-nav button.on');
    out.push({start: ch.start, shown: shown.map((s) => s[0]), overlaps,
              on: shown.filter((s) => s[2]).map((s) => s[0]),
              nav: nav ? nav.textContent.split(' ')[0] : null}); }
  return out; }"""


def test_the_timelines_step_numbers_never_overlap_on_a_phone(browser, files):
    """six-steps reaches its first four steps a frame or two apart: on a phone (390x844) their
    numbers under the timeline were drawn over each other as one unreadable "1234". Numbers
    that would touch are left out, and the step on screen keeps its number, marked."""
    ctx, page = _open(browser, files["six-steps"], (390, 844), "#frame=0", scale=2)
    try:
        got = page.evaluate(STEPS_JS)
        page.screenshot(path=str(ARTIFACTS / "phone-timeline-six-steps.png"), full_page=True)
        assert all(c["overlaps"] == [] for c in got), [c for c in got if c["overlaps"]]
        for c in got:
            if c["nav"] is not None:  # a step is on: its number is drawn, and marked
                assert c["on"] == [c["nav"]], c
        assert len({tuple(c["shown"]) for c in got}) > 1  # each step shows in its turn
    finally:
        ctx.close()
