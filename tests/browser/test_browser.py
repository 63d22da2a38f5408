"""The lesson in a real browser (Debian's Chromium through Playwright): keys step frames, links
open frames, nothing swallows the arrow keys. Screenshots land in test-artifacts/. The player's
other keys, presenter mode and the offline check are in test_player_browser.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from paged.viz.export.serve import shown_frame, wait_idle, wait_painted, wait_ready

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
TRACE = ROOT / "paged" / "lessons" / "six-steps" / "trace.jsonl"

pytestmark = [
    pytest.mark.browser,
]


def open_frame(page, url: str) -> int:
    """Open ``url`` and wait until the player shows a frame and the page's first run is over
    (that run ends by writing the lesson into the URL, over a frame a key already wrote)."""
    page.goto(url)
    frame = wait_ready(page)
    wait_idle(page)
    return frame


def href(page) -> str:
    """The address bar as the page sees it (``page.url`` lags history.replaceState)."""
    return page.evaluate("location.href")


def wait_for_query(page, pattern: str) -> None:
    page.wait_for_function("(p) => new RegExp(p).test(location.search)", arg=pattern)


def press(page, key: str, expect: int) -> None:
    page.keyboard.press(key)
    wait_painted(page, expect)


def test_arrow_keys_step_exactly_one_frame_each_and_page_and_end_keys_jump(page, app_url):
    start = open_frame(page, app_url)
    assert start == 0
    for n in (1, 2, 3):
        press(page, "ArrowRight", start + n)
    assert shown_frame(page) == start + 3
    press(page, "ArrowLeft", start + 2)
    assert shown_frame(page) == start + 2
    wait_for_query(page, r"[?&]frame=2(&|$)")
    page.screenshot(path=str(ARTIFACTS / "lesson-frame-2.png"), full_page=True)
    # the same page: End, Home and PageDown jump
    page.keyboard.press("End")
    last = shown_frame(page)
    assert last > 0
    press(page, "Home", 0)
    page.keyboard.press("PageDown")
    assert 0 < shown_frame(page) < last


def test_a_link_opens_that_frame(page, app_url):
    assert open_frame(page, f"{app_url}/?lesson=six-steps&frame=8") == 8
    assert re.search(r"[?&]frame=8(&|$)", href(page))
    page.screenshot(path=str(ARTIFACTS / "lesson-frame-8.png"), full_page=True)


@pytest.mark.parametrize("query", ["/?frame=7", "/", "/?lesson=six-steps&frame=7"])
def test_one_press_of_back_leaves_an_opened_link(page, app_url, query):
    """A link (the README's classroom `?frame=0`, or none) is one history entry: Back goes
    back to where it was opened from, once the player has written lesson and frame in."""
    page.goto(f"{app_url}/_stcore/health")
    want = 7 if "frame" in query else 0
    assert open_frame(page, app_url + query) == want
    wait_for_query(page, rf"lesson=six-steps.*frame={want}|frame={want}.*lesson=six-steps")
    page.wait_for_timeout(500)  # any history write the page run makes has landed
    # counted by going back, not by history.length: Chromium keeps 50 entries a tab, and the
    # tab the browser tests share may hold that many already
    page.go_back()
    page.wait_for_url(f"{app_url}/_stcore/health")


def test_clicking_the_timeline_or_the_language_switch_keeps_arrows_working(page, app_url):
    assert open_frame(page, f"{app_url}/?frame=3") == 3
    page.locator("#pk-tl-box svg").click(position={"x": 1, "y": 40})  # the timeline's left end
    wait_painted(page, 0)
    press(page, "ArrowRight", 1)
    page.get_by_role("button", name="中文", exact=True).click()
    page.wait_for_function("() => document.querySelector('#pk-frame').innerText.includes('帧')")
    wait_idle(page)
    assert shown_frame(page) == 1  # the language switch keeps the frame shown
    press(page, "ArrowRight", 2)
    wait_for_query(page, r"[?&]lang=zh(&|$)")
    wait_for_query(page, r"[?&]frame=2(&|$)")
    page.screenshot(path=str(ARTIFACTS / "lesson-zh.png"), full_page=True)


def test_a_corrupt_trace_file_shows_one_error_and_no_traceback(page, app_url, tmp_path):
    open_frame(page, app_url)
    page.get_by_role("button", name="Open a trace file", exact=True).click()
    bad = tmp_path / "broken.jsonl"
    bad.write_text(TRACE.read_text(encoding="utf-8")[:5000], encoding="utf-8")
    page.locator("input[type=file]").set_input_files(str(bad))
    alert = page.locator("[data-testid=stAlertContentError]")
    alert.wait_for(timeout=30_000)
    assert alert.count() == 1 and "truncated" in alert.inner_text()
    assert page.locator("[data-testid=stException]").count() == 0
    page.screenshot(path=str(ARTIFACTS / "corrupt-trace.png"))
