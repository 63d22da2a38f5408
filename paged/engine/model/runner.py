"""ModelRunner: turn a scheduler Batch into tensors, run the forward, sample one token per seq."""

from __future__ import annotations

import torch

from paged.engine.core.engine_core import EngineConfig
from paged.engine.core.request import Batch, ScheduledSeq
from paged.engine.errors import InvalidConfigError
from paged.engine.model.arena import KVArena, bytes_per_block, check_fits
from paged.engine.model.attention import Attention, AttentionMetadata, ProbeRow
from paged.engine.model.cpu_tier import CpuKVStore
from paged.engine.model.llama import LlamaForward
from paged.engine.model.loader import LoadedModel
from paged.engine.model.sampling import Sampler
from paged.kernels.fp8 import resolve_kv_dtype


def _probe_rows(
    seqs: list[ScheduledSeq], num_prefill: int, requests: set[str], block_size: int
) -> list[ProbeRow]:
    """The decode tokens of the chosen requests, at their rows of the flat token tensor
    (prefill tokens come first), with their tables up to the block of their last position."""
    first = sum(len(s.token_ids) for s in seqs[:num_prefill])
    return [
        ProbeRow(
            s.request.req_id,
            first + j,
            list(s.block_table[: -(-s.context_len // block_size)]),
            s.context_len,
            j,
        )
        for j, s in enumerate(seqs[num_prefill:])
        if s.request.req_id in requests
    ]


def _pad(rows: list[list[int]]) -> list[list[int]]:
    width = max(len(r) for r in rows)
    return [r + [0] * (width - len(r)) for r in rows]


class ModelRunner:
    """Owns the forward and the sampler; the scheduler owns which tokens run where.

    ``execute`` promises one next token per ``batch.seqs`` entry, in that order, having written
    the K/V of every scheduled token to its ``slot_mapping`` slot."""

    def __init__(
        self,
        model: LoadedModel,
        arena: KVArena,
        attention_backend: str = "auto",
        device: torch.device | str | None = None,
        cpu_tier: CpuKVStore | None = None,
    ) -> None:
        self.device = torch.device(device) if device is not None else model.device
        c = model.config
        self.arena = arena
        self.attention = Attention(
            attention_backend, self.device, c.head_dim**-0.5, arena.k_scale, arena.v_scale
        )
        self.forward = LlamaForward(model.weights, self.attention, self.device, model.dtype)
        self.sampler = Sampler()
        self.cpu_tier = cpu_tier  # where swap preemption parks blocks (paged/engine/core/swap.py)

    @property
    def attention_backend(self) -> str:
        return self.attention.backend

    def execute(self, batch: Batch) -> list[int]:
        if batch.swap_out or batch.swap_in:
            self._swap(batch)
        if not batch.seqs:
            return []
        # Prefill tokens go first in the flat batch, decode tokens after: each attention kind
        # then works on one contiguous slice.
        prefill = [i for i, s in enumerate(batch.seqs) if s.is_prefill]
        decode = [i for i, s in enumerate(batch.seqs) if not s.is_prefill]
        order = prefill + decode
        seqs = [batch.seqs[i] for i in order]
        with torch.inference_mode():
            if batch.copies:  # copy-on-write: before any of this step's K/V lands
                self.arena.copy_blocks(batch.copies)
            input_ids, positions, meta, logits_indices = self._prepare(
                seqs, len(prefill), batch.block_size
            )
            self.attention.prepare(meta, batch.block_size)
            probe = self.attention.probe
            if probe is not None:
                rows = _probe_rows(seqs, len(prefill), probe.requests, batch.block_size)
                probe.begin(rows, batch.block_size)
            logits = self.forward.forward(
                input_ids, positions, self.arena.view(batch.block_size), meta, logits_indices
            )
            if probe is not None:
                probe.end()
            sampled = self.sampler(logits, [s.request for s in seqs])
        tokens = [0] * len(order)
        for i, tok in zip(order, sampled, strict=True):
            tokens[i] = tok
        return tokens

    def _swap(self, batch: Batch) -> None:
        # before the forward: a block given up by a swap-out may be written by this very step
        if self.cpu_tier is None:
            raise RuntimeError("the scheduler swapped blocks but the runner has no CPU tier")
        with torch.inference_mode():
            self.cpu_tier.swap_out(batch.swap_out)
            self.cpu_tier.swap_in(batch.swap_in)

    def forget(self, req_id: str) -> None:
        """Drop per-request sampler state once a request is finished."""
        self.sampler.forget(req_id)

    def _prepare(self, seqs: list[ScheduledSeq], num_prefill: int, block_size: int):
        ids, pos, slots, last = [], [], [], []
        for s in seqs:
            ids += s.token_ids
            pos += s.positions
            slots += s.slot_mapping
            last.append(len(ids) - 1)
        # Table entries past a sequence's context are never read: trim them (a contiguous run
        # reserved for max_model_len would otherwise ship thousands of unused entries per step).
        tables = [list(s.block_table[: -(-s.context_len // block_size)]) for s in seqs]
        ctx = [s.context_len for s in seqs]
        pre, dec = seqs[:num_prefill], seqs[num_prefill:]
        num_prefill_tokens = sum(len(s.token_ids) for s in pre)
        qsl = [0]
        for s in pre:
            qsl.append(qsl[-1] + len(s.token_ids))
        meta = AttentionMetadata(
            slot_mapping=self._tensor(slots, torch.int64),
            num_prefill_tokens=num_prefill_tokens,
            prefill_block_tables=self._tensor(_pad(tables[:num_prefill]), torch.int32)
            if pre
            else None,
            query_start_loc=self._tensor(qsl, torch.int32) if pre else None,
            prefill_context_lens=self._tensor(ctx[:num_prefill], torch.int32) if pre else None,
            decode_block_tables=self._tensor(_pad(tables[num_prefill:]), torch.int32)
            if dec
            else None,
            decode_context_lens=self._tensor(ctx[num_prefill:], torch.int32) if dec else None,
        )
        return (
            self._tensor(ids, torch.int64),
            self._tensor(pos, torch.int64),
            meta,
            self._tensor(last, torch.int64),
        )

    def _tensor(self, data, dtype: torch.dtype) -> torch.Tensor:
        return torch.tensor(data, dtype=dtype).to(self.device, non_blocking=True)


def build_runner(model: LoadedModel, config: EngineConfig, attention: str = "auto") -> ModelRunner:
    """The one assembly of an engine's model side: a zeroed KV arena of ``config``'s blocks, in
    its KV cache dtype on the model's device; a CPU tier of ``config.num_cpu_blocks`` when it
    swaps; and a runner with ``attention`` over both. Raises InvalidConfigError, before
    allocating, for a ``max_model_len`` past the model's context (its rotary table ends there)
    or an arena or tier larger than its device's whole memory."""
    context = model.config.max_position_embeddings
    if config.max_model_len > context:
        raise InvalidConfigError(
            f"max_model_len {config.max_model_len:,} exceeds {model.name}'s context of "
            f"{context:,} tokens"
        )
    kv_dtype = resolve_kv_dtype(config.kv_cache_dtype, model.dtype)
    per_block = bytes_per_block(model.config, config.block_size, kv_dtype)
    check_fits(config.num_blocks * per_block, model.device)
    arena = KVArena(model.config, config.num_blocks, config.block_size, model.device, kv_dtype)
    cpu_tier = None
    if config.num_cpu_blocks:
        check_fits(config.num_cpu_blocks * per_block, "cpu")
        cpu_tier = CpuKVStore(arena, config.num_cpu_blocks)
    return ModelRunner(model, arena, attention, cpu_tier=cpu_tier)
