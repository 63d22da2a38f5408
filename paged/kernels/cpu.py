"""The CPU kernels in C (``paged/kernels/cpu.c``), built once with the system's C compiler
and called through ctypes; each is held to its plain-torch reference in ``paged/kernels/reference.py``.

Why C and not torch ops: a decode step's attention in torch is a gather of every request's K/V
into a new tensor and an SDPA call made for long queries; on this project's 2-core CPU that was
a third of a decode step at ~300 tokens of context. The C kernel reads each K/V row where the
arena holds it, through the block table, as the Triton kernel does on a GPU.

The shared library is built on first use (about a second) into a cache folder keyed by the
source, the compiler and its flags, and this CPU (``-march=native``: a library built for another
CPU's instructions could crash here): ``$PAGED_KERNEL_CACHE``, else ``cpu-kernels/`` under
``$XDG_CACHE_HOME/seeing-pagedattention`` or ``~/.cache/seeing-pagedattention``. The folder is
private and a library is loaded only when it hashes to what this user's build recorded
(``paged/kernels/build_cache.py``); it is written under a temporary name and renamed, so
concurrent first uses (test workers) never load a half-written file. No compiler, a build that
fails, a cache that cannot be trusted or a library without the kernels leaves ``load()``
returning None with ``why()`` saying why; the engine then runs the torch steps and torch
attention.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import math
import mmap
import os
import platform
import shutil
from pathlib import Path

import torch

from paged.kernels import build_cache

SOURCE = Path(__file__).with_name("cpu.c")
# -march=native: the library is built where it runs; -fno-math-errno lets expf vectorize
FLAGS = ("-O3", "-march=native", "-fopenmp", "-fno-math-errno", "-fPIC", "-shared")
_I64, _I32P, _FP = ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p

_lib: ctypes.CDLL | None = None
_why: str | None = None
_tried = False


def cache_dir() -> Path:
    return build_cache.cache_dir()


def _this_cpu() -> str:
    # the first processor's model and instruction-set flags: what -march=native compiles for
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            text = f.read(1 << 16)
    except OSError:
        return platform.machine() + platform.processor()
    first = text.split("\n\n", 1)[0]
    return "\n".join(
        line for line in first.splitlines() if line.startswith(("model name", "flags", "Features"))
    )


def _name(compiler: str) -> str:
    """The library's name in the cache: its source, compiler, flags and this CPU."""
    salt = "\0".join((compiler, *FLAGS, _this_cpu())).encode()
    return "cpu-" + hashlib.sha256(SOURCE.read_bytes() + salt).hexdigest()[:16]


def load() -> ctypes.CDLL | None:
    """The built library, or None (``why()`` says why). Builds it on the first call; never
    raises: whatever fails, the engine runs the torch path."""
    global _lib, _why, _tried
    if _tried:
        return _lib
    _tried = True
    compiler = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    if compiler is None:
        _why = "no C compiler (gcc or cc) on PATH"
        return None
    command = [compiler, *FLAGS, str(SOURCE), "-o", "{out}", "-lmvec", "-lm"]
    try:
        _lib = _bind(build_cache.library(_name(compiler), command, cache_dir()))
    except (OSError, AttributeError) as e:  # AttributeError: a kernel symbol is missing
        _why = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
    return _lib


def _bind(lib: ctypes.CDLL) -> ctypes.CDLL:
    f = lib.paged_decode_f32
    f.restype = ctypes.c_int
    f.argtypes = [_FP, _FP, _FP, _I32P, _I64, _I32P, _FP, _FP]
    f.argtypes += [_I64] * 9 + [ctypes.c_float, ctypes.c_int, _FP, ctypes.c_int]
    g = lib.linear_f32
    g.restype = None
    g.argtypes = [_FP, _FP, _FP, _I64, _I64, _I64, ctypes.c_int, ctypes.c_int]
    lib.rms_norm_f32.restype = None
    lib.rms_norm_f32.argtypes = [_FP, _FP, _FP, _I64, _I64, ctypes.c_float, ctypes.c_int]
    lib.rope_f32.restype = None
    lib.rope_f32.argtypes = [_FP] * 6 + [_I64] * 4 + [ctypes.c_int]
    lib.silu_mul_f32.restype = None
    lib.silu_mul_f32.argtypes = [_FP, _FP, _I64, _I64, ctypes.c_int]
    lib.linear_bf16.restype = ctypes.c_int
    lib.linear_bf16.argtypes = g.argtypes
    lib.linear_bf16_native.restype = ctypes.c_int
    lib.linear_bf16_native.argtypes = []
    return lib


