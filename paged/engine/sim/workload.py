"""Synthetic workloads shaped like the vLLM paper's datasets (its Fig. 11 statistics).

The paper reports only means, so the shape is our choice, fixed for every policy: input and output
lengths are drawn independently with the paper's means, rounded to whole tokens, at least 1, and
capped so that input + output <= max_model_len (the cap trims the tail, so realised means land a
little below the targets; ``simulate`` reports them). Every request arrives at step 0: a saturated
queue. ``LENGTH_DISTS`` names the shapes a student can switch between:

- ``lognormal`` (default, ``sigma`` = SIGMA): a long right tail, as chat transcripts have;
- ``exponential``: memoryless, a standard deviation equal to the mean;
- ``uniform``: flat on [1, 2 x mean - 1], no tail (standard deviation 0.58 means);
- ``fixed``: every request exactly the mean (no spread at all).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from paged.engine.errors import InvalidConfigError

#: name -> (mean input tokens, mean output tokens), from the vLLM paper.

#: Sixteen everyday subjects: the real-model benches and the preemption test share one workload.
DEMO_SUBJECTS = (
    "the moon", "bread", "rivers", "chess", "volcanoes", "jazz", "bees", "glass",
    "trains", "salt", "owls", "paper", "rain", "clocks", "copper", "tea",
)  # fmt: skip
#: One prompt per subject, alternating a short and a longer request.
DEMO_PROMPTS = tuple(
    f"Write a short paragraph about {s}, for a curious child."
    if i % 2
    else f"Tell me three facts about {s}."
    for i, s in enumerate(DEMO_SUBJECTS)
)

WORKLOADS = {"sharegpt": (161.3, 338.0), "alpaca": (19.3, 58.5)}
LENGTH_DISTS = ("lognormal", "exponential", "uniform", "fixed")
#: The default log-normal spread, read off the paper's own Fig. 2. The paper gives means only,
#: but its Max bar depends on the length distribution alone: Max always runs 7 requests (7 x 2,048
#: of 15,728 slots), so its token-state share is 7 x (mean fill of a running request) / 15,728,
#: and 20.4 % means 458 tokens. A running request's mean fill is E[in] + E[out^2] / (2 E[out])
#: (long outputs run longer, so they weigh more); with the means 161.3 and 338 that needs
#: E[out^2] / E[out]^2 = 1.76, a log-normal sigma of sqrt(ln 1.76) = 0.75 before the 2,048 cap
#: trims the tail, 0.8 with it. The same sigma serves every policy and both workloads.
SIGMA = 0.8
MAX_SIGMA = 3.0


@dataclass(frozen=True)
class WorkItem:
    input_len: int
    output_len: int


@dataclass(frozen=True)
class LengthDist:
    """How lengths scatter around their mean. Raises InvalidConfigError for an unknown name or
    a sigma outside (0, MAX_SIGMA]."""

    name: str = "lognormal"
    sigma: float = SIGMA

    def __post_init__(self) -> None:
        if self.name not in LENGTH_DISTS:
            raise InvalidConfigError(
                f"unknown length distribution {self.name!r}; choose one "
                f"of {', '.join(LENGTH_DISTS)}"
            )
        if not (isinstance(self.sigma, (int, float)) and 0 < self.sigma <= MAX_SIGMA):
            raise InvalidConfigError(f"sigma must be in (0, {MAX_SIGMA}], got {self.sigma!r}")

    def draw(self, rng: random.Random, mean: float, cap: int) -> int:
        """One length with mean ``mean`` before rounding, clipped to [1, cap]."""
        if self.name == "lognormal":
            mu = math.log(mean) - self.sigma**2 / 2  # E[lognormal] = exp(mu + sigma^2 / 2)
            x = rng.lognormvariate(mu, self.sigma)
        elif self.name == "exponential":
            x = rng.expovariate(1 / mean)
        elif self.name == "uniform":
            x = rng.uniform(1, 2 * mean - 1)
        else:
            x = mean
        return max(1, min(cap, round(x)))


#: The shortest context a workload can be drawn for: a one-token prompt and one generated token
#: (an input is drawn up to ``max_model_len - 1``, its output up to what is left).
MIN_MODEL_LEN = 2


def generate(
    name: str, num_requests: int, max_model_len: int, seed: int = 0, dist: LengthDist | None = None
) -> list[WorkItem]:
    """``num_requests`` (input, output) length pairs for workload ``name``."""
    if name not in WORKLOADS:
        raise ValueError(f"unknown workload {name!r}; choose one of {', '.join(WORKLOADS)}")
    dist = dist or LengthDist()
    mean_in, mean_out = WORKLOADS[name]
    rng = random.Random(seed)
    items = []
    for _ in range(num_requests):
        inp = dist.draw(rng, mean_in, max_model_len - 1)
        out = dist.draw(rng, mean_out, max_model_len - inp)
        items.append(WorkItem(inp, out))
    return items
