"""Our own compact Llama forward over a flat token batch.

All tokens scheduled in a step (prefill chunks and decode tokens of every sequence) form one
``[T, hidden]`` tensor, so each projection is a single matmul per layer; only attention looks at
sequences separately, through their block tables. The numerics mirror HF's ``LlamaForCausalLM``
(fp32 rsqrt RMSNorm, rotate-half RoPE on ``cat(freqs, freqs)``, scale ``1/sqrt(head_dim)``) so
that greedy decoding is token-exact with HF ``generate`` in fp32.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from engine.model.attention import Attention, AttentionMetadata
from engine.model.weights import LayerWeights, ModelWeights


def _packable(weight: torch.Tensor) -> bool:
    return (
        weight.device.type == "cpu"
        and weight.dtype == torch.float32
        and torch.backends.mkldnn.is_available()
    )


class Linear:
    """``x @ weight.T``. On a CPU in fp32 the weight is packed once, at load, into oneDNN's
    blocked layout (what inductor's weight freezing and vLLM's CPU build do), and every call
    runs oneDNN's matmul on it. F.linear (MKL's sgemm, which re-packs its operand on each call)
    measured 2-3x slower per decode step at batch 16 on this project's 2-core machine, the
    vocabulary head most of all. oneDNN sums in another order than MKL, so logits may differ
    from HF's in the last bits; the greedy tokens are held to HF's by tests/model/."""

    def __init__(self, weight: torch.Tensor, batch_hint: int = 16) -> None:
        self.weight = weight
        self._packed = (
            torch.ops.mkldnn._reorder_linear_weight(weight, batch_hint)
            if _packable(weight)
            else None
        )

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self._packed is None:
            return F.linear(x, self.weight)
        return torch.ops.mkldnn._linear_pointwise(x, self._packed, None, "none", [], "")


@dataclass
class _Layer:
    input_norm: torch.Tensor
    q_proj: Linear
    k_proj: Linear
    v_proj: Linear
    o_proj: Linear
    post_norm: torch.Tensor
    gate_proj: Linear
    up_proj: Linear
    down_proj: Linear

    @classmethod
    def of(cls, w: LayerWeights) -> _Layer:
        return cls(
            w.input_norm,
            Linear(w.q_proj),
            Linear(w.k_proj),
            Linear(w.v_proj),
            Linear(w.o_proj),
            w.post_norm,
            Linear(w.gate_proj),
            Linear(w.up_proj),
            Linear(w.down_proj),
        )


def _heads(x: torch.Tensor, num_heads: int, head_dim: int) -> torch.Tensor:
    return x.view(x.shape[0], num_heads, head_dim)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    dtype = x.dtype
    x = x.to(torch.float32)
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x.to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class RotaryTable:
    """cos/sin for every position, computed once the way HF computes them per call."""

    def __init__(
        self,
        inv_freq: torch.Tensor,
        scaling: float,
        max_positions: int,
        device: torch.device,
        dtype: torch.dtype,
    ) -> None:
        pos = torch.arange(max_positions, dtype=torch.float32)
        freqs = pos[:, None] * inv_freq.float().cpu()[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        self.cos = (emb.cos() * scaling).to(device=device, dtype=dtype)
        self.sin = (emb.sin() * scaling).to(device=device, dtype=dtype)

    def lookup(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``[T]`` positions -> cos, sin ``[T, 1, D]`` (broadcast over heads)."""
        return self.cos[positions].unsqueeze(1), self.sin[positions].unsqueeze(1)


class LlamaForward:
    """``forward(input_ids, positions, kv_caches, meta, logits_indices) -> logits``."""

    def __init__(
        self, weights: ModelWeights, attention: Attention, device: torch.device, dtype: torch.dtype
    ) -> None:
        self.w = weights
        c = weights.config
        self.attention = attention
        self.layers = [_Layer.of(layer) for layer in weights.layers]
        self.lm_head = Linear(weights.lm_head)
        self.rope = RotaryTable(
            weights.inv_freq, weights.rope_scaling, c.max_position_embeddings, device, dtype
        )

    @torch.inference_mode()
    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        kv_caches: list[tuple[torch.Tensor, torch.Tensor]],
        meta: AttentionMetadata,
        logits_indices: torch.Tensor,
    ) -> torch.Tensor:
        """Run ``[T]`` tokens at ``positions`` through every layer, writing their K/V into
        ``kv_caches`` (one ``(k, v)`` arena view per layer), and return logits ``[B, vocab]``
        only for the flat rows in ``logits_indices`` (each sequence's last token)."""
        c, w = self.w.config, self.w
        t = input_ids.shape[0]
        cos, sin = self.rope.lookup(positions)
        h = F.embedding(input_ids, w.embed)
        for layer, (k_cache, v_cache) in zip(self.layers, kv_caches, strict=True):
            x = rms_norm(h, layer.input_norm, c.rms_norm_eps)
            q = _heads(layer.q_proj(x), c.num_heads, c.head_dim)
            k = _heads(layer.k_proj(x), c.num_kv_heads, c.head_dim)
            v = _heads(layer.v_proj(x), c.num_kv_heads, c.head_dim)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            o = self.attention(q, k, v, k_cache, v_cache, meta)
            h = h + layer.o_proj(o.reshape(t, -1))
            x = rms_norm(h, layer.post_norm, c.rms_norm_eps)
            gate = F.silu(layer.gate_proj(x))
            h = h + layer.down_proj(gate * layer.up_proj(x))
        h = rms_norm(h[logits_indices], w.final_norm, c.rms_norm_eps)
        return self.lm_head(h)
