"""Regenerate ``tests/data/golden_hf.json``: HF transformers' own greedy tokens on SmolLM2 (fp32,
CPU) for the prompts of tests/model/test_model_exact.py, tests/engine/test_preemption.py and the shared-prefix
workload of tests/model/test_prefix_exact.py.

The tests compare our engine against these stored ids instead of calling HF ``generate`` a few
dozen times per run; one live HF check stays in test_model_exact.py. Rerun this script when the
prompts, the model or transformers change:

    .venv/bin/python tests/data/make_golden.py
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
OUT = HERE / "golden_hf.json"


def main() -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.path[:0] = [str(ROOT), *(str(ROOT / "tests" / folder) for folder in ("model", "engine"))]
    from paged.engine.threads import configure_openmp

    configure_openmp()  # before the test modules import torch
    import test_model_exact as exact
    import test_preemption as preemption
    import test_prefix_exact as prefix

    from paged.engine.model.loader import load_model

    model = load_model(device="cpu", dtype="float32", keep_hf=True, progress=False)
    cases = {
        "exact": (exact.all_prompt_ids(model.tokenizer), exact.NEW_TOKENS),
        "preemption": (preemption.prompt_ids(model.tokenizer), preemption.GOLDEN_TOKENS),
        "prefix": (
            [model.tokenizer.encode(p) for p in prefix.shared_prefix_prompts()],
            prefix.NEW_TOKENS,
        ),
    }
    golden: dict[str, object] = {"model": model.name}
    for name, (prompts, n) in cases.items():
        print(f"{name}: {len(prompts)} prompts x {n} tokens", file=sys.stderr, flush=True)
        golden[name] = {
            "new_tokens": n,
            "prompt_ids": prompts,
            "hf_token_ids": [exact.hf_greedy(model.hf_model, ids, n) for ids in prompts],
        }
    OUT.write_text(json.dumps(golden, separators=(",", ":")) + "\n", encoding="utf-8")
    print(f"wrote {OUT.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
