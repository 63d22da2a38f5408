"""Synthetic workloads shaped like the vLLM paper's datasets (its Fig. 11 statistics).

The paper reports only means, so the shape is our choice, fixed for every policy: input and output
lengths are drawn independently from log-normal distributions with sigma = 1.0 (long right tails,
as chat transcripts have) and the paper's means, rounded to whole tokens, at least 1, and capped
so that input + output <= max_model_len (the cap trims the tail, so realised means land a little
below the targets; ``simulate`` reports them). Every request arrives at step 0: a saturated queue.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass

#: name -> (mean input tokens, mean output tokens), from the vLLM paper.
WORKLOADS = {"sharegpt": (161.3, 338.0), "alpaca": (19.3, 58.5)}
SIGMA = 1.0


@dataclass(frozen=True)
class WorkItem:
    input_len: int
    output_len: int


def _lognormal_int(rng: random.Random, mean: float, cap: int) -> int:
    mu = math.log(mean) - SIGMA ** 2 / 2   # E[lognormal] = exp(mu + sigma^2 / 2)
    return max(1, min(cap, round(rng.lognormvariate(mu, SIGMA))))


def generate(name: str, num_requests: int, max_model_len: int, seed: int = 0) -> list[WorkItem]:
    """``num_requests`` (input, output) length pairs for workload ``name``."""
    if name not in WORKLOADS:
        raise ValueError(f"unknown workload {name!r}; choose one of {', '.join(WORKLOADS)}")
    mean_in, mean_out = WORKLOADS[name]
    rng = random.Random(seed)
    items = []
    for _ in range(num_requests):
        inp = _lognormal_int(rng, mean_in, max_model_len - 1)
        out = _lognormal_int(rng, mean_out, max_model_len - inp)
        items.append(WorkItem(inp, out))
    return items
