"""Dry runs: the real scheduler and allocators with the forward pass skipped.

Each request's output length is given; a stand-in runner emits EOS when it is reached. Accounting
is folded from the event stream as it is emitted (the same ``Tally`` the viewer uses), so a run of
a thousand requests never holds its events in memory.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from paged.engine.core import events as E
from paged.engine.core.accounting import CATEGORIES, StepAccount, Tally
from paged.engine.core.engine_core import build_core
from paged.engine.core.request import Batch, Request, SamplingParams
from paged.engine.engine_args import EngineArgs
from paged.engine.errors import InvalidRequestError
from paged.engine.sim.paper import default_num_slots
from paged.engine.sim.workload import WorkItem

EOS, FILLER = 1, 0
#: OPT-13B's KV arena on an A100-40GB (the paper's Table 1): 12 GiB // 800 KiB = 15,728 slots.
DEFAULT_NUM_SLOTS = default_num_slots()


class DryRunner:
    """Stands in for the model: token FILLER until a request's forced output length, then EOS."""

    def execute(self, batch: Batch) -> list[int]:
        return [
            EOS if len(s.request.output_token_ids) + 1 >= _forced(s.request) else FILLER
            for s in batch.seqs
        ]

    def forget(self, req_id: str) -> None:
        """Nothing is kept per request."""


def _forced(req: Request) -> int:
    if req.forced_output_len is None:
        raise InvalidRequestError(f"request {req.req_id}: a dry run needs a given output length")
    return req.forced_output_len


@dataclass
class SimResult:
    policy: str
    accounts: list[StepAccount]
    num_preemptions: int
    steps: int
    #: Per step, buddy rounding slack (slots placed but in no run); all zero under first-fit.
    #: The event fold counts these slots as free space nobody can use: external while requests
    #: wait, as the paper's "external fragmentation & others" does.
    slack: list[int] = field(default_factory=list)

    @property
    def waited(self) -> bool:
        """Whether any step had a request waiting: the saturated regime exists in this run."""
        return any(a.waiting for a in self.accounts)

    def _steps(self, saturated_only: bool) -> list[int]:
        """The indices of the steps averaged over. A run in which no request ever waited has
        no saturated regime: asking for it raises, since falling back to every step under the
        same label would let a comparison mix two windows (see ``common_window``)."""
        if not saturated_only:
            return list(range(len(self.accounts)))
        if not self.waited:
            raise ValueError(f"{self.policy}: no request ever waited; average over all steps")
        return [i for i, a in enumerate(self.accounts) if a.waiting]

    def shares(self, saturated_only: bool = True) -> dict[str, float]:
        """Time-averaged share of the arena per category. With ``saturated_only``, over the steps
        in which requests were still waiting (the saturated regime), else over all steps."""
        accts = [self.accounts[i] for i in self._steps(saturated_only)]
        return {c: sum(a.share(c) for a in accts) / len(accts) for c in CATEGORIES}

    def slack_share(self, saturated_only: bool = True) -> float:
        """Time-averaged buddy slack as a share of the arena (a part of external + free)."""
        picked = self._steps(saturated_only)
        return sum(self.slack[i] / self.accounts[i].num_slots for i in picked) / len(picked)

    def mean_running(self, saturated_only: bool = True) -> float:
        """The mean batch size (the paper's Fig. 13 "average number of batched requests"):
        a request is counted in every step it ran in, the one that made its last token too."""
        picked = self._steps(saturated_only)
        return sum(self.accounts[i].batched for i in picked) / len(picked)


def common_window(results: list[SimResult], saturated_only: bool = True) -> bool:
    """Whether ``results`` can all be averaged over their saturated regimes (each had a request
    waiting at some step); else every one is averaged over all its steps, so rows compare."""
    return saturated_only and all(r.waited for r in results)


def build_requests(
    items: list[WorkItem], max_model_len: int, arrivals: list[int] | None = None
) -> list[Request]:
    """Requests that declare no output bound (they may run to ``max_model_len``) and stop at
    their given output length, as a real request stops at EOS."""
    reqs = []
    for i, it in enumerate(items):
        params = SamplingParams(max_tokens=max_model_len - it.input_len + 1)
        reqs.append(
            Request(
                req_id=f"r{i}",
                prompt_token_ids=[FILLER] * it.input_len,
                params=params,
                arrival_step=arrivals[i] if arrivals else 0,
                forced_output_len=it.output_len,
            )
        )
    return reqs


def run_policy(
    policy: str,
    requests: list[Request],
    num_blocks: int,
    block_size: int,
    max_model_len: int,
    sinks: tuple = (),
    max_num_seqs: int = 256,
    placement: str = "first-fit",
) -> SimResult:
    """Run ``requests`` (fresh copies are made) under one allocator and account every step.
    ``placement`` (first-fit or buddy) places the contiguous policies' runs. Raises
    InvalidConfigError for settings ``EngineArgs`` refuses."""
    bus = E.EventBus()
    # The dry run knows every final length in advance, as a complete trace does at its end.
    # A request finishing in a step is counted as it held its memory in that step (as the
    # viewer does): a waiter refused earlier in the step was refused against that memory, and
    # counting it freed (with the refusal standing) made all free slots external fragmentation
    # (one-token requests: 100 % external, no token ever counted).
    tally = Tally(
        num_slots=num_blocks * block_size,
        block_size=block_size,
        final_lens={r.req_id: r.true_final_len for r in requests},
        show_finishing=True,
    )
    accounts: list[StepAccount] = []
    slack: list[int] = []

    apply = tally.apply  # looked up once: fold sees every event

    def fold(ev: E.Event) -> None:
        apply(ev)
        match ev:
            case E.StepEnd():
                accounts.append(tally.close_step(ev.step))
                slack.append(core.allocator.slack_slots)

    bus.subscribe(fold)
    for sink in sinks:
        bus.subscribe(sink)
    config = EngineArgs(
        allocator=policy,
        num_blocks=num_blocks,
        block_size=block_size,
        max_model_len=max_model_len,
        max_num_seqs=max_num_seqs,
        placement=placement,
    ).create_engine_config()
    core = build_core(config, DryRunner(), EOS, bus)
    for r in requests:
        core.add_request(
            Request(
                req_id=r.req_id,
                prompt_token_ids=list(r.prompt_token_ids),
                params=r.params,
                arrival_step=r.arrival_step,
                forced_output_len=r.forced_output_len,
            )
        )
    core.run_to_completion()
    return SimResult(policy, accounts, core.num_preemptions, core.step_count, slack)
