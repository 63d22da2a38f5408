"""The reference attention maths, planned once per step: the ``torch`` backend, the CPU path
where ``paged/kernels/cpu.c`` does not build, and the base of the ``cpu`` backend (last class here).

``paged/kernels/reference.py`` looks up block tables and builds masks inside every call, and gathers
K/V with advanced indexing. All of that is the same for the 30 layers of a step, so this backend
does it once in ``prepare`` and each layer only gathers (``index_select``, several times faster
than advanced indexing on CPU) and calls SDPA with exactly the reference's arguments. The output
is bit-identical to the reference; ``tests/engine/test_arena.py`` holds it to that.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F

from paged.kernels.fp8 import bits, dequantize, is_fp8, quantize
from paged.kernels.reference import gather_slots, own_first_slot_past_context


@dataclass
class _DecodePlan:
    slots: torch.Tensor  # [B * L] flat arena slots of every request's positions 0..L-1
    mask: torch.Tensor  # [B, 1, 1, L] position < context_len
    batch: int
    length: int


@dataclass
class _PrefillSeq:
    start: int
    end: int
    slots: torch.Tensor | None  # None: the whole context is new, its K/V are the step's own
    mask: torch.Tensor | None  # [n, ctx] causal mask over cached + new tokens


class _Rows:
    """A reusable ``[n, width]`` output for the decode gathers. A fresh multi-MB tensor per layer
    often comes straight from the OS (glibc maps and trims blocks that size) and is page-faulted
    in as the gather writes it: in bench/prefix.py's decode (batch 16, ~270 positions) a step
    took 21k page faults and 262 ms fresh, 24 faults and 204 ms reused, under the same load.
    Grows by a quarter at a time as contexts lengthen."""

    def __init__(self) -> None:
        self._buf: torch.Tensor | None = None

    def take(self, n: int, like: torch.Tensor) -> torch.Tensor:
        b = self._buf
        if (
            b is None
            or b.shape[0] < n
            or b.shape[1] != like.shape[1]
            or b.dtype != like.dtype
            or b.device != like.device
            or b.is_inference() != torch.is_inference_mode_enabled()
        ):
            b = self._buf = torch.empty(
                n + n // 4, like.shape[1], dtype=like.dtype, device=like.device
            )
        return b[:n]


class TorchAttention:
    """``prepare(meta, block_size)`` once per step, then ``__call__`` once per layer."""

    name = "torch"

    #: tiles per split-K split for the run (None: the C kernel's default; torch walks none)
    split: int | None = None
    #: set while a recording probes the walk; ``walk``: the decode rows' walk as the C
    #: kernel ran it (its record, tiles per split), None where nothing reports one
    record_walk = False
    walk: tuple[torch.Tensor, int] | None = None

    def __init__(self, scale: float, k_scale: float = 1.0, v_scale: float = 1.0) -> None:
        self.scale = scale
        self.k_scale, self.v_scale = (
            k_scale,
            v_scale,
        )  # per-tensor float8 scales (paged/kernels/fp8.py)
        self._decode: _DecodePlan | None = None
        self._prefill: list[_PrefillSeq] = []
        self._k_rows, self._v_rows = _Rows(), _Rows()

    def prepare(self, meta, block_size: int) -> None:
        self._decode, self._prefill = None, []
        if meta.decode_block_tables is not None:
            ctx = meta.decode_context_lens
            length = int(ctx.max())
            pos = torch.arange(length, device=ctx.device)
            slots = gather_slots(meta.decode_block_tables, pos, block_size)
            slots = own_first_slot_past_context(slots, pos, ctx)
            mask = pos[None, :] < ctx[:, None].long()
            self._decode = _DecodePlan(
                slots.reshape(-1), mask[:, None, None, :], slots.shape[0], length
            )
        if meta.prefill_block_tables is not None:
            starts = meta.query_start_loc.tolist()
            for b, ctx in enumerate(meta.prefill_context_lens.tolist()):
                s, e = starts[b], starts[b + 1]
                if e - s == ctx:
                    self._prefill.append(_PrefillSeq(s, e, None, None))
                    continue
                pos = torch.arange(ctx, device=meta.slot_mapping.device)
                slots = gather_slots(meta.prefill_block_tables[b : b + 1], pos, block_size)[0]
                qpos = torch.arange(ctx - (e - s), ctx, device=pos.device)
                self._prefill.append(_PrefillSeq(s, e, slots, pos[None, :] <= qpos[:, None]))

    def __call__(self, q, k, v, k_cache, v_cache, meta) -> torch.Tensor:
        # reference.store_kv minus its per-call check for skipped (-1) slots: the runner
        # never schedules one
        hkv, d = k_cache.shape[2], k_cache.shape[3]
        if is_fp8(k_cache.dtype):
            # attend to what the arena holds, the new tokens too: K/V after a float8 round trip
            k8, v8 = (
                quantize(k, k_cache.dtype, self.k_scale),
                quantize(v, v_cache.dtype, self.v_scale),
            )
            k, v = dequantize(k8, q.dtype, self.k_scale), dequantize(v8, q.dtype, self.v_scale)
            bits(k_cache).view(-1, hkv, d).index_copy_(0, meta.slot_mapping, bits(k8))
            bits(v_cache).view(-1, hkv, d).index_copy_(0, meta.slot_mapping, bits(v8))
        else:
            k_cache.view(-1, hkv, d).index_copy_(0, meta.slot_mapping, k)
            v_cache.view(-1, hkv, d).index_copy_(0, meta.slot_mapping, v)
        n = meta.num_prefill_tokens
        if self._decode is not None and n == 0:
            return self._attend_decode(q, k_cache, v_cache, self._decode)
        out = torch.empty_like(q)
        for p in self._prefill:
            out[p.start : p.end] = self._attend_prefill(
                q[p.start : p.end], k, v, k_cache, v_cache, p
            )
        if self._decode is not None:
            out[n:] = self._attend_decode(q[n:], k_cache, v_cache, self._decode)
        return out

    def _gather(
        self,
        cache: torch.Tensor,
        slots: torch.Tensor,
        out_dtype: torch.dtype,
        kv_scale: float,
        into: _Rows | None = None,
    ) -> torch.Tensor:
        hkv, d = cache.shape[2], cache.shape[3]
        flat = bits(cache).view(-1, hkv * d)
        if into is None:
            rows = flat.index_select(0, slots)
        else:
            rows = torch.index_select(flat, 0, slots, out=into.take(slots.numel(), flat))
        rows = rows.view(*slots.shape, hkv, d)
        if not is_fp8(cache.dtype):
            return rows.to(out_dtype)
        return dequantize(rows.view(cache.dtype), out_dtype, kv_scale)

    def _attend_decode(self, q, k_cache, v_cache, p: _DecodePlan) -> torch.Tensor:
        hkv, d = k_cache.shape[2], k_cache.shape[3]
        k = self._gather(k_cache, p.slots, q.dtype, self.k_scale, self._k_rows)
        v = self._gather(v_cache, p.slots, q.dtype, self.v_scale, self._v_rows)
        k, v = k.view(p.batch, p.length, hkv, d), v.view(p.batch, p.length, hkv, d)
        out = F.scaled_dot_product_attention(
            q.unsqueeze(2),
            k.transpose(1, 2),
            v.transpose(1, 2),
            attn_mask=p.mask,
            scale=self.scale,
            enable_gqa=q.shape[1] != hkv,
        )
        return out.squeeze(2)

    def _attend_prefill(self, q, k_new, v_new, k_cache, v_cache, p: _PrefillSeq) -> torch.Tensor:
        if p.slots is None:
            # the store above copied these very values into the arena: reading them back
            # would only cost a gather
            k, v = k_new[p.start : p.end], v_new[p.start : p.end]
        else:
            k = self._gather(k_cache, p.slots, q.dtype, self.k_scale)
            v = self._gather(v_cache, p.slots, q.dtype, self.v_scale)
        causal = p.mask is None
        o = F.scaled_dot_product_attention(
            q.transpose(0, 1).unsqueeze(0),
            k.transpose(0, 1).unsqueeze(0),
            v.transpose(0, 1).unsqueeze(0),
            attn_mask=p.mask,
            is_causal=causal,
            scale=self.scale,
            enable_gqa=q.shape[1] != k_cache.shape[2],
        )
        return o[0].transpose(0, 1)


class CpuAttention(TorchAttention):
    """The torch backend with decode tokens attending through ``paged/kernels/cpu.c``: each K/V row
    read in place through the block table, nothing gathered (``paged/kernels/cpu.py`` says why). A
    prefill goes the same way, fresh or behind cached tokens: each of its tokens is one more
    query row, over the table up to its own position, which is the causal mask (a 264-token
    prompt: 2.2x faster than SDPA's causal kernel). Only a chunk past
    MAX_ROW_POSITIONS stays SDPA, and a float8 arena goes the torch way (a bfloat16 one is
    the kernel's too, widened to float32 as it is read). Not
    bit-identical to the torch backend (another summation order); held to the reference within
    float32 rounding by tests/kernels/test_cpu_kernels.py, and to HF's greedy tokens by
    tests/model/."""

    name = "cpu"
    #: query rows x context above which a prefill chunk stays SDPA, whose tiled kernel catches
    #: up on long prompts: one row per token was 1.4x faster at 1,020 tokens, even at 2,040 and
    #: 0.96x at 4,090 (SmolLM2's heads, 2 threads)
    MAX_ROW_POSITIONS = 1 << 20

    def __init__(self, scale: float, k_scale: float = 1.0, v_scale: float = 1.0) -> None:
        from paged.kernels.cpu import DecodeAttention

        super().__init__(scale, k_scale, v_scale)
        self._kernel = DecodeAttention()
        self._meta = None
        self._block_size = 1
        self._max_len = 0
        self._sdpa: list[_PrefillSeq] = []
        self._rows: tuple[torch.Tensor, torch.Tensor, torch.Tensor, int] | None = None

    def prepare(self, meta, block_size: int) -> None:
        decode = meta.decode_block_tables
        # the torch decode plan is made only if an arena the kernel does not take asks for it
        super().prepare(replace(meta, decode_block_tables=None), block_size)
        self._meta, self._block_size = meta, block_size
        self._max_len = int(meta.decode_context_lens.max()) if decode is not None else 0
        self._sdpa, self._rows = [], None
        rows, tables, lens = [], [], []
        if meta.prefill_block_tables is not None:
            ctxs = meta.prefill_context_lens.tolist()
            for b, p in enumerate(self._prefill):
                n = p.end - p.start
                if n * ctxs[b] > self.MAX_ROW_POSITIONS:
                    self._sdpa.append(p)
                    continue
                rows.append(torch.arange(p.start, p.end))
                tables.append(meta.prefill_block_tables[b : b + 1].expand(n, -1))
                lens.append(torch.arange(ctxs[b] - n + 1, ctxs[b] + 1))
        if rows:
            lens_t = torch.cat(lens)
            self._rows = (torch.cat(rows), torch.cat(tables), lens_t, int(lens_t.max()))

    def __call__(self, q, k, v, k_cache, v_cache, meta) -> torch.Tensor:
        from paged.kernels.cpu import supports, walk_shape

        if not supports(q, k_cache):
            if self._max_len and self._decode is None:
                super().prepare(self._meta, self._block_size)
            return super().__call__(q, k, v, k_cache, v_cache, meta)
        hkv, d = k_cache.shape[2], k_cache.shape[3]
        if k.dtype != k_cache.dtype:
            # a bfloat16 arena under float32 activations: what is attended to, the new tokens
            # too, is what the arena holds
            k, v = k.to(k_cache.dtype), v.to(v_cache.dtype)
        k_cache.view(-1, hkv, d).index_copy_(0, meta.slot_mapping, k)
        v_cache.view(-1, hkv, d).index_copy_(0, meta.slot_mapping, v)
        n = meta.num_prefill_tokens
        self.walk = None
        if self._max_len:
            stats = None
            if self.record_walk:
                shape = walk_shape(q.shape[0] - n, q.shape[1], self._max_len, k_cache.shape[1])
                stats = torch.zeros(shape)
            decode = self._kernel(
                q[n:],
                k_cache,
                v_cache,
                meta.decode_block_tables,
                meta.decode_context_lens,
                self.scale,
                self._max_len,
                self.split,
                stats,
            )
            if stats is not None:
                self.walk = (stats, self._kernel.split_used)
            if n == 0:
                return decode
        out = torch.empty_like(q)
        if self._sdpa and k.dtype != q.dtype:  # a long chunk of a bfloat16 arena: SDPA in float32
            k, v = k.to(q.dtype), v.to(q.dtype)
        for p in self._sdpa:
            out[p.start : p.end] = self._attend_prefill(
                q[p.start : p.end], k, v, k_cache, v_cache, p
            )
        if self._rows is not None:
            rows, tables, lens, longest = self._rows
            out[rows] = self._kernel(
                q[rows], k_cache, v_cache, tables, lens, self.scale, longest, self.split
            )
        if self._max_len:
            out[n:] = decode
        return out
