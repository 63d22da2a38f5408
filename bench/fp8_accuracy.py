"""FP8 KV cache accuracy: SmolLM2 with a float8 arena vs the same weights with a fp32 arena.

A dozen prompts, 48 greedy tokens each. Prints the teacher-forced top-1 agreement (the goal is
>= 99 %) and the mean greedy common-prefix length, for e4m3 and e5m2, plus the full-precision
arena against itself (must be 100 % and 48: the measurement itself adds no error).
CPU, fp32 weights, torch attention backend.

Measured (2026-11-30, this script, SmolLM2-135M-Instruct): fp32 vs itself 100.00 % / 48.0;
fp8_e4m3 95.49 % / 17.8; fp8_e5m2 91.67 % / 17.8. The goal of >= 99 % top-1 is not met on this
small model. Saturation is not the cause (|K| <= 20, |V| <= 10 in every layer, far inside e4m3's
448): it is the 3-bit mantissa itself, which no per-tensor scale changes.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from engine.kv_accuracy import measure  # noqa: E402
from engine.llm import LLM  # noqa: E402
from engine.model import load_model  # noqa: E402

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


def main() -> None:
    model = load_model(device="cpu", dtype="float32", progress=False)
    ids = [model.tokenizer.encode(p) for p in PROMPTS]
    full = LLM(model, kv_budget_mb=64, attention="torch", progress=False)
    print(f"{len(ids)} prompts x {NEW_TOKENS} greedy tokens, fp32 weights, per-tensor scale 1.0")
    for name in ("auto", "fp8_e4m3", "fp8_e5m2"):
        other = LLM(model, kv_budget_mb=64, attention="torch", kv_cache_dtype=name, progress=False)
        acc = measure(full, other, ids, NEW_TOKENS)
        label = "fp32 (itself)" if name == "auto" else name
        print(
            f"{label:>14}: teacher-forced top-1 agreement {acc.top1_agreement:.2%} "
            f"({acc.positions} positions), mean greedy common prefix "
            f"{acc.mean_common_prefix:.1f} / {acc.new_tokens}"
        )


if __name__ == "__main__":
    main()
