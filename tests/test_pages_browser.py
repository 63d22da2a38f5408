"""Every page of the app, in English and Chinese, in a real browser: it draws its title and
shows no exception, no error box and no traceback.

Starts ``streamlit run app.py`` on a free port and drives Debian's Chromium with Playwright.
A failing page leaves a screenshot in ``test-artifacts/``.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from viz import capacity_page, paper_page, sweep
from viz.lesson import load_spec

pytestmark = pytest.mark.browser
ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ARTIFACTS = ROOT / "test-artifacts"

# url path (with the query that keeps the paper page's simulation small) -> title per language
PAGES = {
    "": load_spec("six-steps").title,
    "capacity": {lang: capacity_page.TEXT[lang]["title"] for lang in ("en", "zh")},
    "paper?requests=100": {lang: paper_page.TEXT[lang]["title"] for lang in ("en", "zh")},
    "block-size": sweep.load_spec("block-size").title,
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def app_url():
    if not os.access(CHROMIUM, os.X_OK):
        pytest.skip("no system Chromium (make browser installs it)")
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
         "--server.port", str(port), "--server.address", "127.0.0.1",
         "--browser.gatherUsageStats", "false"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, proc)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def _wait_healthy(url: str, proc: subprocess.Popen, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"streamlit exited with {proc.returncode} before it was healthy")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    pytest.fail("streamlit did not become healthy in time")


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


def _settle(page, timeout_ms: int = 240_000) -> None:
    """Wait until the script has run and stays idle (a run may trigger one more rerun)."""
    idle = ("() => { const a = document.querySelector('[data-testid=\"stApp\"]');"
            " return a && a.getAttribute('data-test-script-state') === 'notRunning'; }")
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
