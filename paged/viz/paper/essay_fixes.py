"""Where the essay (*PagedAttention：当 KV Cache 遇到操作系统分页*) and its sources disagree: each
claim, the value that holds, and where that value comes from. The essay is cited by its title
(``ESSAY``), the paper by section and figure. Every corrected number is computed here from the paper's cited
figures (engine.sim.paper) or from exact capacity arithmetic (engine.sim.capacity); the page supplies
the sentences (paged/viz/text/paper_fidelity.toml). Pure Python, no torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from paged.engine.sim.capacity import (
    DEFAULT_ENTRY_BYTES,
    ESSAY_ENTRY_BYTES,
    PRESETS,
    GiB,
    KiB,
    MiB,
    block_table_bytes,
    blocks_for,
    concurrency,
    format_bytes,
)
from paged.engine.sim.paper import FIG2, fig13_ratio

#: The essay this project teaches, by its title (it is cited so, never by where a copy is kept).
ESSAY = "《PagedAttention：当 KV Cache 遇到操作系统分页》"

#: Where the essay's setting comes from (its §1.2 and §4.2): Llama-2-70B in fp16.
LLAMA70B = PRESETS["llama-2-70b"]
#: The essay's "约 140 GB" of weights: 70e9 parameters x 2 bytes, a decimal GB.
ESSAY_WEIGHT_BYTES = 70 * 10**9 * 2
#: Sources, as keys of the page's ``sources`` table (paged/viz/text/paper_fidelity.toml): the paper by
#: figure or section in the reader's language, never a file of this repository.
FIG2_SOURCE = "fig2"
TERMS_SOURCE = "terms"
FIG13A_ABSTRACT_SOURCE = "fig13a_abstract"
ARITHMETIC_SOURCE = "arithmetic"
BLOCK_TABLE_SOURCE = "block_table"
PREFILL_SOURCE = "prefill"
LAUNCH_SOURCE = "launches"
RESERVATION_SOURCE = "terms"
THROUGHPUT_SOURCE = "throughput"
UNVERIFIED_SOURCE = "unverified"
MMU_SOURCE = "gpu_mmu"
KERNEL_SOURCE = "vllm_kernel"
PREFIX_SOURCE = "prefix_caching"
#: The essay's §2.2 example: max_model_len 32,768 and a 2,000-token prompt.
ESSAY_MAX_LEN, ESSAY_PROMPT = 32_768, 2_000
ESSAY_BLOCK = 16  # the essay's default block size (§3.3)


@dataclass(frozen=True)
class Fix:
    """One correction: ``key`` names its sentences in the text file, ``values`` fill them."""

    key: str
    values: dict[str, str]
    source: str  # a key of the text's ``sources`` table


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def table_fixes() -> list[Fix]:
    """Claims of the essay's §4.1 table, shown beside the paper's Fig. 2."""
    mx, p2, orc = FIG2["max"], FIG2["pow2"], FIG2["oracle"]
    return [
        Fix("fix_pow2", {"paper": _pct(p2.token_states)}, FIG2_SOURCE),
        Fix(
            "fix_sources",
            {
                "max_int": _pct(mx.internal or 0),
                "max_res": _pct(mx.reservation or 0),
                "max_ext": _pct(mx.external or 0),
                "or_res": _pct(orc.reservation or 0),
                "or_ext": _pct(orc.external or 0),
                "or_int": _pct(orc.internal or 0),
            },
            FIG2_SOURCE,
        ),
        Fix(
            "fix_618",
            {
                "waste": _pct(orc.waste),
                "or_res": _pct(orc.reservation or 0),
                "or_ext": _pct(orc.external or 0),
                "or_int": _pct(orc.internal or 0),
            },
            FIG2_SOURCE,
        ),
        Fix("fix_terms", {"or_int": _pct(orc.internal or 0)}, TERMS_SOURCE),
        Fix("fix_vllm_100", {"paper": _pct(FIG2["paged"].token_states)}, FIG2_SOURCE),
    ]


def concurrency_fix() -> Fix:
    """The table's concurrency column against Fig. 13a."""
    return Fix(
        "fix_concurrency",
        {p: f"{fig13_ratio('sharegpt', p):.2f}" for p in ("pow2", "oracle", "paged")},
        FIG13A_ABSTRACT_SOURCE,
    )


def arithmetic_fixes() -> list[Fix]:
    """The essay's capacity arithmetic (§1.2, §4.2, §5.2, §5.3), recomputed exactly, then its
    other claims checked (``claim_fixes``): every page that lists the corrections lists these."""
    return _arithmetic() + claim_fixes()


