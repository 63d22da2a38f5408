"""The forward's projections: a weight packed once for oneDNN computes what F.linear computes,
at every batch size a step can have, up to fp32 rounding; anything oneDNN cannot take stays
F.linear, bit for bit."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from engine.model.llama import Linear

needs_onednn = pytest.mark.skipif(
    not torch.backends.mkldnn.is_available(), reason="torch built without oneDNN"
)


@needs_onednn
@pytest.mark.parametrize("rows", [1, 3, 16, 17, 300])
def test_packed_weight_matches_f_linear_at_any_batch_size(rows):
    g = torch.Generator().manual_seed(rows)
    w = torch.randn(1536, 576, generator=g)
    x = torch.randn(rows, 576, generator=g)
    lin = Linear(w)
    assert lin._packed is not None
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
