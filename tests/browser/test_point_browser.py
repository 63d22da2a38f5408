"""Pointing at things in the player (paged/viz/player/point.js), from the offline file at a 1280x720
projector: a request lit up on both sides, an arrow per block-table entry, the frame's key fact
called out on the grid, a clicker that stops at the lesson's steps only, a presenter console
that follows the lesson window, and the first-visit page on how to read the screen. What
each should show is worked out here from the fold, never typed in."""

from __future__ import annotations

from pathlib import Path

import pytest

from paged.engine.trace import io as T
from paged.viz.export import lecture as export
from paged.viz.export.serve import probe, shown_frame, wait_painted, wait_ready
from paged.viz.fold.lesson import build
from paged.viz.fold.lesson_folder import load_spec, trace_path
from paged.viz.player.point import PANELS
from paged.viz.render import point
from paged.viz.render.svg import CELL, GAP, ref_counts

pytestmark = [pytest.mark.browser]

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
LESSONS = ("six-steps", "shared-prompt")
SIZE = {"width": 1280, "height": 720}
# a person's browser: automation is nobody's first visit, so the test says it is not one
PERSON = "Object.defineProperty(Navigator.prototype, 'webdriver', { get: () => false });"


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("point")
    for name in LESSONS:
        assert export.main(["--lesson", name, "--out", str(out), "--format", "html"]) == 0
    return {name: out / f"{name}.html" for name in LESSONS}


@pytest.fixture(scope="module")
def lessons():
    return {n: build(load_spec(n), T.read(trace_path(load_spec(n)))) for n in LESSONS}


@pytest.fixture(scope="module")
def ctx(browser):
    c = browser.new_context(viewport=SIZE)
    yield c
    c.close()


def _open(ctx, path: Path, hash_: str):
    page = ctx.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(path.as_uri() + hash_)
    wait_ready(page)
    page.errors = errors  # type: ignore[attr-defined]
    return page


def _slots(widths: list[float]) -> int:
    """Slots covered by grid rects of these widths (a run of n cells is n pitches less a gap)."""
    return sum(round((w + GAP) / CELL) for w in widths)


# Per box: the requests lit, and the widths (in user units) of the grid cells lit.
LIT_JS = """(req) => { const out = {};
  for (const id of ['pk-lg', 'pk-rg', 'pk-lp', 'pk-rp']) {
    const box = document.getElementById(id);
    const on = [...box.querySelectorAll('.pk-on')];
    out[id] = { reqs: [...new Set(on.map((e) => e.dataset.req))],
      cells: on.filter((e) => e.tagName === 'rect').map((e) => Number(e.getAttribute('width'))),
      all: [...box.querySelectorAll('rect[data-req]')].filter((e) => e.dataset.req === req)
        .length,
      queue: on.filter((e) => e.closest('.pk-q-entry')).length };
  }
  out.focus = document.getElementById('pk-player').dataset.focus;
  out.active = document.activeElement && document.activeElement.dataset.req;
  return out; }"""


def test_hovering_or_tabbing_to_a_request_lights_it_up_on_both_sides(ctx, files, lessons):
    lesson = lessons["six-steps"]
    i = lesson.keyframes[2]  # decoding: three requests hold memory on both sides
    left, right = lesson.left.at(i), lesson.right.at(i)
    req = sorted(set(left.running) & set(right.running))[1]
    page = _open(ctx, files["six-steps"], f"#frame={i}")
    try:
        page.hover(f"#pk-rp .pk-row[data-req='{req}'] .pk-chip")
        lit = page.evaluate(LIT_JS, req)
        for grid, frame in (("pk-lg", left), ("pk-rg", right)):
            assert lit[grid]["reqs"] == [req]
            assert len(lit[grid]["cells"]) == lit[grid]["all"] > 0  # every cell of it, no other
            assert _slots(lit[grid]["cells"]) == frame.owners.count(req)
        for panel in ("pk-lp", "pk-rp"):
            assert lit[panel]["reqs"] == [req] and lit[panel]["queue"] == 1
        page.screenshot(path=str(ARTIFACTS / "point-hover.png"))
        page.mouse.move(2, 2)  # pointing at nothing: nothing lit
        assert page.evaluate(LIT_JS, req)["focus"] == ""

        # the keyboard reaches it too, and it stays lit as the frames change under it
        other = sorted(right.running)[0]
        page.focus(f"#pk-lp .pk-row[data-req='{other}'] .pk-chip")
        page.keyboard.press("ArrowRight")
        wait_painted(page, i + 1)
        lit = page.evaluate(LIT_JS, other)
        assert lit["pk-lg"]["reqs"] == lit["pk-rg"]["reqs"] == [other]
        assert lit["active"] == other
        page.keyboard.press("Escape")
        assert page.evaluate(LIT_JS, other)["focus"] == ""
        page.keyboard.press("r")  # R: the first request on screen, with no mouse at all
        assert page.evaluate(LIT_JS, other)["focus"] == "1"
        assert page.errors == []  # type: ignore[attr-defined]
    finally:
        page.close()