def why() -> str | None:
    """Why ``load()`` gave None; None when it has not failed."""
    return _why


#: The arenas the C kernel reads: float32, or bfloat16 widened to float32 as it reads
ARENA_DTYPES = (torch.float32, torch.bfloat16)


def supports(q: torch.Tensor, k_cache: torch.Tensor) -> bool:
    """The C kernel's case: float32 queries on the CPU over a float32 or bfloat16 arena."""
    return (
        q.device.type == "cpu"
        and k_cache.device.type == "cpu"
        and q.dtype == torch.float32
        and k_cache.dtype in ARENA_DTYPES
    )


#: The most positions a tile holds (MAX_TILE in cpu.c)
MAX_TILE = 256
#: Positions per split-K split: a longer context is walked by several tasks, merged after
#: (vLLM's paged_attention v2 cuts at 512 too). Fixed, so a row's bits never depend on the batch.
SPLIT_POSITIONS = 512


def tile_of(block_size: int) -> int:
    """Positions per tile: one KV block, or, for a block past MAX_TILE, its largest divisor
    within it, so a tile never spans two blocks' worth of a walk a lesson counts by block."""
    if block_size <= MAX_TILE:
        return block_size
    return next(d for d in range(MAX_TILE, 0, -1) if block_size % d == 0)


