"""The one attention entry point of the forward: store new K/V in the arena, then attend.

Interchangeable backends: ``torch`` (the reference maths planned once per step, the CPU path;
see ``engine/model/attention_torch.py``), ``triton`` (``kernels/paged_attention.py`` and
``kernels/store_kv.py``, imported lazily so the engine runs without them) and ``reference``
(``kernels/reference.py`` as is: the oracle the others are tested against).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from engine.errors import InvalidConfigError
from engine.model.backends import BACKENDS


@dataclass
class AttentionMetadata:
    """Per-step layout of the flat token tensor: prefill tokens first, then one token per
    decoding sequence. Built once per step by the runner, shared by all layers."""

    slot_mapping: torch.Tensor  # [T] int64 flat arena slots
    num_prefill_tokens: int
    prefill_block_tables: torch.Tensor | None  # [P, max_blocks] int32
    query_start_loc: torch.Tensor | None  # [P + 1] int32
    prefill_context_lens: torch.Tensor | None  # [P] int32
    decode_block_tables: torch.Tensor | None  # [B, max_blocks] int32
    decode_context_lens: torch.Tensor | None  # [B] int32


def resolve_backend(name: str, device: torch.device) -> str:
    """``auto`` is Triton on CUDA, torch elsewhere. ``reference`` (not offered on the CLI) runs
    ``kernels/reference.py`` unplanned, as the oracle. Raises InvalidConfigError for an unknown
    name, or Triton on a CPU without the interpreter (``TRITON_INTERPRET=1``)."""
    if name not in BACKENDS + ("reference",):
        raise InvalidConfigError(
            f"unknown attention backend {name!r} (expected auto, torch or triton)"
        )
    if name == "auto":
        return "triton" if device.type == "cuda" else "torch"
    if name == "triton" and device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        raise InvalidConfigError(
            "attention backend 'triton' needs a CUDA device (or TRITON_INTERPRET=1 on CPU)"
        )
    return name


class KernelAttention:
    """Store, then prefill and/or decode through three kernels with the signatures of
    ``kernels/reference.py`` (the reference itself, or the Triton kernels)."""

    def __init__(self, name: str, scale: float, k_scale: float = 1.0, v_scale: float = 1.0) -> None:
        self.name, self.scale = name, scale
        self.k_scale, self.v_scale = k_scale, v_scale
        if name == "triton":
            try:
                from kernels.paged_attention import paged_decode_attention, paged_prefill_attention
                from kernels.store_kv import store_kv
            except ImportError as e:
                raise InvalidConfigError(
                    f"attention backend 'triton' is unavailable: {e}"
                ) from None
        else:
            from kernels.reference import paged_decode_attention, paged_prefill_attention, store_kv
        self._store, self._prefill, self._decode = (
            store_kv,
            paged_prefill_attention,
            paged_decode_attention,
        )

    def prepare(self, meta: AttentionMetadata, block_size: int) -> None:
        """Nothing to plan: the kernels read the block tables themselves."""

    def __call__(self, q, k, v, k_cache, v_cache, meta: AttentionMetadata) -> torch.Tensor:
        self._store(k, v, k_cache, v_cache, meta.slot_mapping, self.k_scale, self.v_scale)
        n = meta.num_prefill_tokens
        if n == q.shape[0]:
            return self._run_prefill(q, k_cache, v_cache, meta)
        if n == 0:
            return self._run_decode(q, k_cache, v_cache, meta)
        out = torch.empty_like(q)
        out[:n] = self._run_prefill(q[:n], k_cache, v_cache, meta)
        out[n:] = self._run_decode(q[n:], k_cache, v_cache, meta)
        return out

    def _run_prefill(self, q, k_cache, v_cache, meta: AttentionMetadata) -> torch.Tensor:
        tables, starts, lens = (
            meta.prefill_block_tables,
            meta.query_start_loc,
            meta.prefill_context_lens,
        )
        assert tables is not None and starts is not None and lens is not None, "no prefill"
        return self._prefill(
            q, k_cache, v_cache, tables, starts, lens, self.scale, self.k_scale, self.v_scale
        )

    def _run_decode(self, q, k_cache, v_cache, meta: AttentionMetadata) -> torch.Tensor:
        tables, lens = meta.decode_block_tables, meta.decode_context_lens
        assert tables is not None and lens is not None, "no decode sequences"
        return self._decode(
            q, k_cache, v_cache, tables, lens, self.scale, self.k_scale, self.v_scale
        )


class Attention:
    """The forward's one attention entry point. Per step: ``prepare(meta, block_size)``; per
    layer: ``attn(q, k, v, k_cache, v_cache, meta)`` writes ``k``, ``v`` ``[T, Hkv, D]`` at
    ``meta.slot_mapping`` and lets every query token ``q`` ``[T, Hq, D]`` attend to its
    sequence's context, returning ``[T, Hq, D]``."""

    def __init__(
        self,
        backend: str,
        device: torch.device,
        scale: float,
        k_scale: float = 1.0,
        v_scale: float = 1.0,
    ) -> None:
        # k_scale / v_scale: the arena's per-tensor float8 scales (unused for other dtypes)
        self.backend = resolve_backend(backend, device)
        self._impl: TorchAttention | KernelAttention
        if self.backend == "torch":
            from engine.model.attention_torch import TorchAttention

            self._impl = TorchAttention(scale, k_scale, v_scale)
        else:
            self._impl = KernelAttention(self.backend, scale, k_scale, v_scale)

    def prepare(self, meta: AttentionMetadata, block_size: int) -> None:
        self._impl.prepare(meta, block_size)

    def __call__(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        meta: AttentionMetadata,
    ) -> torch.Tensor:
        return self._impl(q, k, v, k_cache, v_cache, meta)
