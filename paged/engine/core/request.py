"""Requests, sampling parameters and the batch the scheduler hands to a runner. Pure Python."""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from paged.engine.errors import InvalidRequestError

#: Below this a temperature is a typo for greedy (``0``): dividing logits by it only overflows.
MIN_TEMPERATURE = 1e-2
MAX_SEED = 2**64 - 1  # what torch.Generator.manual_seed takes
MAX_SAMPLES = 256  # parallel samples of one prompt


def _real(v: object) -> bool:
    return type(v) in (int, float) and math.isfinite(v)  # type: ignore[arg-type]


@dataclass(frozen=True)
class SamplingParams:
    """How to pick tokens. ``temperature == 0`` is greedy, else it must be at least
    ``MIN_TEMPERATURE``; ``seed`` (an integer in [0, 2**64)) makes sampling repeatable. Every
    field is checked for type and range here, once: InvalidRequestError says which is wrong."""

    max_tokens: int = 16
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    ignore_eos: bool = False
    n: int = 1

    def __post_init__(self) -> None:
        if type(self.max_tokens) is not int or self.max_tokens < 1:
            raise InvalidRequestError(
                f"max_tokens must be an integer of at least 1, got {self.max_tokens!r}"
            )
        t = self.temperature
        if not _real(t) or t < 0 or 0 < t < MIN_TEMPERATURE:
            raise InvalidRequestError(
                f"temperature must be 0 (greedy) or a finite number of at "
                f"least {MIN_TEMPERATURE}, got {t!r}"
            )
        if not _real(self.top_p) or not 0 < self.top_p <= 1:
            raise InvalidRequestError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if self.seed is not None and (type(self.seed) is not int or not 0 <= self.seed <= MAX_SEED):
            raise InvalidRequestError(f"seed must be an integer in [0, 2**64), got {self.seed!r}")
        if type(self.n) is not int or not 1 <= self.n <= MAX_SAMPLES:
            raise InvalidRequestError(f"n must be an integer in [1, {MAX_SAMPLES}], got {self.n!r}")
        if self.seed is not None and self.seed + self.n - 1 > MAX_SEED:
            raise InvalidRequestError(
                f"seed + n - 1 must stay below 2**64 (sample i uses "
                f"seed + i), got seed {self.seed} and n {self.n}"
            )
        if type(self.ignore_eos) is not bool:
            raise InvalidRequestError(f"ignore_eos must be true or false, got {self.ignore_eos!r}")


def check_prompt(i: int, prompt: object) -> str:
    """A text prompt the tokenizer can take: a non-blank string that is valid Unicode (no lone
    surrogates, which is what undecodable bytes on a command line become)."""
    if not isinstance(prompt, str):
        raise InvalidRequestError(
            f"prompt {i} must be text or a list of token ids, got {type(prompt).__name__}"
        )
    if not prompt.strip():
        raise InvalidRequestError(f"prompt {i} is empty")
    try:
        prompt.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidRequestError(f"prompt {i} is not valid UTF-8 text") from None
    return prompt


class Status(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass
class Request:
    """One generation request. ``num_computed`` counts tokens whose K/V sit in the arena."""

    req_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    arrival_step: int = 0
    output_token_ids: list[int] = field(default_factory=list)
    status: Status = Status.WAITING
    num_computed: int = 0
    num_preemptions: int = 0
    finish_reason: str | None = None
    #: Dry run only: the output length at which the stand-in runner emits EOS.
    forced_output_len: int | None = None
    #: What an oracle allocator is told the final length will be (e.g. from an earlier run);
    #: None means the bound ``max_final_len``, exact whenever EOS is ignored.
    known_final_len: int | None = None
    #: Parallel sampling: the request whose prompt blocks this one may share (copy-on-write).
    parent_id: str | None = None

    @property
    def all_token_ids(self) -> list[int]:
        return self.prompt_token_ids + self.output_token_ids

    def token_ids(self, start: int, end: int) -> list[int]:
        """Tokens ``start`` to ``end`` (prompt then output) without building the whole list: the
        scheduler asks for a decode step's one token of every request every step."""
        p = len(self.prompt_token_ids)
        if start >= p:
            return self.output_token_ids[start - p : end - p]
        return self.prompt_token_ids[start:end] + self.output_token_ids[: max(0, end - p)]

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    @property
    def prompt_len(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def max_final_len(self) -> int:
        """K/V slots this request fills at most: prompt + max_tokens - 1 (the last sampled
        token's K/V is never computed)."""
        return self.prompt_len + self.params.max_tokens - 1

    @property
    def true_final_len(self) -> int:
        """The final length as far as an oracle may know it."""
        if self.known_final_len is not None:
            return self.known_final_len
        # a dry run's forced output length is where the stand-in emits EOS: a request that
        # ignores EOS runs on to its bound, so the bound is its final length
        if self.forced_output_len is not None and not self.params.ignore_eos:
            return self.prompt_len + min(self.forced_output_len, self.params.max_tokens) - 1
        return self.max_final_len


@dataclass
class ScheduledSeq:
    """One request's share of a step. The runner feeds ``token_ids`` at ``positions``, writes
    their K/V to ``slot_mapping`` (flat arena slot indices), attends over positions
    ``[0, context_len)`` through ``block_table`` and returns one next token."""

    request: Request
    token_ids: list[int]
    positions: list[int]
    slot_mapping: list[int]
    block_table: Sequence[int]
    context_len: int

    @property
    def is_prefill(self) -> bool:
        return len(self.token_ids) > 1 or self.positions[0] == 0


@dataclass
class Batch:
    """What one engine step runs. ``block_size`` is the granularity of the block tables: the
    paged allocator's block size, or 1 for contiguous runs (a run of slots is a table of
    one-slot blocks, so both allocators go through one attention entry point)."""

    seqs: list[ScheduledSeq]
    block_size: int
    #: block copies to run before the forward: ``(device, cpu)`` swap-outs, ``(cpu, device)``
    #: swap-ins (paged/engine/core/swap.py)
    swap_out: list[tuple[int, int]] = field(default_factory=list)
    swap_in: list[tuple[int, int]] = field(default_factory=list)
    #: (src, dst) physical blocks to copy before the forward writes anything (copy-on-write)
    copies: list[tuple[int, int]] = field(default_factory=list)

    @property
    def num_tokens(self) -> int:
        return sum(len(s.token_ids) for s in self.seqs)
