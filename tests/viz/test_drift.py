"""The drift canary's reading (.ci/drift.py): which packages it blames first, and the lock it
reads. Its whole run (a venv of the newest releases, minutes) is `make fresh`, run by CI."""

from __future__ import annotations

import importlib.util
from pathlib import Path

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
