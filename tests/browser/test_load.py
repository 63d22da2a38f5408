"""A classroom on loopback: 20 browser sessions open the app and step with the arrow keys while
one of them uploads a maximal-size trace (as large as the upload cap allows, recorded by the
engine's dry run so it is valid). The server (streamlit and any children) must stay under
``RSS_BOUND_MB`` the whole time and no session may show an error. Marked ``load``: bounded to
about a minute and a half; run it with ``pytest -m load tests/browser/test_load.py``."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from paged.engine.trace import io as T
from paged.engine.trace.check import TraceChecker
from paged.engine.trace.schema import LIMITS
from paged.viz.app.lesson import MAX_UPLOAD_MB
from paged.viz.export.serve import SERVER_POLL_MS, wait_idle
from tests.app_server import running_app

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
SESSIONS = 20
# The documented bound (README, "Serving a classroom"): the server with 20 sessions and one
# maximal upload folded (measured: about 470 MB peak, 95 MB before the upload; printed here).
RSS_BOUND_MB = 1024

pytestmark = [
    pytest.mark.load,
    pytest.mark.browser,
]


def load_scenario(
    requests: int, arena: tuple[int, int, int] = (64, 16, 256), variant: int = 0
) -> str:
    """A long dry-run workload: many requests through a small arena (preemptions, holes).
    ``arena``: blocks, block size, max_model_len; ``variant`` shifts the prompts (another
    trace of about the same size)."""
    num_blocks, block_size, max_model_len = arena
    lines = [
        'title = "Load"',
        "[arena]",
        f"num_blocks = {num_blocks}",
        f"block_size = {block_size}",
        f"max_model_len = {max_model_len}",
    ]
    for i in range(requests):
        lines += [
            "[[requests]]",
            f'id = "r{i}"',
            f"prompt_len = {20 + (i * 7 + variant) % 60}",
            f"max_tokens = {60 + (i * 13) % 150}",
            "ignore_eos = true",
            f"arrival_step = {i * 3}",
        ]
    return "\n".join(lines) + "\n"


class MaxTrace:
    """The largest valid trace under the upload cap: a dry run (recorded in the background
    while the sessions open), then, if that one is more than the app accepts, one recording
    rescaled by how far over it was: the closest to the limit a whole number of requests gets."""

    def __init__(
        self,
        folder: Path,
        arena: tuple[int, int, int] = (64, 16, 256),
        requests: int = 10 * MAX_UPLOAD_MB,
        variant: int = 0,
    ) -> None:
        self.cap = MAX_UPLOAD_MB * 1_000_000
        self.arena, self.variant = arena, variant
        self.scenario = folder / f"load-{variant}.toml"
        self.out = folder / f"max-{variant}.jsonl"
        # 80 at 8 MB: 3.6 MB, 0.99 of the drawing budget (frames x slots), which binds before
        # the bytes do, and 81 is over it: the largest in one recording, where starting from
        # twice as many cost a second one (the loop below still rescales if it is over)
        self.requests = requests
        self.proc = self._record()

    def _record(self) -> subprocess.Popen:
        self.scenario.write_text(
            load_scenario(self.requests, self.arena, self.variant), encoding="utf-8"
        )
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "paged",
                "record",
                "--scenario",
                str(self.scenario),
                "--out",
                str(self.out),
                "--forward",
                "skip",
            ],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def path(self) -> Path:
        """The recording, once it is both under the byte cap and within the reader's drawing
        budget (engine.trace.schema.Limits: frames x arena slots): the largest trace the app
        accepts, not one it refuses in a line."""
        while True:
            assert self.proc.wait(timeout=120) == 0
            over = over_budget(self.out, self.cap)
            if over <= 1:
                # maximal: within 5 % of what the app takes (else the start count above is
                # stale: the engine or the budget changed)
                assert over >= 0.95, f"{self.requests} requests fill only {over:.2f} of it"
                T.read(self.out)  # the app's own reader takes it whole
                return self.out
            # the work grows with the requests (one arrives every 3 steps): scale, with room
            self.requests = min(self.requests - 1, int(self.requests / over * 0.96))
            self.proc = self._record()


def over_budget(path: Path, cap: int) -> float:
    """How many times what the app accepts a trace is: the largest of its bytes over ``cap``
    and its events, frames x arena slots and slot walks over the reader's budget (LIMITS); at
    most 1.0 when the app takes it. Read once with a budget that never runs out."""
    lim = LIMITS
    endless = replace(lim, max_events=1 << 40, max_frame_cells=1 << 40, max_slot_touches=1 << 40)
    checker = TraceChecker(endless)
    with path.open(encoding="utf-8", newline="\n") as f:
        for lineno, line in enumerate(f, start=1):
            checker.line(lineno, line)
    b = checker.budget
    return max(
        path.stat().st_size / cap,
        b.events / lim.max_events,
        b.cells / lim.max_frame_cells,
        b.touches / lim.max_slot_touches,
    )


def server_rss_mb(port: int) -> float:
    """VmRSS of the streamlit process serving ``port`` and all its descendants, in MB."""
    procs = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                status = (d / "status").read_text()
                cmd = (d / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            fields = dict(ln.split(":", 1) for ln in status.splitlines() if ":" in ln)
            procs[int(d.name)] = (
                int(fields.get("PPid", "0").strip()),
                cmd,
                int(fields.get("VmRSS", "0 kB").split()[0]),
            )
    roots = [
        p
        for p, (_, cmd, _) in procs.items()
        if b"streamlit" in b" ".join(cmd) and str(port).encode() in cmd
    ]
    seen, todo = set(), list(roots)
    while todo:
        p = todo.pop()
        seen.add(p)
        todo += [c for c, (pp, _, _) in procs.items() if pp == p and c not in seen]
    return sum(procs[p][2] for p in seen) / 1024


class Sampler(threading.Thread):
    """Samples the server's RSS every 0.2 s; ``peak`` is the largest seen."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.port, self.peak, self.halt = port, 0.0, threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            self.peak = max(self.peak, server_rss_mb(self.port))
            self.halt.wait(0.2)