def _arithmetic() -> list[Fix]:
    kv = 32 * 32_768 * LLAMA70B.bytes_per_token  # batch 32 at 32k tokens
    tail_tokens = mean_tail(ESSAY_BLOCK)
    tail = tail_tokens * LLAMA70B.bytes_per_token_per_layer
    c = concurrency(LLAMA70B, 40 * GiB, 8192, 3000, 16)
    requests, length, block = 100, 32_768, 8  # the essay's §5.2 block tables
    entry = ESSAY_ENTRY_BYTES
    table = requests * block_table_bytes(length, block, entry)
    vllm = requests * block_table_bytes(length, block, DEFAULT_ENTRY_BYTES)
    return [
        Fix(
            "fix_kv_weights",
            {
                "kv_gib": f"{kv / GiB:,.0f}",
                "kv_gb": f"{kv / 1e9:,.1f}",
                "w_gb": f"{ESSAY_WEIGHT_BYTES / 1e9:,.0f}",
                "w_gib": f"{ESSAY_WEIGHT_BYTES / GiB:,.1f}",
                "ratio": f"{kv / ESSAY_WEIGHT_BYTES:.2f}",
            },
            ARITHMETIC_SOURCE,
        ),
        Fix(
            "fix_tail",
            {
                "bs": str(ESSAY_BLOCK),
                "top": str(ESSAY_BLOCK - 1),
                "tokens": f"{tail_tokens:g}",
                "token_layer": format_bytes(LLAMA70B.bytes_per_token_per_layer),
                "per_layer": f"{tail / KiB:g} KiB",
                "layers": str(LLAMA70B.num_layers),
                "all_layers": f"{tail * LLAMA70B.num_layers / MiB:g} MiB",
            },
            ARITHMETIC_SOURCE,
        ),
        Fix(
            "fix_prealloc",
            {
                "pre": str(c.prealloc_requests),
                "mean": f"{c.mean_len:,}",
                "max_len": f"{c.max_len:,}",
                "budget": format_bytes(c.budget_bytes),
                "used": f"{100 * c.mean_len / c.max_len:.2f} %",
                "idle": f"{(c.budget_bytes - c.prealloc_used_bytes) / GiB:.2f}",
                "paged": str(c.paged_requests),
                "gain": f"{c.ratio:.2f}",
            },
            THROUGHPUT_SOURCE,
        ),
        Fix(
            "fix_block_table",
            {
                "requests": str(requests),
                "length": f"{length:,}",
                "bs": str(block),
                "entry": str(entry),
                "bytes": f"{table:,}",
                "mib": f"{table / MiB:g}",
                "mb": f"{table / 1e6:.2f}",
                "vllm_entry": str(DEFAULT_ENTRY_BYTES),
                "vllm_bytes": f"{vllm:,}",
                "vllm_mib": f"{vllm / MiB:g}",
            },
            BLOCK_TABLE_SOURCE,
        ),
    ]


def mean_tail(block_size: int) -> float:
    """The mean unfilled tail of a request's last block when its length is equally likely to
    leave any remainder: the tails 0, 1, ..., block_size - 1 averaged, (block_size - 1) / 2."""
    return sum((-r) % block_size for r in range(block_size)) / block_size


def claim_fixes() -> list[Fix]:
    """The essay's other claims, each checked against the paper, the engine or plain arithmetic;
    one it gives no source for and none can be found for is said to be unverifiable."""
    locked = ESSAY_MAX_LEN - ESSAY_PROMPT
    return [
        Fix(
            "fix_first_block",
            {
                "prompt": f"{ESSAY_PROMPT:,}",
                "bs": str(ESSAY_BLOCK),
                "blocks": str(blocks_for(ESSAY_PROMPT, ESSAY_BLOCK)),
            },
            PREFILL_SOURCE,
        ),
        Fix(
            "fix_locked",
            {
                "locked": f"{locked:,}",
                "max_len": f"{ESSAY_MAX_LEN:,}",
                "prompt": f"{ESSAY_PROMPT:,}",
            },
            RESERVATION_SOURCE,
        ),
        Fix("fix_launches", {}, LAUNCH_SOURCE),
        Fix("fix_mmu", {}, MMU_SOURCE),
        Fix("fix_online_softmax", {}, KERNEL_SOURCE),
        Fix("fix_prefix_hash", {}, PREFIX_SOURCE),
        Fix("fix_deepseek", {}, UNVERIFIED_SOURCE),
    ]
