"""The lesson's claims, checked on the real scheduler and allocators (forward pass skipped)."""

import io
import json

import pytest

from paged.engine.core import accounting
from paged.engine.core import events as E
from paged.engine.sim.simulate import build_requests, run_policy
from paged.engine.sim.workload import WorkItem, generate
from paged.engine.trace import io as trace
from paged.engine.trace.recorder import record
from paged.engine.trace.scenario import load
from tests.sinks import ListSink

SIX_STEPS = "paged/lessons/six-steps/scenario.toml"


def _blocked_no_hole(events):
    return [
        ev for ev in events if ev.kind == "admission_blocked" and ev.reason == E.BLOCKED_NO_HOLE
    ]


def test_preallocation_blocks_request_despite_enough_free_slots():
    runs = record(
        load(SIX_STEPS),
        ["max", "paged"],
        forward="skip",
        sinks={"max": [left := ListSink()], "paged": [right := ListSink()]},
    ).runs
    blocked = _blocked_no_hole(left.events)
    assert blocked, "preallocation never hit external fragmentation"
    first = blocked[0]
    assert first.free_slots >= first.need_slots > first.largest_hole
    admitted_right = [ev for ev in right.events if ev.kind == "admitted" and ev.req == first.req]
    assert admitted_right and admitted_right[0].step <= first.step, "paging did not admit it"
    assert all(r.finish_reason for run in runs.values() for r in run.requests)


def test_paging_never_reports_external_fragmentation_as_no_hole():
    sink = ListSink()
    record(load(SIX_STEPS), ["paged"], forward="skip", sinks={"paged": [sink]})
    assert not _blocked_no_hole(sink.events)


def test_live_events_and_trace_read_back_give_identical_accounting():
    sc = load(SIX_STEPS)
    buf = io.StringIO()
    live = {"max": [ListSink()], "paged": [ListSink()]}
    record(sc, ["max", "paged"], buf, forward="skip", sinks=live)
    back = trace.loads(buf.getvalue())
    n = sc.num_blocks * sc.block_size
    for run in ("max", "paged"):
        live_events = live[run][0].events
        assert back.runs[run] == live_events
        assert accounting.account(back.runs[run], n, sc.block_size) == accounting.account(
            live_events, n, sc.block_size
        )


def test_every_slot_is_in_exactly_one_category_every_step():
    sink = ListSink()
    sc = load(SIX_STEPS)
    record(sc, ["max"], forward="skip", sinks={"max": [sink]})
    for a in accounting.account(sink.events, sc.num_blocks * sc.block_size, sc.block_size):
        assert sum(getattr(a, c) for c in accounting.CATEGORIES) == a.num_slots
        assert min(getattr(a, c) for c in accounting.CATEGORIES) >= 0


@pytest.fixture(scope="module")
def sharegpt_runs():
    """200 ShareGPT-like requests on 960 blocks of 16 under every policy, run once: the two
    tests below read different claims off the same runs."""
    reqs = build_requests(generate("sharegpt", 200, 2048, seed=0), 2048)
    return {p: run_policy(p, reqs, 960, 16, 2048) for p in ("max", "pow2", "oracle", "paged")}


def test_paging_fits_more_requests_than_preallocation_on_equal_memory(sharegpt_runs):
    mx, pg = sharegpt_runs["max"], sharegpt_runs["paged"]
    assert pg.mean_running() > 2 * mx.mean_running()
    assert pg.shares()["token_states"] > mx.shares()["token_states"]


def test_policies_rank_as_in_the_paper_for_token_states(sharegpt_runs):
    shares = {p: run.shares()["token_states"] for p, run in sharegpt_runs.items()}
    assert shares["max"] < shares["pow2"] < shares["oracle"] < shares["paged"]
    assert shares["paged"] >= 0.9


def test_paged_preempts_under_pressure_and_still_finishes_everything():
    items = [WorkItem(20, 60) for _ in range(8)]
    res = run_policy("paged", build_requests(items, 128), 16, 8, 128)
    assert res.num_preemptions > 0
    assert res.accounts[-1].running == res.accounts[-1].waiting == 0


def test_simulate_cli_prints_one_json_object(tmp_path):
    import contextlib

    from paged.engine.cli.main import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        rc = main(["simulate", "--requests", "40", "--policies", "max,paged", "--json"])
    assert rc == 0
    obj = json.loads(out.getvalue())
    assert obj["forward"] == "skipped" and set(obj["policies"]) == {"max", "paged"}
    for row in obj["policies"].values():
        assert sum(row[c] for c in accounting.CATEGORIES) == pytest.approx(1, abs=1e-3)


def test_the_dry_run_stops_each_request_where_the_real_model_did():
    """The scenario's output_len is the shipped real-model trace's length, request by request,
    and at least two requests stop at EOS long before their max_tokens (internal
    fragmentation on the left for more than one request)."""
    sc = load(SIX_STEPS)
    shipped = trace.read("paged/lessons/six-steps/trace.jsonl")
    assert shipped.header["forward"] == "model"
    for run, events in shipped.runs.items():
        real = {e.req: e for e in events if e.kind == E.Finished.kind}
        for r in sc.requests:
            want = r.max_tokens if r.ignore_eos else r.output_len
            assert real[r.id].num_generated == want, (run, r.id)
        early = [r for r in sc.requests if real[r.id].num_generated * 3 < r.max_tokens]
        assert len(early) >= 2 and all(real[r.id].reason == "eos" for r in early), run


def test_a_live_view_shows_the_finished_traces_frame_at_every_line_it_may_stop_at():
    """The recorder writes each run's step in turn: a stream read between the two must not show
    one side a step behind, labelled as ended, nor narrate the run as finished ("every
    request has finished ... in 32 steps") while it runs. Cut after every line of the opening
    and closing steps (all of them take seconds), the newest frame must be the finished trace's,
    side by side, and no step keyed to the last frame may show before the end."""
    from paged.viz.fold.lesson import build, live_edge
    from paged.viz.fold.lesson_folder import load_spec

    buf = io.StringIO()
    record(load(SIX_STEPS), ["max", "paged"], buf, forward="skip")
    lines = buf.getvalue().splitlines(keepends=True)
    spec = load_spec("six-steps")
    full = build(spec, trace.loads(buf.getvalue()), source="live")
    last_step = [k for k, s in enumerate(spec.steps) if s.rule.get("frame") == "last"]
    folded = 0
    for k in [*range(1, 140), *range(len(lines) - 60, len(lines))]:
        tr = trace.parse_lines(lines[:k], require_end=False)
        if not all(any(e.kind == "step_end" for e in evs) for evs in tr.runs.values()):
            continue
        live = build(spec, live_edge(tr), source="live", partial=True)
        i = live.num_frames - 1
        for side in ("left", "right"):
            ended, was = i >= len(live.side(side).frames), i >= len(full.side(side).frames)
            assert ended == was and live.side(side).at(i) == full.side(side).at(i), (k, side)
        assert all(live.keyframes[s] is None for s in last_step), k
        folded += 1
    assert folded > 150 and last_step
