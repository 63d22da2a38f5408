"""Only commands that run a model pay for torch (~4 s): the others must not import it at all."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROBE = """
import json, sys
from paged.engine.cli.main import main
try:
    rc = main(sys.argv[1:])
except SystemExit as e:  # --help exits
    rc = e.code
print(json.dumps({"rc": rc, "modules": sorted(sys.modules)}))
"""


def run_and_list_modules(*args: str) -> tuple[int, set[str]]:
    """Run ``python -m paged ARGS`` in a fresh interpreter; its exit code and every module
    loaded by the end."""
    run = subprocess.run(
        [sys.executable, "-c", PROBE, *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    last = json.loads(run.stdout.strip().splitlines()[-1])
    return last["rc"], set(last["modules"])


@pytest.mark.parametrize(
    "args",
    [
        ("capacity", "--preset", "llama-2-70b"),
        ("simulate", "--requests", "4", "--policies", "max,paged", "--json"),
        ("record", "--help"),
    ],
)
def test_commands_without_a_model_import_no_torch(args):
    rc, modules = run_and_list_modules(*args)
    assert rc == 0
    assert f"paged.engine.cli.{args[0]}" in modules
    assert not {m for m in modules if m == "torch" or m.startswith("torch.")}
