"""Pick one next token per sequence: greedy, or temperature + top-p with a per-request RNG."""

from __future__ import annotations

import torch

from paged.engine.core.request import Request, SamplingParams


def top_p_sample(
    logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None
) -> int:
    """Sample from the smallest set of most likely tokens whose mass reaches ``top_p``."""
    probs = torch.softmax(logits.float() / params.temperature, dim=-1)
    if params.top_p < 1.0:
        sorted_p, order = probs.sort(descending=True)
        # keep a token while the mass before it is still below top_p (the top token always stays)
        sorted_p[(sorted_p.cumsum(-1) - sorted_p) >= params.top_p] = 0.0
        pick = torch.multinomial(sorted_p, 1, generator=generator)
        return int(order[pick])
    return int(torch.multinomial(probs, 1, generator=generator))


class Sampler:
    """Greedy rows are one batched argmax. A sampled request with a ``seed`` owns a
    ``torch.Generator`` for its whole life (preemption included), so its output is repeatable
    whatever else shares the batch; ``forget`` drops it when the request is done."""

    def __init__(self) -> None:
        self._generators: dict[str, torch.Generator] = {}

    def __call__(self, logits: torch.Tensor, requests: list[Request]) -> list[int]:
        """``logits`` ``[B, vocab]``, one row per request -> B token ids."""
        tokens = logits.argmax(dim=-1).tolist()
        for i, req in enumerate(requests):
            if req.params.temperature > 0:
                tokens[i] = top_p_sample(logits[i], req.params, self._generator(req, logits.device))
        return tokens

    def _generator(self, req: Request, device: torch.device) -> torch.Generator | None:
        if req.params.seed is None:
            return None
        gen = self._generators.get(req.req_id)
        if gen is None:
            gen = torch.Generator(device=device).manual_seed(req.params.seed)
            self._generators[req.req_id] = gen
        return gen

    def forget(self, req_id: str) -> None:
        self._generators.pop(req_id, None)
