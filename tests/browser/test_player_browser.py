"""The lesson player in Chromium: every key, autoplay, the timeline scrubber, the help overlay,
presenter mode at projector and full-HD sizes in both languages (screenshots in test-artifacts/),
the URL following each key, and the whole page working with the network cut off."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

import pytest

from paged.viz.export.serve import (
    hold_unpacking,
    release_unpacking,
    shown_frame,
    url_after_one_animation_frame,
    wait_idle,
    wait_painted,
    wait_ready,
    wait_unpacking_held,
)
from tests.app_server import hold_key

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
TRACE = ROOT / "paged" / "lessons" / "six-steps" / "trace.jsonl"

pytestmark = [
    pytest.mark.browser,
]

ROOT_JS = "() => document.querySelector('#pk-player').dataset"


def open_player(page, url: str) -> int:
    """Open ``url`` and wait until the player shows a frame and the page's first run is over
    (that run ends by writing the lesson into the URL, over a frame a key already wrote)."""
    page.goto(url)
    frame = wait_ready(page)
    wait_idle(page)
    return frame


# Back to how a freshly opened player stands: not playing, no help, not presenting, at the
# speed it opened with, on frame ``f``.
RESET_JS = """(f) => { const p = window.pkPlayer;
  if (window.pkSpeedAtOpen === undefined) window.pkSpeedAtOpen = p.speed;
  p.stop(); p.help(false); p.setPresent(false); p.speed = window.pkSpeedAtOpen; p.showSpeed();
  p.go(f); }"""


@pytest.fixture(scope="module")
def _player_tab(_tab, app_url):
    """One lesson page for the checks that only work the player: a key, a click or a drag on
    it never reaches the server, so they need no app session each (the server's silence,
    presenter mode opened from a link and the offline check open their own)."""
    ctx, _ = _tab
    page = ctx.new_page()
    open_player(page, f"{app_url}/?frame=0")
    page.evaluate(RESET_JS, 0)  # notes the speed it opened with
    yield page
    page.close()


@pytest.fixture
def player(_player_tab):
    """The module's player, reset (RESET_JS); ``start_at`` puts it on a frame."""
    page = _player_tab
    page.bring_to_front()  # in front of the shared tab, or its animation frames crawl
    page.mouse.up()
    page.evaluate(RESET_JS, 0)
    return page


def start_at(page, frame: int) -> int:
    """Show ``frame`` on the reset player and return the frame it shows once painted."""
    page.evaluate(RESET_JS, frame)
    wait_painted(page, frame)
    return shown_frame(page)


def chapters(page) -> list[dict]:
    return page.evaluate("() => window.pkPlayer.data.chapters")


def last_frame(page) -> int:
    return page.evaluate("() => window.pkPlayer.frames.length - 1")


def test_arrows_home_end_and_step_keys(player):
    page = player
    assert start_at(page, 10) == 10
    page.keyboard.press("ArrowRight")
    assert shown_frame(page) == 11
    page.keyboard.press("ArrowLeft")
    page.keyboard.press("ArrowLeft")
    assert shown_frame(page) == 9
    # PageUp / PageDown (a clicker) stop at the lesson's steps, not at the chapters between
    steps = [c["start"] for c in chapters(page) if c["step"] is not None]
    nxt = next(s for s in steps if s > 9)
    page.keyboard.press("PageDown")
    assert shown_frame(page) == nxt
    page.keyboard.press("PageUp")
    assert shown_frame(page) == max(s for s in steps if s < nxt)
    page.keyboard.press("End")
    assert shown_frame(page) == last_frame(page)
    page.keyboard.press("ArrowRight")  # past the end: stays
    assert shown_frame(page) == last_frame(page)
    page.keyboard.press("Home")
    assert shown_frame(page) == 0
    seen = []
    for _ in steps[1:]:
        page.keyboard.press("PageDown")
        seen.append(shown_frame(page))
    assert seen == steps[1:]  # a clicker walks every step in order


