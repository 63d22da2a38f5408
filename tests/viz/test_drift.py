"""The lock and the drift canary's reading of it (.ci/drift.py): requirements.lock pins what
requirements.txt asks for, and the canary blames first what a failure ran through. The canary's
whole run (a venv of the newest releases, minutes) is `make fresh`, run by CI."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

from packaging.requirements import Requirement
from test_package import requirement_lines  # tests/viz is on sys.path under pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("drift", ROOT / ".ci" / "drift.py")
assert spec is not None and spec.loader is not None
drift = importlib.util.module_from_spec(spec)
spec.loader.exec_module(drift)

TRACEBACK = """
  File "/tmp/v/lib/python3.11/site-packages/transformers/integrations/hub_kernels.py", line 9
    from kernels import CUDAProperties
  File "/tmp/v/lib/python3.11/site-packages/transformers/modeling_utils.py", line 40
  File "/tmp/v/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1
ImportError: cannot import name 'CUDAProperties' from 'kernels'
"""


def test_the_release_a_failures_traceback_runs_through_is_tried_first():
    owners = {"transformers": "transformers", "torch": "torch", "yaml": "pyyaml"}
    changed = ["pyyaml", "streamlit", "transformers"]
    # transformers: in the traceback; streamlit: asked for by requirements.txt; pyyaml: neither
    assert drift.suspects(TRACEBACK, owners, changed) == ["transformers", "streamlit", "pyyaml"]


def test_a_package_the_lock_already_has_is_never_a_suspect():
    owners = {"transformers": "transformers", "torch": "torch"}
    assert drift.suspects(TRACEBACK, owners, ["numpy"]) == ["numpy"]


def test_the_lock_and_requirements_are_read_by_normalised_name(tmp_path):
    lock = tmp_path / "requirements.lock"
    lock.write_text("# header\nHuggingFace_Hub==1.2.3\n    # via transformers\ntorch==2.13.0+cpu\n")
    assert drift.pins(lock) == {"huggingface-hub": "1.2.3", "torch": "2.13.0+cpu"}
    assert set(drift.direct(ROOT / "requirements.txt")) <= set(
        drift.pins(ROOT / "requirements.lock")
    )


def test_every_line_of_the_lock_is_an_exact_pin():
    text = (ROOT / "requirements.lock").read_text(encoding="utf-8")
    entries = [line for line in text.splitlines() if line and not line.startswith((" ", "#"))]
    assert len(drift.pins(ROOT / "requirements.lock")) == len(entries), "a line that is no pin"


def test_the_lock_pins_every_requirement_at_a_version_the_requirement_allows():
    pins = drift.pins(ROOT / "requirements.lock")
    for line in requirement_lines((ROOT / "requirements.txt").read_text(encoding="utf-8")):
        req = Requirement(line)
        name = drift.norm(req.name)
        assert name in pins, f"{req.name} is not in requirements.lock: make lock"
        assert req.specifier.contains(pins[name], prereleases=True), line


def test_the_lock_asks_for_nothing_requirements_txt_no_longer_names():
    lock = (ROOT / "requirements.lock").read_text(encoding="utf-8")
    # pip-compile writes "# via -r requirements.txt" under each package asked for directly
    asked = re.findall(
        r"^([A-Za-z0-9][\w.-]*)==\S+\n(?:\s+#.*\n)*?\s+#\s+(?:via )?-r requirements\.txt",
        lock,
        re.M,
    )
    assert {drift.norm(n) for n in asked} == set(drift.direct(ROOT / "requirements.txt"))