# Each arrow: its request, block, end point and the target block's box, in the layer's pixels.
ARROWS_JS = """() => { const layer = document.querySelector('.pk-pt-layer');
  const o = layer.getBoundingClientRect();
  return [...layer.querySelectorAll('.pk-pt-arrow')].map((a) => {
    const end = a.getPointAtLength(a.getTotalLength());
    const t = document.querySelector("#pk-rg rect[data-block='" + a.dataset.block + "']")
      .getBoundingClientRect();
    return { req: a.dataset.req, block: Number(a.dataset.block), x: end.x, y: end.y,
      box: [t.left - o.left, t.top - o.top, t.right - o.left, t.bottom - o.top] }; }); }"""


def test_an_arrow_per_logical_block_and_from_every_table_sharing_one(ctx, files, lessons):
    lesson = lessons["shared-prompt"]
    i, frame = next((k, f) for k, f in enumerate(lesson.right.frames) if ref_counts(f))
    tables = frame.block_tables
    req = min(tables, key=lambda r: frame.requests[r].order)
    mine = set(tables[req])
    want = sorted(
        [(req, b) for b in tables[req]]
        + [(r, b) for r, t in tables.items() if r != req for b in t if b in mine]
    )
    assert len(want) > len(tables[req])  # the frame shares blocks: arrows come in from others
    page = _open(ctx, files["shared-prompt"], f"#frame={i}")
    try:
        page.hover(f"#pk-rp .pk-row[data-req='{req}'] .pk-chip")
        arrows = page.evaluate(ARROWS_JS)
        assert sorted((a["req"], a["block"]) for a in arrows) == want
        for a in arrows:  # each lands on its block's edge
            x0, y0, x1, y1 = a["box"]
            assert min(abs(a["x"] - x0), abs(a["x"] - x1)) < 1.5 and y0 <= a["y"] <= y1, a
        page.screenshot(path=str(ARTIFACTS / "point-arrows.png"))
    finally:
        page.close()


def test_presenter_mode_keeps_every_arrow_of_the_request_in_focus(ctx, files, lessons):
    """Presenter mode shows the block tables beside the grids, condensed to the rows the frame
    changed: the request pointed at keeps its rows (and the rows sharing its blocks), so each
    of its arrows is drawn at the projector's size too."""
    lesson = lessons["shared-prompt"]
    i, frame = next((k, f) for k, f in enumerate(lesson.right.frames) if ref_counts(f))
    tables = frame.block_tables
    req = max(tables, key=lambda r: frame.requests[r].order)
    mine = set(tables[req])
    want = sorted(
        [(req, b) for b in tables[req]]
        + [(r, b) for r, t in tables.items() if r != req for b in t if b in mine]
    )
    page = _open(ctx, files["shared-prompt"], f"#frame={i}&present=1")
    try:
        page.hover(f"#pk-rg rect[data-req='{req}']")
        page.wait_for_function("() => document.querySelectorAll('.pk-pt-arrow').length > 0")
        arrows = page.evaluate(ARROWS_JS)
        assert sorted((a["req"], a["block"]) for a in arrows) == want
        for a in arrows:
            x0, y0, x1, y1 = a["box"]
            assert min(abs(a["x"] - x0), abs(a["x"] - x1)) < 1.5 and y0 <= a["y"] <= y1, a
        page.screenshot(path=str(ARTIFACTS / "point-arrows-present.png"))
        assert page.errors == []  # type: ignore[attr-defined]
    finally:
        page.close()


