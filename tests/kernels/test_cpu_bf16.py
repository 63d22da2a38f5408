"""The bfloat16 matmul of paged/kernels/cpu.c (section 4) against the float32 product of the same
bfloat16 weights: with avx512_bf16 the input is rounded to bfloat16 too (the dot-product
instruction takes bfloat16 pairs), without it the input stays float32 and the weights are
widened. Both sum in float32, so each is within float32 rounding of its exact product. The
widening fallback is built here too, by turning the instruction off, where this CPU has it."""

from __future__ import annotations

import ctypes
import shutil
import subprocess

import pytest
import torch

from paged.kernels import cpu

pytestmark = pytest.mark.skipif(cpu.load() is None, reason=f"no CPU kernels: {cpu.why()}")


def _expected(x: torch.Tensor, w: torch.Tensor, rounds_input: bool) -> torch.Tensor:
    xs = x.bfloat16().double() if rounds_input else x.double()
    return (xs @ w.bfloat16().double().T).float()


def _close(got: torch.Tensor, want: torch.Tensor) -> None:
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("rows", [1, 5, 8, 16, 17, 300])
@pytest.mark.parametrize(("n", "k"), [(96, 64), (100, 70), (49, 576)])
def test_bf16_matmul_is_the_float32_product_of_bfloat16_weights(rows, n, k):
    g = torch.Generator().manual_seed(rows * 1000 + n)
    w = torch.randn(n, k, generator=g) / k**0.5
    x = torch.randn(rows, k, generator=g)
    for pages in (None, cpu.HugePages()):
        proj = cpu.PackedLinear(w, pages, torch.bfloat16)
        _close(proj(x), _expected(x, w, cpu.bf16_native()))


def test_bf16_matmul_adds_into_the_residual_as_a_separate_add():
    g = torch.Generator().manual_seed(3)
    w, x = torch.randn(200, 128, generator=g), torch.randn(12, 128, generator=g)
    h = torch.randn(12, 200, generator=g)
    proj = cpu.PackedLinear(w, None, torch.bfloat16)
    assert torch.equal(proj(x, h.clone()), h + proj(x))


def test_bf16_weights_halve_the_packed_bytes_and_need_an_even_width():
    w = torch.randn(100, 64)
    f32 = cpu.PackedLinear(w).packed
    bf16 = cpu.PackedLinear(w, None, torch.bfloat16).packed
    assert bf16.numel() * bf16.element_size() * 2 == f32.numel() * f32.element_size()
    with pytest.raises(ValueError, match="even number"):
        cpu.PackedLinear(torch.randn(8, 7), None, torch.bfloat16)


@pytest.mark.skipif(not cpu.bf16_native(), reason="this CPU builds the widening path already")
def test_the_widening_fallback_gives_the_float32_product_too(tmp_path):
    compiler = shutil.which("gcc") or shutil.which("cc")
    if compiler is None:
        pytest.skip("no C compiler")
    out = tmp_path / "widen.so"
    flags = [f for f in cpu.FLAGS if f != "-shared"]
    subprocess.run(
        [compiler, *flags, "-mno-avx512bf16", "-shared", str(cpu.SOURCE), "-o", str(out)]
        + ["-lmvec", "-lm"],
        check=True,
        capture_output=True,
    )
    lib = cpu._bind(ctypes.CDLL(str(out)))
    assert lib.linear_bf16_native() == 0
    g = torch.Generator().manual_seed(5)
    w, x = torch.randn(100, 96, generator=g) / 10, torch.randn(17, 96, generator=g)
    packed = cpu.pack_weight(w, None, torch.bfloat16)
    got = torch.empty(17, 100)
    lib.linear_bf16(x.data_ptr(), packed.data_ptr(), got.data_ptr(), 17, 100, 96, 0, 2)
    _close(got, _expected(x, w, rounds_input=False))
