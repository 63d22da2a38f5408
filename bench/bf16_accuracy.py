"""bfloat16 on the CPU: what it costs in accuracy against the float32 run, the exactness reference.

The same SmolLM2 checkpoint loaded twice, float32 and bfloat16, both through paged/kernels/cpu.c's
steps (the bf16 run: bfloat16 weights and arena, float32 activations and sums), on bench/
fp8_accuracy.py's prompts, 48 greedy tokens each. Prints, for bf16 against fp32:

- greedy: how many prompts give the same tokens, and the mean common prefix;
- teacher-forced top-1 agreement: fp32's continuation fed to the bf16 run, its argmax compared
  at every position (paged/engine/model/kv_accuracy.py), so no early difference compounds.

tests/model/test_bf16.py pins the agreement at the level measured here. The greedy figures move
with any change of rounding (thread count, batch), the teacher-forced one much less, so the
written file says at how many threads, through which matmul and on which day it was measured.
``--write-data`` also writes the figures to ``paged/viz/data/bf16_accuracy.json``, which the
capacity and stack pages quote (paged/viz/data/bf16_accuracy.py checks it).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
from paged.engine.threads import configure_openmp  # noqa: E402

configure_openmp()  # before torch loads

import torch  # noqa: E402

from bench.fp8_accuracy import NEW_TOKENS, PROMPTS  # noqa: E402
from paged.engine.core.request import SamplingParams  # noqa: E402
from paged.engine.llm import LLM  # noqa: E402
from paged.engine.model.kv_accuracy import measure  # noqa: E402
from paged.engine.model.loader import load_model  # noqa: E402
from paged.kernels import cpu  # noqa: E402

DATA_PATH = os.path.join(ROOT, "paged", "viz", "data", "bf16_accuracy.json")


def compare(ids: list[list[int]], new_tokens: int = NEW_TOKENS) -> dict:
    """bf16 against fp32 on ``ids``: the figures this script prints."""
    full = LLM(load_model(device="cpu", dtype="float32", progress=False), kv_budget_mb=64,
               progress=False)  # fmt: skip
    half = LLM(load_model(device="cpu", dtype="bfloat16", progress=False), kv_budget_mb=64,
               progress=False)  # fmt: skip
    params = SamplingParams(max_tokens=new_tokens, ignore_eos=True)
    ref = [o.token_ids for o in full.generate(ids, params)]
    got = [o.token_ids for o in half.generate(ids, params)]
    acc = measure(full, half, ids, new_tokens, reference=ref)
    return {
        "steps": (full.runner.forward.steps.name, half.runner.forward.steps.name),
        "equal": sum(a == b for a, b in zip(ref, got, strict=True)),
        "prompts": len(ids),
        "mean_common_prefix": acc.mean_common_prefix,
        "top1_agreement": acc.top1_agreement,
        "positions": acc.positions,
        "new_tokens": new_tokens,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--threads", type=int, default=0, help="torch threads (default: as configured)")
    p.add_argument("--write-data", action="store_true", help=f"also write {DATA_PATH}")
    args = p.parse_args()
    if args.threads < 0:
        p.error("--threads takes a whole number >= 1")
    if args.threads:
        torch.set_num_threads(args.threads)
    tok = load_model(device="cpu", dtype="float32", progress=False).tokenizer
    r = compare([tok.encode(text) for text in PROMPTS])
    native = "vdpbf16ps" if cpu.bf16_native() else "widened to float32"
    print(f"steps {r['steps'][0]} vs {r['steps'][1]} (bf16 matmul: {native}), "
          f"{torch.get_num_threads()} thread(s)")  # fmt: skip
    print(
        f"bf16 vs fp32, {r['prompts']} prompts x {r['new_tokens']} greedy tokens: "
        f"{r['equal']}/{r['prompts']} identical, mean common prefix "
        f"{r['mean_common_prefix']:.1f} / {r['new_tokens']}; teacher-forced top-1 agreement "
        f"{r['top1_agreement']:.2%} ({r['positions']} positions)"
    )
    if args.write_data:
        write_data(r, "vdpbf16ps" if cpu.bf16_native() else "widened")


def write_data(r: dict, matmul: str) -> None:
    data = {
        "source": "bench/bf16_accuracy.py",
        "prompts": r["prompts"],
        "new_tokens": r["new_tokens"],
        "equal": r["equal"],
        "mean_common_prefix": round(r["mean_common_prefix"], 2),
        "top1_agreement": round(r["top1_agreement"], 4),
        "positions": r["positions"],
        "threads": torch.get_num_threads(),
        "matmul": matmul,
        "measured": datetime.datetime.now(datetime.UTC).date().isoformat(),
        "torch": torch.__version__,
    }
    with open(DATA_PATH, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2)
        f.write("\n")
    print(f"wrote {os.path.relpath(DATA_PATH, ROOT)}")


if __name__ == "__main__":
    main()
