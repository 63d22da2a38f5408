"""Shared launcher helpers for the Triton kernels.

On CPU tensors the kernels run through Triton's interpreter, which must be chosen with
``TRITON_INTERPRET=1`` *before the first* ``import triton``: Triton's own library functions
(``tl.zeros``, ``tl.max``...) are decorated at that import, in whichever mode was set then.
"""

from __future__ import annotations

import torch
import triton.language as tl

try:  # private to Triton, stable across 3.x
    from triton.runtime.interpreter import InterpretedFunction
except ImportError:  # pragma: no cover
    InterpretedFunction = ()


def interpreter_active() -> bool:
    """True when Triton was imported in interpreter mode, so kernels can run on CPU tensors."""
    return isinstance(tl.zeros, InterpretedFunction)


def check_device(x: torch.Tensor) -> None:
    """Raise a clear error instead of Triton's when CPU tensors meet compiled kernels."""
    if x.device.type == "cpu" and not interpreter_active():
        raise RuntimeError(
            "Triton kernels on CPU tensors need TRITON_INTERPRET=1 set before "
            "triton is first imported; or use kernels.reference"
        )


def next_pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()
