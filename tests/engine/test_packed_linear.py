"""The forward's projections: a weight packed once (for paged/kernels/cpu.c, or for oneDNN where it
does not build) computes what F.linear computes, at every batch size a step can have, up to fp32
rounding; anything neither can take stays F.linear, bit for bit."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from paged.engine.model.llama import Linear, RotaryTable, apply_rope
from paged.kernels import cpu

needs_onednn = pytest.mark.skipif(
    not torch.backends.mkldnn.is_available(), reason="torch built without oneDNN"
)


def test_the_c_kernel_packs_the_weights_where_it_builds_else_onednn():
    lin = Linear(torch.randn(96, 8))
    assert (lin._kernel is not None) == (cpu.load() is not None)
    if torch.backends.mkldnn.is_available():
        assert (lin._packed is not None) == (cpu.load() is None)
        assert Linear(torch.randn(96, 8), kernel=False)._packed is not None


PATHS = [
    pytest.param(True, marks=pytest.mark.skipif(cpu.load() is None, reason="no CPU kernels")),
    pytest.param(False, marks=needs_onednn),
]


@pytest.mark.parametrize("kernel", PATHS)
@pytest.mark.parametrize("rows", [1, 3, 16, 17, 300])
def test_packed_weight_matches_f_linear_at_any_batch_size(rows, kernel):
    g = torch.Generator().manual_seed(rows)
    w = torch.randn(1536, 576, generator=g)
    x = torch.randn(rows, 576, generator=g)
    lin = Linear(w, kernel=kernel)
    assert lin._packed is not None or lin._kernel is not None
    with torch.inference_mode():
        got = lin(x)
    assert got.shape == (rows, 1536)
    torch.testing.assert_close(got, F.linear(x, w), rtol=1e-5, atol=1e-4)


def test_weights_onednn_does_not_take_stay_f_linear_bit_for_bit():
    g = torch.Generator().manual_seed(0)
    w = torch.randn(64, 32, generator=g, dtype=torch.float64)
    x = torch.randn(5, 32, generator=g, dtype=torch.float64)
    lin = Linear(w)
    assert lin._packed is None
    assert torch.equal(lin(x), F.linear(x, w))


@pytest.mark.parametrize("kernel", PATHS)
@pytest.mark.parametrize("rows", [1, 16, 17, 300])
def test_one_matmul_for_several_weights_gives_the_bits_of_separate_ones(rows, kernel):
    g = torch.Generator().manual_seed(rows)
    q, k, v = (torch.randn(n, 576, generator=g) for n in (576, 192, 192))
    x = torch.randn(rows, 576, generator=g)
    fused = Linear(q, k, v, kernel=kernel)
    with torch.inference_mode():
        got = fused(x)
        alone = torch.cat([Linear(w, kernel=kernel)(x) for w in (q, k, v)], dim=-1)
    assert got.shape == (rows, 960)
    assert torch.equal(got, alone)


def test_several_weights_without_onednn_are_hfs_separate_matmuls_side_by_side():
    g = torch.Generator().manual_seed(1)
    a, b = (
        torch.randn(8, 4, generator=g, dtype=torch.float64),
        torch.randn(3, 4, dtype=torch.float64),
    )
    x = torch.randn(5, 4, generator=g, dtype=torch.float64)
    assert torch.equal(Linear(a, b)(x), torch.cat([F.linear(x, a), F.linear(x, b)], dim=-1))


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
