"""The vLLM paper's reference figures, as data with their sources (Kwon et al., "Efficient Memory
Management for Large Language Model Serving with PagedAttention", SOSP 2023).

Only what the paper printed is typed in here; every ratio or derived size is computed from it
(``fig13_ratio``, ``default_num_slots``). Pure Python, no torch: the pages import it.
"""

from __future__ import annotations

from dataclasses import dataclass

from paged.engine.sim.capacity import PRESETS, GiB

PAPER = "Kwon et al., SOSP 2023"
POLICIES = ("max", "pow2", "oracle", "paged")
PAPER_NAMES = {
    "max": "Orca (Max)",
    "pow2": "Orca (Pow2)",
    "oracle": "Orca (Oracle)",
    "paged": "vLLM",
}


@dataclass(frozen=True)
class Breakdown:
    """One bar of Fig. 2, as shares of the KV memory. The paper's fourth segment is "external
    fragmentation & others"; for vLLM it prints only token states and one remainder."""

    token_states: float
    reservation: float | None
    internal: float | None
    external: float | None

    @property
    def waste(self) -> float:
        """Everything that is not a token state (what the bar's other segments add up to)."""
        return 1.0 - self.token_states


FIG2_SOURCE = f"{PAPER}, Fig. 2"
#: The workload Fig. 2's bars were measured on: the paper prints no breakdown for Alpaca, so an
#: Alpaca run is compared with Fig. 13b alone.
FIG2_WORKLOAD = "sharegpt"
#: Fig. 2: average share of KV memory per category during the §6.2 experiment (OPT-13B).
FIG2 = {
    "max": Breakdown(0.204, 0.133, 0.573, 0.089),
    "pow2": Breakdown(0.268, 0.179, 0.136, 0.416),
    "oracle": Breakdown(0.382, 0.252, 0.0, 0.366),
    "paged": Breakdown(0.963, None, None, None),
}

FIG13_SOURCE = f"{PAPER}, Fig. 13"
#: Fig. 13: average number of batched requests serving OPT-13B, ShareGPT at 2 req/s (13a)
#: and Alpaca at 30 req/s (13b).
FIG13 = {
    "sharegpt": {"max": 7.00, "pow2": 9.81, "oracle": 13.62, "paged": 30.42},
    "alpaca": {"max": 7.00, "pow2": 43.24, "oracle": 72.75, "paged": 132.44},
}

TABLE1_SOURCE = f"{PAPER}, Table 1"
#: Table 1, OPT-13B on one A100 (40 GB): "memory for KV cache 12 GB", "max # KV cache slots
#: 15.7K". The paper's GB is binary here: 12 GiB / 800 KiB per token = 15,728 = "15.7K".
TABLE1_OPT13B_KV_BUDGET = 12 * GiB
TABLE1_OPT13B_SLOTS_PRINTED = "15.7K"

#: §6.1 Baseline 2 (Orca): reservations are placed by a buddy allocator; Max reserves the
#: model's maximum sequence length (2,048 for OPT); Pow2 over-reserves the output by at most 2x
#: (a 25-token output reserves 32); Oracle reserves exactly the true output.
ORCA_SOURCE = f"{PAPER}, §6.1"
OPT_MAX_SEQ_LEN = 2048
ORCA_PLACEMENT = "buddy"


def default_num_slots() -> int:
    """OPT-13B's KV slots in Table 1's 12 GiB budget: 12 GiB // 800 KiB per token = 15,728."""
    return TABLE1_OPT13B_KV_BUDGET // PRESETS["opt-13b"].bytes_per_token


def fig13_ratio(workload: str, policy: str, over: str = "max") -> float:
    """How many times as many requests ``policy`` batches as ``over`` in Fig. 13."""
    row = FIG13[workload]
    return row[policy] / row[over]