class DecodeAttention:
    """``paged_decode_attention`` of ``paged/kernels/reference.py`` on the CPU (float32 queries,
    a float32 or bfloat16 arena): the context walked tile by tile with an online softmax,
    split-K past ``split`` tiles."""

    def __init__(self) -> None:
        lib = load()
        if lib is None:
            raise RuntimeError(f"the CPU attention kernel is unavailable: {why()}")
        self._f = lib.paged_decode_f32
        self._partials = torch.empty(0)
        self.split_used = 0  # tiles per split of the latest call
        self._key: tuple | None = None  # the arguments _convert last converted

    @staticmethod
    def _convert(key: tuple) -> tuple:
        """The call's table width, then its dimensions, tile, split, scale and thread count as
        ctypes objects, which ctypes passes as they are, where it converts a Python number
        afresh at every call (~0.1 µs each); then the partials' float count, tiles per split."""
        width, b, hq, hkv, d, bs, nb, max_len, split, scale, threads = key
        tile = tile_of(bs)
        if split is None:
            split = max(1, SPLIT_POSITIONS // tile)
        need = b * -(-max_len // (tile * split)) * hq * (d + 2) if split > 0 else 0
        dims = tuple(ctypes.c_int64(x) for x in (b, hq, hkv, d, bs, nb, max_len, tile, split))
        return (
            ctypes.c_int64(width),
            (*dims, ctypes.c_float(scale), ctypes.c_int(threads)),
            need,
            split,
        )

    def __call__(
        self,
        q: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        block_tables: torch.Tensor,
        context_lens: torch.Tensor,
        scale: float,
        max_len: int | None = None,
        split: int | None = None,
        stats: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``q`` [B, Hq, D] attends to its request's first ``context_lens[b]`` positions through
        ``block_tables``; -> [B, Hq, D]. ``max_len``: ``context_lens.max()`` when known.
        ``split``: tiles per split-K split (default SPLIT_POSITIONS' worth). ``stats``: a
        float32 tensor of ``walk_shape(...)`` the kernel fills with its walk (cpu.c says
        how), or None."""
        # it runs 30 times a decode step, once per layer: every check below is one of the
        # cheapest torch offers (is_cpu, not device.type; no .to() on what is already int32),
        # and the call's integer arguments are converted to ctypes once per shape, not per call
        b, hq, d = q.shape
        nb, bs, hkv, dk = k_cache.shape
        if not (
            q.is_cpu
            and k_cache.is_cpu
            and v_cache.is_cpu
            and q.dtype == torch.float32
            and k_cache.dtype == v_cache.dtype
            and k_cache.dtype in ARENA_DTYPES
        ):
            raise ValueError(
                "the CPU attention kernel takes float32 CPU queries over a float32 or bfloat16 arena"
            )
        if hq % hkv or d != dk:
            raise ValueError(f"query heads {hq} x {d} do not fit the arena's {hkv} x {dk}")
        if not q.is_contiguous():
            q = q.contiguous()
        tables, lens = block_tables, context_lens
        if tables.dtype != torch.int32 or not tables.is_contiguous():
            tables = tables.to(torch.int32).contiguous()
        if lens.dtype != torch.int32 or not lens.is_contiguous():
            lens = lens.to(torch.int32).contiguous()
        if max_len is None:
            max_len = int(lens.max())
        if stats is not None and (
            stats.shape != walk_shape(b, hq, max_len, bs)
            or stats.dtype != torch.float32
            or not stats.is_contiguous()
        ):
            raise ValueError(f"stats must be float32 {list(walk_shape(b, hq, max_len, bs))}")
        threads = torch.get_num_threads()
        key = (tables.shape[1], b, hq, hkv, d, bs, nb, max_len, split, scale, threads)
        if key != self._key:
            self._key = key
            self._width, self._dims, self._need, self.split_used = self._convert(key)
        if (
            self._partials.numel() < self._need
            or self._partials.is_inference() != torch.is_inference_mode_enabled()
        ):
            self._partials = torch.empty(self._need + self._need // 4)
        out = torch.empty_like(q)
        rc = self._f(
            q.data_ptr(),
            k_cache.data_ptr(),
            v_cache.data_ptr(),
            tables.data_ptr(),
            self._width,
            lens.data_ptr(),
            out.data_ptr(),
            self._partials.data_ptr(),
            *self._dims,
            None if stats is None else stats.data_ptr(),
            k_cache.dtype == torch.bfloat16,
        )
        if rc:
            raise ValueError(
                "a block table entry or context length is out of the arena's range"
                if rc == 2
                else "a context length is empty or longer than its block table"
                if rc == 1
                else f"split {self.split_used} must be a positive number of tiles"
            )
        return out


def walk_shape(batch: int, heads: int, max_len: int, block_size: int) -> tuple[int, ...]:
    """The shape of the kernel's walk record: per row and head, a row of 4 numbers per tile
    and one for the merge."""
    return (batch, heads, -(-max_len // tile_of(block_size)) + 1, 4)


PANEL = 48  # output columns per packed panel: PW in cpu.c


class HugePages:
    """Memory for packed weights, carved from a few large private anonymous maps advised for
    transparent huge pages (``MADV_HUGEPAGE``; where this kernel has THP in ``madvise`` mode,
    as here, memory is not given huge pages otherwise). A decode step streams every weight once:
    with 4 KiB pages that is ~130,000 TLB misses, and a step's matmuls at batch 16 measured
    ~3 ms (10 %) faster from huge pages. Where madvise or THP is missing, the maps are plain
    memory. A map lives as long as any tensor carved from it."""

    CHUNK = 64 << 20

    def __init__(self) -> None:
        self._map: torch.Tensor | None = None
        self._used = 0

    def empty(self, *shape: int) -> torch.Tensor:
        """An uninitialised float32 tensor of ``shape``, 64-byte aligned."""
        n = 4 * math.prod(shape)
        if self._map is None or self._used + n > self._map.numel():
            size = max(self.CHUNK, -(-n // (2 << 20)) * (2 << 20))
            mm = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
            with contextlib.suppress(AttributeError, OSError):
                mm.madvise(mmap.MADV_HUGEPAGE)
            self._map, self._used = torch.frombuffer(mm, dtype=torch.uint8), 0
        out = self._map[self._used : self._used + n].view(torch.float32).view(shape)
        self._used += -(-n // 64) * 64
        return out


def pack_weight(
    weight: torch.Tensor, pages: HugePages | None = None, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """``[N, K]`` -> panels of 48 output columns, the last one padded with zeros; in ``pages``
    when given. float32: ``[ceil(N / 48), K, 48]`` for ``linear_f32``. bfloat16 (K even):
    ``[ceil(N / 48), K / 2, 48, 2]``, k in pairs, for ``linear_bf16`` (cpu.c section 4)."""
    n, k = weight.shape
    panels = -(-n // PANEL)
    padded = torch.zeros(panels * PANEL, k, dtype=dtype)
    padded[:n] = weight
    if dtype == torch.bfloat16:
        if k % 2:
            raise ValueError(f"a bfloat16 weight needs an even number of inputs, got {k}")
        panelled = padded.view(panels, PANEL, k // 2, 2).transpose(1, 2)
        if pages is None:
            return panelled.contiguous()
        out = pages.empty(panels, k // 2, PANEL).view(torch.bfloat16)
        return out.view(panels, k // 2, PANEL, 2).copy_(panelled)
    if dtype != torch.float32:
        raise ValueError(f"the CPU matmul packs float32 or bfloat16 weights, not {dtype}")
    panelled = padded.view(panels, PANEL, k).transpose(1, 2)
    if pages is None:
        return panelled.contiguous()
    return pages.empty(panels, k, PANEL).copy_(panelled)


def bf16_native() -> bool:
    """Whether the built bfloat16 matmul uses the CPU's bf16 dot-product instruction
    (avx512_bf16) rather than widening the weights to float32."""
    lib = load()
    return lib is not None and bool(lib.linear_bf16_native())


class PackedLinear:
    """``x @ weight.T`` through cpu.c, ``weight`` packed once: ``linear_f32``, or, with
    ``dtype=torch.bfloat16``, ``linear_bf16`` (bfloat16 weights, float32 input, output and
    sums)."""

    def __init__(
        self,
        weight: torch.Tensor,
        pages: HugePages | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        lib = load()
        if lib is None:
            raise RuntimeError(f"the CPU matmul kernel is unavailable: {why()}")
        self._f = lib.linear_bf16 if dtype == torch.bfloat16 else lib.linear_f32
        self.dtype = dtype
        self.out_features, self.in_features = weight.shape
        self.packed = pack_weight(weight, pages, dtype)

    def __call__(self, x: torch.Tensor, add_to: torch.Tensor | None = None) -> torch.Tensor:
        """``[M, K]`` float32 -> ``[M, N]``; with ``add_to`` (``[M, N]``, contiguous) the
        product is added to it in place (the same bits as ``add_to + x @ weight.T``) and it is
        returned."""
        _check(x, self.in_features)
        x = x.contiguous()
        m = x.shape[0]
        if add_to is None:
            out = torch.empty(m, self.out_features)
        else:
            if add_to.shape != (m, self.out_features) or not add_to.is_contiguous():
                raise ValueError(f"cannot add [{m}, {self.out_features}] to {list(add_to.shape)}")
            _check(add_to, self.out_features)
            out = add_to
        if m:
            self.run(x, out, add_to is not None, torch.get_num_threads())
        return out

    def run(self, x: torch.Tensor, out: torch.Tensor, add: int, threads: int) -> None:
        """The kernel on checked, contiguous ``x`` and ``out``."""
        if self._f(
            x.data_ptr(), self.packed.data_ptr(), out.data_ptr(), x.shape[0], self.out_features,
            self.in_features, add, threads,
        ):  # fmt: skip
            raise MemoryError("no memory for the bfloat16 matmul's input")


def _check(x: torch.Tensor, width: int) -> None:
    if x.dtype != torch.float32 or x.device.type != "cpu" or x.dim() != 2 or x.shape[1] != width:
        raise ValueError(
            f"the CPU kernels take float32 [rows, {width}] on the CPU, got {x.dtype} "
            f"{list(x.shape)} on {x.device}"
        )


def _lib_or_raise() -> ctypes.CDLL:
    lib = load()
    if lib is None:
        raise RuntimeError(f"the CPU kernels are unavailable: {why()}")
    return lib


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """HF's LlamaRMSNorm of each row of ``x`` [rows, width] float32, in one pass."""
    _check(x, weight.shape[0])
    x, weight = x.contiguous(), weight.contiguous()
    out = torch.empty_like(x)
    _lib_or_raise().rms_norm_f32(
        x.data_ptr(), weight.data_ptr(), out.data_ptr(), x.shape[0], x.shape[1], eps,
        torch.get_num_threads(),
    )  # fmt: skip
    return out


def in_range(positions: torch.Tensor, size: int) -> bool:
    """Every one of ``positions`` is in ``[0, size)``."""
    return not positions.numel() or (int(positions.min()) >= 0 and int(positions.max()) < size)


class Pass:
    """One forward's steps in cpu.c (``paged/engine/model/steps.py`` names them), with every
    buffer made and every shape checked once per forward instead of once per call: at decode
    batch 16 the per-call wrappers above cost ~3 ms of a ~40 ms step. ``h`` (``[T, hidden]``
    float32, the residual stream) is updated in place. A step's output lives in this pass's
    buffers until the next step of its kind (a projection's until the next one of its width)."""

    def __init__(
        self,
        h: torch.Tensor,
        positions: torch.Tensor,
        cos: torch.Tensor,
        signed_sin: torch.Tensor,
        num_heads: int,
        num_kv_heads: int,
        eps: float,
    ) -> None:
        t, hidden = h.shape
        d = cos.shape[1]
        _check(h, hidden)
        if not h.is_contiguous() or cos.shape != signed_sin.shape or not cos.is_contiguous():
            raise ValueError("the residual stream and the rotary tables must be contiguous")
        if cos.dtype != torch.float32 or signed_sin.dtype != torch.float32:
            raise ValueError("the rotary tables must be float32")
        self.positions = positions.to(torch.int64).contiguous()
        if self.positions.shape != (t,) or not in_range(self.positions, cos.shape[0]):
            raise ValueError(f"positions must be {t} values in [0, {cos.shape[0]})")
        self.lib, self.threads = _lib_or_raise(), torch.get_num_threads()
        self.t, self.hidden, self.eps = t, hidden, eps
        self.heads, self.kv_heads, self.head_dim = num_heads, num_kv_heads, d
        self.h, self.cos, self.sin = h, cos, signed_sin
        self.x = torch.empty(t, hidden)
        self.q = torch.empty(t, num_heads, d)
        self.k = torch.empty(t, num_kv_heads, d)
        self._out: dict[int, torch.Tensor] = {}
        self._act: torch.Tensor | None = None

    def norm(self, weight: torch.Tensor) -> torch.Tensor:
        """RMSNorm of ``h`` with ``weight`` ``[hidden]`` float32."""
        if weight.shape != (self.hidden,) or weight.dtype != torch.float32:
            raise ValueError(f"a norm weight must be float32 [{self.hidden}]")
        self.lib.rms_norm_f32(
            self.h.data_ptr(), weight.contiguous().data_ptr(), self.x.data_ptr(), self.t,
            self.hidden, self.eps, self.threads,
        )  # fmt: skip
        return self.x

    def linear(self, proj: PackedLinear, x: torch.Tensor) -> torch.Tensor:
        """``x @ proj.T``."""
        out = self._out.get(proj.out_features)
        if out is None:
            out = self._out[proj.out_features] = torch.empty(self.t, proj.out_features)
        self._linear(proj, x, out, 0)
        return out

    def rope(self, qkv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q and k rotated, and v, from the joined projection ``qkv``."""
        d, width = self.head_dim, (self.heads + 2 * self.kv_heads) * self.head_dim
        if qkv.shape != (self.t, width) or not qkv.is_contiguous():
            raise ValueError(f"q/k/v must be a contiguous [{self.t}, {width}] projection")
        self.lib.rope_f32(
            qkv.data_ptr(), self.cos.data_ptr(), self.sin.data_ptr(),
            self.positions.data_ptr(), self.q.data_ptr(), self.k.data_ptr(), self.t, self.heads,
            self.kv_heads, d, self.threads,
        )  # fmt: skip
        v = qkv[:, (self.heads + self.kv_heads) * d :].view(self.t, self.kv_heads, d)
        return self.q, self.k, v

    def residual(self, proj: PackedLinear, x: torch.Tensor) -> None:
        """``h += x @ proj.T`` (``x`` ``[T, proj.in_features]``), added by the matmul."""
        x = x.reshape(self.t, -1).to(torch.float32).contiguous()
        self._linear(proj, x, self.h, 1)

    def silu_mul(self, gate_up: torch.Tensor) -> torch.Tensor:
        """``silu(gate) * up`` of the joined projection."""
        inter = gate_up.shape[1] // 2
        if gate_up.shape != (self.t, 2 * inter) or not gate_up.is_contiguous():
            raise ValueError(f"gate/up must be a contiguous [{self.t}, even width] projection")
        if self._act is None or self._act.shape[1] != inter:
            self._act = torch.empty(self.t, inter)
        self.lib.silu_mul_f32(gate_up.data_ptr(), self._act.data_ptr(), self.t, inter, self.threads)
        return self._act

    def logits(self, rows: torch.Tensor, norm: torch.Tensor, head: PackedLinear) -> torch.Tensor:
        """``head`` of the final norm of ``h``'s ``rows``."""
        return head(rms_norm(self.h[rows], norm.to(torch.float32), self.eps))

    def _linear(self, proj: PackedLinear, x: torch.Tensor, out: torch.Tensor, add: int) -> None:
        if (
            x.shape != (self.t, proj.in_features)
            or out.shape != (self.t, proj.out_features)
            or not x.is_contiguous()
        ):
            raise ValueError(
                f"a [{proj.out_features}, {proj.in_features}] projection cannot take "
                f"{list(x.shape)} into {list(out.shape)}"
            )
        proj.run(x, out, add, self.threads)
