"""FP8 KV cache accuracy: SmolLM2 with a float8 arena vs the same weights with a fp32 arena.

A dozen prompts, 48 greedy tokens each. Prints the teacher-forced top-1 agreement (the goal is
>= 99 %) and the mean greedy common-prefix length, for e4m3 and e5m2, plus the full-precision
arena against itself (must be 100 % and 48: the measurement itself adds no error).
CPU, fp32 weights, torch attention backend. ``--write-data`` also writes the figures to
``paged/viz/data/fp8_accuracy.json``, which the FP8 lesson's narration and the stack page read.

The reference is an fp32 arena with the same fp32 weights, not a bf16 one: the lesson's bf16 side
is what a GPU stores, the CPU path computes in fp32. The greedy runs depend on rounding, so on
torch's thread count (a reduction split across threads sums in another order) and on how the
prompts are batched: ``--threads 1,2`` measures at each count, ships the first as the figure
(one thread: the same on every run of the same CPU and torch) and the lowest and highest over all
of them as its spread.

Measured (2026-12-02, this script, SmolLM2-135M-Instruct, torch 2.13 CPU, the projections
through paged/kernels/cpu.c's matmul): fp32 vs itself 100.00 % / 48.0; fp8_e4m3 96.18 % / 19.4 (19.0
at 2 threads); fp8_e5m2 90.97 % / 12.4. With torch's matmuls (earlier the same day) they read
95.83 % / 19.5 and 91.49 % / 12.8; older code read 95.49 % / 17.8 and 95.14 % / 16.8 for e4m3:
the greedy prefix moves with any change of rounding, so the shipped file says what it was
measured with. The goal of >= 99 % top-1 is not met on this small model. Saturation is not the cause (|K| <= 20, |V| <= 10 in every layer, far inside e4m3's
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
from paged.engine.threads import configure_openmp  # noqa: E402

configure_openmp()  # before torch loads

import torch  # noqa: E402

from paged.engine.llm import LLM  # noqa: E402
from paged.engine.model.kv_accuracy import measure  # noqa: E402
from paged.engine.model.loader import load_model  # noqa: E402

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
# How paged/kernels/fp8.py scales, in each language the lessons speak (quoted by their narration).
GRANULARITY = {
    "en": "one static scale per tensor (1.0): float8's own exponent covers K and V's range",
    "zh": "每个张量一个静态缩放因子 1.0，float8 自己的指数就覆盖得了 K 和 V 的取值范围",
}
DATA_PATH = os.path.join(ROOT, "paged", "viz", "data", "fp8_accuracy.json")


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--write-data", action="store_true", help=f"also write {DATA_PATH}")
    p.add_argument(
        "--threads",
        default="1,2",
        help="torch thread counts to measure at, comma-separated; the first is shipped (%(default)s)",
    )
    args = p.parse_args()
    counts = [int(t) for t in args.threads.split(",") if t.strip()]
    if not counts or min(counts) < 1:
        p.error("--threads takes whole numbers >= 1")
    model = load_model(device="cpu", dtype="float32", progress=False)
    ids = [model.tokenizer.encode(p) for p in PROMPTS]
    print(f"{len(ids)} prompts x {NEW_TOKENS} greedy tokens, fp32 weights, per-tensor scale 1.0")
    runs: list[dict] = []
    for threads in counts:
        torch.set_num_threads(threads)
        full = LLM(model, kv_budget_mb=64, attention="torch", progress=False)
        results = {}
        for name in ("auto", "fp8_e4m3", "fp8_e5m2"):
            other = LLM(
                model, kv_budget_mb=64, attention="torch", kv_cache_dtype=name, progress=False
            )
            acc = measure(full, other, ids, NEW_TOKENS)
            label = "fp32 (itself)" if name == "auto" else name
            print(
                f"{threads} thread(s) {label:>14}: teacher-forced top-1 agreement "
                f"{acc.top1_agreement:.2%} ({acc.positions} positions), mean greedy common "
                f"prefix {acc.mean_common_prefix:.1f} / {acc.new_tokens}",
                flush=True,
            )
            if name != "auto":
                results[name] = {
                    "top1_agreement": round(acc.top1_agreement, 4),
                    "mean_common_prefix": round(acc.mean_common_prefix, 2),
                }
        runs.append(results)
    if args.write_data:
        spread = {
            name: {
                key: [min(r[name][key] for r in runs), max(r[name][key] for r in runs)]
                for key in ("top1_agreement", "mean_common_prefix")
            }
            for name in runs[0]
        }
        data = {
            "source": "bench/fp8_accuracy.py",
            "prompts": len(ids),
            "new_tokens": NEW_TOKENS,
            "scale_granularity": GRANULARITY,
            "reference": "float32",
            "threads": counts[0],
            "spread_threads": counts,
            "torch": torch.__version__,
            "results": runs[0],
            "spread": spread,
        }
        with open(DATA_PATH, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2, ensure_ascii=False)
            f.write("\n")
        print(f"wrote {os.path.relpath(DATA_PATH, ROOT)}")


if __name__ == "__main__":
    main()