NOTES_JS = """() => { const g = document.querySelector('#pk-lg svg').getBoundingClientRect();
  const line = document.querySelector('#pk-lg .pk-callout path').getBoundingClientRect();
  const scale = g.width / document.querySelector('#pk-lg svg').viewBox.baseVal.width;
  // the grid cells the dashed outline holds (centres inside it), in user units
  const inside = [...document.querySelectorAll('#pk-lg svg > rect')].filter((r) => {
    const b = r.getBoundingClientRect(), x = (b.left + b.right) / 2, y = (b.top + b.bottom) / 2;
    return x > line.left && x < line.right && y > line.top && y < line.bottom; });
  return { grid: [g.left, g.right], scale,
    held: inside.filter((r) => r.dataset.req).length,
    widths: inside.map((r) => Number(r.getAttribute('width'))),
    notes: [...document.querySelectorAll('.pk-pt-note')].map((n) => {
      const b = n.getBoundingClientRect();
      return { text: n.textContent, kind: n.dataset.kind, left: b.left, right: b.right,
               height: b.height, px: parseFloat(getComputedStyle(n).fontSize) }; }) }; }"""


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_step_5s_frame_calls_out_the_hole_that_is_too_small(ctx, files, lessons, lang):
    lesson = lessons["six-steps"]
    i = lesson.keyframes[4]
    refused = lesson.left.at(i).blocked_by("no_hole")
    assert refused is not None and refused.largest_hole < refused.need_slots
    want = point.TEXT[lang]["hole"].format(hole=refused.largest_hole, need=refused.need_slots)
    page = _open(ctx, files["six-steps"], f"#frame={i}&lang={lang}&present=1")
    try:
        got = page.evaluate(NOTES_JS)
        assert [(n["text"], n["kind"]) for n in got["notes"]] == [(want, "hole")]
        note = got["notes"][0]
        assert got["grid"][0] - 1 <= note["left"] and note["right"] <= got["grid"][1] + 1
        assert note["px"] >= 14 and note["height"] >= 17  # the back row reads it
        # the outline holds the hole the allocator measured: that many free slots, no one's
        assert got["held"] == 0 and _slots(got["widths"]) == refused.largest_hole
        page.screenshot(path=str(ARTIFACTS / f"point-callout-{lang}.png"))
    finally:
        page.close()


def test_the_clicker_stops_at_the_lesson_steps_only(ctx, files, lessons):
    lesson = lessons["six-steps"]
    steps = sorted({k for k in lesson.keyframes if k is not None})
    page = _open(ctx, files["six-steps"], "#frame=0&present=1")
    try:
        seen = [shown_frame(page)]
        for _ in range(len(steps) + 1):  # one more than there are: the last one stays
            page.keyboard.press("PageDown")
            seen.append(shown_frame(page))
        assert [f for k, f in enumerate(seen) if k == 0 or f != seen[k - 1]] == (
            steps if steps[0] == 0 else [0, *steps]
        )
        back = []
        for _ in steps[:-1]:
            page.keyboard.press("PageUp")
            back.append(shown_frame(page))
        assert back == steps[-2::-1]
        # between two steps (a filler stretch): on to the next step, back to the one before
        mid = (steps[-2] + steps[-1]) // 2
        page.evaluate("(i) => window.pkPlayer.go(i)", mid)
        page.keyboard.press("PageDown")
        assert shown_frame(page) == steps[-1]
        page.evaluate("(i) => window.pkPlayer.go(i)", mid)
        page.keyboard.press("PageUp")
        assert shown_frame(page) == steps[-2]
    finally:
        page.close()


CONSOLE_JS = """() => { const r = document.getElementById('pk-player');
  return { frame: window.pkPlayer ? window.pkPlayer.i : -1, next: Number(r.dataset.consoleNext),
           body: document.getElementById('pk-body').textContent,
           clock: (document.querySelector('.pk-con-time') || {}).textContent || '' }; }"""


