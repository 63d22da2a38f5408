"""The KV arena: sizing, validation, and one memory seen as blocks or as single slots."""

from __future__ import annotations

import pytest
import torch

from paged.engine.errors import InvalidConfigError
from paged.engine.model.arena import KVArena, blocks_for_budget, bytes_per_block
from paged.engine.model.attention import resolve_backend
from paged.engine.model.weights import ModelConfig

CFG = ModelConfig(
    num_layers=3,
    hidden_size=64,
    num_heads=4,
    num_kv_heads=2,
    head_dim=16,
    vocab_size=100,
    rms_norm_eps=1e-5,
    max_position_embeddings=64,
    eos_token_id=2,
)


def test_bytes_per_block_counts_k_and_v_in_every_layer():
    assert bytes_per_block(CFG, 8, torch.float32) == 2 * 3 * 8 * 2 * 16 * 4
    assert bytes_per_block(CFG, 8, torch.bfloat16) == bytes_per_block(CFG, 8, torch.float32) // 2


def test_budget_buys_whole_blocks_only():
    per_block = bytes_per_block(CFG, 4, torch.float32)
    budget_mb = (10.5 * per_block) / 2**20
    arena = KVArena(CFG, blocks_for_budget(CFG, 4, torch.float32, budget_mb), 4)
    assert arena.num_blocks == 10
    assert arena.num_slots == 40
    assert arena.nbytes == 10 * per_block
    assert arena.k[0].shape == (10, 4, 2, 16) and len(arena.v) == 3


@pytest.mark.parametrize(
    "make",
    [
        lambda: KVArena(CFG, 8, 0),
        lambda: KVArena(CFG, 8, -2),
        lambda: KVArena(CFG, 0, 4),
        lambda: blocks_for_budget(
            CFG, 4, torch.float32, bytes_per_block(CFG, 4, torch.float32) * 0.9 / 2**20
        ),
        lambda: blocks_for_budget(CFG, 0, torch.float32, 1.0),
    ],
)
def test_bad_sizes_raise_invalid_config(make):
    with pytest.raises(InvalidConfigError):
        make()


def test_slot_view_and_block_view_share_memory_slot_for_slot():
    arena = KVArena(CFG, 6, 4)
    blocks, slots = arena.view(4), arena.view(1)
    assert slots[1][0].shape == (24, 1, 2, 16)
    value = torch.arange(32, dtype=torch.float32).view(2, 16)
    slots[1][0][13, 0] = value  # flat slot 13 = block 3, offset 1
    assert torch.equal(blocks[1][0][3, 1], value)
    assert torch.equal(arena.k[1][3, 1], value)
    assert not arena.v[1].any() and not arena.k[0].any()  # other layers and V untouched


def test_view_rejects_a_block_size_that_does_not_divide_the_arena():
    with pytest.raises(InvalidConfigError):
        KVArena(CFG, 6, 4).view(5)


def test_fresh_arena_is_finite_so_masked_reads_cannot_poison_attention():
    arena = KVArena(CFG, 4, 4)
    assert all(torch.isfinite(t).all() for t in arena.k + arena.v)


def test_attention_backend_resolution(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    from paged.kernels.cpu import load

    assert resolve_backend("auto", torch.device("cpu")) == ("cpu" if load() else "torch")
    assert resolve_backend("auto", torch.device("cuda")) == "triton"
    assert resolve_backend("torch", torch.device("cuda")) == "torch"
    with pytest.raises(InvalidConfigError, match="CUDA"):
        resolve_backend("triton", torch.device("cpu"))
    with pytest.raises(InvalidConfigError, match="unknown"):
        resolve_backend("flash", torch.device("cpu"))
    with pytest.raises(InvalidConfigError, match="runs on the CPU"):
        resolve_backend("cpu", torch.device("cuda"))
