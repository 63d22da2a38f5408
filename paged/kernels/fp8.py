"""FP8 KV blocks: the arena's K and V stored as float8, one byte an element.

Granularity: **one static scale per tensor** (``k_scale``, ``v_scale``, default 1.0), as vLLM does
when a checkpoint ships no calibrated scales. Why not a scale per token and head stored beside the
block? Because a scale beside the block costs bytes: with 64-dim heads a 4-byte per-token-per-head
scale adds 6 % to every block, and "the same bytes hold exactly twice the blocks of bf16" would no
longer be true. A per-tensor scale costs nothing per block, and the K/V of a small Llama (|x| well
under e4m3's 448) lose nothing to range; what they lose is precision (3 mantissa bits):
``bench/fp8_accuracy.py`` measures it (SmolLM2-135M, e4m3: 95.5 % teacher-forced top-1 agreement
with a fp32 arena). ``bench/fp8_granularity.py`` tried the alternatives on 27 prompts (top-1,
e4m3): per tensor 95.5 %, calibrated per tensor 94.7 %, per (layer, KV head) 96.0 %, per channel
93.0 %, per block of 16 96.1 %, per (token, KV head) amax/448 96.7 %, per (token, KV head) best
of 32 scales 97.5 %; bf16 99.7 %, and 6 mantissa bits 99.4 %. No float8 scale reaches the 99 %
goal on this model, and the best of them would cost the exact 2x (a 2-byte scale per row:
2D/(D+2) = 1.94x bf16's blocks at head_dim 64).

Quantize: ``clamp(x / scale, -max, +max)`` then round to nearest-even in torch (``Tensor.to``); the
clamp matters because torch turns an out-of-range value into NaN, not into the largest finite one.
Every store path (``paged.kernels.reference.store_kv``, ``paged.kernels.store_kv``, the torch backend) calls
``quantize`` here, so the arena holds the same bits on every backend. Dequantize on load:
``x.float() * scale``, inside the attention kernels (Triton and reference).

Batch dependence: over a float8 arena a request's greedy tokens may change with the requests
that share its batch (6 of 12 prompts within 32 tokens in e4m3; none over a fp32 arena), and
that is rounding, not this file: nothing here depends on the batch, and with a batch-invariant
fp32 forward the float8 logits are the same bit for bit alone and batched
(``bench/fp8_batch.py``). The fp32 forward rounds a little differently for each batch shape
(matmul kernels chosen by row count, decode attention padded to the longest context: 6e-5 in
the logits); a value that close to a float8 rounding boundary lands on its other side, a jump
of up to an eighth of its size in e4m3, and such jumps multiply through the layers' attention.
"""

from __future__ import annotations

import torch

#: ``--kv-cache-dtype`` names and the torch dtype each stores (``auto``: the model's own dtype).
KV_CACHE_DTYPES: dict[str, torch.dtype | None] = {
    "auto": None,
    "fp8_e4m3": torch.float8_e4m3fn,
    "fp8_e5m2": torch.float8_e5m2,
}
FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)


def is_fp8(dtype: torch.dtype) -> bool:
    return dtype in FP8_DTYPES


def resolve_kv_dtype(name: str, model_dtype: torch.dtype) -> torch.dtype:
    """The arena's element type for a ``--kv-cache-dtype`` name. Raises ValueError for an
    unknown name (``paged.engine.engine_args`` checks names before any model loads)."""
    if name not in KV_CACHE_DTYPES:
        raise ValueError(f"unknown KV cache dtype {name!r}")
    return KV_CACHE_DTYPES[name] or model_dtype


def quantize(x: torch.Tensor, dtype: torch.dtype, scale: float = 1.0) -> torch.Tensor:
    """``x`` as ``dtype``: for float8, divided by ``scale``, saturated and rounded; any other
    dtype is a plain cast (the scale is ignored: only float8 is scaled)."""
    if not is_fp8(dtype):
        return x.to(dtype)
    big = torch.finfo(dtype).max
    # out of place: ``x.float()`` is ``x`` itself when x is float32, and clamping it in place
    # changed the caller's tensor
    y = x.float() if scale == 1.0 else x.float() / scale
    return y.clamp(-big, big).to(dtype)


def dequantize(x: torch.Tensor, out_dtype: torch.dtype, scale: float = 1.0) -> torch.Tensor:
    """Float8 ``x`` back to ``out_dtype`` (times ``scale``); other dtypes are only cast."""
    if not is_fp8(x.dtype):
        return x.to(out_dtype)
    y = x.float()
    return (y if scale == 1.0 else y * scale).to(out_dtype)


def bits(x: torch.Tensor) -> torch.Tensor:
    """A float8 tensor seen as its raw bytes (uint8, same storage), anything else as itself:
    CPU torch lacks ``index_copy_`` / ``index_select`` for float8, and copying bytes is exact."""
    return x.view(torch.uint8) if is_fp8(x.dtype) else x
