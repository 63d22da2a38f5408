"""FP8 KV cache accuracy: SmolLM2 with a float8 arena vs the same weights with a fp32 arena.

A dozen prompts, 48 greedy tokens each. Prints the teacher-forced top-1 agreement (the goal is
>= 99 %) and the mean greedy common-prefix length, for e4m3 and e5m2, plus the full-precision
arena against itself (must be 100 % and 48: the measurement itself adds no error).
CPU, fp32 weights, torch attention backend. ``--write-data`` also writes the figures to
``viz/data/fp8_accuracy.json``, which the FP8 lesson's narration and the stack page read.

Measured (2026-11-30, this script, SmolLM2-135M-Instruct): fp32 vs itself 100.00 % / 48.0;
fp8_e4m3 95.49 % / 17.8; fp8_e5m2 91.67 % / 17.8. The goal of >= 99 % top-1 is not met on this
small model. Saturation is not the cause (|K| <= 20, |V| <= 10 in every layer, far inside e4m3's
448): it is the 3-bit mantissa itself, which no per-tensor scale changes.

Finer scales do not reach the goal either (``bench/fp8_granularity.py``, 27 prompts): per
(layer, KV head) 96.0 %, per block of 16 96.1 %, per token per KV head with the best of 32 scales
97.5 %; 99 % needs about 6 mantissa bits (6-bit rounding: 99.4 %). A per-row scale would also
cost the arena its exact 2x of bf16's blocks (2D/(D+2) = 1.94x), so the engine keeps one.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
from engine.threads import configure_openmp  # noqa: E402

configure_openmp()  # before torch loads

from engine.llm import LLM  # noqa: E402
from engine.model.kv_accuracy import measure  # noqa: E402
from engine.model.loader import load_model  # noqa: E402

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time, in a land far away,",
    "Translate to French: The cat sits on the mat.",
    "Q: What is the boiling point of water at sea level?\nA:",
    "Die Hauptstadt von Deutschland ist",
    "import numpy as np\n\nx = np.",
    "<html>\n<head>\n<title>",
    "Tell me three facts about volcanoes.",
    "Write a short paragraph about bees, for a curious child.",
    "The three laws of thermodynamics are",
    "PagedAttention stores the key-value cache of each request in fixed-size blocks that need "
    "not be contiguous in memory, much like virtual memory pages in an operating system. This "
    "removes most of the fragmentation that contiguous preallocation causes, so that",
]
NEW_TOKENS = 48
# How kernels/fp8.py scales, in each language the lessons speak (quoted by their narration).
GRANULARITY = {
    "en": "one static scale per tensor (1.0): float8's own exponent covers K and V's range",
    "zh": "每个张量一个静态缩放因子 1.0，float8 自己的指数就覆盖得了 K 和 V 的取值范围",
}
DATA_PATH = os.path.join(ROOT, "viz", "data", "fp8_accuracy.json")


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--write-data", action="store_true", help=f"also write {DATA_PATH}")
    args = p.parse_args()
    model = load_model(device="cpu", dtype="float32", progress=False)
    ids = [model.tokenizer.encode(p) for p in PROMPTS]
    full = LLM(model, kv_budget_mb=64, attention="torch", progress=False)
    print(f"{len(ids)} prompts x {NEW_TOKENS} greedy tokens, fp32 weights, per-tensor scale 1.0")
    results = {}
    for name in ("auto", "fp8_e4m3", "fp8_e5m2"):
        other = LLM(model, kv_budget_mb=64, attention="torch", kv_cache_dtype=name, progress=False)
        acc = measure(full, other, ids, NEW_TOKENS)
        label = "fp32 (itself)" if name == "auto" else name
        print(
            f"{label:>14}: teacher-forced top-1 agreement {acc.top1_agreement:.2%} "
            f"({acc.positions} positions), mean greedy common prefix "
            f"{acc.mean_common_prefix:.1f} / {acc.new_tokens}",
            flush=True,
        )
        if name != "auto":
            results[name] = {
                "top1_agreement": round(acc.top1_agreement, 4),
                "mean_common_prefix": round(acc.mean_common_prefix, 2),
            }
    if args.write_data:
        data = {
            "source": "bench/fp8_accuracy.py",
            "prompts": len(ids),
            "new_tokens": NEW_TOKENS,
            "scale_granularity": GRANULARITY,
            "results": results,
        }
        with open(DATA_PATH, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2, ensure_ascii=False)
            f.write("\n")
        print(f"wrote {os.path.relpath(DATA_PATH, ROOT)}")


if __name__ == "__main__":
    main()
