"""Importing ``engine`` before torch makes torch's OpenMP workers spin briefly, then sleep.

libgomp prints the settings it parsed at load with ``OMP_DISPLAY_ENV=VERBOSE``; its busy-wait spin
count is 3000 as the engine sets it, 300000 under libgomp's own default and 30000000000 under the
active policy (engine/__init__.py says why neither extreme suits the CPU path)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def spin_count(code: str, **env: str) -> str:
    """The busy-wait spin count libgomp chose in a fresh interpreter running ``code``.

    libgomp prints its settings as it loads, early in ``import torch``: the process is stopped
    there, since the rest of torch's import (most of the ~2 s) cannot change what was chosen."""
    base = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**base, "OMP_DISPLAY_ENV": "VERBOSE", **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    timer = threading.Timer(120, proc.kill)
    timer.start()
    seen: list[str] = []
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            seen.append(line)
            found = re.search(r"GOMP_SPINCOUNT = '(\d+)'", line)
            if found is not None:
                return found.group(1)
    finally:
        timer.cancel()
        proc.kill()
        proc.wait()
    assert proc.returncode == 0, "".join(seen)[-2000:]
    pytest.skip("torch here does not run on GNU libgomp (no GOMP_SPINCOUNT in its display)")


def test_engine_first_makes_openmp_workers_spin_briefly():
    assert spin_count("import engine, torch") == "3000"


def test_torch_first_keeps_the_spinning_default():
    # the control: the setting only holds when engine is imported before torch loads libgomp
    assert spin_count("import torch, engine") == "300000"


def test_an_explicit_policy_wins():
    assert spin_count("import engine, torch", OMP_WAIT_POLICY="ACTIVE") == "30000000000"


def test_an_explicit_spin_count_wins():
    assert spin_count("import engine, torch", GOMP_SPINCOUNT="12345") == "12345"
