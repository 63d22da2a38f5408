"""The watch page, in a real browser (Debian's Chromium via Playwright), follows OUR ENGINE: a
``python -m paged record`` child process running the shared-system-prompt lesson's workload on
the real model with prefix caching, publishing on a free loopback port. The page must show the
shared chain the engine's own trace says it cached and hand it out as a recording that folds
back to the same cache; keep it when the process is SIGKILLed and say the server went away;
follow the process started again on the same port (the same scenario as a dry run, ``--forward
skip``: another model load would double the test's time, and its different cache shows the
page really follows the new process); shrug off 1,000 malformed messages with one warning
line; and take a 100k-event burst with the recording ring, the blocks held and the app server's
memory bounded. Every expected number comes from the scenario or the engine's trace, every
wait is bounded. (It replaced a browser test of the same page against stand-in events: every
check of that one is made here, on the real engine.)"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from paged.engine.interop import kv_events as K
from paged.viz.watch.state import fold, read_recording
from tests.browser.watch_browser import (
    ARTIFACTS,
    T,
    download,
    metric,
    rss_kib,
    settled,
    survives_malformed,
    until,
)
from tests.engine.test_kv_events import free_ports

pytestmark = [
    pytest.mark.browser,
    pytest.mark.model,
]
ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "paged" / "lessons" / "shared-prompt" / "scenario.toml"
HOLDING = "holding the KV-event sockets open"  # what record says once its run is complete
COLS = list(T["cols"])  # the chain table's columns, in the page's order


class Engine:
    """``python -m paged record`` on the lesson's scenario, publishing on ``url`` and then
    holding its sockets open until the test kills it. Its stderr goes to a log in
    test-artifacts/."""

    def __init__(self, url: str, trace: Path, log: Path, forward: str = "model") -> None:
        self.trace, self.log = trace, log
        cmd = [
            sys.executable,
            "-m",
            "paged",
            "record",
            "--scenario",
            str(SCENARIO),
            "--out",
            str(trace),
            "--allocators",
            "paged",
            "--forward",
            forward,
            "--kv-events",
            url,
            "--kv-events-hold",
            "600",
        ]
        with open(log, "w") as out:
            self.proc = subprocess.Popen(
                cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=os.environ.copy()
            )

    def wait_holding(self, timeout: float) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if HOLDING in self.log.read_text(errors="replace"):
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.2)
        tail = self.log.read_text(errors="replace")[-2000:]
        raise AssertionError(f"the engine never finished its run (rc {self.proc.poll()}):\n{tail}")

    def kill(self) -> None:
        """SIGKILL: no goodbye, the sockets just vanish."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)


@dataclass
class Cached:
    """What the engine's own trace says its prefix cache did."""

    held: set[str] = field(default_factory=set)  # block hashes held at the end
    saved: list[int] = field(default_factory=list)  # tokens each cache hit saved
    steps: set[int] = field(default_factory=set)  # steps with cache events: one batch each
    block_size: int = 0


def cached(trace: Path) -> Cached:
    c = Cached()
    for line in trace.read_text(encoding="utf-8").splitlines()[1:]:
        ev = json.loads(line)
        kind = ev.get("kind")
        if kind in ("block_stored", "block_evicted", "all_blocks_cleared"):
            c.steps.add(ev["step"])
        if kind == "block_stored":
            c.held.add(ev["block_hash"])
            c.block_size = ev["block_size"]
        elif kind == "block_evicted":
            c.held.discard(ev["block_hash"])
        elif kind == "all_blocks_cleared":
            c.held.clear()
        elif kind == "cache_hit":
            c.saved.append(ev["tokens_saved"])
    return c


def template_regex(template: str) -> re.Pattern[str]:
    """A page line built from ``template``: each ``{name:spec}`` becomes a number group."""
    parts = re.split(r"\{(\w+)(?::[^}]*)?\}", template)
    rx = "".join(re.escape(p) if i % 2 == 0 else rf"(?P<{p}>[\d.,]+)" for i, p in enumerate(parts))
    return re.compile(rx)


def numbers(page, key: str) -> dict[str, float] | None:
    """The numbers in the status line made from ``T[key]``, or None while it is not shown."""
    m = template_regex(T[key]).search(page.inner_text("body"))
    return None if m is None else {k: float(v.replace(",", "")) for k, v in m.groupdict().items()}


def cell(page, col: str, row: int = 0) -> str | None:
    """A cell of the chain table (the data grid's accessible cells carry these test ids)."""
    loc = page.locator(f'[data-testid="glide-cell-{COLS.index(col)}-{row}"]')
    return loc.first.inner_text() if loc.count() else None


def shows(page, text: str) -> bool:
    return text in page.inner_text("body")


class Laps:
    """Prints how long each phase took (run with -s); a record, never an assertion."""

    def __init__(self) -> None:
        self.t0 = self.t = time.monotonic()

    def __call__(self, what: str) -> None:
        now = time.monotonic()
        print(f"[watch-engine] {what}: {now - self.t:.1f} s (total {now - self.t0:.1f} s)")
        self.t = now


