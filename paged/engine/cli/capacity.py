"""``python -m paged capacity``: KV bytes per token, block and request, and how many requests a
KV budget holds with preallocation versus paging. Defaults are the essay's Llama-2-70B setting.
Sizes print in binary units (GiB = 2**30 B); ``--json`` prints exact byte counts."""

from __future__ import annotations

import argparse
import json

from paged.engine.cli.main import first_paragraph
from paged.engine.engine_args import EngineArgs
from paged.engine.errors import InvalidConfigError
from paged.engine.sim.capacity import (
    DTYPE_BYTES,
    MAX_BUDGET_GIB,
    PRESETS,
    CapacityReport,
    Concurrency,
    GiB,
    ModelShape,
    build_report,
    format_bytes,
    load_shape,
)


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "capacity", help="KV-cache capacity calculator", description=first_paragraph(__doc__)
    )
    src = p.add_mutually_exclusive_group()
    src.add_argument(
        "--preset", choices=sorted(PRESETS), help="a known model (default llama-2-70b)"
    )
    src.add_argument("--config", metavar="PATH", help="a Hugging Face config.json (or its folder)")
    src.add_argument("--gguf", metavar="PATH", help="a GGUF file; only its metadata is read")
    p.add_argument(
        "--dtype",
        choices=sorted(DTYPE_BYTES),
        help="KV element type (default: a preset's own, e.g. fp32 for smollm2-135m as this "
        "engine runs it on a CPU; a config's or GGUF's if half precision, else fp16)",
    )
    EngineArgs.add_cli_args(p, only=("block_size",))
    p.add_argument(
        "--budget-gb",
        type=float,
        default=40.0,
        help="KV budget in GiB (2**30 B), the unit the essay's 'GB' stands for",
    )
    p.add_argument("--max-len", type=int, default=8192, help="what preallocation reserves")
    p.add_argument("--mean-len", type=int, default=3000, help="what a request really fills")
    p.add_argument("--lengths", type=_int_list, default=(2048, 8192, 32768), metavar="N,N,...")
    p.add_argument("--batches", type=_int_list, default=(1, 8, 32), metavar="N,N,...")
    p.add_argument("--json", action="store_true", help="exact bytes as JSON")
    p.set_defaults(run=run)


def _int_list(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}"
        ) from None


def run(args) -> int:
    if not (0 < args.budget_gb <= MAX_BUDGET_GIB):  # also refuses nan and inf
        raise InvalidConfigError(
            f"--budget-gb must be a number above 0 and at most {MAX_BUDGET_GIB:,}"
            f" (just under 8 PiB), got {args.budget_gb}"
        )
    shape = load_shape(args.preset, args.config, args.gguf, args.dtype)
    report = build_report(
        shape,
        block_size=args.block_size,
        budget_bytes=round(args.budget_gb * GiB),
        max_len=args.max_len,
        mean_len=args.mean_len,
        lengths=args.lengths,
        batches=args.batches,
    )
    print(json.dumps(report.to_dict(), indent=2) if args.json else render_text(report))
    return 0


def render_text(report: CapacityReport) -> str:
    """The report as aligned plain-text tables."""
    return "\n\n".join(
        [
            _shape_section(report),
            _request_section(report),
            _block_table_section(report),
            _concurrency_section(report),
        ]
    )


def _shape_section(r: CapacityReport) -> str:
    s, b = r.shape, r.block_size
    kv = (
        f"one MLA latent of {s.head_dim}"
        if s.is_mla
        else f"{s.num_kv_heads} KV heads x head_dim {s.head_dim}"
    )
    window = (
        f"; {s.num_sliding_layers} layers keep a {s.sliding_window:,}-token window"
        if s.num_sliding_layers
        else ""
    )
    lines = [
        f"{s.name}: {s.num_layers} layers x {kv}, {s.dtype_bytes} B per element{window}",
        _kv("KV per token per layer", s.bytes_per_token_per_layer),
        _kv("KV per token", s.bytes_per_token),
        _kv(f"KV per block per layer (block {b})", s.bytes_per_block_per_layer(b)),
        _kv(f"KV per block, all layers (block {b})", s.bytes_per_block(b)),
    ]
    return "\n".join(lines)


def _kv(label: str, n: int) -> str:
    exact = f"  ({n:,} B)" if n >= 1024 else ""
    return f"  {label:<36}{format_bytes(n):>12}{exact}"


def _request_section(r: CapacityReport) -> str:
    head = ["length", *(f"batch={b}" for b in r.batches)]
    rows = [
        [f"{row['length']:,}", *(f"{c['bytes'] / GiB:.3g} GiB" for c in row["by_batch"])]
        for row in r.per_request_rows()
    ]
    out = "KV cache per request (GiB = 2**30 B; the essay calls it GB)\n" + _table(head, rows)
    if beyond := r.lengths_beyond_context():
        out += (
            f"\n  note: {', '.join(f'{n:,}' for n in beyond)} exceed{'s' if len(beyond) == 1 else ''}"
            f" the model's {r.shape.max_position_embeddings:,}-token context: arithmetic only"
        )
    return out


def _block_table_section(r: CapacityReport) -> str:
    rows = [
        [f"{t['length']:,}", f"{t['entries']:,}", format_bytes(t["bytes"])]
        for t in r.block_table_rows()
    ]
    title = f"Block table per request (block {r.block_size}, {r.entry_bytes} B per entry)\n"
    return title + _table(["length", "entries", "bytes"], rows)


def _concurrency_section(r: CapacityReport) -> str:
    c = r.concurrency
    ratio = "n/a (budget holds no preallocated request)" if c.ratio is None else f"{c.ratio:.2f}x"
    return "\n".join(
        [
            f"Concurrency in a {format_bytes(c.budget_bytes)} KV budget",
            f"  preallocate max_len {c.max_len:,}: {format_bytes(c.prealloc_bytes_per_request)} each"
            f" -> {_requests(c.prealloc_requests)}",
            f"  paged, mean {c.mean_len:,} tokens = {_paged_blocks(c, r.shape)}: "
            f"{format_bytes(c.paged_bytes_per_request)} each -> {_requests(c.paged_requests)}",
            f"  paged / preallocated: {ratio}",
        ]
    )


def _paged_blocks(c: Concurrency, shape: ModelShape) -> str:
    if c.window_blocks_per_request is None:
        return f"{c.paged_blocks_per_request} blocks"
    full = shape.num_layers - shape.num_sliding_layers
    if not full:
        return f"{c.window_blocks_per_request} blocks (every layer keeps only its window)"
    return (
        f"{c.paged_blocks_per_request} blocks in each of {full} full-attention layers and "
        f"{c.window_blocks_per_request} in each of {shape.num_sliding_layers} sliding-window layers"
    )


def _requests(n: int) -> str:
    return f"{n} request" + ("" if n == 1 else "s")


def _table(head: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(x) for x in col) for col in zip(head, *rows, strict=True)]

    def fmt(cells: list[str]) -> str:
        return "  " + "  ".join(c.rjust(w) for c, w in zip(cells, widths, strict=True))

    return "\n".join([fmt(head), fmt(["-" * w for w in widths]), *map(fmt, rows)])