def test_the_url_follows_each_key_within_an_animation_frame(player):
    page = player
    start_at(page, 3)
    for key, want in (("ArrowRight", 4), ("ArrowRight", 5), ("Home", 0), ("ArrowRight", 1)):
        page.keyboard.press(key)
        assert f"frame={want}" in url_after_one_animation_frame(page)
    assert "lesson=six-steps" in url_after_one_animation_frame(page)


def test_stepping_asks_nothing_of_the_server(page, app_url):
    """No websocket message and no request (not even the favicon, which Chromium fetches again
    on every URL change) while the keys step through frames."""
    asked: list[str] = []
    page.on("websocket", lambda ws: ws.on("framesent", lambda f: asked.append("ws")))
    open_player(page, f"{app_url}/?frame=2")
    wait_idle(page)  # the page's own loading (first runs, fonts, icons) is over
    page.wait_for_load_state("networkidle")
    asked.clear()
    page.on("request", lambda r: asked.append(r.url) if "/static/" not in r.url else None)
    for n in range(3, 23):
        page.keyboard.press("ArrowRight")
        wait_painted(page, n)
    page.wait_for_timeout(300)
    assert asked == []


def test_a_held_arrow_registers_every_repeat(player):
    page = player
    start_at(page, 0)
    # key repeat at 30 ms, 40 repeats or more (a loaded machine sends fewer in 1.5 s)
    sent = hold_key(page, 1.5, 0.030, at_least=40)
    wait_painted(page, min(sent, last_frame(page)))  # every repeat is a step


def test_autoplay_advances_pauses_and_stops_at_the_end(player):
    page = player
    start_at(page, 0)
    page.keyboard.press("+")
    page.keyboard.press("+")
    fps = int(page.locator("#pk-speed").get_attribute("data-fps"))
    page.keyboard.press("-")
    slower = int(page.locator("#pk-speed").get_attribute("data-fps"))
    assert slower < fps and str(slower) in page.locator("#pk-speed").inner_text()
    page.keyboard.press(" ")
    page.wait_for_function("() => Number(document.querySelector('#pk-frame').dataset.frame) >= 3")
    page.keyboard.press(" ")  # pause: the frame holds
    held = shown_frame(page)
    page.wait_for_timeout(600)
    assert shown_frame(page) == held and page.evaluate(ROOT_JS)["playing"] == "0"
    last = last_frame(page)
    page.keyboard.press("End")
    page.keyboard.press("ArrowLeft")
    page.keyboard.press("ArrowLeft")
    page.keyboard.press(" ")
    page.wait_for_function(
        "() => document.querySelector('#pk-player').dataset.playing === '0'", timeout=10_000
    )
    assert shown_frame(page) == last


def test_clicking_and_dragging_the_timeline_scrubs(player):
    page = player
    start_at(page, 0)
    page.locator("#pk-tl-box").scroll_into_view_if_needed()
    box = page.locator("#pk-tl-box svg").bounding_box()
    geo = page.evaluate(
        "() => { const s = document.querySelector('#pk-tl-box svg'); return "
        "[+s.dataset.left, +s.dataset.right, +s.dataset.width]; }"
    )
    n = last_frame(page) + 1
    x0 = box["x"] + box["width"] * geo[0] / geo[2]
    x1 = box["x"] + box["width"] * (1 - geo[1] / geo[2])

    def x_of(frame: int) -> float:
        return x0 + (x1 - x0) * (frame + 0.5) / n

    y = box["y"] + box["height"] / 2
    page.mouse.click(x_of(40), y)
    assert shown_frame(page) == 40
    page.mouse.move(x_of(10), y)
    page.mouse.down()
    assert shown_frame(page) == 10
    page.mouse.move(x_of(70), y, steps=8)
    assert shown_frame(page) == 70
    page.mouse.up()
    page.mouse.move(x_of(90), y)  # released: moving no longer scrubs
    assert shown_frame(page) == 70
    page.keyboard.press("ArrowRight")
    assert shown_frame(page) == 71


