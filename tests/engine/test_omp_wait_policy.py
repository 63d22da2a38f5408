"""``configure_openmp()`` before torch makes torch's OpenMP workers spin briefly, then sleep;
importing ``engine`` alone changes nothing.

libgomp prints the settings it parsed at load with ``OMP_DISPLAY_ENV=VERBOSE``; its busy-wait spin
count is 30000 as the engine sets it, 300000 under libgomp's own default and 30000000000 under the
active policy (paged/engine/threads.py says why neither extreme suits the CPU path)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


CONFIGURED = "from paged.engine.threads import configure_openmp; configure_openmp(); import torch"


def clean_env(**env: str) -> dict[str, str]:
    """This process's environment without the two settings (conftest set them), plus ``env``."""
    base = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    return {**base, **env}


def spin_count(code: str, *args: str, **env: str) -> str:
    """The busy-wait spin count libgomp chose in a fresh interpreter running ``code`` (``-c``'s
    argument, or ``-m`` and a module's arguments).

    libgomp prints its settings as it loads, early in ``import torch``: the process is stopped
    there, since the rest of torch's import (most of the ~2 s) cannot change what was chosen."""
    command = ["-m", code, *args] if args else ["-c", code]
    proc = subprocess.Popen(
        [sys.executable, *command],
        cwd=ROOT,
        env=clean_env(OMP_DISPLAY_ENV="VERBOSE", **env),
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


def test_configure_before_torch_makes_openmp_workers_spin_briefly():
    assert spin_count(CONFIGURED) == "30000"


def test_the_command_line_configures_before_torch_loads():
    assert spin_count("paged", "generate", "hi", "--device", "cpu", "--max-tokens", "1") == "30000"


def test_importing_engine_keeps_the_spinning_default():
    assert spin_count("import paged.engine, paged.engine.llm, torch") == "300000"


def test_importing_engine_leaves_the_environment_alone():
    code = "import os; before = dict(os.environ); import paged.engine, paged.engine.llm; print(os.environ == before)"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=clean_env(), capture_output=True, text=True
    )
    assert out.stdout.strip() == "True", out.stderr[-2000:]


def test_configure_after_torch_is_too_late_and_says_so():
    code = (
        "import torch; from paged.engine.threads import configure_openmp; print(configure_openmp())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=clean_env(), capture_output=True, text=True
    )
    assert out.stdout.strip() == "False", out.stderr[-2000:]
    assert spin_count(code) == "300000"


def test_an_explicit_policy_wins():
    assert spin_count(CONFIGURED, OMP_WAIT_POLICY="ACTIVE") == "30000000000"


def test_an_explicit_spin_count_wins():
    assert spin_count(CONFIGURED, GOMP_SPINCOUNT="12345") == "12345"
