"""Reading the watch page in a real browser (Debian's Chromium via Playwright): its metrics, a
metric once it has settled, its recording download, a hostile publisher's 1,000 malformed
messages, the app server's memory. Used by tests/browser/test_watch_engine_browser.py, which drives the
page against the real engine."""

from __future__ import annotations

import time
from pathlib import Path

from paged.viz import ui_text
from tests.engine.test_kv_events import hostile_publisher, send_malformed, send_probe

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
T = ui_text.load("watch_page")["en"]


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


METRIC_JS = """(label) => {
  for (const m of document.querySelectorAll('[data-testid="stMetric"]')) {
    const l = m.querySelector('[data-testid="stMetricLabel"]');
    const v = m.querySelector('[data-testid="stMetricValue"]');
    if (l && v && l.innerText.trim() === label) return v.innerText.replace(/,/g, '').trim();
  }
  return null; }"""


def metric(page, key: str) -> int | None:
    v = page.evaluate(METRIC_JS, T[key])
    return None if v is None else int(v)


def until(cond, timeout: float = 20.0, tick=None) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if tick is not None:
            tick()
        if cond():
            return
        time.sleep(0.2)
    raise AssertionError("the page never showed it")


def survives_malformed(page, url: str, blocks: int, timeout: float) -> None:
    """A hostile server bound where the page's server was sends 1,000 malformed messages: the
    page counts every one and its view (``blocks`` held) does not change."""
    with hostile_publisher(url) as bad:
        until(
            lambda: (metric(page, "m_malformed") or 0) > 0,
            30,
            tick=lambda: send_probe(bad),
        )
        base = settled(page, "m_malformed")
        send_malformed(bad, 1000)
        until(lambda: metric(page, "m_malformed") == base + 1000, timeout)
        assert metric(page, "m_blocks") == blocks


# Counts the page's finished script runs (the live view reruns every second). Installed on
# first use; returns the run a caller must see finish for the page to show state newer than
# the call: the next one, or the one after when a run is under way now.
RUNS_JS = """() => {
  const a = document.querySelector('[data-test-script-state]');
  if (window.__pkRunsDone === undefined) {
    window.__pkRunsDone = 0;
    new MutationObserver(rs => { for (const r of rs) if (r.oldValue === 'running')
      window.__pkRunsDone++; }).observe(a, {attributes: true, attributeOldValue: true,
                                            attributeFilter: ['data-test-script-state']});
  }
  return window.__pkRunsDone + (a.dataset.testScriptState === 'running' ? 2 : 1); }"""
DONE_JS = "(n) => window.__pkRunsDone >= n"


def redrawn(page, timeout: float = 20.0) -> None:
    """Return once a run of the page that began after this call has finished: what it shows
    then is drawn from the subscriber's state at or after the call."""
    page.wait_for_function(DONE_JS, arg=page.evaluate(RUNS_JS), timeout=timeout * 1000)


def settled(page, key: str, timeout: float = 20.0) -> int:
    """A metric once it has stopped moving: the same now and after a fresh redraw of the view
    (probes in flight may still land). Counting the page's runs, not sleeping, keeps this exact on a
    loaded machine, where a redraw can come later than its second."""
    last, end = metric(page, key), time.monotonic() + timeout
    while time.monotonic() < end:
        redrawn(page, max(0.1, end - time.monotonic()))
        now = metric(page, key)
        if now == last and now is not None:
            return now
        last = now
    raise AssertionError(f"{key} never settled")


def download(page) -> Path:
    """Click the download button; the view redraws every second and may swap the button out
    from under a click, so try a few times."""
    from playwright.sync_api import Error as PlaywrightError

    for _ in range(4):
        try:
            with page.expect_download(timeout=10_000) as dl:
                page.get_by_role("button", name=T["download"]).click(timeout=10_000)
            return Path(dl.value.path())
        except PlaywrightError:
            continue
    raise AssertionError("the recording never downloaded")
