"""Our own compact Llama forward over a flat token batch.

All tokens scheduled in a step (prefill chunks and decode tokens of every sequence) form one
``[T, hidden]`` tensor, so each projection is a single matmul per layer; only attention looks at
sequences separately, through their block tables. The numerics mirror HF's ``LlamaForCausalLM``
(fp32 rsqrt RMSNorm, rotate-half RoPE on ``cat(freqs, freqs)``, scale ``1/sqrt(head_dim)``) so
that greedy decoding is token-exact with HF ``generate`` in fp32; on CPU the matmuls are
paged/kernels/cpu.c's (or oneDNN's), not HF's MKL (``Linear``), which moves logits by a few ulps and,
on every prompt the exactness tests hold it to, no token.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from paged.engine.model.attention import Attention, AttentionMetadata
from paged.engine.model.weights import LayerWeights, ModelWeights


def _packable(weight: torch.Tensor) -> bool:
    return (
        weight.device.type == "cpu"
        and weight.dtype == torch.float32
        and torch.backends.mkldnn.is_available()
    )


def _huge_pages(like: torch.Tensor):
    """Where the CPU kernels pack a model's weights: huge pages (paged/kernels/cpu.py HugePages)."""
    if not _packable(like):
        return None
    from paged.kernels.cpu import HugePages, load

    return HugePages() if load() is not None else None


class Linear:
    """``x @ w.T`` for each of ``weights``, which share their input, side by side.

    On a CPU in float32 the weights are concatenated and packed once, at load, and a call is one
    matmul whose output is split: one matmul for q/k/v (and for gate/up) saves calls. The
    matmul is ``linear_f32`` of ``paged/kernels/cpu.c`` when it builds (``paged/kernels/cpu.py`` says why;
    at decode batch 16 it took ~31 ms a step where oneDNN took ~38 and MKL's F.linear ~80, on
    this project's 2-core machine, and it is faster at batch 1 and at prefill too), else
    oneDNN's, its weights packed into oneDNN's blocked layout (what inductor's weight freezing
    and vLLM's CPU build do). Both sum in another order than HF's MKL, so logits may differ
    from HF's in the last bits; the greedy tokens are held to HF's by tests/model/. Elsewhere
    each weight is its own F.linear, as in HF."""

    def __init__(
        self, *weights: torch.Tensor, batch_hint: int = 16, kernel: bool = True, pages=None
    ) -> None:
        """``kernel=False``: oneDNN even where paged/kernels/cpu.c builds. ``pages``: a
        ``paged.kernels.cpu.HugePages`` the packed copy is carved from (else ordinary memory)."""
        self.weights: tuple[torch.Tensor, ...] = weights
        self._packed = None
        self._kernel = None
        if _packable(weights[0]):
            whole = torch.cat(weights) if len(weights) > 1 else weights[0]
            from paged.kernels.cpu import PackedLinear, load

            if kernel and load() is not None:
                self._kernel = PackedLinear(whole, pages)
            else:
                self._packed = torch.ops.mkldnn._reorder_linear_weight(whole, batch_hint)
            self.weights = ()  # the packed copy is all a call reads

    @property
    def kernel(self):
        """The packed matmul of paged/kernels/cpu.c; only where it built (``_forward_fused``)."""
        assert self._kernel is not None, "no CPU kernel for this projection"
        return self._kernel

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """``[T, in]`` -> ``[T, sum of the weights' rows]``, the outputs side by side."""
        if self._kernel is not None:
            return self._kernel(x)
        if self._packed is None:
            if len(self.weights) == 1:
                return F.linear(x, self.weights[0])
            return torch.cat([F.linear(x, w) for w in self.weights], dim=-1)
        return torch.ops.mkldnn._linear_pointwise(x, self._packed, None, "none", [], "")


@dataclass
class _Layer:
    input_norm: torch.Tensor
    qkv_proj: Linear
    o_proj: Linear
    post_norm: torch.Tensor
    gate_up_proj: Linear
    down_proj: Linear

    @classmethod
    def of(cls, w: LayerWeights, pages=None) -> _Layer:
        return cls(
            w.input_norm,
            Linear(w.q_proj, w.k_proj, w.v_proj, pages=pages),
            Linear(w.o_proj, pages=pages),
            w.post_norm,
            Linear(w.gate_proj, w.up_proj, pages=pages),
            Linear(w.down_proj, pages=pages),
        )


