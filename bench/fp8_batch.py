"""Batch dependence: does a request's greedy output depend on which others share its batch?

Each prompt is generated alone, then all of them in one batch (32 greedy tokens, EOS ignored;
SmolLM2-135M on CPU in fp32, torch attention backend), under a fp32 arena and both float8
arenas. Printed per arena: how many prompts' tokens differ and where they first do, and the
largest logit difference alone vs batched up to the first token that differs.

``--invariant`` makes the fp32 forward itself batch-invariant: every projection a matmul of one
row (MKL picks its kernel, and so its rounding, by the row count) and every decoding sequence's
attention over exactly its own context (not padded to the batch's longest: the reduction's
length changes its rounding even where the padding is masked to zero). If the float8 arena
added batch dependence of its own (a scale, a padded slot, a store path that depends on the
batch), it would remain here.

Measured (2026-12-01, this script, 12 prompts; "first" is the first token that differs):

    arena      forward      tokens differ             max |logit diff| up to the first
    fp32       as shipped   0 of 12                   6e-05
    fp8_e4m3   as shipped   6 of 12 (first: 4 to 31)  1
    fp8_e5m2   as shipped   5 of 12 (first: 7 to 30)  2
    fp32       invariant    0 of 12                   0 (bit for bit)
    fp8_e4m3   invariant    0 of 12                   0 (bit for bit)
    fp8_e5m2   invariant    0 of 12                   0 (bit for bit)

So the float8 arena's batch dependence is the fp32 forward's own rounding, amplified: a value
within about 1e-6 of a float8 rounding boundary lands on its other side (a jump of up to 1/8 of
its size in e4m3, 1/4 in e5m2), and the K/V codes that differ multiply layer by layer through
attention. Over a fp32 arena the same differences keep their size (6e-5 in the logits), too
small to change an argmax on these prompts.
"""

from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
from paged.engine.threads import configure_openmp  # noqa: E402

configure_openmp()  # before torch loads

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from bench.fp8_accuracy import PROMPTS  # noqa: E402
from paged.engine.core.request import SamplingParams  # noqa: E402
from paged.engine.llm import LLM  # noqa: E402
from paged.engine.model.loader import load_model  # noqa: E402

ARENAS = ("auto", "fp8_e4m3", "fp8_e5m2")


def make_batch_invariant() -> None:
    """Patch the forward (this process only) so no number depends on the batch's shape."""
    from paged.engine.model import attention_torch as AT

    linear = F.linear
    F.linear = lambda x, w, b=None: torch.cat([linear(x[i : i + 1], w, b) for i in range(len(x))])

    def per_sequence(self, q, k_cache, v_cache, p):
        hkv, d = k_cache.shape[2], k_cache.shape[3]
        k = self._gather(k_cache, p.slots, q.dtype, self.k_scale).view(p.batch, p.length, hkv, d)
        v = self._gather(v_cache, p.slots, q.dtype, self.v_scale).view(p.batch, p.length, hkv, d)
        out = []
        for b in range(p.batch):
            n = int(p.mask[b].sum())
            o = F.scaled_dot_product_attention(
                q[b : b + 1].unsqueeze(2),
                k[b : b + 1, :n].transpose(1, 2),
                v[b : b + 1, :n].transpose(1, 2),
                scale=self.scale,
                enable_gqa=q.shape[1] != hkv,
            )
            out.append(o.squeeze(2))
        return torch.cat(out)

    AT.TorchAttention._attend_decode = per_sequence


class _Recorder:
    """Stands in for the runner's sampler: notes each row of logits, then samples as it would."""

    def __init__(self, sampler, where: dict[tuple[int, ...], int]) -> None:
        self.sampler, self.where = sampler, where
        self.logits: dict[tuple[int, int], torch.Tensor] = {}

    def __call__(self, rows, reqs):
        for row, r in zip(rows, reqs, strict=True):
            key = (self.where[tuple(r.prompt_token_ids)], len(r.output_token_ids))
            self.logits[key] = row.clone()
        return self.sampler(rows, reqs)

    def forget(self, req_id: str) -> None:
        self.sampler.forget(req_id)


def generate(llm: LLM, prompts: list[list[int]], params: SamplingParams):
    """Each prompt's tokens, and its logits by (prompt index, generated position)."""
    sampler = llm.runner.sampler
    recorder = _Recorder(sampler, {tuple(p): i for i, p in enumerate(prompts)})
    llm.runner.sampler = recorder  # type: ignore[assignment]
    try:
        tokens = [o.token_ids for o in llm.generate(prompts, params)]
    finally:
        llm.runner.sampler = sampler
    return tokens, recorder.logits


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--invariant", action="store_true", help="a batch-invariant fp32 forward")
    args = p.parse_args()
    if args.invariant:
        make_batch_invariant()
    model = load_model(device="cpu", dtype="float32", progress=False)
    prompts = [model.tokenizer.encode(t) for t in PROMPTS]
    params = SamplingParams(max_tokens=args.new_tokens, ignore_eos=True)
    forward = "invariant" if args.invariant else "as shipped"
    for arena in ARENAS:
        llm = LLM(model, kv_budget_mb=64, attention="torch", kv_cache_dtype=arena, progress=False)
        batched, batched_logits = generate(llm, prompts, params)
        firsts, worst = [], 0.0
        for i, prompt in enumerate(prompts):
            alone, alone_logits = generate(llm, [prompt], params)
            first = next(
                (j for j, (a, b) in enumerate(zip(alone[0], batched[i], strict=True)) if a != b),
                None,
            )
            firsts.append(first)
            for j in range(args.new_tokens if first is None else first + 1):
                diff = (alone_logits[(0, j)] - batched_logits[(i, j)]).abs().max().item()
                worst = max(worst, diff)
        differ = [f for f in firsts if f is not None]
        print(
            f"{arena:9s} {forward:10s}: tokens differ in {len(differ)} of {len(prompts)} "
            f"prompts (first at {sorted(differ)}); max |logit diff| before {worst:.1g}",
            flush=True,
        )


if __name__ == "__main__":
    main()
