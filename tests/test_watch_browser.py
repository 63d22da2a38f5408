"""The watch page in a real browser (Debian's Chromium via Playwright) follows a KV-event
publisher on loopback fed the shared-system-prompt workload (stand-in prefix-cache events until
the prefix cache lands), shows the shared chain, and survives the publisher being killed and
restarted, 1,000 malformed messages and 100k events in a burst, with the app server's resident
memory growth asserted. Every wait is bounded."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from engine import kv_events as K
from tests.test_kv_events import (
    FakeStepEnd,
    FakeStored,
    free_ports,
    hostile_publisher,
    send_malformed,
    send_probe,
)
from tests.test_watch_page import shared_prompt_workload
from viz import ui_text
from viz.kv_watch import fold, read_recording
from viz.serve import CHROMIUM, running_app

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="needs Debian's chromium"),
]
ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"
T = ui_text.load("watch_page")["en"]
BS = 4


@pytest.fixture(scope="module")
def own_app():
    """An app server of our own, so its memory can be read from /proc."""
    info: dict = {}
    ARTIFACTS.mkdir(exist_ok=True)
    with running_app(log=ARTIFACTS / "streamlit-watch.log", info=info) as url:
        yield url, info["pid"]


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


def settled(page, key: str, timeout: float = 20.0) -> int:
    """A metric once it has stopped moving (the view redraws every second; probes in flight
    may still land)."""
    last, end = metric(page, key), time.monotonic() + timeout
    while time.monotonic() < end:
        time.sleep(2.2)
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


def test_watch_page_in_a_browser(own_app, browser):
    app, pid = own_app
    port, _ = free_ports()
    url = f"tcp://127.0.0.1:{port}"
    page = browser.new_page(viewport={"width": 1440, "height": 1000})
    pub = None
    try:
        page.goto(f"{app}/watch", wait_until="domcontentloaded")
        page.get_by_text(T["title"]).first.wait_for(timeout=60_000)
        page.get_by_label(T["endpoint"]).fill(url)
        page.get_by_label(T["endpoint"]).press("Enter")
        page.wait_for_timeout(500)
        page.get_by_role("button", name=T["connect"]).click()
        # the shared chain: 5 blocks, one chain, the system prompt shared by three requests
        pub = K.KVEventPublisher(url)
        tr = K.EngineEventTranslator(pub)
        until(lambda: metric(page, "m_blocks") == 5, 30, tick=lambda: shared_prompt_workload(tr, 1))
        assert metric(page, "m_chains") == 1
        page.get_by_text(T["chains_title"]).first.wait_for(timeout=10_000)
        page.locator(".js-plotly-plot").first.wait_for(timeout=20_000)
        page.wait_for_timeout(2500)
        page.screenshot(path=str(ARTIFACTS / "watch-shared-chain.png"), full_page=True)
        # the recording downloads as JSONL and folds back to the same cache
        recorded = read_recording(download(page).read_text(encoding="utf-8"))
        assert fold(recorded).snapshot().num_blocks == 5
        # killed: the view keeps its blocks; restarted: the new process's cache replaces it
        pub.close()
        pub = None
        page.wait_for_timeout(1500)
        assert metric(page, "m_blocks") == 5
        pub = K.KVEventPublisher(url)
        tr = K.EngineEventTranslator(pub)

        def one_block() -> None:
            tr(FakeStored(7, None, (9,) * BS, BS, physical=0))
            tr(FakeStepEnd())

        until(lambda: metric(page, "m_blocks") == 1, 30, tick=one_block)
        pub.close()
        pub = None
        # a hostile server on the same port: 1,000 malformed messages, one warning line
        survives_malformed(page, url, blocks=1, timeout=30)
        # a flood: 100k events in a burst; the server's memory grows by a bounded amount
        pub = K.KVEventPublisher(url)
        until(
            lambda: metric(page, "m_blocks") == 0,
            30,
            tick=lambda: pub.publish([K.AllBlocksCleared()]),
        )
        removed0 = settled(page, "m_removed")
        rss0 = rss_kib(pid)
        for b in range(1000):
            hs = [b * 100 + i for i in range(50)]
            pub.publish(
                [K.BlockStored([h], None, list(range(16)), 16, None, "GPU") for h in hs]
                + [K.BlockRemoved([h], "GPU") for h in hs]
            )
        until(lambda: metric(page, "m_removed") == removed0 + 50_000, 90)
        assert metric(page, "m_blocks") == 0
        grown = rss_kib(pid) - rss0
        print(f"app server RSS grew by {grown} KiB over the 100k-event flood")
        assert grown < 200 * 1024, f"app server grew by {grown} KiB"
        body = page.inner_text("body")
        assert "Traceback" not in body
        assert page.locator('[data-testid="stException"]').count() == 0
    except Exception:
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "watch-browser.png"), full_page=True)
        raise
    finally:
        if pub is not None:
            pub.close()
        page.close()
