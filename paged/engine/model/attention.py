"""The one attention entry point of the forward: store new K/V in the arena, then attend.

Interchangeable backends: ``torch`` (the reference maths planned once per step, the CPU path;
see ``paged/engine/model/attention_torch.py``), ``triton`` (``paged/kernels/paged_attention.py`` and
``paged/kernels/store_kv.py``, imported lazily so the engine runs without them) and ``reference``
(``paged/kernels/reference.py`` as is: the oracle the others are tested against).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

import torch

from paged.engine.errors import InvalidConfigError
from paged.engine.model.backends import BACKENDS


@dataclass
class AttentionMetadata:
    """Per-step layout of the flat token tensor: prefill tokens first, then one token per
    decoding sequence. Built once per step by the runner, shared by all layers."""

    slot_mapping: torch.Tensor  # [T] int64 flat arena slots
    num_prefill_tokens: int
    prefill_block_tables: torch.Tensor | None  # [P, max_blocks] int32
    query_start_loc: torch.Tensor | None  # [P + 1] int32
    prefill_context_lens: torch.Tensor | None  # [P] int32
    decode_block_tables: torch.Tensor | None  # [B, max_blocks] int32
    decode_context_lens: torch.Tensor | None  # [B] int32


def resolve_backend(name: str, device: torch.device) -> str:
    """``auto`` is Triton on CUDA, torch elsewhere. ``reference`` (not offered on the CLI) runs
    ``paged/kernels/reference.py`` unplanned, as the oracle. Raises InvalidConfigError for an unknown
    name, or Triton on a CPU without the interpreter (``TRITON_INTERPRET=1``)."""
    if name not in BACKENDS + ("reference",):
        raise InvalidConfigError(
            f"unknown attention backend {name!r} (expected auto, torch or triton)"
        )
    if name == "auto":
        if device.type == "cuda":
            return "triton"
        from paged.kernels.cpu import load

        return "cpu" if load() is not None else "torch"
    if name == "cpu":
        if device.type != "cpu":
            raise InvalidConfigError(f"attention backend 'cpu' runs on the CPU, not {device}")
        from paged.kernels.cpu import load, why

        if load() is None:
            raise InvalidConfigError(f"attention backend 'cpu' is unavailable: {why()}")
    if name == "triton" and device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        raise InvalidConfigError(
            "attention backend 'triton' needs a CUDA device (or TRITON_INTERPRET=1 on CPU)"
        )
    return name


class KernelAttention:
    """Store, then prefill and/or decode through three kernels with the signatures of
    ``paged/kernels/reference.py`` (the reference itself, or the Triton kernels)."""

    #: no walk to report or split to take (Attention.kernel_walk, set_split)
    record_walk = False
    walk: tuple[torch.Tensor, int] | None = None
    split: int | None = None

    def __init__(self, name: str, scale: float, k_scale: float = 1.0, v_scale: float = 1.0) -> None:
        self.name, self.scale = name, scale
        self.k_scale, self.v_scale = k_scale, v_scale
        if name == "triton":
            try:
                from paged.kernels.paged_attention import (
                    paged_decode_attention,
                    paged_prefill_attention,
                )
                from paged.kernels.store_kv import store_kv
            except ImportError as e:
                raise InvalidConfigError(
                    f"attention backend 'triton' is unavailable: {e}"
                ) from None
        else:
            from paged.kernels.reference import (
                paged_decode_attention,
                paged_prefill_attention,
                store_kv,
            )
        self._store, self._prefill, self._decode = (
            store_kv,
            paged_prefill_attention,
            paged_decode_attention,
        )

    def prepare(self, meta: AttentionMetadata, block_size: int) -> None:
        """Nothing to plan: the kernels read the block tables themselves."""

    def __call__(self, q, k, v, k_cache, v_cache, meta: AttentionMetadata) -> torch.Tensor:
        self._store(k, v, k_cache, v_cache, meta.slot_mapping, self.k_scale, self.v_scale)
        n = meta.num_prefill_tokens
        if n == q.shape[0]:
            return self._run_prefill(q, k_cache, v_cache, meta)
        if n == 0:
            return self._run_decode(q, k_cache, v_cache, meta)
        out = torch.empty_like(q)
        out[:n] = self._run_prefill(q[:n], k_cache, v_cache, meta)
        out[n:] = self._run_decode(q[n:], k_cache, v_cache, meta)
        return out

    def _run_prefill(self, q, k_cache, v_cache, meta: AttentionMetadata) -> torch.Tensor:
        tables, starts, lens = (
            meta.prefill_block_tables,
            meta.query_start_loc,
            meta.prefill_context_lens,
        )
        assert tables is not None and starts is not None and lens is not None, "no prefill"
        return self._prefill(
            q, k_cache, v_cache, tables, starts, lens, self.scale, self.k_scale, self.v_scale
        )

    def _run_decode(self, q, k_cache, v_cache, meta: AttentionMetadata) -> torch.Tensor:
        tables, lens = meta.decode_block_tables, meta.decode_context_lens
        assert tables is not None and lens is not None, "no decode sequences"
        return self._decode(
            q, k_cache, v_cache, tables, lens, self.scale, self.k_scale, self.v_scale
        )


class Attention:
    """The forward's one attention entry point. Per step: ``prepare(meta, block_size)``; per
    layer: ``attn(q, k, v, k_cache, v_cache, meta)`` writes ``k``, ``v`` ``[T, Hkv, D]`` at
    ``meta.slot_mapping`` and lets every query token ``q`` ``[T, Hq, D]`` attend to its
    sequence's context, returning ``[T, Hq, D]``."""

    def __init__(
        self,
        backend: str,
        device: torch.device,
        scale: float,
        k_scale: float = 1.0,
        v_scale: float = 1.0,
    ) -> None:
        # k_scale / v_scale: the arena's per-tensor float8 scales (unused for other dtypes)
        self.backend = resolve_backend(backend, device)
        self.scale, self.k_scale, self.v_scale = scale, k_scale, v_scale
        #: set by the runner for a step that records attention; None costs one test per layer
        self.probe: AttentionProbe | None = None
        self._impl: TorchAttention | KernelAttention
        if self.backend == "torch":
            from paged.engine.model.attention_torch import TorchAttention

            self._impl = TorchAttention(scale, k_scale, v_scale)
        elif self.backend == "cpu":
            from paged.engine.model.attention_torch import CpuAttention

            self._impl = CpuAttention(scale, k_scale, v_scale)
        else:
            self._impl = KernelAttention(self.backend, scale, k_scale, v_scale)

    def prepare(self, meta: AttentionMetadata, block_size: int) -> None:
        self._impl.prepare(meta, block_size)

    def set_split(self, tiles: int) -> None:
        """Split-K splits of ``tiles`` tiles for the rest of the run; a backend without splits
        (the torch reference walks one) ignores it, and its walks say so (split 0)."""
        self._impl.split = tiles

    def kernel_walk(self) -> tuple[torch.Tensor, int] | None:
        """The latest layer's decode rows as the kernel walked them (``paged.kernels.cpu``'s
        walk record, tiles per split), or None: a backend that reports no walk, or no probe."""
        return self._impl.walk

    def __call__(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        meta: AttentionMetadata,
    ) -> torch.Tensor:
        self._impl.record_walk = self.probe is not None
        out = self._impl(q, k, v, k_cache, v_cache, meta)
        if self.probe is not None:
            self.probe.observe(self, q, k_cache, v_cache, out)
        return out


