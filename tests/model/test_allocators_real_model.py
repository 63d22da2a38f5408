"""Every allocator serves the real model the same greedy tokens, and the accounting of the
live event stream equals that of the trace read back from disk."""

import pytest

from paged.engine.core import accounting
from paged.engine.trace import io as trace
from paged.engine.trace.recorder import record
from paged.engine.trace.scenario import Scenario, ScenarioRequest
from tests.sinks import ListSink

pytestmark = pytest.mark.model

ALL = ["paged", "max", "pow2", "oracle"]


def _scenario() -> Scenario:
    reqs = (
        # each request grows past a block boundary (block 8: A from 5 tokens to 10, B's chat
        # prompt from 39 to 45, C from 21 to 26); more tokens would only add steps
        ScenarioRequest(
            id="A", prompt="The three primary colours are", max_tokens=5, ignore_eos=True
        ),
        ScenarioRequest(
            id="B",
            prompt="Answer briefly: what is two plus two?",
            chat=True,
            max_tokens=6,
            arrival_step=1,
        ),
        ScenarioRequest(id="C", prompt_len=21, max_tokens=5, ignore_eos=True, arrival_step=2),
    )
    return Scenario(
        "allocators agree", num_blocks=14, block_size=8, max_model_len=80, requests=reqs
    )


@pytest.fixture(scope="module")
def recorded(smollm, tmp_path_factory):
    path = tmp_path_factory.mktemp("trace") / "all.jsonl"
    live = {name: [ListSink()] for name in ALL}
    runs = record(_scenario(), ALL, str(path), model=smollm, attention="torch", sinks=live).runs
    return runs, live, trace.read(path)


def test_every_allocator_yields_the_same_greedy_tokens(recorded):
    runs, _, _ = recorded
    outputs = {
        name: {r.req_id: r.output_token_ids for r in run.requests} for name, run in runs.items()
    }
    assert all(len(toks) > 0 for toks in outputs["paged"].values())
    for name in ALL[1:]:
        assert outputs[name] == outputs["paged"], f"{name} diverged from paged"


def test_live_events_and_the_trace_give_identical_accounting_at_every_step(recorded):
    _, live, back = recorded
    sc = _scenario()
    n = sc.num_blocks * sc.block_size
    for name in ALL:
        live_events = live[name][0].events
        assert back.runs[name] == live_events
        live_acct = accounting.account(live_events, n, sc.block_size)
        assert live_acct == accounting.account(back.runs[name], n, sc.block_size)
        assert len(live_acct) == sum(1 for ev in live_events if ev.kind == "step_end")


def test_the_oracle_reserves_exactly_what_paging_filled(recorded):
    runs, live, _ = recorded
    finals = {r.req_id: r.num_computed for r in runs["paged"].requests}
    reserved = {ev.req: ev.length for ev in live["oracle"][0].events if ev.kind == "slots_reserved"}
    assert reserved == finals
