"""Our compact Llama forward over a flat token batch.

All tokens scheduled in a step (prefill chunks and decode tokens of every sequence) form one
``[T, hidden]`` tensor, so each projection is a single matmul per layer; only attention looks at
sequences separately, through their block tables. The numerics mirror HF's ``LlamaForCausalLM``
(fp32 rsqrt RMSNorm, rotate-half RoPE on ``cat(freqs, freqs)``, scale ``1/sqrt(head_dim)``) so
that greedy decoding is token-exact with HF ``generate`` in fp32. The steps run on the backend
``paged/engine/model/steps.py`` chooses once per run: paged/kernels/cpu.c on a CPU, plain torch
elsewhere.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from paged.engine.model.attention import Attention, AttentionMetadata
from paged.engine.model.steps import RotaryTable, choose
from paged.engine.model.weights import ModelWeights


class LlamaForward:
    """``forward(input_ids, positions, kv_caches, meta, logits_indices) -> logits``."""

    def __init__(
        self, weights: ModelWeights, attention: Attention, device: torch.device, dtype: torch.dtype
    ) -> None:
        self.w = weights
        self.attention = attention
        self.steps = choose(attention.backend, device, dtype)
        # Packed on CPU, the projections are as large as the weights: made once per backend
        # and shared by every later forward, so two LLMs over one model hold one copy.
        if self.steps.name not in weights.prepared:
            weights.prepared[self.steps.name] = self.steps.prepare(weights)
        self.layers, self.lm_head = weights.prepared[self.steps.name]
        self.rope = RotaryTable(
            weights.inv_freq,
            weights.rope_scaling,
            weights.config.max_position_embeddings,
            device,
            self.steps.activations or dtype,
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
        h = F.embedding(input_ids, self.w.embed)
        s = self.steps.begin(h, positions, self.rope, self.w.config)
        for layer, (k_cache, v_cache) in zip(self.layers, kv_caches, strict=True):
            x = s.norm(layer.input_norm)
            q, k, v = s.rope(s.linear(layer.qkv_proj, x))
            o = self.attention(q, k, v, k_cache, v_cache, meta)
            s.residual(layer.o_proj, o)
            x = s.norm(layer.post_norm)
            s.residual(layer.down_proj, s.silu_mul(s.linear(layer.gate_up_proj, x)))
        return s.logits(logits_indices, self.w.final_norm, self.lm_head)
