"""What a cheaper KV cache costs in accuracy, measured against a full-precision one.

Two numbers, both on the same prompts and the same weights:

- **teacher-forced top-1 agreement**: the full-precision run's greedy continuation is fed to the
  other run as input; at every position, does its argmax equal the token full precision chose?
  Errors cannot compound here, so this isolates what the KV dtype does to one prediction.
- **greedy common prefix**: both runs generate freely; how many leading tokens agree. One early
  disagreement ends the prefix, so this is the number a user sees.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from paged.engine.core.request import Request, SamplingParams, ScheduledSeq
from paged.engine.llm import LLM


@dataclass(frozen=True)
class KVAccuracy:
    top1_agreement: float  # fraction of teacher-forced positions that agree
    positions: int
    mean_common_prefix: float  # tokens, out of ``new_tokens``
    new_tokens: int


def teacher_forced_argmax(llm: LLM, prompt: list[int], continuation: list[int]) -> list[int]:
    """``llm``'s argmax after ``prompt`` and after each prefix of ``continuation`` (its last
    token excluded): one prefill through the paged arena, logits kept at every position."""
    runner, bs = llm.runner, llm.arena.block_size
    ids = prompt + continuation[:-1]
    n = len(ids)
    if -(-n // bs) > llm.arena.num_blocks:
        raise ValueError(f"{n} tokens do not fit in the arena")
    table = list(range(-(-n // bs)))
    seq = ScheduledSeq(
        Request("tf", ids, SamplingParams()),
        ids,
        list(range(n)),
        [table[p // bs] * bs + p % bs for p in range(n)],
        table,
        n,
    )
    with torch.inference_mode():
        input_ids, positions, meta, _ = runner._prepare([seq], 1, bs)
        runner.attention.prepare(meta, bs)
        rows = torch.arange(len(prompt) - 1, n, device=input_ids.device)
        logits = runner.forward.forward(input_ids, positions, llm.arena.view(bs), meta, rows)
    return logits.argmax(-1).tolist()


def measure(
    full: LLM,
    other: LLM,
    prompts: list[list[int]],
    new_tokens: int = 48,
    reference: list[list[int]] | None = None,
) -> KVAccuracy:
    """Compare ``other`` (e.g. a float8 KV arena) with ``full`` (the model's own dtype) on
    ``prompts`` (token ids), ``new_tokens`` greedy tokens each, EOS ignored. ``reference``:
    full's greedy tokens when they are already known (at least ``new_tokens`` per prompt; the
    first ``new_tokens`` are used), instead of generating them again. The greedy runs batch
    all ``prompts`` together; over a float8 arena their common prefix depends on that batch
    (its rounding does: ``paged/kernels/fp8.py``), the teacher-forced agreement (one prompt at a
    time) does not."""
    params = SamplingParams(max_tokens=new_tokens, ignore_eos=True)
    if reference is None:
        ref = [o.token_ids for o in full.generate(prompts, params)]
    else:
        if len(reference) != len(prompts) or any(len(r) < new_tokens for r in reference):
            raise ValueError(f"the reference needs {new_tokens} tokens for each prompt")
        ref = [list(r[:new_tokens]) for r in reference]
    got = [o.token_ids for o in other.generate(prompts, params)]
    agree = total = 0
    for p, r in zip(prompts, ref, strict=True):
        pred = teacher_forced_argmax(other, p, r)
        agree += sum(a == b for a, b in zip(pred, r, strict=True))
        total += len(r)
    prefixes = [_common_prefix(a, b) for a, b in zip(ref, got, strict=True)]
    return KVAccuracy(agree / total, total, sum(prefixes) / len(prefixes), new_tokens)


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n
