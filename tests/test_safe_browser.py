"""A hostile trace and a hostile link in a real browser (Debian's Chromium through Playwright):
script, SVG and markdown payloads in run names, request ids, header fields and the URL must
stay text. No dialog, no injected element, no request to any host but the app's."""
from __future__ import annotations

from pathlib import Path
from urllib.parse import quote, urlsplit

import pytest

from tests.hostile_traces import HEADER, REMOTE, SIX_TRACE, hostile_trace_text
from viz.serve import CHROMIUM, settle_after_load, wait_idle

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test-artifacts"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="needs Debian's chromium"),
    pytest.mark.skipif(not SIX_TRACE.is_file(), reason="six-step trace not recorded yet"),
]
playwright = pytest.importorskip("playwright.sync_api")

# Elements or attributes any payload would create if it were parsed as markup.
INJECTED_JS = """() => {
  const bad = [...document.querySelectorAll('img[src="x"], u, script:not([src]), .katex')]
    .filter(e => !e.closest('[data-testid=stFileUploaderDropzone]')
             && (e.tagName !== 'SCRIPT' || e.textContent.includes('__pk_pwned')));
  const handlers = [...document.querySelectorAll('*')].filter(
    e => [...e.attributes].some(a => a.name.startsWith('on')));
  const remote = [...document.querySelectorAll('img, image, a')].filter(
    e => (e.getAttribute('src') || e.getAttribute('href') || '').includes('127.0.0.2'));
  const ids = [...document.querySelectorAll('pattern')].map(p => p.id)
    .filter(id => !/^pk-[A-Za-z0-9_-]+$/.test(id));
  return {bad: bad.map(e => e.outerHTML.slice(0, 80)),
          handlers: handlers.map(e => e.outerHTML.slice(0, 80)),
          remote: remote.map(e => e.outerHTML.slice(0, 80)), ids,
          pwned: window.__pk_pwned === undefined ? null : window.__pk_pwned};
}"""


class Watch:
    """Every dialog (dismissed) and every request a page makes, for the assertions."""

    def __init__(self, page, app_url: str) -> None:
        self.dialogs: list[str] = []
        self.foreign: list[str] = []
        self.host = urlsplit(app_url).netloc
        page.on("dialog", self._dialog)
        page.on("request", self._request)

    def _dialog(self, dialog) -> None:
        self.dialogs.append(dialog.message)
        dialog.dismiss()

    def _request(self, request) -> None:
        parts = urlsplit(request.url)
        if parts.scheme in ("data", "blob", "about"):
            return
        if parts.netloc != self.host:
            self.foreign.append(request.url)


def assert_clean(page, watch: Watch) -> None:
    found = page.evaluate(INJECTED_JS)
    assert found == {"bad": [], "handlers": [], "remote": [], "ids": [], "pwned": None}
    assert watch.dialogs == []
    assert watch.foreign == []
    assert page.locator("[data-testid=stException]").count() == 0


@pytest.fixture
def page(browser):
    ctx = browser.new_context(viewport={"width": 1600, "height": 1000})
    pg = ctx.new_page()
    yield pg
    ctx.close()


def test_a_hostile_trace_is_drawn_as_text(page, app_url, tmp_path):
    watch = Watch(page, app_url)
    page.goto(app_url)
    page.wait_for_selector("#pk-frame", timeout=60_000)
    settle_after_load(page)
    page.get_by_role("button", name="Open a trace file", exact=True).click()
    hostile = tmp_path / "<img src=x onerror=window.__pk_pwned=9>.jsonl"
    hostile.write_text(hostile_trace_text(), encoding="utf-8")
    page.locator("input[type=file]").set_input_files(str(hostile))
    page.wait_for_function("() => document.querySelectorAll('svg[data-pk-frame]').length === 2"
                           " && document.body.innerText.includes('Replaying')", timeout=60_000)
    wait_idle(page)
    assert page.locator("[data-testid=stAlertContentError]").count() == 0
    # The header's words are shown, as the text they are.
    assert HEADER["model"] in page.inner_text("body")
    for key in ("ArrowRight", "ArrowRight", "PageDown", "PageDown", "PageDown", "End"):
        page.keyboard.press(key)
        wait_idle(page)
    page.wait_for_function("() => document.querySelector('#pk-frame').dataset.frame !== '0'")
    wait_idle(page)
    page.locator("svg.pk-arena").first.hover(force=True)  # tooltips are text too
    page.wait_for_timeout(300)
    page.screenshot(path=str(ARTIFACTS / "hostile-trace.png"), full_page=True)
    assert_clean(page, watch)


def test_a_hostile_link_is_shown_as_text(page, app_url):
    watch = Watch(page, app_url)
    lesson = quote(f"![l]({REMOTE}/l.png)<img src=x onerror=window.__pk_pwned=1>")
    frame = quote(f"![f]({REMOTE}/f.png)")
    page.goto(f"{app_url}/?lesson={lesson}&frame={frame}&lang={quote('<u>zh</u>')}")
    page.wait_for_selector("#pk-frame", timeout=60_000)
    settle_after_load(page)
    assert "is not a frame number" in page.inner_text("body")  # the notice, as text
    assert_clean(page, watch)
