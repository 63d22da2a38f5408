"""A hostile trace and a hostile link in a real browser (Debian's Chromium through Playwright):
script, SVG and markdown payloads in run names, request ids, header fields and the URL must
stay text. No dialog, no injected element, no request to any host but the app's."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from urllib.parse import quote, urlsplit

import pytest

from paged.viz.export.serve import settle_after_load, wait_idle
from tests.hostile_traces import HEADER, REMOTE, SIX_TRACE, hostile_trace_text

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"

pytestmark = [
    pytest.mark.browser,
]

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


def test_a_hostile_trace_is_drawn_as_text(page, app_url, tmp_path):
    watch = Watch(page, app_url)
    page.goto(app_url)
    page.wait_for_selector("#pk-frame", timeout=60_000)
    settle_after_load(page)
    page.get_by_role("button", name="Open a trace file", exact=True).click()
    hostile = tmp_path / "<img src=x onerror=window.__pk_pwned=9>.jsonl"
    hostile.write_text(hostile_trace_text(), encoding="utf-8")
    page.locator("input[type=file]").set_input_files(str(hostile))
    page.wait_for_function(
        "() => document.querySelectorAll('svg[data-pk-frame]').length === 2"
        " && document.body.innerText.includes('Replaying')",
        timeout=60_000,
    )
    wait_idle(page)
    assert page.locator("[data-testid=stAlertContentError]").count() == 0
    # The header's words are shown, as the text they are.
    assert HEADER["model"] in page.inner_text("body")
    for key in ("ArrowRight", "ArrowRight", "PageDown", "PageDown", "PageDown"):
        page.keyboard.press(key)
        wait_idle(page)
    page.wait_for_function("() => document.querySelector('#pk-frame').dataset.frame !== '0'")
    wait_idle(page)
    page.locator("svg.pk-arena").first.hover(force=True)  # tooltips are text too
    page.wait_for_timeout(300)
    page.keyboard.press("End")  # the scoreboard quotes the run names too
    wait_idle(page)
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


def _children(pid: int) -> list[tuple[int, str]]:
    """(pid, command line) of ``pid``'s direct children, from /proc."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            status = (d / "status").read_text()
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        ppid = next(int(ln.split()[1]) for ln in status.splitlines() if ln.startswith("PPid:"))
        if ppid == pid:
            out.append((int(d.name), cmd))
    return out


def _streamlit_pid(port: int) -> int:
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if any(b"streamlit" in c for c in cmd) and str(port).encode() in cmd:
                return int(d.name)
    raise AssertionError("no streamlit process for this port")


@pytest.fixture
def slow_live_app(tmp_path):
    """The app over a copy of the six-step lesson whose scenario runs long even as a dry run,
    so a live run is still going when a second session asks and when its tab closes."""
    from tests.app_server import running_app
    from tests.browser.test_load import load_scenario

    lesson = tmp_path / "six-steps"
    lesson.mkdir()
    src = SIX_TRACE.parent
    for name in ("lesson.toml", "trace.jsonl"):
        (lesson / name).write_bytes((src / name).read_bytes())
    (lesson / "scenario.toml").write_text(load_scenario(2000), encoding="utf-8")
    with running_app(
        env={"PAGED_KV_LESSONS": str(tmp_path)}, log=ARTIFACTS / "streamlit-live-limit.log"
    ) as url:
        yield url


def _go_live(page, url: str) -> None:
    page.goto(url)
    page.wait_for_selector("#pk-frame", timeout=60_000)
    wait_idle(page)  # only clicks follow: settle_after_load's wait is for keys
    page.get_by_role("button", name="Run it live now", exact=True).click()
    wait_idle(page)
    page.get_by_role("button", name="Dry run (no model)", exact=True).click()
    wait_idle(page)
    page.get_by_role("button", name="Record on the engine now", exact=True).click()


def test_one_live_run_per_server_and_it_ends_with_its_tab(page, slow_live_app):
    port = int(slow_live_app.rsplit(":", 1)[1])
    server = _streamlit_pid(port)
    first = page.context.new_page()  # a tab of its own, closed below; the second is the shared one
    _go_live(first, slow_live_app)
    deadline = time.monotonic() + 30
    while not (live := [p for p, cmd in _children(server) if "paged record" in cmd]):
        assert time.monotonic() < deadline, "the live run never started"
        time.sleep(0.2)
    # Paused while the second session asks: still a running child (so a second run must be
    # refused), but neither it nor the first tab's live view burns a core meanwhile.
    os.kill(live[0], signal.SIGSTOP)
    try:
        second = page
        second.bring_to_front()  # a tab behind another gets few animation frames: waits crawl
        _go_live(second, slow_live_app)
        second.get_by_text("live run is in progress").wait_for(timeout=30_000)
        assert [p for p, cmd in _children(server) if "paged record" in cmd] == live
    finally:
        os.kill(live[0], signal.SIGCONT)
    first.close()  # the tab that started it goes away, its run going again
    deadline = time.monotonic() + 20
    while Path(f"/proc/{live[0]}").exists():  # neither running nor a zombie
        assert time.monotonic() < deadline, "the live run outlived its session"
        time.sleep(0.2)