def _heads(x: torch.Tensor, num_heads: int, head_dim: int) -> torch.Tensor:
    return x.view(x.shape[0], num_heads, head_dim)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    dtype = x.dtype
    x = x.to(torch.float32)
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x.to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """HF's ``x * cos + rotate_half(x) * sin`` in four ops instead of five: the halves are
    swapped by one flip, and rotate_half's minus sign lives in ``signed_sin`` (``RotaryTable``),
    which gives the same bits, since ``(-a) * b == a * (-b)`` exactly."""
    t, heads, d = x.shape
    swapped = x.view(t, heads, 2, d // 2).flip(2).view(t, heads, d)
    return x * cos + swapped * signed_sin


class RotaryTable:
    """cos/sin for every position, computed once the way HF computes them per call; ``sin``'s
    first half negated for ``apply_rope``."""

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
        sin = emb.sin() * scaling
        sin[:, : sin.shape[1] // 2].neg_()
        self.sin = sin.to(device=device, dtype=dtype)

    def lookup(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``[T]`` positions -> cos, signed sin ``[T, 1, D]`` (broadcast over heads)."""
        return self.cos[positions].unsqueeze(1), self.sin[positions].unsqueeze(1)


class LlamaForward:
    """``forward(input_ids, positions, kv_caches, meta, logits_indices) -> logits``."""

    def __init__(
        self, weights: ModelWeights, attention: Attention, device: torch.device, dtype: torch.dtype
    ) -> None:
        self.w = weights
        c = weights.config
        self.attention = attention
        if weights.prepared is None:
            pages = _huge_pages(weights.embed)
            weights.prepared = (
                [_Layer.of(x, pages) for x in weights.layers],
                Linear(weights.lm_head, pages=pages),
            )
        self.layers, self.lm_head = weights.prepared
        self.rope = RotaryTable(
            weights.inv_freq, weights.rope_scaling, c.max_position_embeddings, device, dtype
        )
        # every projection runs in paged/kernels/cpu.c: so do the steps between them
        self.fused = self.lm_head._kernel is not None and self.rope.cos.dtype == torch.float32

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
        if self.fused:
            return self._forward_fused(input_ids, positions, kv_caches, meta, logits_indices)
        c, w = self.w.config, self.w
        t, heads = input_ids.shape[0], c.num_heads + c.num_kv_heads
        cos, sin = self.rope.lookup(positions)
        h = F.embedding(input_ids, w.embed)
        for layer, (k_cache, v_cache) in zip(self.layers, kv_caches, strict=True):
            x = rms_norm(h, layer.input_norm, c.rms_norm_eps)
            qkv = layer.qkv_proj(x)
            # q and k side by side take their rotation together
            qk = apply_rope(_heads(qkv[:, : c.head_dim * heads], heads, c.head_dim), cos, sin)
            q, k = qk[:, : c.num_heads], qk[:, c.num_heads :]
            v = _heads(qkv[:, c.head_dim * heads :], c.num_kv_heads, c.head_dim)
            o = self.attention(q, k, v, k_cache, v_cache, meta)
            h = h + layer.o_proj(o.reshape(t, -1))
            x = rms_norm(h, layer.post_norm, c.rms_norm_eps)
            gate, up = layer.gate_up_proj(x).chunk(2, dim=-1)
            h = h + layer.down_proj(F.silu(gate) * up)
        h = rms_norm(h[logits_indices], w.final_norm, c.rms_norm_eps)
        return self.lm_head(h)

    def _forward_fused(self, input_ids, positions, kv_caches, meta, logits_indices):
        """``forward`` with the steps between the projections in ``paged/kernels/cpu.c`` too: one
        pass each for RMSNorm, RoPE and SiLU * up, and the residual adds done by the matmuls
        that produce them. Each keeps torch's rounding (cpu.c says how), so only the matmuls'
        and attention's summation orders differ from the torch path."""
        from paged.kernels import cpu

        c, w = self.w.config, self.w
        h = F.embedding(input_ids, w.embed)
        step = cpu.LayerStep(
            h, positions, self.rope.cos, self.rope.sin, c.num_heads, c.num_kv_heads, c.rms_norm_eps
        )
        step.norm(self.layers[0].input_norm)
        for i, (layer, (k_cache, v_cache)) in enumerate(zip(self.layers, kv_caches, strict=True)):
            step.qkv_rope(layer.qkv_proj.kernel)
            o = self.attention(step.q, step.k, step.v, k_cache, v_cache, meta)
            step.add(layer.o_proj.kernel, o)
            step.norm(layer.post_norm)
            step.mlp(layer.gate_up_proj.kernel, layer.down_proj.kernel)
            if i + 1 < len(self.layers):
                step.norm(self.layers[i + 1].input_norm)
        return self.lm_head(cpu.rms_norm(h[logits_indices], w.final_norm, c.rms_norm_eps))
