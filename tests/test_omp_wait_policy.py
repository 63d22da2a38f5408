"""Importing ``engine`` before torch makes torch's OpenMP workers sleep instead of spin.

libgomp prints the settings it parsed at load with ``OMP_DISPLAY_ENV=VERBOSE``; its busy-wait spin
count is 0 under the passive policy and 300000 under its own default (engine/__init__.py says why
the spinning default costs the CPU path so much on a shared machine)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def spin_count(code: str, **env: str) -> str:
    """The busy-wait spin count libgomp chose in a fresh interpreter running ``code``."""
    base = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    run = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**base, "OMP_DISPLAY_ENV": "VERBOSE", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    found = re.search(r"GOMP_SPINCOUNT = '(\d+)'", run.stderr)
    if found is None:
        pytest.skip("torch here does not run on GNU libgomp (no GOMP_SPINCOUNT in its display)")
    return found.group(1)


def test_engine_first_makes_openmp_workers_passive():
    assert spin_count("import engine, torch") == "0"


def test_torch_first_keeps_the_spinning_default():
    # the control: the policy only holds when engine is imported before torch loads libgomp
    assert spin_count("import torch, engine") != "0"


def test_an_explicit_policy_wins():
    assert spin_count("import engine, torch", OMP_WAIT_POLICY="ACTIVE") != "0"
