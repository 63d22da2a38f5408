"""Paged decode attention (Triton) vs contiguous attention (torch SDPA) on one GPU.

For each batch x context: the latency of both over the same K/V, the ratio paged/contiguous, and
achieved bandwidth (K/V bytes read / time) as a share of the device's peak. Before timing, the
compiled kernels are checked against ``paged/kernels/reference.py`` on the GPU (``--no-check`` skips).
Heads default to Llama-3-8B's (Hq 32, Hkv 8, D 128); ``--heads smollm2`` uses SmolLM2-135M's
(9, 3, 64). The contiguous side is SDPA (FlashAttention backend) over ``[B, Hkv, L, D]``
tensors: its best case. Timing is Triton's ``do_bench`` median, L2 flushed between calls.

Without a GPU: ``--dry-run`` prints the plan, ``--compile-only`` compiles every kernel for a CUDA
architecture (Triton's bundled ptxas) to catch what the interpreter cannot: compile errors.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# `python bench/kernel_speed.py` puts bench/ first on sys.path, not the root that holds `paged`
if sys.path and Path(sys.path[0] or ".").resolve() == ROOT / "bench":
    sys.path[0] = str(ROOT)

HEADS = {"llama": (32, 8, 128), "smollm2": (9, 3, 64)}  # Hq, Hkv, head_dim
# HBM bandwidth in GB/s by device-name substring; first match wins, so GH200 precedes H200
# and L40S precedes L4
PEAK_GBPS = [
    ("GH200", 4000),
    ("H200", 4800),
    ("H100 PCIe", 2000),
    ("H100 NVL", 3900),
    ("H100", 3350),
    ("A100 80GB PCIe", 1935),
    ("A100-SXM4-80GB", 2039),
    ("A100", 1555),
    ("L40S", 864),
    ("A10G", 600),
    ("L4", 300),
    ("RTX 4090", 1008),
]
DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


@dataclass
class Row:
    batch: int
    context: int
    kv_mib: float
    paged_us: float = 0.0
    contiguous_us: float = 0.0
    ratio: float = 0.0
    paged_gbps: float = 0.0
    contiguous_gbps: float = 0.0
    paged_peak_pct: float | None = None
    contiguous_peak_pct: float | None = None
    max_abs_err: float = 0.0


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/kernel_speed.py", description=__doc__.splitlines()[0])
    p.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32, 64])
    p.add_argument("--contexts", type=int, nargs="+", default=[512, 2048, 8192])
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--heads", choices=sorted(HEADS), default="llama")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    p.add_argument("--rep-ms", type=int, default=100, help="timing window per measurement")
    p.add_argument("--peak-gbps", type=float, help="device peak bandwidth (default: by name)")
    p.add_argument("--out", default=os.environ.get("OUT"), help="write kernels.md/.csv here ($OUT)")
    p.add_argument("--no-check", action="store_true", help="skip the GPU correctness check")
    p.add_argument("--dry-run", action="store_true", help="print the planned grid and exit")
    p.add_argument(
        "--compile-only",
        action="store_true",
        help="compile every kernel for --arch without a GPU, then exit",
    )
    p.add_argument("--arch", type=int, default=90, help="CUDA capability for --compile-only")
    return p.parse_args(argv)


def kv_bytes(batch: int, context: int, hkv: int, d: int, elem: int) -> int:
    """Bytes one decode step must read: K and V of every cached token."""
    return 2 * batch * context * hkv * d * elem


def plan(args) -> list[Row]:
    _, hkv, d = HEADS[args.heads]
    elem = 4 if args.dtype == "fp32" else 2
    return [
        Row(b, c, kv_bytes(b, c, hkv, d, elem) / 2**20) for b in args.batches for c in args.contexts
    ]


def peak_for(name: str) -> float | None:
    return next((gbps for key, gbps in PEAK_GBPS if key in name), None)


# ------------------------------------------------------------------ GPU side


def make_case(batch, context, hq, hkv, d, block_size, dtype, device, gen):
    """A paged arena with blocks in shuffled physical order, and the same K/V contiguous."""
    import torch

    per = -(-context // block_size)
    num_blocks = batch * per
    k_cache = torch.randn(num_blocks, block_size, hkv, d, device=device, dtype=dtype, generator=gen)
    v_cache = torch.randn_like(k_cache)
    tables = torch.randperm(num_blocks, device=device, generator=gen).int().view(batch, per)
    lens = torch.full((batch,), context, device=device, dtype=torch.int32)
    q = torch.randn(batch, hq, d, device=device, dtype=dtype, generator=gen)

    def contiguous(cache):  # [B, Hkv, L, D]
        return cache[tables.long()].flatten(1, 2)[:, :context].transpose(1, 2).contiguous()

    return q, k_cache, v_cache, tables, lens, contiguous(k_cache), contiguous(v_cache)


def sdpa_backend(dtype):
    """Pin SDPA to FlashAttention for fp16/bf16: the only backend that does GQA without copying
    K/V per query head, so the baseline cannot silently fall back to the slow math path."""
    import contextlib

    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    if dtype == torch.float32:  # FlashAttention has no fp32: torch's choice
        return contextlib.nullcontext()
    return sdpa_kernel(SDPBackend.FLASH_ATTENTION)


def time_row(row: Row, args, hq, hkv, d, dtype, peak) -> Row:
    import torch

    _measure(row, args, hq, hkv, d, dtype)  # its tensors die when it returns
    torch.cuda.empty_cache()
    row.ratio = row.paged_us / row.contiguous_us
    nbytes = row.kv_mib * 2**20
    row.paged_gbps = nbytes / row.paged_us / 1e3
    row.contiguous_gbps = nbytes / row.contiguous_us / 1e3
    if peak:
        row.paged_peak_pct = 100 * row.paged_gbps / peak
        row.contiguous_peak_pct = 100 * row.contiguous_gbps / peak
    return row


def _measure(row: Row, args, hq, hkv, d, dtype) -> None:
    import torch
    import torch.nn.functional as F
    from triton.testing import do_bench

    from paged.kernels.paged_attention import paged_decode_attention

    gen = torch.Generator(device="cuda").manual_seed(row.batch * 100003 + row.context)
    q, kc, vc, tables, lens, k, v = make_case(
        row.batch, row.context, hq, hkv, d, args.block_size, dtype, "cuda", gen
    )
    scale = d**-0.5

    def paged():
        return paged_decode_attention(q, kc, vc, tables, lens, scale)

    def contig():
        return F.scaled_dot_product_attention(
            q.unsqueeze(2), k, v, scale=scale, enable_gqa=hq != hkv
        ).squeeze(2)

    with sdpa_backend(dtype):
        row.max_abs_err = (paged().float() - contig().float()).abs().max().item()
        row.paged_us = do_bench(paged, rep=args.rep_ms, return_mode="median") * 1e3
        row.contiguous_us = do_bench(contig, rep=args.rep_ms, return_mode="median") * 1e3


def check_against_reference(
    device="cuda", lens=(1, 15, 16, 17, 100, 3000), new=(1, 15, 3, 17, 70, 200)
) -> list[tuple[str, float, bool]]:
    """Compiled kernels vs the torch reference on the GPU: (case, max abs error, within
    tolerance). fp32 must agree to 1e-4; half precisions to their rounding of the output."""
    import torch

    from paged.kernels import reference as ref
    from paged.kernels.paged_attention import decode_attention, paged_prefill_attention
    from paged.kernels.store_kv import store_kv

    gen = torch.Generator(device=device).manual_seed(0)
    tol = {torch.float32: (1e-4, 0.0), torch.float16: (2e-3, 2e-3), torch.bfloat16: (1e-2, 1.6e-2)}
    results = []

    def compare(case, got, want, dtype):
        atol, rtol = tol[dtype]
        err = (got.float() - want).abs()
        results.append((case, err.max().item(), bool((err <= atol + rtol * want.abs()).all())))

    for dtype in tol:
        for hq, hkv, d in [(2, 2, 64), (9, 3, 64), (32, 4, 128)]:
            for splits in (1, 4):
                q, kc, vc, tables, _, _, _ = make_case(
                    len(lens), max(lens), hq, hkv, d, 16, dtype, device, gen
                )
                ctx = torch.tensor(lens, device=device, dtype=torch.int32)
                want = ref.paged_decode_attention(
                    q.float(), kc.float(), vc.float(), tables, ctx, d**-0.5
                )
                got = decode_attention(q, kc, vc, tables, ctx, d**-0.5, num_splits=splits)
                compare(f"decode {dtype} {hq}/{hkv}x{d} splits={splits}", got, want, dtype)
            starts = torch.tensor([0, *new], device=device).cumsum(0).int()
            qp = torch.randn(int(starts[-1]), hq, d, device=device, dtype=dtype, generator=gen)
            want = ref.paged_prefill_attention(
                qp.float(), kc.float(), vc.float(), tables, starts, ctx, d**-0.5
            )
            got = paged_prefill_attention(qp, kc, vc, tables, starts, ctx, d**-0.5)
            compare(f"prefill {dtype} {hq}/{hkv}x{d}", got, want, dtype)
        k = torch.randn(64, 3, 64, device=device, generator=gen)
        slots = torch.randperm(8 * 16, device=device, generator=gen)[:64]
        slots[::7] = -1
        caches = [torch.zeros(8, 16, 3, 64, device=device, dtype=dtype) for _ in range(4)]
        store_kv(k, -k, caches[0], caches[1], slots)
        ref.store_kv(k, -k, caches[2], caches[3], slots)
        same = torch.equal(caches[0], caches[2]) and torch.equal(caches[1], caches[3])
        results.append((f"store_kv {dtype}", 0.0 if same else float("inf"), same))
    return results


# ------------------------------------------------------------------ no-GPU side


def compile_only(arch: int, heads: str) -> list[str]:
    """Compile each kernel variant the engine and this bench launch, for CUDA ``arch``."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.compiler import compile as triton_compile

    from paged.kernels import paged_attention as pa
    from paged.kernels import store_kv as sk

    hq, hkv, d = HEADS[heads]
    group = hq // hkv
    done = []

    def build(fn, types: dict, consts: dict, label: str):
        sig = {a: "constexpr" if a in consts else types.get(a, "i32") for a in fn.arg_names}
        triton_compile(ASTSource(fn, sig, consts), target=GPUTarget("cuda", arch, 32))
        done.append(label)

    for dt in ("bf16", "fp32"):
        ptrs = {
            n: "*" + dt
            for n in ("q_ptr", "k_cache_ptr", "v_cache_ptr", "out_ptr", "k_ptr", "v_ptr")
        }
        ptrs.update(
            bt_ptr="*i32",
            ctx_ptr="*i32",
            qsl_ptr="*i32",
            part_ptr="*fp32",
            ml_ptr="*fp32",
            slot_ptr="*i64",
            qk_scale="fp32",
            k_scale="fp32",
            v_scale="fp32",
        )
        shape = dict(
            GROUP=group,
            HEAD_DIM=d,
            D_PAD=pa.next_pow2(max(d, 16)),
            BLOCK_SIZE=16,
            DOT_PRECISION="ieee" if dt == "fp32" else None,
            WIDEN=False,
            FP8=False,
        )
        for splits in (1, 8):
            build(
                pa._decode_kernel,
                ptrs,
                dict(shape, GROUP_PAD=max(16, pa.next_pow2(group)), TILE_N=64, NUM_SPLITS=splits),
                f"decode {dt} splits={splits}",
            )
        build(
            pa._merge_splits_kernel,
            ptrs,
            dict(HEAD_DIM=d, D_PAD=shape["D_PAD"], NUM_SPLITS=8),
            f"merge {dt}",
        )
        build(
            pa._prefill_kernel,
            ptrs,
            dict(
                shape,
                GROUP_PAD=pa.next_pow2(group),
                BLOCK_Q=max(1, 64 // pa.next_pow2(group)),
                TILE_N=64,
            ),
            f"prefill {dt}",
        )
        if dt == "bf16":  # a float8 arena read by bf16 queries: dequantized in the tile load
            fp8 = dict(ptrs, k_cache_ptr="*fp8e4nv", v_cache_ptr="*fp8e4nv")
            build(
                pa._decode_kernel,
                fp8,
                dict(
                    shape, FP8=True, GROUP_PAD=max(16, pa.next_pow2(group)), TILE_N=64, NUM_SPLITS=1
                ),
                "decode fp8 kv",
            )
        build(
            sk._store_kv_kernel,
            ptrs,
            dict(H_PAD=pa.next_pow2(hkv), D_PAD=shape["D_PAD"]),
            f"store_kv {dt}",
        )
    return done


# ------------------------------------------------------------------ output

COLUMNS = [
    ("batch", "batch"),
    ("context", "context"),
    ("K/V MiB", "kv_mib"),
    ("paged µs", "paged_us"),
    ("contiguous µs", "contiguous_us"),
    ("paged/contig", "ratio"),
    ("paged GB/s", "paged_gbps"),
    ("contig GB/s", "contiguous_gbps"),
    ("paged % peak", "paged_peak_pct"),
    ("contig % peak", "contiguous_peak_pct"),
    ("max abs err", "max_abs_err"),
]


def _fmt(v) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 0.01 else f"{v:,.2f}"
    return str(v)


def markdown(rows: list[Row], columns=COLUMNS) -> str:
    head = "| " + " | ".join(c for c, _ in columns) + " |"
    rule = "|" + "|".join("---:" for _ in columns) + "|"
    body = ["| " + " | ".join(_fmt(getattr(r, f)) for _, f in columns) + " |" for r in rows]
    return "\n".join([head, rule, *body])


def write_outputs(out: str, title: str, rows: list[Row]) -> None:
    path = Path(out)
    path.mkdir(parents=True, exist_ok=True)
    (path / "kernels.md").write_text(f"{title}\n\n{markdown(rows)}\n")
    with open(path / "kernels.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(asdict(rows[0])))
        w.writeheader()
        w.writerows(asdict(r) for r in rows)


def main(argv=None) -> int:
    args = parse_args(argv)
    hq, hkv, d = HEADS[args.heads]
    title = (
        f"Paged decode vs contiguous SDPA: {args.heads} heads (Hq {hq}, Hkv {hkv}, D {d}), "
        f"{args.dtype}, block {args.block_size}"
    )
    if args.dry_run:
        print(f"plan: {title}")
        print(markdown(plan(args), COLUMNS[:3]))
        return 0
    if args.compile_only:
        if os.environ.get("TRITON_INTERPRET") == "1":
            print("error: --compile-only needs TRITON_INTERPRET unset", file=sys.stderr)
            return 2
        for label in compile_only(args.arch, args.heads):
            print(f"compiled for sm_{args.arch}: {label}")
        return 0

    import torch

    if not torch.cuda.is_available():
        print(
            "error: bench/kernel_speed.py needs a CUDA GPU (try --dry-run or --compile-only)",
            file=sys.stderr,
        )
        return 2
    name = torch.cuda.get_device_name()
    peak = args.peak_gbps or peak_for(name)
    print(f"{title}\ndevice: {name}, peak {peak or 'unknown'} GB/s")
    if not args.no_check:
        failures = 0
        for case, err, ok in check_against_reference():
            failures += not ok
            print(f"check {'ok  ' if ok else 'FAIL'} {case}: max abs err {err:.3g}")
        if failures:
            print(f"error: {failures} kernel checks failed against the reference", file=sys.stderr)
            return 1
    dtype = getattr(torch, DTYPES[args.dtype])
    rows = []
    for row in plan(args):
        rows.append(time_row(row, args, hq, hkv, d, dtype, peak))
        print(markdown(rows[-1:]).splitlines()[-1], flush=True)
    table = markdown(rows)
    print(f"\n{title}; device {name}\n{table}")
    if args.out:
        write_outputs(args.out, f"{title}; device {name}, peak {peak or 'unknown'} GB/s", rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