def test_question_mark_lists_every_key(player):
    page = player
    start_at(page, 2)
    page.keyboard.press("?")
    help_box = page.locator("#pk-help")
    assert help_box.is_visible()
    keys = help_box.locator("kbd").all_inner_texts()
    for k in (
        "←",
        "→",
        "PageUp",
        "PageDown",
        "Home",
        "End",
        "Space",
        "+",
        "−",
        "F",
        "?",
        "R",
        "C",
        "H",
    ):
        assert k in keys, k
    page.screenshot(path=str(ARTIFACTS / "player-help.png"))
    page.keyboard.press("Escape")
    assert not help_box.is_visible()
    page.keyboard.press("?")
    page.keyboard.press("?")
    assert not help_box.is_visible()
    # over the help, a player key closes it and does nothing else: no step unseen behind it
    for key in ("ArrowRight", "End", "f"):
        page.keyboard.press("?")
        page.keyboard.press(key)
        assert not help_box.is_visible() and shown_frame(page) == 2
        assert page.evaluate(ROOT_JS)["present"] == "0"
    page.keyboard.press("ArrowRight")
    assert shown_frame(page) == 3


def test_f_toggles_presenter_mode_and_the_url_says_so(player):
    page = player
    start_at(page, 5)
    page.keyboard.press("f")
    assert page.evaluate(ROOT_JS)["present"] == "1"
    assert "present=1" in url_after_one_animation_frame(page)
    assert not page.locator("#pk-p-nav").is_visible()
    assert not page.locator("#pk-tl-box").is_visible()
    page.keyboard.press("ArrowRight")
    assert shown_frame(page) == 6
    page.keyboard.press("F")
    assert page.evaluate(ROOT_JS)["present"] == "0"
    assert "present" not in url_after_one_animation_frame(page)


def test_presenter_mode_says_how_to_leave_it_then_gets_out_of_the_way(player):
    """It hides the help button, and its hint ("F: leave presenter mode") was sent but never
    shown: someone opening a ?present=1 link had no way to learn the way out."""
    page = player
    hint = page.locator("#pk-hint")
    assert not hint.is_visible()
    page.keyboard.press("f")
    assert hint.is_visible() and hint.inner_text() == "F: leave presenter mode"
    page.wait_for_function(
        "() => document.querySelector('#pk-hint').hidden", timeout=10_000, polling=200
    )
    page.keyboard.press("f")  # out, in again: said again
    page.keyboard.press("f")
    assert hint.is_visible()
    page.keyboard.press("Escape")
    assert not hint.is_visible()


LABELS_JS = """() => {
  const root = document.querySelector('#pk-player');
  const out = [];
  const vw = innerWidth, vh = innerHeight;
  for (const el of root.querySelectorAll('*')) {
    const own = [...el.childNodes].some(n => n.nodeType === 3 && n.textContent.trim());
    if (!own) continue;
    const r = el.getBoundingClientRect();
    if (r.width === 0 && r.height === 0) continue;          // not displayed
    if (el.closest('[hidden]') || getComputedStyle(el).visibility === 'hidden') continue;
    const html = el instanceof HTMLElement;
    out.push({text: el.textContent.trim().slice(0, 40), inside: r.left >= -0.5 && r.top >= -0.5
              && r.right <= vw + 0.5 && r.bottom <= vh + 0.5,
              ellipsis: html && el.scrollWidth > el.clientWidth + 1 &&
                        getComputedStyle(el).overflow !== 'visible'});
  }
  return out;
}"""

SIZE_JS = "(sel) => parseFloat(getComputedStyle(document.querySelector(sel)).fontSize)"


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_presenter_mode_fits_the_screen(page, app_url, lang):
    """At a projector's and a full-HD screen's size, one page: presenter mode is laid out by
    CSS alone (vw, vh), so the same page resized is the page opened at that size."""
    page.set_viewport_size({"width": 1280, "height": 720})
    start = open_player(page, f"{app_url}/?present=1&lang={lang}&frame=9")
    for size in ((1280, 720), (1920, 1080)):
        _fits(page, lang, size, [start, 20, 41, last_frame(page)])


