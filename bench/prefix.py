"""Prefix caching: the same workload with and without it, same model, same run.

16 requests share a 256-token system prompt, each followed by its own short question, and ask
for 32 new tokens (greedy, EOS ignored), all arriving at once. Rounds alternate between the two
settings; on a shared machine a neighbour's burst can slow either side's round, so the best round
of each and the median of the per-round ratios are reported. Tokens computed in prefill come
from the engine's own counters; the outputs must be identical token for token.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
from paged.engine.threads import configure_openmp  # noqa: E402

configure_openmp()  # before torch loads

from paged.engine.core.request import SamplingParams  # noqa: E402
from paged.engine.llm import LLM  # noqa: E402
from paged.engine.model.loader import load_model  # noqa: E402
from paged.engine.trace.scenario import FILLER_TEXT  # noqa: E402

QUESTIONS = [
    "What is a page?",
    "Why split memory into frames?",
    "What is a page fault?",
    "Who keeps the page table?",
    "What is a TLB?",
    "What is swapping?",
    "Why is fragmentation bad?",
    "What is a segment?",
    "What does mmap do?",
    "What is copy-on-write?",
    "What is a huge page?",
    "What is thrashing?",
    "What is demand paging?",
    "What is a dirty page?",
    "What is an MMU?",
    "What is virtual memory?",
]


def workload(tokenizer, system_len: int) -> list[list[int]]:
    system: list[int] = []
    filler = tokenizer.encode(FILLER_TEXT, add_special_tokens=False)
    while len(system) < system_len:
        system += filler
    system = system[:system_len]
    return [
        system + tokenizer.encode(" Question: " + q, add_special_tokens=False) for q in QUESTIONS
    ]


def one_round(llm: LLM, prompts: list[list[int]], new_tokens: int):
    params = SamplingParams(max_tokens=new_tokens, ignore_eos=True)
    t0 = time.perf_counter()
    outs = llm.generate(prompts, params)
    dt = time.perf_counter() - t0
    return dt, [o.token_ids for o in outs], llm.prefill_tokens_computed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--system-len", type=int, default=256)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    model = load_model(device=args.device, dtype="float32", progress=False)
    prompts = workload(model.tokenizer, args.system_len)
    # the default arena (512 MiB): all 16 requests fit either way, so the ratio is prefill work
    llms = {c: LLM(model, enable_prefix_caching=c, progress=False) for c in (False, True)}
    one_round(llms[True], prompts[:1], 2)  # warm-up
    times: dict[bool, list[float]] = {False: [], True: []}
    tokens, prefill = {}, {}
    for _ in range(args.rounds):
        for c in (False, True):
            dt, tokens[c], prefill[c] = one_round(llms[c], prompts, args.new_tokens)
            times[c].append(dt)
            print(f"  round: caching {'on ' if c else 'off'} {dt:.2f} s", flush=True)
    if tokens[True] != tokens[False]:
        print("error: outputs differ with prefix caching", file=sys.stderr)
        return 1
    n = len(prompts) * args.new_tokens
    best = {c: min(t) for c, t in times.items()}
    ratios = [off / on for off, on in zip(times[False], times[True], strict=True)]
    print(
        f"{len(prompts)} requests, {args.system_len}-token shared system prompt, "
        f"{args.new_tokens} new tokens each, device {model.device}, "
        f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')} "
        f"GOMP_SPINCOUNT={os.environ.get('GOMP_SPINCOUNT')}"
    )
    for c in (False, True):
        print(
            f"  prefix caching {'on ' if c else 'off'}: best {best[c]:.2f} s "
            f"({n / best[c]:.1f} tok/s), prefill tokens computed {prefill[c]}, "
            f"cache hit tokens {llms[c].prefix_cache_hit_tokens}"
        )
    print(
        f"throughput ratio on/off: best-of {best[False] / best[True]:.2f}x, "
        f"median of rounds {statistics.median(ratios):.2f}x (goal >= 2, aim 3)"
    )
    print(f"prefill tokens computed on/off: {prefill[True] / prefill[False]:.1%} (goal <= 20%)")
    print("outputs identical: yes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
