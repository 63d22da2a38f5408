"""The forward's steps between attentions, on one backend chosen per run.

``LlamaForward.forward`` (paged/engine/model/llama.py) is written once, as the model's steps:
norm, q/k/v projection, RoPE, attention, o-projection into the residual, norm, gate/up, SiLU·up,
down-projection into the residual. Each step is a method of a *pass* (one forward's buffers and
inputs), and a pass comes from one of two backends:

- ``CSteps``: paged/kernels/cpu.c on a float32 CPU, where it builds: weights packed once into
  panels (``cpu.PackedLinear``), one C call per step, a residual add done by the matmul
  that produces it (``cpu.Pass``); ``CBf16Steps`` the same for a bfloat16 model, its weights
  packed in bfloat16.
- ``TorchSteps``: plain torch, HF's own ops and order (``F.linear`` per weight, rsqrt RMSNorm,
  rotate-half RoPE): the reference the C steps are held to, and the path on a GPU (cuBLAS),
  on another dtype, or where no C compiler is.

Both give HF's greedy tokens (tests/model/); they differ in the last bits of a logit, since the C
matmul sums in another order than MKL's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch
import torch.nn.functional as F

from paged.engine.model.weights import LayerWeights, ModelConfig, ModelWeights


class Pass(Protocol):
    """One forward's steps; ``h`` is the residual stream ``[T, hidden]``, updated in place."""

    h: torch.Tensor

    def norm(self, weight: torch.Tensor) -> torch.Tensor: ...
    def linear(self, proj: Any, x: torch.Tensor) -> torch.Tensor: ...
    def rope(self, qkv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]: ...
    def residual(self, proj: Any, x: torch.Tensor) -> None: ...
    def silu_mul(self, gate_up: torch.Tensor) -> torch.Tensor: ...
    def logits(self, rows: torch.Tensor, norm: torch.Tensor, head: Any) -> torch.Tensor: ...


@dataclass
class Layer:
    """A layer's weights as its backend's steps take them: q/k/v joined into one projection,
    gate/up into another."""

    input_norm: torch.Tensor
    qkv_proj: Any
    o_proj: Any
    post_norm: torch.Tensor
    gate_up_proj: Any
    down_proj: Any

    @classmethod
    def of(cls, w: LayerWeights, proj: Callable[..., Any]) -> Layer:
        return cls(
            w.input_norm,
            proj(w.q_proj, w.k_proj, w.v_proj),
            proj(w.o_proj),
            w.post_norm,
            proj(w.gate_proj, w.up_proj),
            proj(w.down_proj),
        )


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """HF's LlamaRMSNorm: in float32, rsqrt of the mean square."""
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


class TorchLinear:
    """``x @ w.T`` for each of ``weights`` (which share their input), side by side: one
    ``F.linear`` each, as HF's separate projections, since MKL's joined matmul measured slower
    at decode batch sizes and would sum in another order."""

    def __init__(self, *weights: torch.Tensor) -> None:
        self.weights = weights

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if len(self.weights) == 1:
            return F.linear(x, self.weights[0])
        return torch.cat([F.linear(x, w) for w in self.weights], dim=-1)


