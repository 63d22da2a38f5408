"""What strangers' input may cost a classroom's server, measured on its process tree: four
sessions uploading different maximal traces at once (one fold at a time, under 1 GiB, let go
when they close), and ten sessions opening the costliest lab link a scenario may ask for while
another session still loads and steps. Marked ``load``: run with
``pytest -m load tests/browser/test_load_shared.py``."""

from __future__ import annotations

import contextlib
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from test_load import SHARED_RENDERERS, MaxTrace, Sampler, server_rss_mb

from paged.viz.export.serve import (
    SERVER_POLL_MS,
    launch_chromium,
    wait_idle,
    wait_painted,
)
from paged.viz.live import lab as S
from tests.app_server import running_app

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
RSS_BOUND_MB = 1024  # docs/classroom.md
#: The server's tree once the sessions have closed and their folds are let go
RSS_AFTER_MB = 300
UPLOADERS = 4
#: A small arena over many steps: 7.8 MB of events within the drawing budget (0.63 of its
#: frame cells), the costliest upload to fold and draw found (11k frames: about 14 CPU-s)
UPLOAD_ARENA = (8, 16, 128)
UPLOAD_REQUESTS = 143
LAB_SESSIONS = 10
#: The costliest scenario a link may draw: 1-slot blocks over the largest arena, 0.98 of the
#: drawing budget
COSTLIEST_LINK = S.Lab(
    tuple(S.LabRequest(f"R{i}", "hi", 250, 0) for i in range(8)),
    num_blocks=S.MAX_SLOTS,
    block_size=1,
    max_model_len=S.MAX_SLOTS,
    policy="oracle",
)

pytestmark = [pytest.mark.load, pytest.mark.browser]


@pytest.fixture
def browser(playwright_driver):
    b = launch_chromium(playwright_driver, SHARED_RENDERERS)
    yield b
    b.close()


class HealthProbe(threading.Thread):
    """Asks the server's health endpoint every 0.5 s; ``worst`` is the slowest answer (s): how
    long the server's event loop, which every session's messages go through, was held up."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url, self.worst, self.halt = f"{url}/_stcore/health", 0.0, threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            t = time.monotonic()
            with contextlib.suppress(OSError), urllib.request.urlopen(self.url, timeout=30):
                pass
            self.worst = max(self.worst, time.monotonic() - t)
            self.halt.wait(0.5)


def _errors(page) -> int:
    return page.locator("[data-testid=stAlertContentError], [data-testid=stException]").count()


def _told_to_wait(pages, within_s: float) -> bool:
    """Whether a session says its upload waits its turn, while the others fold."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        for pg in pages:
            if pg.get_by_text("waits its turn").count():
                return True
        time.sleep(0.5)
    return False


def _settled_rss(port: int, below: float, within_s: float) -> float:
    """The tree's RSS once it is under ``below``, or after ``within_s`` seconds."""
    deadline = time.monotonic() + within_s
    while True:
        mb = server_rss_mb(port)
        if mb < below or time.monotonic() > deadline:
            return mb
        time.sleep(1)


