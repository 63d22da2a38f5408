"""What the tiers below and beside the arena did, up to a frame: numbers a lesson may quote.

Swap preemption moves blocks to the CPU tier and back; recompute preemption throws K/V away and
computes it again. Both are counted here from the frames' own events, so narration can weigh
recomputed tokens against bytes moved. An arena's element type (bf16, fp8) and its bytes come
from the trace header (``RunHeader.block_bytes``, ``kv_cache_dtype``). Pure Python, no torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from paged.engine.core import events as E
from paged.engine.trace.header import RunHeader
from paged.viz.fold.reducer import Frame

MIB = 1 << 20


def mib(nbytes: int) -> str:
    """Bytes as MiB, one decimal (two below 1 MiB, so a small copy does not read as 0.0)."""
    return f"{nbytes / MIB:.2f} MiB" if nbytes < MIB else f"{nbytes / MIB:.1f} MiB"


@dataclass(frozen=True)
class TierFacts:
    """What the tiers did up to a frame, as narration quotes it (``{R.swaps_out}``)."""

    swaps_out: int
    swaps_in: int
    blocks_moved: int
    bytes_moved: str  # MiB, or "?" when the header gives no block size in bytes
    fallbacks: int  # swaps that found the CPU tier full and recomputed instead
    preemptions: int
    recomputed: int
    relocated: int  # blocks that came back into another physical block
    waited: int  # request-steps spent in the queue so far
    cpu_blocks: int
    cpu_used: int
    swapped: int
    kv_dtype: str
    num_blocks: int
    block_kib: str
    arena_mib: str
    #: bytes of one stored K or V element (4 for fp32, 2 for bf16, 1 for fp8; 0: unknown), and
    #: what one block of the same model would take stored as bf16 and as fp32 ("?": unknown), so
    #: a lesson can say why one run's blocks are twice another's
    elem_bytes: int
    bf16_block_kib: str
    fp32_block_kib: str


def tier_facts(run: RunHeader, frames: Sequence[Frame], i: int) -> TierFacts:
    """Counts over ``frames[: i + 1]``: swaps each way, blocks and bytes moved, swap
    fallbacks, preemptions, and ``recomputed``: K/V slots that recompute preemption threw
    away (each victim's written slots at the frame before), which must be computed again, less
    what prefix caching finds again when the victim is readmitted."""
    swaps_out = swaps_in = moved = fallbacks = preemptions = recomputed = 0
    waited = relocated = 0
    left: dict[str, tuple[int, ...]] = {}  # device blocks each swapped request left from
    owed: dict[str, int] = {}  # slots a recomputed victim threw away, until it is readmitted
    for k, f in enumerate(frames[: i + 1]):
        parked = {e.req for e in E.of_kind(f.events, E.SwappedOut)}
        found = {e.req: e.tokens_saved for e in E.of_kind(f.events, E.CacheHit)}
        waited += len(f.waiting)
        for ev in f.events:
            match ev:
                case E.SwappedOut():
                    swaps_out, moved = swaps_out + 1, moved + len(ev.block_map)
                    left[ev.req] = tuple(d for d, _ in ev.block_map)
                case E.SwappedIn():
                    swaps_in, moved = swaps_in + 1, moved + len(ev.block_map)
                    before = left.pop(ev.req, ())
                    back = [d for _, d in ev.block_map]
                    relocated += sum(
                        1 for n, d in enumerate(back) if n >= len(before) or d != before[n]
                    )
                case E.SwapFallback():
                    fallbacks += 1
                case E.Preempted():
                    preemptions += 1
                    if ev.req not in parked and k > 0:
                        view = frames[k - 1].requests.get(ev.req)
                        owed[ev.req] = view.filled if view is not None else 0
                        recomputed += owed[ev.req]
                case E.Admitted() if ev.req in owed:  # found again: not computed
                    recomputed -= min(owed.pop(ev.req), found.get(ev.req, 0))
    f = frames[min(i, len(frames) - 1)]
    blocks = run.num_slots // run.block_size
    width = element_bytes(run.kv_cache_dtype)
    return TierFacts(
        swaps_out=swaps_out,
        swaps_in=swaps_in,
        blocks_moved=moved,
        bytes_moved=mib(moved * run.block_bytes) if run.block_bytes else "?",
        fallbacks=fallbacks,
        preemptions=preemptions,
        recomputed=recomputed,
        relocated=relocated,
        waited=waited,
        cpu_blocks=run.num_cpu_blocks,
        cpu_used=f.account.cpu_used,
        swapped=f.account.swapped,
        kv_dtype=dtype_name(run.kv_cache_dtype),
        num_blocks=blocks,
        block_kib=f"{run.block_bytes / 1024:.0f} KiB" if run.block_bytes else "?",
        arena_mib=mib(blocks * run.block_bytes) if run.block_bytes else "?",
        elem_bytes=width,
        bf16_block_kib=_kib(run.block_bytes * 2 // width) if width and run.block_bytes else "?",
        fp32_block_kib=_kib(run.block_bytes * 4 // width) if width and run.block_bytes else "?",
    )


def _kib(nbytes: int) -> str:
    return f"{nbytes / 1024:.0f} KiB"


def element_bytes(dtype: str) -> int:
    """Bytes of one element of the header's torch dtype name; 0 for a name not known here."""
    if dtype.startswith("float8_"):
        return 1
    return {"float32": 4, "bfloat16": 2, "float16": 2}.get(dtype, 0)


def dtype_name(dtype: str) -> str:
    """The header's torch name, as the lessons say it (``float8_e4m3fn`` -> ``fp8 e4m3``)."""
    short = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
    if dtype.startswith("float8_"):
        return "fp8 " + dtype.removeprefix("float8_").removesuffix("fn").removesuffix("fnuz")
    return short.get(dtype, dtype or "?")
