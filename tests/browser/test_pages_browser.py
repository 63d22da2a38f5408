"""Every page of the app, in English and Chinese, in a real browser: it draws its title and
shows no exception, no error box and no traceback.

Starts the app with ``viz.export.serve.running_app`` and drives Debian's Chromium with Playwright.
A failing page leaves a screenshot in ``test-artifacts/``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from viz import ui_text
from viz.app import capacity as capacity_page
from viz.app import paper as paper_page
from viz.app import stack as stack_page
from viz.app import watch as watch_page
from viz.export.serve import wait_idle
from viz.fold import sweep
from viz.fold.lesson_folder import load_spec

pytestmark = [
    pytest.mark.browser,
]
ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"

# url path -> title per language (the paper page opens from its shipped results)
PAGES = {
    "": load_spec("six-steps").title,
    "capacity": {lang: capacity_page.TEXT[lang]["title"] for lang in ("en", "zh")},
    "paper": {lang: paper_page.text(lang)["title"] for lang in ("en", "zh")},
    "block-size": sweep.load_spec("block-size").title,
    "watch": {lang: watch_page.TEXT[lang]["title"] for lang in ("en", "zh")},
}  # and the stack page, opened once per language by the test of its links (below)
STACK_TITLE = {lang: stack_page.UI[lang]["title"] for lang in ("en", "zh")}


def _open(page, url: str, timeout_ms: int = 240_000) -> None:
    """Open ``url`` and wait until its script run is over. No page reruns itself after its
    first run (watched with a MutationObserver on the run state), so idle once is settled."""
    page.goto(url, wait_until="domcontentloaded")
    wait_idle(page, timeout_ms)


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("path", list(PAGES))
def test_page_renders_without_errors(app_url, page, path, lang):
    sep = "&" if "?" in path else "?"
    page.set_viewport_size({"width": 1440, "height": 900})
    _open(page, f"{app_url}/{path}{sep}lang={lang}")
    _assert_drawn(page, PAGES[path][lang], (path.split("?")[0] or "lesson") + f"-{lang}.png")


def _assert_drawn(page, title: str, shot: str) -> None:
    """The page shows ``title`` and no exception, error box or traceback (else a screenshot
    named ``shot`` in test-artifacts/)."""
    try:
        page.get_by_text(title, exact=False).first.wait_for(timeout=30_000)
        assert page.locator('[data-testid="stException"]').count() == 0
        assert page.locator('[data-testid="stAlertContentError"]').count() == 0
        assert "Traceback" not in page.inner_text("body")
    except Exception:
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / shot), full_page=True)
        raise


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_each_stack_layer_links_to_its_lesson(app_url, page, lang):
    """The stack page renders without errors (as every page above), and following a layer's
    link opens that lesson (the lesson page reads ?lesson=)."""
    page.set_viewport_size({"width": 1440, "height": 900})
    _open(page, f"{app_url}/stack?lang={lang}")
    _assert_drawn(page, STACK_TITLE[lang], f"stack-{lang}.png")
    link = page.locator("a[href*='lesson=fp8-twice']").first
    href = link.get_attribute("href")
    assert href is not None
    _open(page, f"{app_url}/{href}")
    page.get_by_text(load_spec("fp8-twice").title[lang], exact=False).first.wait_for(timeout=30_000)


def _change_page(page, title: str, arrived: str) -> None:
    """Click the top bar's link to the page titled ``title`` and wait until the address says
    ``arrived`` (a JS predicate on ``location``) and the page's run is over."""
    page.locator("[data-testid='stTopNavLink']").filter(has_text=title).click()
    page.wait_for_function(f"() => {arrived}", timeout=60_000)
    wait_idle(page)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_page_change_is_one_history_entry_in_either_language(app_url, page, lang):
    """From the lesson (its player keeps lesson and frame in the address) to the lab (which
    keeps its scenario there) and back again: one press of Back per change returns to exactly
    the address left. In Chinese each change was two entries (the server wrote ?lang=zh back
    after Streamlit dropped it), so Back first landed on a bare `/lab?lang=zh`; in English the
    lab's own ?scenario= write did the same. (Counted by Back, not history.length: Chromium
    keeps 50 entries, which the shared tab reaches.)"""
    titles = ui_text.load("pages")[lang]
    zh = "/[?&]lang=zh(&|$)/.test(location.search)" if lang == "zh" else "true"
    _open(page, f"{app_url}/?lang={lang}" if lang == "zh" else app_url)
    page.wait_for_function(f"() => /[?&]frame=0(&|$)/.test(location.search) && {zh}")
    lesson_url = page.evaluate("location.href")
    _change_page(
        page,
        titles["lab"],
        f"location.pathname === '/lab' && {zh} && /[?&]scenario=/.test(location.search)",
    )
    lab_url = page.evaluate("location.href")
    _change_page(
        page,
        titles["lesson"],
        f"location.pathname === '/' && {zh} && /[?&]frame=0(&|$)/.test(location.search)",
    )
    page.go_back()
    assert page.evaluate("location.href") == lab_url
    # the lab drawn again (its address written) before the next Back
    record = ui_text.load("lab")[lang]["record"]
    page.get_by_role("button", name=record).wait_for(timeout=60_000)
    wait_idle(page)
    page.go_back()
    assert page.evaluate("location.href") == lesson_url
