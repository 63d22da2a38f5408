"""Every page of the app, in English and Chinese, in a real browser: it draws its title and
shows no exception, no error box and no traceback.

Starts the app with ``viz.serve.running_app`` and drives Debian's Chromium with Playwright.
A failing page leaves a screenshot in ``test-artifacts/``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from viz import capacity_page, paper_page, stack_page, sweep, watch_page
from viz.lesson import load_spec
from viz.serve import CHROMIUM

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="needs Debian's chromium"),
]
ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"

# url path -> title per language (the paper page opens from its shipped results)
PAGES = {
    "": load_spec("six-steps").title,
    "capacity": {lang: capacity_page.TEXT[lang]["title"] for lang in ("en", "zh")},
    "paper": {lang: paper_page.text(lang)["title"] for lang in ("en", "zh")},
    "block-size": sweep.load_spec("block-size").title,
    "watch": {lang: watch_page.TEXT[lang]["title"] for lang in ("en", "zh")},
    "stack": {lang: stack_page.UI[lang]["title"] for lang in ("en", "zh")},
}


def _settle(page, timeout_ms: int = 240_000) -> None:
    """Wait until the script has run and stays idle (a run may trigger one more rerun)."""
    idle = (
        "() => { const a = document.querySelector('[data-testid=\"stApp\"]');"
        " return a && a.getAttribute('data-test-script-state') === 'notRunning'; }"
    )
    for _ in range(2):
        page.wait_for_function(idle, timeout=timeout_ms)
        page.wait_for_timeout(600)


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("path", list(PAGES))
def test_page_renders_without_errors(app_url, browser, path, lang):
    sep = "&" if "?" in path else "?"
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    try:
        page.goto(f"{app_url}/{path}{sep}lang={lang}", wait_until="domcontentloaded")
        _settle(page)
        page.get_by_text(PAGES[path][lang], exact=False).first.wait_for(timeout=30_000)
        assert page.locator('[data-testid="stException"]').count() == 0
        assert page.locator('[data-testid="stAlertContentError"]').count() == 0
        assert "Traceback" not in page.inner_text("body")
    except Exception:
        ARTIFACTS.mkdir(exist_ok=True)
        name = (path.split("?")[0] or "lesson") + f"-{lang}.png"
        page.screenshot(path=str(ARTIFACTS / name), full_page=True)
        raise
    finally:
        page.close()


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_each_stack_layer_links_to_its_lesson(app_url, browser, lang):
    """Following a layer's link opens that lesson (the lesson page reads ?lesson=)."""
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    try:
        page.goto(f"{app_url}/stack?lang={lang}", wait_until="domcontentloaded")
        _settle(page)
        link = page.locator("a[href*='lesson=fp8-twice']").first
        href = link.get_attribute("href")
        assert href is not None
        page.goto(f"{app_url}/{href}", wait_until="domcontentloaded")
        _settle(page)
        page.get_by_text(load_spec("fp8-twice").title[lang], exact=False).first.wait_for(
            timeout=30_000
        )
    finally:
        page.close()