def test_four_sessions_upload_maximal_traces_at_once_in_bounded_memory(tmp_path, browser):
    t0 = time.monotonic()
    traces = [
        MaxTrace(tmp_path, UPLOAD_ARENA, UPLOAD_REQUESTS, variant=k) for k in range(UPLOADERS)
    ]
    ARTIFACTS.mkdir(exist_ok=True)
    with running_app(log=ARTIFACTS / "streamlit-load-uploads.log") as url:
        port = int(url.rsplit(":", 1)[1])
        sampler = Sampler(port)
        sampler.start()
        ctx = browser.new_context(viewport={"width": 1280, "height": 900})
        pages = [ctx.new_page() for _ in range(UPLOADERS)]
        for pg in pages:
            pg.goto(url, wait_until="commit")
        for pg in pages:
            pg.wait_for_selector("#pk-frame", timeout=90_000)
            wait_idle(pg)
            pg.get_by_role("button", name="Open a trace file", exact=True).click()
        paths = [tr.path() for tr in traces]
        idle_mb = server_rss_mb(port)
        for pg, path in zip(pages, paths, strict=True):  # all four at once
            pg.locator("input[type=file]").set_input_files(str(path))
        told = _told_to_wait(pages, within_s=120)
        for pg in pages:
            pg.wait_for_function(
                "() => document.querySelectorAll('svg[data-pk-frame]').length === 2"
                " && document.body.innerText.includes('Replaying')",
                timeout=400_000,
                polling=SERVER_POLL_MS,
            )
        t_drawn = time.monotonic()
        errors = [_errors(pg) for pg in pages]
        for pg in pages:
            pg.keyboard.press("End")
        pages[-1].screenshot(path=str(ARTIFACTS / "load-uploads.png"))
        peak = sampler.peak
        ctx.close()
        after_mb = _settled_rss(port, RSS_AFTER_MB, within_s=60)
        sampler.halt.set()
        sampler.join()
    sizes = ", ".join(f"{p.stat().st_size / 1e6:.1f}" for p in paths)
    print(
        f"\nuploads: {UPLOADERS} traces of {sizes} MB drawn at {t_drawn - t0:.0f} s; server"
        f" tree idle {idle_mb:.0f} MB, peak {peak:.0f} MB (bound {RSS_BOUND_MB}), after the"
        f" sessions closed {after_mb:.0f} MB (bound {RSS_AFTER_MB}); told to wait: {told}"
    )
    assert errors == [0] * UPLOADERS
    assert told  # four at once: three wait, and say so
    assert len({p.read_bytes() for p in paths}) == UPLOADERS  # no cache hides a fold
    assert 0 < peak < RSS_BOUND_MB
    assert after_mb < RSS_AFTER_MB


def test_ten_sessions_open_the_costliest_lab_link_while_another_steps(browser):
    link = f"lab?scenario={S.encode(COSTLIEST_LINK)}&frame=0"
    ARTIFACTS.mkdir(exist_ok=True)
    with running_app(log=ARTIFACTS / "streamlit-load-lab.log") as url:
        port = int(url.rsplit(":", 1)[1])
        sampler, probe = Sampler(port), HealthProbe(url)
        sampler.start()
        probe.start()
        ctx = browser.new_context(viewport={"width": 1280, "height": 900})
        t0 = time.monotonic()
        labs = [ctx.new_page() for _ in range(LAB_SESSIONS)]
        for pg in labs:
            pg.goto(f"{url}/{link}", wait_until="commit")
        other = ctx.new_page()  # a student on the lesson page meanwhile
        other.goto(url, wait_until="commit")
        other.wait_for_selector("#pk-frame", timeout=120_000)
        t_other = time.monotonic() - t0
        wait_idle(other, timeout_ms=120_000)
        other.keyboard.press("ArrowRight")
        wait_painted(other, 1, timeout_ms=30_000)
        for pg in labs:
            pg.wait_for_selector("#pk-frame", timeout=300_000)
        t_labs = time.monotonic() - t0
        errors = [_errors(pg) for pg in [*labs, other]]
        labs[0].screenshot(path=str(ARTIFACTS / "load-lab.png"))
        ctx.close()
        sampler.halt.set()
        probe.halt.set()
        sampler.join()
        probe.join()
    print(
        f"\nlab: {LAB_SESSIONS} sessions opened the costliest link in {t_labs:.0f} s; another"
        f" session's lesson page loaded in {t_other:.0f} s and stepped; the server's slowest"
        f" health answer {probe.worst:.2f} s; server tree peak {sampler.peak:.0f} MB (bound"
        f" {RSS_BOUND_MB})"
    )
    assert errors == [0] * (LAB_SESSIONS + 1)
    # the browser's 11 tabs share this machine's cores with the server: page loads are slow
    # with or without the lab's drawing (about 30 s with a cheap link on a loaded 2-core box)
    assert t_other < 150
    assert probe.worst < 5
    assert 0 < sampler.peak < RSS_BOUND_MB
