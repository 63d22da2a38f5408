"""Swap vs recompute preemption at a quarter of the KV memory the batch needs, same run.

16 prompts x 64 greedy tokens (EOS ignored), SmolLM2 on CPU in fp32, paged blocks of 16. The
arena holds a quarter of the blocks all requests need at full length; the CPU tier is as large
as the arena. Rounds alternate recompute / swap; prints the best round of each, their
throughput ratio (swap / recompute), the bytes the swap run moved, the tokens the recompute run
computed twice, and checks both produced the same tokens.

Measured 2026-11-30 on the shared 2-core dev box (--rounds 2 --new-tokens 48, load ~3): 64 blocks
needed, arena 16; recompute 48.8 tok/s, 20 preemptions, 444 tokens recomputed; swap 54.1 tok/s,
20 preemptions (19 swap-outs, 1 fallback: 43 tokens recomputed), 42.2 MiB moved; swap / recompute
1.11x; same tokens. Under load the ratio depends on how torch's OpenMP workers wait: spinning
workers slow every small copy the swap makes (paged/engine/threads.py).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
from paged.engine.threads import configure_openmp  # noqa: E402

configure_openmp()  # before torch loads

from paged.engine.core import events as E  # noqa: E402
from paged.engine.core.request import SamplingParams  # noqa: E402
from paged.engine.llm import LLM  # noqa: E402
from paged.engine.model.loader import load_model  # noqa: E402
from paged.engine.sim.workload import DEMO_PROMPTS  # noqa: E402

PROMPTS = list(DEMO_PROMPTS)


def recomputed_tokens(events: list[E.Event]) -> int:
    """Tokens prefilled again after a recompute preemption: all but the newest of each
    re-admission (those K/V had been computed once already). A swapped-in request computes
    only its newest token, so its re-admission counts nothing."""
    seen, swapped, again = set(), set(), 0
    for ev in events:
        if isinstance(ev, E.SwappedOut):
            swapped.add(ev.req)
        elif isinstance(ev, E.Admitted):
            if ev.req in seen and ev.req not in swapped:
                again += ev.num_tokens - 1
            swapped.discard(ev.req)
            seen.add(ev.req)
    return again


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--new-tokens", type=int, default=64)
    args = ap.parse_args()
    model = load_model(device="cpu", dtype="float32", progress=False)
    ids = [model.tokenizer.encode(p) for p in PROMPTS]
    need = [-(-(len(p) + args.new_tokens) // 16) for p in ids]
    blocks = max(sum(need) // 4, max(need))
    params = SamplingParams(max_tokens=args.new_tokens, ignore_eos=True)
    print(
        f"{len(ids)} prompts x {args.new_tokens} tokens; need {sum(need)} blocks, arena "
        f"{blocks} (a quarter), CPU tier {blocks} blocks"
    )
    llms = {
        m: LLM(model, num_blocks=blocks, attention="torch", preemption_mode=m, progress=False)
        for m in ("recompute", "swap")
    }
    best = {m: float("inf") for m in llms}
    facts: dict[str, dict] = {}
    outputs = {}
    for _ in range(args.rounds):
        for mode, llm in llms.items():
            seen: list[E.Event] = []
            llm.trace = seen.append
            tier = llm.runner.cpu_tier
            moved0 = (tier.bytes_out + tier.bytes_in) if tier else 0
            t0 = time.perf_counter()
            outs = llm.generate(ids, params)
            best[mode] = min(best[mode], time.perf_counter() - t0)
            outputs[mode] = [o.token_ids for o in outs]
            kinds = [e.kind for e in seen]
            facts[mode] = {
                "preemptions": llm.num_preemptions,
                "swaps_out": kinds.count("swapped_out"),
                "fallbacks": kinds.count("swap_fallback"),
                "bytes_moved": ((tier.bytes_out + tier.bytes_in) if tier else 0) - moved0,
                "recomputed_tokens": recomputed_tokens(seen),
            }
    total = len(ids) * args.new_tokens
    for mode in llms:
        f = facts[mode]
        print(
            f"{mode:>9}: {total / best[mode]:6.1f} tok/s (best of {args.rounds}), "
            f"{f['preemptions']} preemptions, {f['swaps_out']} swap-outs, "
            f"{f['fallbacks']} fallbacks, {f['bytes_moved'] / 2**20:.1f} MiB moved, "
            f"{f['recomputed_tokens']} tokens recomputed"
        )
    print(f"throughput swap / recompute: {best['recompute'] / best['swap']:.2f}x")
    print(f"same tokens: {outputs['swap'] == outputs['recompute']}")


if __name__ == "__main__":
    main()
