"""Run the app headless in a child process and press keys in it as a keyboard does: for the
browser tests and ``bench/frames.py`` (which puts the checkout on its path), never the product."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from paged import IMPORT_ROOT


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def running_app(
    env: dict[str, str] | None = None,
    log: Path | None = None,
    timeout: float = 90,
    info: dict | None = None,
    script: str = "app.py",
) -> Iterator[str]:
    """Start ``streamlit run app.py`` (or ``script``: classroom.py serves the class's routes
    too) on a free port, wait for /_stcore/health, yield its base URL, and stop it (our child
    only) afterwards. ``info["pid"]`` gets the server's pid."""
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(IMPORT_ROOT / script),
        "--server.headless",
        "true",
        "--server.port",
        str(port),
        "--server.address",
        "127.0.0.1",
        "--server.fileWatcherType",
        "none",
        "--browser.gatherUsageStats",
        "false",
    ]
    out: IO[str] | int = open(log, "w") if log else subprocess.DEVNULL  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        cmd,
        cwd=IMPORT_ROOT,
        env={**os.environ, **(env or {})},
        stdout=out,
        stderr=subprocess.STDOUT,
    )
    if info is not None:
        info["pid"] = proc.pid
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, proc, timeout)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if not isinstance(out, int):
            out.close()


def _wait_healthy(url: str, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"streamlit exited with status {proc.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.3)
    raise TimeoutError(f"the app at {url} did not become healthy in {timeout:.0f}s")


def hold_key(
    page,
    seconds: float,
    every: float,
    key: str = "ArrowRight",
    code: int = 39,
    at_least: int = 0,
) -> int:
    """Hold ``key`` as a keyboard does: a keydown, then auto-repeats every ``every`` seconds,
    sent straight through the DevTools protocol (Playwright's own calls are slower than 30 ms).
    Held past ``seconds`` until ``at_least`` keydowns are out (a loaded machine sends fewer in
    the time). Returns the number of keydowns sent."""
    cdp = page.context.new_cdp_session(page)
    ev = {"key": key, "code": key, "windowsVirtualKeyCode": code}
    t0, n = time.monotonic(), 0
    while time.monotonic() - t0 < seconds or n < at_least:
        cdp.send("Input.dispatchKeyEvent", {**ev, "type": "rawKeyDown", "autoRepeat": n > 0})
        n += 1
        time.sleep(max(0.0, t0 + n * every - time.monotonic()))
    cdp.send("Input.dispatchKeyEvent", {**ev, "type": "keyUp"})
    cdp.detach()
    return n
