"""One live run per server process, owned by the session that started it.

A live run is a real-model child process (about 1 GB), so a classroom of browsers must not
start one each. ``LiveRegistry.start`` hands out the single slot: a second session is refused
(``None``; the page says "a live run is in progress") until the running child ends. A reaper
thread checks every ``interval`` seconds: a run whose session has ended (tab closed, Streamlit
dropped the session) is stopped with its whole process group, and every finished child is
``wait``-ed for, so none is left a zombie.

Limits (documented in README "Serving a classroom"): ``MAX_LIVE_RUNS = 1`` per server process;
a live run lives no longer than its session (checked every ``REAP_INTERVAL_S`` seconds).
"""

from __future__ import annotations

import atexit
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from paged.viz.live.run import LiveRun

MAX_LIVE_RUNS = 1
REAP_INTERVAL_S = 2.0


def session_alive(session_id: str) -> bool:
    """Whether Streamlit still has this session connected. Without a runtime (AppTest, a
    script) there is no session to lose: alive."""
    from streamlit import runtime

    if not runtime.exists():
        return True
    return runtime.get_instance().is_active_session(session_id)


def session_id() -> str:
    """The current Streamlit session's id ("" outside a script run)."""
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    ctx = get_script_run_ctx()
    return ctx.session_id if ctx is not None else ""


@dataclass
class LiveRegistry:
    """The process-wide table of live runs, keyed by session id. Thread-safe."""

    alive: Callable[[str], bool] = session_alive
    interval: float = REAP_INTERVAL_S
    limit: int = MAX_LIVE_RUNS
    _runs: dict[str, LiveRun] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _reaper: threading.Thread | None = None

    def start(self, session: str, cmd: list[str], cwd: Path | None = None) -> LiveRun | None:
        """Start ``cmd`` as ``session``'s live run, or return None when the server already
        runs ``limit`` of them (for this or any other session)."""
        with self._lock:
            self._collect()
            if len(self._runs) >= self.limit:
                return None
            run = LiveRun.start(cmd, cwd=cwd)
            self._runs[session] = run
            self._ensure_reaper()
            return run

    def running(self) -> dict[str, LiveRun]:
        """Session id -> its live run, for those still running."""
        with self._lock:
            self._collect()
            return dict(self._runs)

    def reap(self) -> None:
        """One reaper pass: stop runs whose session is gone, wait for finished children."""
        with self._lock:
            orphans = [(s, r) for s, r in self._runs.items() if not self.alive(s)]
        for _, run in orphans:
            run.stop()
        with self._lock:
            for s, run in orphans:
                if self._runs.get(s) is run:
                    del self._runs[s]
            self._collect()

    def stop_all(self) -> None:
        """Stop every live run (tests, and a server shutting down)."""
        with self._lock:
            runs = list(self._runs.values())
            self._runs.clear()
        for run in runs:
            run.stop()

    def _collect(self) -> None:
        # poll() waits for an exited child: it stops being a zombie here. Caller holds the lock.
        for s, run in list(self._runs.items()):
            if run.proc.poll() is not None:
                del self._runs[s]

    def _ensure_reaper(self) -> None:
        if self._reaper is None or not self._reaper.is_alive():
            self._reaper = threading.Thread(target=self._reap_loop, name="live-reaper", daemon=True)
            self._reaper.start()

    def _reap_loop(self) -> None:
        while True:
            time.sleep(self.interval)
            self.reap()
            with self._lock:
                if not self._runs:
                    self._reaper = None
                    return


REGISTRY = LiveRegistry()
# The children run in their own process groups, so a Ctrl-C on the server no longer reaches
# them: the server ends them itself on the way out.
atexit.register(REGISTRY.stop_all)
