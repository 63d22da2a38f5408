"""Run a scenario on the engine *now* and watch its trace arrive, without importing torch here.

The engine runs in a child process (``python -m paged record --scenario FILE --out -``) that
writes the trace JSONL to stdout, one flushed line per event, and progress to stderr. Two reader
threads collect complete lines; on every refresh the page reads the lines that are new
(``lines_since``) and folds only those (``paged.viz.live.follow.LiveView``). A ``LiveRun`` lives in
``st.session_state``, so a rerun of the page never loses the child.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from paged.engine.trace.io import Trace, parse_lines


def record_command(scenario: Path, forward: str = "model") -> list[str]:
    """The engine command that records ``scenario`` to stdout. ``forward="skip"`` is the
    engine's dry run: same scheduler and allocators, no model (seconds instead of minutes)."""
    return [
        sys.executable,
        "-m",
        "paged",
        "record",
        "--scenario",
        str(scenario),
        "--out",
        "-",
        "--forward",
        forward,
    ]


@dataclass
class LiveRun:
    """A recording in progress. ``lines`` (trace) and ``log`` (progress) only ever grow; read
    them through ``snapshot`` so a reader sees whole lines only."""

    proc: subprocess.Popen
    started: float = field(default_factory=time.monotonic)
    stopped: bool = False  # the viewer asked it to stop
    lines: list[str] = field(default_factory=list)
    log: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _readers: list[threading.Thread] = field(default_factory=list)

    @classmethod
    def start(cls, cmd: list[str], cwd: Path | None = None) -> LiveRun:
        # Its own process group: stop() ends whatever the engine starts, too.
        proc = subprocess.Popen(
            cmd,
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            encoding="utf-8",
            errors="replace",
            bufsize=1,
            start_new_session=True,
        )
        run = cls(proc)
        for stream, sink in ((proc.stdout, run.lines), (proc.stderr, run.log)):
            t = threading.Thread(target=run._pump, args=(stream, sink), daemon=True)
            t.start()
            run._readers.append(t)
        return run

    def _pump(self, stream: IO[str], sink: list[str]) -> None:
        for line in stream:
            if not line.endswith("\n"):
                continue  # a torn last line of a killed child is not a whole event
            with self._lock:
                sink.append(line)

    @property
    def done(self) -> bool:
        """The child has exited and both streams are drained."""
        return self.proc.poll() is not None and not any(t.is_alive() for t in self._readers)

    @property
    def returncode(self) -> int | None:
        return self.proc.poll()

    def snapshot(self) -> tuple[list[str], list[str]]:
        with self._lock:
            return list(self.lines), list(self.log)

    def lines_since(self, n: int) -> list[str]:
        """The trace lines after the first ``n``, each whole (ending in its line feed)."""
        with self._lock:
            return self.lines[n:]

    def trace(self) -> Trace | None:
        """What has arrived so far as a Trace (None before the header). Raises TraceError if
        the stream is corrupt; a complete stream (done, exit 0) must carry its end line."""
        lines, _ = self.snapshot()
        if not lines:
            return None
        finished = self.done and self.returncode == 0
        return parse_lines(lines, require_end=finished)

    def progress(self) -> str:
        _, log = self.snapshot()
        return log[-1].strip() if log else ""

    def error(self) -> str | None:
        """One line saying why the child failed, or None while it runs, after success, or
        after the viewer stopped it."""
        if not self.done or self.returncode == 0 or self.stopped:
            return None
        _, log = self.snapshot()
        last = next((line.strip() for line in reversed(log) if line.strip()), "")
        if self.returncode is not None and self.returncode < 0:  # killed from outside: its last
            # line is progress, not a reason ("step 19: 3/10 requests finished" was shown as one)
            try:
                name = signal.Signals(-self.returncode).name
            except ValueError:
                name = f"signal {-self.returncode}"
            return f"the engine was killed ({name})" + (f" after “{last}”" if last else "")
        return last or f"the engine exited with status {self.returncode}"

    def stop(self) -> None:
        """End the child and its process group (ours: it was started in a session of its
        own) and wait for it, so no zombie is left."""
        if self.proc.poll() is None:
            self.stopped = True
            self._signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
                self.proc.wait()
        else:
            self._signal(signal.SIGKILL)  # a grandchild the engine left behind
        for t in self._readers:  # the pipes close with the child: drain what it wrote
            t.join(timeout=5)

    def _signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)  # pgid == pid: start_new_session

    def text(self) -> str:
        lines, _ = self.snapshot()
        return "".join(lines)