class TorchPass:
    """The steps in plain torch, HF's ops in HF's order."""

    def __init__(self, h: torch.Tensor, positions: torch.Tensor, rope: RotaryTable, c: ModelConfig):
        self.h, self.c = h, c
        self.cos, self.sin = rope.lookup(positions)

    def norm(self, weight: torch.Tensor) -> torch.Tensor:
        return rms_norm(self.h, weight, self.c.rms_norm_eps)

    def linear(self, proj: TorchLinear, x: torch.Tensor) -> torch.Tensor:
        return proj(x)

    def rope(self, qkv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        c, t = self.c, qkv.shape[0]
        heads = c.num_heads + c.num_kv_heads
        # q and k side by side take their rotation together
        qk = apply_rope(qkv[:, : c.head_dim * heads].view(t, heads, c.head_dim), self.cos, self.sin)
        v = qkv[:, c.head_dim * heads :].view(t, c.num_kv_heads, c.head_dim)
        return qk[:, : c.num_heads], qk[:, c.num_heads :], v

    def residual(self, proj: TorchLinear, x: torch.Tensor) -> None:
        self.h = self.h + proj(x.reshape(self.h.shape[0], -1))

    def silu_mul(self, gate_up: torch.Tensor) -> torch.Tensor:
        gate, up = gate_up.chunk(2, dim=-1)
        return F.silu(gate) * up

    def logits(self, rows: torch.Tensor, norm: torch.Tensor, head: TorchLinear) -> torch.Tensor:
        return head(rms_norm(self.h[rows], norm, self.c.rms_norm_eps))


class TorchSteps:
    name = "torch"
    activations: torch.dtype | None = None  # the model's own

    def prepare(self, weights: ModelWeights) -> tuple[list[Layer], Any]:
        return [Layer.of(w, TorchLinear) for w in weights.layers], TorchLinear(weights.lm_head)

    def begin(
        self, h: torch.Tensor, positions: torch.Tensor, rope: RotaryTable, c: ModelConfig
    ) -> Pass:
        return TorchPass(h, positions, rope, c)


class CSteps:
    """cpu.c's steps on float32 weights and activations."""

    name = "cpu"
    #: the dtype the steps' activations and the rotary table are in
    activations = torch.float32
    weights = torch.float32

    def prepare(self, weights: ModelWeights) -> tuple[list[Layer], Any]:
        from paged.kernels.cpu import HugePages, PackedLinear

        pages = HugePages()

        def packed(*ws: torch.Tensor) -> PackedLinear:
            return PackedLinear(torch.cat(ws) if len(ws) > 1 else ws[0], pages, self.weights)

        layers = [Layer.of(w, packed) for w in weights.layers]
        for layer in layers:  # the norms run in float32 (HF's RMSNorm does too)
            layer.input_norm = layer.input_norm.to(torch.float32)
            layer.post_norm = layer.post_norm.to(torch.float32)
        return layers, packed(weights.lm_head)

    def begin(
        self, h: torch.Tensor, positions: torch.Tensor, rope: RotaryTable, c: ModelConfig
    ) -> Pass:
        from paged.kernels.cpu import Pass as CPass

        return CPass(
            h.to(torch.float32), positions, rope.cos, rope.sin, c.num_heads, c.num_kv_heads,
            c.rms_norm_eps,
        )  # fmt: skip


class CBf16Steps(CSteps):
    """cpu.c's steps for a bfloat16 model: bfloat16 weights (half the bytes a decode step
    streams) through the bf16 matmul (cpu.c section 4), every activation between steps in
    float32, as is every sum. Float32 activations are the cheap side here: a decode step at
    batch 16 moves ~0.1 MB of them beside 270 MB of bfloat16 weights, so bfloat16 ones would
    save nothing a step's time shows, and they would add a rounding at every step (norm,
    RoPE, SiLU, the residual stream). The matmul rounds its input to bfloat16 itself where the
    CPU's dot product takes it. q/k/v go to attention in float32 too: the C attention kernel
    stores k and v rounded to bfloat16 (the arena is bfloat16, half the bytes of float32 per
    block) and reads them back widened, every sum in float32."""

    name = "cpu-bf16"
    weights = torch.bfloat16


def choose(attention: str, device: torch.device, dtype: torch.dtype) -> TorchSteps | CSteps:
    """The steps backend of a run: C where the attention backend is the C kernel (it chose the
    C kernels, which build here) and the model is float32 or bfloat16 on the CPU; torch
    otherwise."""
    if attention == "cpu" and device.type == "cpu":
        if dtype == torch.float32:
            return CSteps()
        if dtype == torch.bfloat16:
            return CBf16Steps()
    return TorchSteps()