@dataclass
class ProbeRow:
    """One chosen request's decode token in a step: its row of the flat token tensor, its
    block table up to its last block and its context length; what the layers found so far."""

    req: str
    row: int
    table: list[int]
    context_len: int
    decode: int = 0  # its row among the step's decode tokens
    mass: torch.Tensor | None = None  # [n_blocks]: probability summed over layers, mean of heads
    layers: int = 0
    walk: dict = field(default_factory=dict)


class AttentionProbe:
    """Records how the decode tokens of ``requests`` read their K/V, from the very tensors the
    forward attends with: per layer, after the backend ran, the token's scores against its
    context (gathered through its block table), their softmax summed per block, and for layer
    ``layer`` and KV head ``kv_head`` the tile walk of the decode kernel (one tile per block,
    ``paged.kernels.reference.online_softmax_walk``). At a step's end ``emit`` gets each token's
    ``attention_read`` fields. Off unless a recording asks for it: the runner then calls
    ``begin`` and ``end`` around each forward."""

    def __init__(
        self,
        requests: Collection[str],
        layer: int,
        kv_head: int,
        emit: Callable[..., None],
    ) -> None:
        self.requests, self.layer, self.kv_head, self.emit = set(requests), layer, kv_head, emit
        self.rows: list[ProbeRow] = []
        self.block_size = 1
        self._layer = 0

    def begin(self, rows: list[ProbeRow], block_size: int) -> None:
        self.rows, self.block_size, self._layer = rows, block_size, 0

    def observe(self, attn: Attention, q, k_cache, v_cache, out) -> None:
        from paged.kernels.reference import decode_scores

        walk = attn.kernel_walk()
        walked = self._layer == self.layer
        for r in self.rows:
            table = torch.tensor(r.table, dtype=torch.int64, device=k_cache.device)
            tiles = len(r.table)
            # the reference's scores: for the shares where the kernel reported no walk, and
            # as the oracle on the walked layer; on the other layers the kernel's record is all
            probs = scores = None
            if walk is None or walked:
                scores = decode_scores(
                    q[r.row], k_cache, table, r.context_len, attn.scale, attn.k_scale
                )
                probs = torch.softmax(scores, dim=-1)  # [Hq, L]
            if walk is not None:
                # each tile's share of the probability, from the kernel's own (m, l): the
                # tile's sum rescaled from its max to the merged max, over the merged sum
                st = walk[0][r.decode]
                m, l_ = st[:, -1, 0:1], st[:, -1, 1:2]
                share = st[:, :tiles, 3] * torch.exp(st[:, :tiles, 2] - m) / l_
                mass = share.mean(dim=0)
            else:
                assert probs is not None
                pad = tiles * self.block_size - r.context_len
                per_block = torch.nn.functional.pad(probs, (0, pad)).view(
                    probs.shape[0], -1, self.block_size
                )
                mass = per_block.sum(dim=2).mean(dim=0)
            r.mass = mass if r.mass is None else r.mass + mass
            r.layers += 1
            if walked:
                r.walk = self._walk(attn, r, table, scores, probs, v_cache, out[r.row], walk)
        self._layer += 1

    def _walk(self, attn: Attention, r: ProbeRow, table, scores, probs, v_cache, out, walk) -> dict:
        from paged.kernels.fp8 import dequantize
        from paged.kernels.reference import gather_slots, merge_partials, online_softmax_walk

        hq, hkv, d = scores.shape[0], v_cache.shape[2], v_cache.shape[3]
        group = hq // hkv
        if not 0 <= self.kv_head < hkv:
            raise InvalidConfigError(f"attention kv_head {self.kv_head} is not one of {hkv}")
        heads = list(range(self.kv_head * group, (self.kv_head + 1) * group))
        pos = torch.arange(r.context_len, device=v_cache.device)
        slots = gather_slots(table[None], pos, self.block_size)[0]
        v = dequantize(v_cache.view(-1, hkv, d)[slots, self.kv_head], torch.float32, attn.v_scale)
        s = scores[heads]
        # the reference walk over the same tensors: the oracle the kernel's walk is held to,
        # and the walk itself for a backend that reports none
        run_m, run_l, part_m, part_l, walked = online_softmax_walk(s, v, self.block_size)
        merged_m, merged_l = merge_partials(part_m, part_l)
        source, split = "reference", 0
        if walk is not None:
            st = walk[0][r.decode, heads]  # [G, tiles + 1, 4]
            tiles = len(r.table)
            run_m, run_l = st[:, :tiles, 0].T, st[:, :tiles, 1].T
            part_m, part_l = st[:, :tiles, 2].T, st[:, :tiles, 3].T
            merged_m, merged_l = st[:, -1, 0], st[:, -1, 1]
            source, split = "cpu", walk[1]
        full_m = s.max(dim=1).values
        full_l = torch.exp(s - full_m[:, None]).sum(dim=1)
        walk_probs = torch.exp(s - merged_m[:, None]) / merged_l[:, None]
        return {
            "layer": self.layer,
            "kv_head": self.kv_head,
            "heads": tuple(heads),
            "tile_m": _rows(run_m),
            "tile_l": _rows(run_l),
            "part_m": _rows(part_m),
            "part_l": _rows(part_l),
            "merged_m": _row(merged_m),
            "merged_l": _row(merged_l),
            "full_m": _row(full_m),
            "full_l": _row(full_l),
            "max_diff": _small(float((walk_probs - probs[heads]).abs().max())),
            "out_diff": _small(float((walked - out[heads].float()).abs().max())),
            "source": source,
            "split": split,
        }

    def end(self) -> None:
        """Emit each chosen token's reading of this step, then forget the step."""
        for r in self.rows:
            if r.mass is None or not r.walk:
                raise InvalidConfigError(
                    f"attention layer {self.layer} is past the model's {r.layers} layers"
                )
            mass = r.mass / r.layers
            self.emit(
                req=r.req,
                position=r.context_len - 1,
                physical=tuple(r.table),
                mass=_row(mass / mass.sum()),
                **r.walk,
            )
        self.rows = []


def _row(x: torch.Tensor) -> tuple[float, ...]:
    # six decimals: far below what a frame prints, and a trace line stays short
    return tuple(round(v, 6) for v in x.tolist())


def _rows(x: torch.Tensor) -> tuple[tuple[float, ...], ...]:
    return tuple(_row(row) for row in x)


def _small(x: float) -> float:
    # a difference is printed as such (3e-08), not rounded to 0
    return float(f"{x:.3g}")