CONSOLE_LAYOUT_JS = """() => { let least = Infinity, labels = 0;
  for (const t of document.querySelectorAll('.pk-con-grids svg text')) {
    if (!t.getBoundingClientRect().width || getComputedStyle(t).display === 'none') continue;
    labels++;
    least = Math.min(least, parseFloat(getComputedStyle(t).fontSize) * t.getScreenCTM().a);
  }
  return {body: document.getElementById('pk-body').getBoundingClientRect().top, labels, least}; }"""


def _follows(page, frame: int) -> dict:
    page.wait_for_function("(f) => window.pkPlayer && window.pkPlayer.i === f", arg=frame)
    return page.evaluate(CONSOLE_JS)


def test_the_presenter_console_follows_the_lesson_window(ctx, files, lessons):
    lesson = lessons["six-steps"]
    steps = sorted({k for k in lesson.keyframes if k is not None})
    page = _open(ctx, files["six-steps"], "#frame=0&present=1")
    try:
        with ctx.expect_page() as opened:
            page.keyboard.press("c")  # C opens the console in a second window
        con = opened.value
        con.wait_for_function(probe("ready"))
        page.keyboard.press("PageDown")
        got = _follows(con, steps[1])
        assert got["next"] == steps[2] and got["clock"].count(":") == 2
        assert got["body"] == page.evaluate(CONSOLE_JS)["body"]  # the narration of that frame
        page.keyboard.press("ArrowRight")
        _follows(con, steps[1] + 1)
        con.keyboard.press("PageDown")  # and the console can drive the lesson window
        _follows(page, steps[2])
        # a console opened by hand in another tab finds the lesson window by itself
        other = ctx.new_page()
        other.goto(files["six-steps"].as_uri() + "#frame=0&console=1")
        other.wait_for_function(probe("ready"))
        page.keyboard.press("End")
        _follows(other, lesson.num_frames - 1)
        assert other.evaluate(CONSOLE_JS)["next"] == -1  # no step after the last
        # a presenter's screen, narration first: on top, and the next step's labels readable
        con.set_viewport_size({"width": 1280, "height": 720})
        con.evaluate("(i) => window.pkPlayer.go(i)", steps[1])
        at = con.evaluate(CONSOLE_LAYOUT_JS)
        assert at["body"] <= 120 and at["labels"] > 0 and at["least"] >= 12, at
        con.screenshot(path=str(ARTIFACTS / "point-console.png"))
        other.close()
        con.close()
    finally:
        page.close()


READ_JS = """() => { const r = document.querySelector('.pk-read');
  const card = r.querySelector('.pk-read-card');
  const texts = [...r.querySelectorAll('*')].filter((e) => [...e.childNodes].some(
    (n) => n.nodeType === 3 && n.textContent.trim())).map((e) => {
      const b = e.getBoundingClientRect();
      return [e.textContent.trim().slice(0, 20), parseFloat(getComputedStyle(e).fontSize),
              b.height]; });
  return { shown: !r.hidden, texts, panels: r.querySelectorAll('li').length,
           numbers: r.querySelectorAll('.pk-read-num').length,
           fits: card.scrollHeight <= card.clientHeight + 1 &&
                 card.getBoundingClientRect().bottom <= innerHeight }; }"""


def test_a_first_visit_shows_how_to_read_the_screen_and_an_export_nothing_transient(browser, files):
    c = browser.new_context(viewport=SIZE)
    c.add_init_script(PERSON)
    try:
        page = _open(c, files["six-steps"], "#frame=8&present=1&lang=zh")
        got = page.evaluate(READ_JS)
        assert got["shown"] and got["fits"] and got["panels"] == len(PANELS)
        assert got["numbers"] >= 4  # the panels presenter mode shows carry their numbers
        small = [t for t in got["texts"] if t[1] < 14 or t[2] < 17]
        assert small == []
        page.screenshot(path=str(ARTIFACTS / "point-read-zh.png"))
        page.keyboard.press("ArrowRight")  # any key closes it, and does what it says
        assert not page.evaluate(READ_JS)["shown"] and shown_frame(page) == 9
        page.keyboard.press("h")
        assert page.evaluate(READ_JS)["shown"]
        page.close()
        again = _open(c, files["six-steps"], "#frame=0")
        assert not again.evaluate(READ_JS)["shown"]  # once seen, not on every visit
        again.close()
    finally:
        c.close()
    # a photographed page (paged/viz/export/animate.py asks for still=1): nothing transient, even
    # on a first visit and with the pointer over a request
    c = browser.new_context(viewport=SIZE)
    c.add_init_script(PERSON)
    try:
        page = _open(c, files["six-steps"], "#frame=4&still=1")
        page.hover("#pk-rp .pk-row[data-req] .pk-chip")
        assert not page.evaluate(READ_JS)["shown"]
        assert page.evaluate("() => document.querySelectorAll('.pk-on, .pk-pt-arrow').length") == 0
    finally:
        c.close()


