"""The paper page's policies simulated side by side: one child process per policy.

The four runs of a setting share nothing (each has its own scheduler, allocator and fold), and each
is a pure function of the setting, so on a machine with more than one core they run at once: in
``python -m paged.viz.paper.parallel '<job>'`` children that print their progress and then their row as
JSON lines. The row is ``simulate_policy``'s, carried as JSON (floats print as their shortest
round-tripping repr), so it equals the row computed in this process. With one core, or
``processes=0``, the policies run here one after another. The children of every call (every
session of the server) together number at most ``MAX_CHILDREN``: a call that finds them all busy
waits for one. Pure Python (no torch, no streamlit).
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import IO

from paged import IMPORT_ROOT
from paged.viz.paper.results import PolicyRow, SimConfig, simulate_policy

#: How long a child may run: a thousand-request policy takes seconds; a hung one must not hang
#: the page for ever.
TIMEOUT_S = 300.0
#: While every child slot is taken, how often a waiting call looks again (and reports progress,
#: where a page rerun or a closed tab ends the wait).
SLOT_WAIT_S = 0.5
#: Progress lines per policy (one every ``requests // PROGRESS_LINES`` finished requests).
PROGRESS_LINES = 50


class SimulationError(RuntimeError):
    """A child ended without its row, or ran past TIMEOUT_S; says which policy and why."""


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


#: Live children of all calls together, one per core: a class changing settings at once would
#: otherwise start four processes per session (thirty sessions, 120 processes on two cores).
MAX_CHILDREN = usable_cores()
_SLOTS = threading.BoundedSemaphore(MAX_CHILDREN)


def simulate_rows(
    config: SimConfig,
    policies: tuple[str, ...],
    on_progress: Callable[[int, int], None] | None = None,
    processes: int | None = None,
) -> dict[str, PolicyRow]:
    """Each of ``policies`` under ``config``, as ``simulate_policy`` computes it. At most
    ``processes`` children run at once (None: one per policy when more than one core is usable,
    else none; 0: none, every policy in this process), and no more than ``MAX_CHILDREN`` over
    all calls (a call waits for a slot). ``on_progress(done, total)`` follows the
    requests finished over all policies. Raises SimulationError; an exception from
    ``on_progress`` (a page rerun) ends every child before it propagates."""
    if processes is None:
        processes = len(policies) if usable_cores() > 1 else 0
    total = config.requests * len(policies)

    def report(done: int) -> None:
        if on_progress is not None:
            on_progress(done, total)

    if processes <= 0:
        rows: dict[str, PolicyRow] = {}
        for i, policy in enumerate(policies):
            rows[policy] = simulate_policy(config, policy, _after(i * config.requests, report))
        return rows
    return _Children(config, policies, processes).run(report)


def _after(before: int, report: Callable[[int], None]) -> Callable[[int], None]:
    """A policy's progress (its requests finished) as progress over all of them, ``before``
    having run earlier."""
    return lambda done: report(before + done)


class _Children:
    """The children of one ``simulate_rows`` call and the threads reading their output."""

    def __init__(self, config: SimConfig, policies: tuple[str, ...], processes: int) -> None:
        self.config, self.todo, self.processes = config, list(policies), processes
        self.lines: queue.Queue[tuple[str, str | None]] = queue.Queue()
        self.live: dict[str, subprocess.Popen] = {}  # each holds one of _SLOTS
        self.started: dict[str, float] = {}  # when each live child began
        self.output: dict[str, list[str]] = {}  # what each child printed that is not progress

    def run(self, report: Callable[[int], None]) -> dict[str, PolicyRow]:
        rows: dict[str, PolicyRow] = {}
        done: dict[str, int] = {}
        try:
            self._start_more()
            while self.live or self.todo:
                if not self.live:  # other calls' children hold every slot: wait for one
                    self._start_more(SLOT_WAIT_S)
                    report(sum(done.values()))  # (a page rerun ends the wait here)
                    continue
                left = min(self.started[p] for p in self.live) + TIMEOUT_S - time.monotonic()
                try:
                    if left <= 0:  # (a child that keeps printing must not keep it waiting)
                        raise queue.Empty
                    policy, line = self.lines.get(timeout=left)
                except queue.Empty:
                    raise SimulationError(f"no result after {TIMEOUT_S:g} s") from None
                if line is None:  # its output has ended
                    code = self._reap(policy)
                    if code != 0 or policy not in rows:
                        said = self.output[policy][-1:] or [f"it exited with status {code}"]
                        raise SimulationError(f"simulating {policy} failed: {said[0]}")
                    self._start_more()
                    continue
                msg = _message(line)
                if "done" in msg:
                    done[policy] = msg["done"]
                    report(sum(done.values()))
                elif "row" in msg:
                    rows[policy] = PolicyRow(**msg["row"])
                else:
                    self.output[policy].append(line.strip())
            return rows
        finally:
            for policy in list(self.live):
                self.live[policy].kill()
                self._reap(policy)

    def _reap(self, policy: str) -> int:
        """Wait for ``policy``'s child and give its slot back; its exit status."""
        try:
            return self.live.pop(policy).wait()
        finally:
            _SLOTS.release()

    def _start_more(self, wait_s: float = 0.0) -> None:
        """Start children while this call may and a slot is free (waiting up to ``wait_s`` for
        the first)."""
        while self.todo and len(self.live) < self.processes:
            if not (_SLOTS.acquire(timeout=wait_s) if wait_s else _SLOTS.acquire(False)):
                return
            wait_s = 0.0
            try:
                self._start(self.todo[0])
            except BaseException:
                if self.todo[0] not in self.live:  # (a live one gives it back when reaped)
                    _SLOTS.release()
                raise
            self.todo.pop(0)

    def _start(self, policy: str) -> None:
        job = json.dumps({"config": asdict(self.config), "policy": policy})
        proc = subprocess.Popen(
            [sys.executable, "-m", "paged.viz.paper.parallel", job],
            cwd=IMPORT_ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            encoding="utf-8",
            errors="replace",
        )
        assert proc.stdout is not None
        self.live[policy], self.output[policy] = proc, []
        self.started[policy] = time.monotonic()
        threading.Thread(target=self._pump, args=(policy, proc.stdout), daemon=True).start()

    def _pump(self, policy: str, stream: IO[str]) -> None:
        with stream:
            for line in stream:
                self.lines.put((policy, line))
        self.lines.put((policy, None))


def _message(line: str) -> dict:
    """A child's JSON line (``{"done": n}`` or ``{"row": {...}}``), or {} for anything else (a
    traceback's lines: kept to say why it failed)."""
    try:
        msg = json.loads(line)
    except ValueError:
        return {}
    return msg if isinstance(msg, dict) else {}


def main(argv: list[str]) -> int:
    """The child: simulate the one policy of the job ``argv[0]`` and print it as JSON lines."""
    job = json.loads(argv[0])
    config, policy = SimConfig(**job["config"]), job["policy"]
    every = max(1, config.requests // PROGRESS_LINES)

    def tick(done: int) -> None:
        if done % every == 0 or done == config.requests:
            print(json.dumps({"done": done}), flush=True)

    row = simulate_policy(config, policy, tick)
    print(json.dumps({"row": asdict(row)}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