def test_watch_page_follows_the_engine_through_kill_restart_garbage_and_a_flood(
    page, app_url, app_pid, tmp_path
):
    ARTIFACTS.mkdir(exist_ok=True)
    lap = Laps()
    port, _ = free_ports()
    url = f"tcp://127.0.0.1:{port}"
    requests = tomllib.loads(SCENARIO.read_text(encoding="utf-8"))["requests"]
    engines: list[Engine] = []
    page.set_viewport_size({"width": 1440, "height": 1100})
    pub = None
    try:
        # the engine binds its sockets, then loads the model (seconds): the page subscribes
        # meanwhile, on the shared app server (whose memory the flood checks)
        first = Engine(url, tmp_path / "run1.jsonl", ARTIFACTS / "watch-engine-run1.log")
        engines.append(first)
        app, pid = app_url, app_pid
        page.goto(f"{app}/watch", wait_until="domcontentloaded")
        page.get_by_text(T["title"]).first.wait_for(timeout=60_000)
        page.get_by_label(T["endpoint"]).fill(url)
        page.get_by_label(T["endpoint"]).press("Enter")
        page.wait_for_timeout(500)
        page.get_by_role("button", name=T["connect"]).click()
        lap("app up, page connected")

        # 1. the shared chain, as the engine's own trace has it
        first.wait_holding(300)
        lap("engine ran the workload")
        run1 = cached(first.trace)
        held, saved = run1.held, run1.saved
        assert len(saved) == len(requests) - 1 and len(set(saved)) == 1, saved
        # the system prompt's full blocks, hit by each later request
        shared = saved[0] // run1.block_size
        assert shared >= 2 and len(held) > shared

        def folded_all() -> bool:  # one batch per engine step with cache events
            c = numbers(page, "status_counts")
            return c is not None and c["batches"] + c["replayed"] == len(run1.steps)

        until(lambda: folded_all() and metric(page, "m_blocks") == len(held), 60)
        # followed as it ran: batches arrived live, none missed
        counts = numbers(page, "status_counts")
        assert counts is not None and counts["batches"] >= 1 and counts["gaps"] == 0
        lap("page shows the blocks")
        assert metric(page, "m_chains") == 1
        until(lambda: cell(page, "blocks") == str(len(held)), 60)
        assert cell(page, "shared") == str(shared)
        lap("chain table drawn")
        assert cell(page, "leaves") == str(len(requests))
        page.get_by_text(T["chains_title"]).first.wait_for(timeout=10_000)
        page.locator(".js-plotly-plot").first.wait_for(timeout=30_000)
        page.screenshot(path=str(ARTIFACTS / "watch-engine-shared-chain.png"), full_page=True)
        # the recording downloads as JSONL and folds back to the same cache
        recorded = read_recording(download(page).read_text(encoding="utf-8"))
        assert fold(recorded).snapshot().num_blocks == len(held)
        lap("recording downloaded")

        # 2. killed: the page says so and keeps what it had
        first.kill()
        until(lambda: shows(page, T["status_gone"].format(url=url)), 30)
        assert metric(page, "m_blocks") == len(held)
        assert metric(page, "m_chains") == 1
        lap("killed, page says so")

        # 3. started again on the same port: the page follows the new process's cache
        second = Engine(url, tmp_path / "run2.jsonl", ARTIFACTS / "watch-engine-run2.log", "skip")
        engines.append(second)
        second.wait_holding(120)
        held2 = cached(second.trace).held
        assert held2 and len(held2) != len(held)  # else following it would prove nothing
        until(lambda: metric(page, "m_blocks") == len(held2), 60)
        counts = numbers(page, "status_counts")
        assert counts is not None and counts["restarts"] == 1
        lap("restarted, page follows")
        second.kill()
        until(lambda: shows(page, T["status_gone"].format(url=url)), 30)

        # 4. a hostile server on the same port: 1,000 malformed messages, one warning line
        survives_malformed(page, url, blocks=len(held2), timeout=60)
        warnings = page.locator('[data-testid="stAlertContentWarning"]')
        assert warnings.count() == 1
        assert T["last_error"].split("{")[0].strip() in warnings.first.inner_text()
        lap("1,000 malformed messages")

        # 5. a burst of 100k events (about 20 MB of batches) from a new publisher on the port
        pub = K.KVEventPublisher(url)
        until(lambda: metric(page, "m_blocks") == 0, 30)  # a new process: an empty cache
        removed0 = settled(page, "m_removed")
        rss0 = rss_kib(pid)
        tokens = list(range(1000, 1128))
        for b in range(1000):
            hs = [b * 100 + i for i in range(50)]
            pub.publish(
                [K.BlockStored([h], None, tokens, len(tokens), None, "GPU") for h in hs]
                + [K.BlockRemoved([h], "GPU") for h in hs]
            )
        until(lambda: metric(page, "m_removed") == removed0 + 50_000, 180)
        assert metric(page, "m_blocks") == 0
        grown = rss_kib(pid) - rss0
        kept = numbers(page, "status_kept")
        counts = numbers(page, "status_counts")
        print(f"app server RSS grew by {grown} KiB over the burst; ring: {kept}")
        assert kept is not None and counts is not None and counts["events"] >= 100_000
        assert kept["mib"] <= kept["cap"]  # the recording ring stays within its bytes
        assert 0 < kept["n"] < 1000  # and has dropped the oldest of the burst's batches
        assert grown < 200 * 1024, f"app server grew by {grown} KiB"
        lap("100k-event burst")
        # the page still follows: one more block shows up
        until(
            lambda: metric(page, "m_blocks") == 1,
            30,
            tick=lambda: pub.publish([K.BlockStored([7], None, [1] * 16, 16, None, "GPU")]),
        )
        assert "Traceback" not in page.inner_text("body")
        assert page.locator('[data-testid="stException"]').count() == 0
    except Exception:
        page.screenshot(path=str(ARTIFACTS / "watch-engine-browser.png"), full_page=True)
        raise
    finally:
        if pub is not None:
            pub.close()
        for e in engines:
            e.kill()
