"""The model as this engine holds it: shape facts and weight tensors, apart from how they load.

The loader builds these from transformers, the model cache from its own files; the forward, the
arena and the cache read them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass(frozen=True)
class ModelConfig:
    """The shape facts the forward, the arena and the engine need."""

    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    rms_norm_eps: float
    max_position_embeddings: int
    eos_token_id: int | None
    #: Every id that ends a sequence (config.json's and generation_config.json's, as HF and
    #: vLLM stop on any of them: Llama 3 Instruct ends a turn with one of three); () means
    #: just ``eos_token_id``, as in a cache's engine.json written before this field existed.
    stop_token_ids: tuple[int, ...] = ()

    @property
    def stop_ids(self) -> tuple[int, ...]:
        """The ids a sequence stops at: ``stop_token_ids``, else ``eos_token_id`` alone."""
        if self.stop_token_ids:
            return tuple(self.stop_token_ids)
        return () if self.eos_token_id is None else (self.eos_token_id,)


@dataclass
class LayerWeights:
    # HF's separate projections, as loaded. The C steps join q/k/v (and gate/up) into one
    # packed matmul (paged/engine/model/steps.py: same bits as apart); with MKL's sgemm the
    # joined matmul measured slower at decode batch sizes.
    input_norm: torch.Tensor
    q_proj: torch.Tensor
    k_proj: torch.Tensor
    v_proj: torch.Tensor
    o_proj: torch.Tensor
    post_norm: torch.Tensor
    gate_proj: torch.Tensor
    up_proj: torch.Tensor
    down_proj: torch.Tensor


@dataclass
class ModelWeights:
    config: ModelConfig
    embed: torch.Tensor
    layers: list[LayerWeights]
    final_norm: torch.Tensor
    lm_head: torch.Tensor  # the embedding itself when tied
    inv_freq: torch.Tensor  # RoPE inverse frequencies exactly as HF computed them (fp32)
    rope_scaling: float  # HF's "attention_scaling" applied to cos/sin
    #: The projections as each steps backend runs them (paged/engine/model/steps.py), by its
    #: name; made by the first forward over these weights on that backend.
    prepared: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def tied(self) -> bool:
        """The head is the embedding itself (one tensor), as in SmolLM2."""
        return self.lm_head.data_ptr() == self.embed.data_ptr()


#: Our LayerWeights fields and where HF's Llama decoder layer keeps each weight.
LAYER_NAMES = {
    "input_norm": "input_layernorm",
    "q_proj": "self_attn.q_proj",
    "k_proj": "self_attn.k_proj",
    "v_proj": "self_attn.v_proj",
    "o_proj": "self_attn.o_proj",
    "post_norm": "post_attention_layernorm",
    "gate_proj": "mlp.gate_proj",
    "up_proj": "mlp.up_proj",
    "down_proj": "mlp.down_proj",
}