#: The tabs are the server's load, not what is measured: Chromium may seat them in two renderer
#: processes instead of one each (20 tabs: ~1.4 -> ~1.2 CPU-s apiece on this 2-core machine).
SHARED_RENDERERS = [
    "--renderer-process-limit=2",
    "--disable-site-isolation-trials",
    "--disable-features=SitePerProcess,IsolateOrigins",
]


@pytest.fixture
def browser(playwright_driver):
    """This test's own Chromium, with SHARED_RENDERERS (the suite's shares no switches)."""
    from paged.viz.export.serve import launch_chromium

    b = launch_chromium(playwright_driver, SHARED_RENDERERS)
    yield b
    b.close()


def test_twenty_sessions_step_while_one_uploads_a_maximal_trace(tmp_path, browser):
    t0 = time.monotonic()
    recording = MaxTrace(tmp_path)
    ARTIFACTS.mkdir(exist_ok=True)
    with running_app(log=ARTIFACTS / "streamlit-load-test.log") as url:
        port = int(url.rsplit(":", 1)[1])
        sampler = Sampler(port)
        sampler.start()
        ctx = browser.new_context(viewport={"width": 1280, "height": 900})
        pages = []
        for _ in range(SESSIONS):
            pg = ctx.new_page()
            pg.goto(url, wait_until="commit")  # open all at once; wait below
            pages.append(pg)
        for pg in pages:
            pg.wait_for_selector("#pk-frame", timeout=60_000)
        idle_mb, t_open = server_rss_mb(port), time.monotonic()
        uploader, steppers = pages[0], pages[1:]
        wait_idle(uploader)
        uploader.get_by_role("button", name="Open a trace file", exact=True).click()
        trace = recording.path()
        uploader.locator("input[type=file]").set_input_files(str(trace))
        for _ in range(3):  # everyone steps while the upload folds
            for pg in steppers:
                pg.keyboard.press("ArrowRight")
            for pg in steppers:
                wait_idle(pg, timeout_ms=60_000)
        uploader.wait_for_function(
            "() => document.querySelectorAll('svg[data-pk-frame]').length === 2"
            " && document.body.innerText.includes('Replaying')",
            timeout=80_000,
            polling=SERVER_POLL_MS,
        )
        t_upload = time.monotonic()
        uploader.keyboard.press("End")
        wait_idle(uploader, timeout_ms=60_000)
        sampler.halt.set()
        sampler.join()
        frames = [
            pg.evaluate("() => Number(document.querySelector('#pk-frame').dataset.frame)")
            for pg in steppers
        ]
        errors = [
            pg.locator("[data-testid=stAlertContentError], [data-testid=stException]").count()
            for pg in pages
        ]
        uploader.screenshot(path=str(ARTIFACTS / "load-uploader.png"))
        ctx.close()
    print(
        f"\nload: sessions open at {t_open - t0:.0f} s, upload drawn at {t_upload - t0:.0f} s;"
        f" trace {trace.stat().st_size / 1e6:.1f} MB, server RSS idle with "
        f"{SESSIONS} sessions {idle_mb:.0f} MB, peak {sampler.peak:.0f} MB "
        f"(bound {RSS_BOUND_MB} MB)"
    )
    assert errors == [0] * SESSIONS
    assert all(f > 0 for f in frames), frames  # every session really stepped
    assert 0 < sampler.peak < RSS_BOUND_MB