# Each number H puts on the screen: its panel's drawn box (a grid's drawing, not the box it is
# scaled into), how far the number is from it, and the texts of the player it covers.
MARKS_JS = """() => { const out = [];
  const texts = [];
  const root = document.querySelector('#pk-player');
  const walk = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  for (let n = walk.nextNode(); n; n = walk.nextNode()) {
    const el = n.parentElement;
    if (!n.textContent.trim() || el.closest('svg, .pk-read, [hidden], .pk-sr')) continue;
    const r = document.createRange(); r.selectNodeContents(n);
    for (const b of r.getClientRects()) if (b.width > 0.5) texts.push([n.textContent.trim(), b]);
  }
  for (const t of root.querySelectorAll('svg text')) {
    const b = t.getBoundingClientRect();
    if (b.width > 0.5 && getComputedStyle(t).display !== 'none') texts.push([t.textContent, b]);
  }
  const meets = (a, b) => Math.min(a.right, b.right) - Math.max(a.left, b.left) > 0.5
    && Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top) > 0.5;
  const panels = {};
  for (const li of document.querySelectorAll('.pk-read li[data-panel]'))
    panels[li.querySelector('b').textContent] = li.dataset.panel;
  for (const num of document.querySelectorAll('.pk-read-num')) {
    const m = num.getBoundingClientRect(), box = document.getElementById(panels[num.textContent]);
    const svg = box.querySelector('svg.pk-arena, svg.pk-k-arena, svg.pk-k-tiles');
    let d = box.getBoundingClientRect();
    if (svg) { const c = svg.getScreenCTM(), v = svg.viewBox.baseVal;
      d = {left: c.a * v.x + c.e, top: c.d * v.y + c.f,
           right: c.a * (v.x + v.width) + c.e, bottom: c.d * (v.y + v.height) + c.f}; }
    const gap = Math.max(d.left - m.right, m.left - d.right, d.top - m.bottom, m.top - d.bottom, 0);
    const c = document.querySelector('.pk-read-card').getBoundingClientRect();
    const hidden = meets(d, c);  // the card hides (part of) its drawing
    const atCard = Math.min(Math.abs(m.bottom - c.top), Math.abs(m.top - c.bottom),
                            Math.abs(m.right - c.left), Math.abs(m.left - c.right)) <= 8
      && m.right > d.left && m.left < d.right;
    out.push({n: num.textContent, panel: panels[num.textContent], gap, hidden, atCard,
              onCard: meets(m, c),
              covers: texts.filter(([, b]) => meets(m, b)).map(([t]) => t.slice(0, 20)),
              onScreen: m.left >= 0 && m.top >= 0 && m.right <= innerWidth && m.bottom <= innerHeight});
  }
  return out; }"""


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_h_numbers_each_panel_beside_what_it_draws_and_covers_no_text(browser, files, lang):
    """In presenter mode at 1280x720 H's numbers pointed ④ and ⑥ at empty space (the corners of
    boxes larger than their drawings), put ① and ② over the title and the caption, and one
    whose panel the card hides sat on the card's own text."""
    c = browser.new_context(viewport=SIZE)
    try:
        page = _open(c, files["six-steps"], f"#frame=8&present=1&lang={lang}")
        page.keyboard.press("h")
        page.wait_for_timeout(100)  # placed again once the rows are fitted (two frames)
        marks = page.evaluate(MARKS_JS)
        assert len(marks) >= 4, marks
        for m in marks:  # beside its drawing, or (one the card hides) at the card's edge by it
            assert m["onScreen"] and m["covers"] == [] and not m["onCard"], m
            assert m["gap"] <= 30 or (m["hidden"] and m["atCard"]), m
    finally:
        c.close()
