"""Paged decode attention on the CPU: paged/kernels/cpu.c against the torch reference (gather the
K/V through the block table, then SDPA), the same tensors, the same run; with ``--baseline REV``
also against the C kernel of an earlier revision (its cpu.c from git, built the same way; one
whose decode kernel still took a per-thread score scratch, as before the online softmax).

SmolLM2-135M's heads (9 query, 3 KV, head_dim 64), blocks of 16 scattered over the arena, each
request's context at the lengths given (290 and 1,020 tokens: a chat turn, a long prompt), at
batch 16 (a decode step of the demo batch) and 1 (one long request: split-K's case). Each
figure is the median of rounds that alternate the two sides; the ratio is per round, then its
median. Prints one table.
"""

from __future__ import annotations

import argparse
import ctypes
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from paged.kernels import cpu  # noqa: E402
from paged.kernels.reference import paged_decode_attention  # noqa: E402

HQ, HKV, D, BS = 9, 3, 64, 16


def timed(fn, reps: int) -> float:
    fn()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) / reps * 1e6


def baseline(rev: str):
    """``paged_decode_f32`` of ``rev``'s cpu.c, called as it was then: a score scratch per
    thread, no tile, split or walk record."""
    src = subprocess.run(
        ["git", "show", f"{rev}:paged/kernels/cpu.c"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    folder = Path(tempfile.mkdtemp(prefix="cpu-baseline-"))
    (folder / "cpu.c").write_bytes(src)
    compiler = shutil.which("gcc") or "cc"
    subprocess.run(
        [
            compiler,
            *cpu.FLAGS,
            str(folder / "cpu.c"),
            "-o",
            str(folder / "cpu.so"),
            "-lmvec",
            "-lm",
        ],
        check=True,
    )
    f = ctypes.CDLL(str(folder / "cpu.so")).paged_decode_f32
    f.restype = ctypes.c_int
    f.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p]
    f.argtypes += [ctypes.c_void_p] * 2 + [ctypes.c_int64] * 7 + [ctypes.c_float, ctypes.c_int]

    def call(q, k, v, tables, lens, scale, max_len):
        b, hq, d = q.shape
        threads = torch.get_num_threads()
        scratch = torch.empty(threads * hq * max_len)
        out = torch.empty_like(q)
        rc = f(
            q.data_ptr(), k.data_ptr(), v.data_ptr(), tables.data_ptr(), tables.shape[1],
            lens.data_ptr(), out.data_ptr(), scratch.data_ptr(), b, hq, k.shape[2], d,
            k.shape[1], k.shape[0], max_len, scale, threads,
        )  # fmt: skip
        assert rc == 0
        return out

    return call


def case(
    batch: int, context: int, rounds: int, reps: int, old=None, log: list[str] | None = None
) -> tuple[float, ...]:
    g = torch.Generator().manual_seed(batch * context)
    per = -(-context // BS)
    blocks = batch * per
    k = torch.randn(blocks, BS, HKV, D, generator=g)
    v = torch.randn(blocks, BS, HKV, D, generator=g)
    tables = torch.randperm(blocks, generator=g).to(torch.int32).view(batch, per)
    lens = torch.full((batch,), context, dtype=torch.int32)
    q = torch.randn(batch, HQ, D, generator=g)
    kernel = cpu.DecodeAttention()
    sides = [
        lambda: kernel(q, k, v, tables, lens, D**-0.5, context),
        lambda: paged_decode_attention(q, k, v, tables, lens, D**-0.5),
    ]
    if old is not None:
        torch.testing.assert_close(
            old(q, k, v, tables, lens, D**-0.5, context), sides[0](), rtol=1e-5, atol=2e-6
        )
        sides.append(lambda: old(q, k, v, tables, lens, D**-0.5, context))
    times: list[list[float]] = [[] for _ in sides]
    for r in range(rounds):
        order = range(len(sides)) if r % 2 == 0 else reversed(range(len(sides)))
        for i in order:
            times[i].append(timed(sides[i], reps))
    ours = times[0]
    if log is not None:  # each round's ratios, so a median can be checked against its spread
        for name, other in zip(("reference", "baseline"), times[1:], strict=False):
            cells = " ".join(f"{t / o:.3f}" for t, o in zip(other, ours, strict=True))
            log.append(f"batch {batch}, context {context}, {name} / C by round: {cells}")
    figures = [statistics.median(t) for t in times]
    ratios = [
        statistics.median(t / o for t, o in zip(other, ours, strict=True)) for other in times[1:]
    ]
    return (*figures, *ratios)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--contexts", type=int, nargs="+", default=[290, 1020])
    ap.add_argument("--batches", type=int, nargs="+", default=[16, 1])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--reps", type=int, default=50, help="calls per timing")
    ap.add_argument("--threads", type=int, help="torch's thread count (default: torch's)")
    ap.add_argument("--baseline", metavar="REV", help="also time REV's C kernel (git revision)")
    ap.add_argument("--every", action="store_true", help="also print every round's ratios")
    args = ap.parse_args()
    if cpu.load() is None:
        sys.exit(f"no CPU kernels: {cpu.why()}")
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.set_grad_enabled(False)
    old = baseline(args.baseline) if args.baseline else None
    print(f"threads {torch.get_num_threads()}; median of {args.rounds} rounds, sides alternating")
    head = "| batch | context | C kernel µs | torch reference µs |"
    rule = "|---:|---:|---:|---:|"
    if old is not None:
        head += f" {args.baseline} C µs |"
        rule += "---:|"
    head += " reference / C |" + (f" {args.baseline} / C |" if old is not None else "")
    rule += "---:|" * (2 if old is not None else 1)
    print(head)
    print(rule)
    log: list[str] | None = [] if args.every else None
    for batch in args.batches:
        for context in args.contexts:
            row = case(batch, context, args.rounds, args.reps, old, log)
            n = len(row) // 2 + 1
            cells = [f"{x:.0f}" for x in row[:n]] + [f"{x:.3f}×" for x in row[n:]]
            print(f"| {batch} | {context} | " + " | ".join(cells) + " |")
    for line in log or []:
        print(line)


if __name__ == "__main__":
    main()