def _fits(page, lang: str, size: tuple[int, int], frames: list[int]) -> None:
    page.set_viewport_size({"width": size[0], "height": size[1]})
    assert page.evaluate(ROOT_JS)["present"] == "1"
    for f in frames:
        page.evaluate(f"() => window.pkPlayer.go({f})")
        wait_painted(page, f)
        labels = page.evaluate(LABELS_JS)
        assert labels, "no labels found"
        bad = [lb for lb in labels if not lb["inside"] or lb["ellipsis"]]
        assert not bad, (f, bad[:5])
        if size[0] == 1920:
            for sel in ("#pk-chapter", "#pk-cap-l", "#pk-cap-r"):
                assert page.evaluate(SIZE_JS, sel) >= 24, sel
        page.screenshot(path=str(ARTIFACTS / f"present-{lang}-{size[0]}x{size[1]}-{f}.png"))


def test_the_app_opens_and_steps_with_the_network_cut_off(page, app_url):
    """Every request the tab makes (the page, its scripts, styles, fonts, images) is routed:
    the app's own host passes, anything else is refused and noted."""
    page.set_viewport_size({"width": 1280, "height": 720})
    outside: list[str] = []
    inside: list[str] = []

    def route(r):
        host = urlparse(r.request.url).hostname or ""
        if r.request.url.startswith(("data:", "blob:")) or host in ("127.0.0.1", "localhost"):
            inside.append(r.request.url)
            r.continue_()
        else:
            outside.append(r.request.url)
            r.abort()

    page.route("**/*", route)
    try:
        assert open_player(page, f"{app_url}/?frame=4") == 4
        for n in (5, 6, 7):
            page.keyboard.press("ArrowRight")
            wait_painted(page, n)
        assert outside == [], outside
        assert any("/static/" in u for u in inside)  # the route saw the page's own loads
        page.screenshot(path=str(ARTIFACTS / "player-offline.png"))
    finally:
        page.unroute("**/*", route)


def test_every_frame_shows_its_own_caption_and_chapter(player):
    """Walk every frame in the browser: the caption and chapter title on screen are the ones
    folded from that frame (tests/viz/test_captions.py checks those against the frame's numbers)."""
    from paged.engine.trace.io import read
    from paged.viz.fold import captions
    from paged.viz.fold import chapters as C
    from paged.viz.fold.lesson import build
    from paged.viz.fold.lesson_folder import load_spec

    lesson = build(load_spec("six-steps"), read(TRACE))
    chs = C.chapters(lesson)
    page = player
    start_at(page, 0)
    shown = page.evaluate(
        """(n) => { const out = [];
      for (let i = 0; i < n; i++) { window.pkPlayer.go(i);
        out.push([document.querySelector('#pk-cap-l').textContent,
                  document.querySelector('#pk-cap-r').textContent,
                  document.querySelector('#pk-chapter').textContent,
                  Number(document.querySelector('#pk-frame').dataset.frame)]); }
      return out; }""",
        lesson.num_frames,
    )
    for i, (left, right, title, frame) in enumerate(shown):
        ch = next(c for c in chs if c.start <= i <= c.end)
        assert frame == i
        assert (left, right) == captions.caption(lesson, i, "en"), i
        assert title == C.title(lesson, ch, "en"), i


ZH_FRAMES_JS = """() => window.pkPlayer.data.lang === 'zh' &&
  /[\\u4e00-\\u9fff]/.test(document.querySelector('#pk-body').textContent)"""


def test_keys_pressed_while_another_language_unpacks_count_once(page, app_url):
    """Arrows pressed while the Chinese frames are still unpacking step the frames on screen,
    and the Chinese frames open where those keys left off: the swap took the player back to
    the frame it was on when the language was chosen."""
    assert open_player(page, f"{app_url}/?frame=5") == 5
    hold_unpacking(page)
    page.get_by_role("button", name="中文", exact=True).click()
    wait_unpacking_held(page)
    for want in (6, 7, 8):
        page.keyboard.press("ArrowRight")
        wait_painted(page, want)
    release_unpacking(page)
    page.wait_for_function(ZH_FRAMES_JS)
    assert shown_frame(page) == 8
    page.keyboard.press("ArrowRight")
    wait_painted(page, 9)
    page.wait_for_function("() => /[?&]frame=9(&|$)/.test(location.search)")
