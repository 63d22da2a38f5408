"""The attention an ``attention_read`` event records is the model's own: transformers' eager
attention (``output_attentions=True``) on the same tokens, averaged over layers and heads and
summed per block, gives the same shares; the tile walk is the compiled kernel's own record of
the forward; and its splits' (m, l), merged, are the softmax over all of the chosen layer's
scores."""

from __future__ import annotations

import pytest
import torch

from paged.engine.core import events as E
from paged.engine.trace.recorder import record
from paged.engine.trace.scenario import load
from paged.kernels import cpu
from tests.sinks import ListSink

SCENARIO = """
title = "attention mass"
[arena]
num_blocks = 16
block_size = 4
max_model_len = 64
[[runs]]
label = "paged"
[attention]
requests = ["A"]
layer = 7
kv_head = 2
split = 2
[[requests]]
id = "A"
prompt = "The page table maps each virtual page to"
max_tokens = 6
ignore_eos = true
[[requests]]
id = "B"
prompt = "Frames"
max_tokens = 6
ignore_eos = true
"""


@pytest.fixture(scope="module")
def recorded(smollm_hf, tmp_path_factory):
    path = tmp_path_factory.mktemp("attn") / "scenario.toml"
    path.write_text(SCENARIO, encoding="utf-8")
    sink = ListSink()
    real = cpu.DecodeAttention.__call__
    walks: list[torch.Tensor] = []  # every walk record cpu.c filled, in call order (a layer each)

    def spy(self, *args, **kwargs):
        out = real(self, *args, **kwargs)
        stats = kwargs.get("stats", args[8] if len(args) > 8 else None)
        if stats is not None:
            walks.append(stats.clone())
        return out

    cpu.DecodeAttention.__call__ = spy  # type: ignore[method-assign]
    try:
        runs = record(load(path), None, model=smollm_hf, sinks={"paged": [sink]}).runs
    finally:
        cpu.DecodeAttention.__call__ = real  # type: ignore[method-assign]
    (req,) = [r for r in runs["paged"].requests if r.req_id == "A"]
    reads = [e for e in sink.events if isinstance(e, E.AttentionRead)]
    # returned, not kept in a global: pytest-xdist's worksteal can run this module's tests apart
    # and make the fixture again, and a global list then held two recordings' walks
    return req, reads, walks


@pytest.mark.skipif(cpu.load() is None, reason="no C kernel: the walk is the reference's")
def test_each_tiles_m_and_l_are_what_the_compiled_kernel_returned_in_that_forward(recorded):
    _, reads, walks = recorded
    layers = 30
    assert len(walks) == layers * len(reads)  # one record a layer, each decode step
    for i, ev in enumerate(reads):
        assert (ev.source, ev.split) == ("cpu", 2)
        walk = walks[i * layers + ev.layer]  # [decode rows, Hq, tiles + 1, 4]
        tiles, heads = len(ev.physical), list(ev.heads)
        rows = [
            r
            for r in walk[:, heads]
            if torch.allclose(r[:, :tiles, 0].T, torch.tensor(ev.tile_m), atol=1e-6, rtol=0)
        ]
        assert len(rows) == 1, "no decode row of the kernel's record holds this walk"
        (st,) = rows
        for col, field in enumerate((ev.tile_m, ev.tile_l, ev.part_m, ev.part_l)):
            torch.testing.assert_close(
                st[:, :tiles, col].T, torch.tensor(field), atol=1e-6, rtol=1e-6
            )
        torch.testing.assert_close(st[:, -1, 0], torch.tensor(ev.merged_m), atol=1e-6, rtol=1e-6)
        torch.testing.assert_close(st[:, -1, 1], torch.tensor(ev.merged_l), atol=1e-6, rtol=1e-6)


def _eager_attentions(hf, ids: list[int]) -> torch.Tensor:
    """Every layer's attention probabilities of the last token: [layers, heads, len(ids)]."""
    if hasattr(hf, "set_attn_implementation"):
        hf.set_attn_implementation("eager")
    else:  # pragma: no cover - older transformers
        hf.config._attn_implementation = "eager"
    with torch.inference_mode():
        out = hf(torch.tensor([ids]), output_attentions=True)
    return torch.stack([a[0, :, -1, :].float() for a in out.attentions])


def test_each_blocks_share_is_what_eager_attention_gives_on_the_same_tokens(smollm_hf, recorded):
    req, reads, _ = recorded
    assert len(reads) == req.params.max_tokens - 1  # every decode step, none of the prefill
    tokens = req.prompt_token_ids + req.output_token_ids
    bs = 4
    for ev in (reads[0], reads[-1]):
        probs = _eager_attentions(smollm_hf.hf_model, tokens[: ev.position + 1])
        n = ev.position // bs + 1
        padded = torch.nn.functional.pad(probs, (0, n * bs - probs.shape[-1]))
        per_block = padded.view(*probs.shape[:2], n, bs).sum(-1).mean(dim=(0, 1))
        assert len(ev.mass) == n
        assert torch.allclose(per_block, torch.tensor(ev.mass), atol=1e-4, rtol=0), (
            per_block.tolist(),
            ev.mass,
        )


def test_the_walks_last_m_and_l_are_the_softmax_over_the_chosen_heads_scores(recorded):
    _, reads, _ = recorded
    for ev in reads:
        assert ev.layer == 7 and ev.kv_head == 2 and ev.heads == (6, 7, 8)  # 9 heads, 3 KV
        assert len(ev.tile_m) == len(ev.physical)
        for g in range(len(ev.heads)):
            assert ev.merged_m[g] == pytest.approx(ev.full_m[g], abs=1e-5)
            assert ev.merged_l[g] == pytest.approx(ev.full_l[g], rel=1e-5)
        # the kernel's walk against the reference's over the same tensors: its (m, l) give
        # every probability to float32 rounding, and the reference walk's output its own
        assert ev.max_diff < 1e-5 and ev.out_diff < 1e-6


def test_without_the_attention_table_nothing_is_recorded_and_the_tokens_are_the_same(
    smollm_hf, recorded, tmp_path
):
    req, _, _ = recorded
    path = tmp_path / "scenario.toml"
    start, end = SCENARIO.index("[attention]"), SCENARIO.index("[[requests]]")
    path.write_text(SCENARIO[:start] + SCENARIO[end:], encoding="utf-8")
    sink = ListSink()
    runs = record(load(path), None, model=smollm_hf, sinks={"paged": [sink]}).runs
    assert not any(isinstance(e, E.AttentionRead) for e in sink.events)
    assert runs["paged"].core.runner.attention.probe is None  # type: ignore[attr-defined]
    (plain,) = [r for r in runs["paged"].requests if r.req_id == "A"]
    assert plain.output_token_ids == req.output_token_ids
