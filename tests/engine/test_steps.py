"""The forward's steps (paged/engine/model/steps.py): the torch steps are HF's ops bit for bit,
and the C steps compute what the torch steps compute, each step on the same input, to float32
rounding (bit for bit where cpu.c keeps torch's rounding)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from paged.engine.model.steps import (
    CBf16Steps,
    CSteps,
    Layer,
    RotaryTable,
    TorchLinear,
    TorchPass,
    TorchSteps,
    apply_rope,
    choose,
)
from paged.engine.model.weights import LayerWeights, ModelConfig
from paged.kernels import cpu

needs_c = pytest.mark.skipif(cpu.load() is None, reason=f"no CPU kernels: {cpu.why()}")


def hf_rope(x, cos, sin):
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


def test_rope_in_four_ops_gives_hfs_bits():
    c = 64
    inv_freq = 1.0 / (100000 ** (torch.arange(0, c, 2, dtype=torch.float32) / c))
    table = RotaryTable(inv_freq, 1.0, 512, torch.device("cpu"), torch.float32)
    pos = torch.randint(0, 512, (40,), generator=torch.Generator().manual_seed(2))
    freqs = pos[:, None].float() * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    hf_cos, hf_sin = emb.cos()[:, None], emb.sin()[:, None]
    x = torch.randn(40, 12, 960 // 12)[..., :c]  # a strided slice, as q|k of a fused projection
    cos, signed_sin = table.lookup(pos)
    assert torch.equal(apply_rope(x, cos, signed_sin), hf_rope(x, hf_cos, hf_sin))


def test_torch_projections_are_hfs_separate_matmuls_side_by_side():
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(8, 4, generator=g), torch.randn(3, 4, generator=g)
    x = torch.randn(5, 4, generator=g)
    assert torch.equal(TorchLinear(a, b)(x), torch.cat([F.linear(x, a), F.linear(x, b)], dim=-1))


def test_c_steps_only_for_the_c_kernels_on_a_float32_or_bfloat16_cpu():
    cpu_dev = torch.device("cpu")
    assert type(choose("cpu", cpu_dev, torch.float32)) is CSteps
    assert type(choose("cpu", cpu_dev, torch.bfloat16)) is CBf16Steps
    for backend, dtype in (("torch", torch.float32), ("torch", torch.bfloat16)):
        assert isinstance(choose(backend, cpu_dev, dtype), TorchSteps)
    assert isinstance(choose("cpu", cpu_dev, torch.float16), TorchSteps)
    assert isinstance(choose("triton", torch.device("cuda"), torch.float32), TorchSteps)


HEADS, KV_HEADS, D, HIDDEN, INTER = 3, 1, 32, 96, 64


def _layer(g: torch.Generator) -> LayerWeights:
    def w(*shape):
        return torch.randn(*shape, generator=g) / shape[-1] ** 0.5

    return LayerWeights(
        torch.rand(HIDDEN, generator=g) + 0.5,
        w(HEADS * D, HIDDEN),
        w(KV_HEADS * D, HIDDEN),
        w(KV_HEADS * D, HIDDEN),
        w(HIDDEN, HEADS * D),
        torch.rand(HIDDEN, generator=g) + 0.5,
        w(INTER, HIDDEN),
        w(INTER, HIDDEN),
        w(HIDDEN, INTER),
    )


def _config() -> ModelConfig:
    return ModelConfig(1, HIDDEN, HEADS, KV_HEADS, D, 50, 1e-5, 256, None)


def _close(a, b):
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


@needs_c
@pytest.mark.parametrize("t", [1, 5, 70])
def test_each_c_step_computes_what_the_torch_step_computes(t):
    g = torch.Generator().manual_seed(t)
    w, c = _layer(g), _config()
    inv_freq = 1.0 / (100000 ** (torch.arange(0, D, 2, dtype=torch.float32) / D))
    table = RotaryTable(inv_freq, 1.0, 256, torch.device("cpu"), torch.float32)
    pos = torch.randint(0, 256, (t,), generator=g)
    h = torch.randn(t, HIDDEN, generator=g)
    ours = TorchPass(h.clone(), pos, table, c)
    theirs = CSteps().begin(h.clone(), pos, table, c)
    tl = Layer.of(w, TorchLinear)
    cl = Layer.of(w, lambda *ws: cpu.PackedLinear(torch.cat(ws)))

    x = ours.norm(w.input_norm)
    _close(theirs.norm(w.input_norm), x)
    qkv = ours.linear(tl.qkv_proj, x)
    _close(theirs.linear(cl.qkv_proj, x.contiguous()), qkv)
    for a, b in zip(ours.rope(qkv), theirs.rope(qkv.contiguous()), strict=True):
        assert torch.equal(a, b)  # cpu.c rotates with torch's rounding
    o = torch.randn(t, HEADS, D, generator=g)
    ours.residual(tl.o_proj, o)
    theirs.residual(cl.o_proj, o)
    _close(theirs.h, ours.h)
    gate_up = ours.linear(tl.gate_up_proj, ours.norm(w.post_norm))
    act = ours.silu_mul(gate_up)
    _close(theirs.silu_mul(gate_up.contiguous()), act)
    rows = torch.tensor([t - 1])
    head = torch.randn(50, HIDDEN, generator=g)
    _close(
        theirs.logits(rows, w.post_norm, cpu.PackedLinear(head)),
        ours.logits(rows, w.post_norm, TorchLinear(head)),
    )


@needs_c
@pytest.mark.parametrize("rows", [1, 16, 17, 300])
def test_one_packed_matmul_for_several_weights_gives_the_bits_of_separate_ones(rows):
    g = torch.Generator().manual_seed(rows)
    q, k, v = (torch.randn(n, 576, generator=g) for n in (576, 192, 192))
    x = torch.randn(rows, 576, generator=g)
    got = cpu.PackedLinear(torch.cat((q, k, v)))(x)
    alone = torch.cat([cpu.PackedLinear(w)(x) for w in (q, k, v)], dim=-1)
    assert got.shape == (rows, 960)
    assert torch.equal(got, alone)


@needs_c
def test_bf16_c_steps_are_the_float32_steps_of_the_bfloat16_weights():
    """A bfloat16 model's C steps: float32 activations and residual stream, bfloat16 weights;
    within bfloat16 input rounding of the float32 steps on the same (rounded) weights."""
    g = torch.Generator().manual_seed(9)
    w, c, t = _layer(g), _config(), 6
    inv_freq = 1.0 / (100000 ** (torch.arange(0, D, 2, dtype=torch.float32) / D))
    table = RotaryTable(inv_freq, 1.0, 256, torch.device("cpu"), torch.float32)
    pos = torch.randint(0, 256, (t,), generator=g)
    h = torch.randn(t, HIDDEN, generator=g)
    rounded = LayerWeights(*(x.bfloat16().float() for x in vars(w).values()))
    ref = TorchPass(h.clone(), pos, table, c)
    ours = CBf16Steps().begin(h.bfloat16(), pos, table, c)
    assert ours.h.dtype == torch.float32
    tl = Layer.of(rounded, TorchLinear)
    cl = Layer.of(w, lambda *ws: cpu.PackedLinear(torch.cat(ws), None, torch.bfloat16))
    ref.h = h.bfloat16().float()
    x = ours.norm(rounded.input_norm)
    q, k, v = ours.rope(ours.linear(cl.qkv_proj, x))
    want = ref.rope(ref.linear(tl.qkv_proj, ref.norm(rounded.input_norm)))
    for a, b in zip((q, k, v), want, strict=True):
        assert a.dtype == torch.float32
        torch.testing.assert_close(a, b, rtol=0.02, atol=0.02)
    ours.residual(cl.o_proj, q)
    ref.residual(tl.o_proj, q)
    torch.testing.assert_close(ours.h, ref.h, rtol=0.02, atol=0.02)
