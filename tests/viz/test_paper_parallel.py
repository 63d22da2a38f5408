"""The paper page's policies simulated in child processes: the rows of one process, progress over
all of them, one line when a child fails, and no child left behind when the page moves on."""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path

import pytest

from paged.engine.sim.paper import POLICIES
from paged.viz.paper import parallel as PP
from paged.viz.paper import results as R

SMALL = R.SimConfig(workload="alpaca", requests=60, placement="first-fit")


def _our_children() -> list[int]:
    """Live simulation children of this process (Linux: read from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            cmd = (stat.parent / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        if ppid == os.getpid() and b"paged.viz.paper.parallel" in cmd:
            found.append(int(stat.parent.name))
    return found


@pytest.mark.parametrize("processes", [2, 0], ids=["children", "this process"])
def test_policies_side_by_side_give_the_rows_of_one_process(processes):
    seen: list[tuple[int, int]] = []
    rows = PP.simulate_rows(SMALL, POLICIES, lambda *p: seen.append(p), processes=processes)
    assert rows == {p: R.simulate_policy(SMALL, p) for p in POLICIES}
    total = SMALL.requests * len(POLICIES)
    assert seen[-1] == (total, total)
    assert all(a[0] <= b[0] for a, b in zip(seen, seen[1:], strict=False))


def test_a_failing_child_says_which_policy_and_why():
    bad = R.SimConfig(workload="alpaca", requests=10, length_dist="zipf")
    with pytest.raises(PP.SimulationError, match=r"simulating \w+ failed: .*zipf"):
        PP.simulate_rows(bad, POLICIES, processes=2)
    assert _our_children() == []


def test_a_page_rerun_midway_ends_every_child():
    class Rerun(Exception):
        """What Streamlit raises inside a progress update when the reader changes a setting."""

    def rerun(done: int, total: int) -> None:
        raise Rerun

    with pytest.raises(Rerun):
        PP.simulate_rows(R.SimConfig(requests=300), POLICIES, rerun, processes=4)
    assert _our_children() == []


def test_a_child_past_its_time_is_ended(monkeypatch):
    monkeypatch.setattr(PP, "TIMEOUT_S", 0.05)
    with pytest.raises(PP.SimulationError, match="no result after"):
        PP.simulate_rows(R.SimConfig(requests=300), POLICIES, processes=4)
    assert _our_children() == []


class _Counted:
    """Popen, counting the children alive at once (from their start to their first wait)."""

    def __init__(self):
        self.lock, self.live, self.most = threading.Lock(), 0, 0
        counter, popen = self, subprocess.Popen

        class Popen(popen):  # type: ignore[misc, valid-type]
            def __init__(self, *args, **kwargs):
                with counter.lock:
                    counter.live += 1
                    counter.most = max(counter.most, counter.live)
                self._counted = True
                super().__init__(*args, **kwargs)

            def wait(self, timeout=None):
                code = super().wait(timeout)
                with counter.lock:
                    if self._counted:
                        self._counted = False
                        counter.live -= 1
                return code

        self.Popen = Popen


@pytest.mark.parametrize("calls", [1, 3])
def test_children_of_every_call_together_stay_within_the_bound(monkeypatch, calls):
    counted = _Counted()
    monkeypatch.setattr(PP.subprocess, "Popen", counted.Popen)
    monkeypatch.setattr(PP, "_SLOTS", threading.BoundedSemaphore(2), raising=False)
    results: list[dict] = []

    def one_session() -> None:
        results.append(PP.simulate_rows(SMALL, POLICIES, processes=len(POLICIES)))

    threads = [threading.Thread(target=one_session) for _ in range(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    expected = {p: R.simulate_policy(SMALL, p) for p in POLICIES}
    assert results == [expected] * calls
    assert counted.most == 2
    assert counted.live == 0 and _our_children() == []
    # every slot came back: two more children could start now
    assert PP._SLOTS.acquire(False) and PP._SLOTS.acquire(False)
