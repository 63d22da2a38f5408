"""The dry-run simulation against the vLLM paper's own figures: Orca as §6.1 describes it (buddy
placement, output-only Pow2), the Table 1 arena, and Fig. 2 / Fig. 13 within stated bounds.
The full-size run (1,000 requests) is reported in the note; here 300 keep the test fast."""

from __future__ import annotations

import contextlib
import io
import json
import statistics

import pytest

from paged.engine.cli.main import main
from paged.engine.errors import InvalidConfigError
from paged.engine.sim import paper
from paged.engine.sim.capacity import PRESETS, KiB
from paged.engine.sim.simulate import build_requests, run_policy
from paged.engine.sim.workload import LENGTH_DISTS, LengthDist, generate

N = 300


def _simulate(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["simulate", *args])
    return rc, out.getvalue(), err.getvalue()


def test_default_arena_is_opt_13b_in_table_1s_twelve_gib():
    opt = PRESETS["opt-13b"]
    assert opt.bytes_per_token == 2 * 40 * 5120 * 2 == 800 * KiB  # K+V x layers x hidden x fp16
    assert paper.default_num_slots() == 12 * 1024 * 1024 // 800 == 15_728
    assert f"{paper.default_num_slots() / 1000:.1f}K" == paper.TABLE1_OPT13B_SLOTS_PRINTED


@pytest.fixture(scope="module")
def sharegpt() -> dict:
    rc, out, _ = _simulate("--workload", "sharegpt", "--requests", str(N), "--json")
    assert rc == 0
    return json.loads(out)


def test_defaults_are_the_papers_orca(sharegpt):
    w = sharegpt["workload"]
    assert (w["placement"], w["num_slots"], w["max_model_len"]) == ("buddy", 15_728, 2048)


@pytest.mark.parametrize("policy", ["max", "pow2", "oracle"])
def test_token_state_share_is_within_five_points_of_fig_2(sharegpt, policy):
    ours = sharegpt["policies"][policy]["token_states"]
    assert abs(ours - paper.FIG2[policy].token_states) <= 0.05


def test_paging_keeps_at_least_the_papers_token_share(sharegpt):
    assert sharegpt["policies"]["paged"]["token_states"] >= paper.FIG2["paged"].token_states


@pytest.mark.parametrize("policy", paper.POLICIES)
def test_mean_running_is_within_fifteen_percent_of_fig_13(sharegpt, policy):
    ours = sharegpt["policies"][policy]["mean_running"]
    ref = paper.FIG13["sharegpt"][policy]
    assert abs(ours - ref) <= 0.15 * ref


def test_buddy_slack_is_counted_with_external_fragmentation(sharegpt):
    for policy in ("pow2", "oracle"):
        row = sharegpt["policies"][policy]
        assert row["internal"] == 0 or policy == "pow2"
        assert 0 < row["buddy_slack"] <= row["external"] + row["free"] + 1e-4
    assert sharegpt["policies"]["max"]["buddy_slack"] == 0  # 2,048 is a power of two


def test_first_fit_has_no_slack_and_less_external_fragmentation():
    rc, out, _ = _simulate(
        "--requests", "120", "--policies", "oracle", "--placement", "first-fit", "--json"
    )
    ff = json.loads(out)["policies"]["oracle"]
    rc2, out2, _ = _simulate("--requests", "120", "--policies", "oracle", "--json")
    buddy = json.loads(out2)["policies"]["oracle"]
    assert rc == rc2 == 0 and ff["buddy_slack"] == 0
    assert ff["external"] < buddy["external"] and ff["mean_running"] > buddy["mean_running"]


@pytest.mark.parametrize("name", LENGTH_DISTS)
def test_every_length_distribution_keeps_the_papers_means(name):
    items = generate("sharegpt", 4000, 2048, seed=3, dist=LengthDist(name))
    assert statistics.mean(i.output_len for i in items) == pytest.approx(338.0, rel=0.08)
    assert all(i.input_len >= 1 and i.input_len + i.output_len <= 2048 for i in items)


def test_spread_grows_with_sigma_and_is_zero_when_fixed():
    def spread(dist: LengthDist) -> float:
        return statistics.pstdev(i.output_len for i in generate("alpaca", 3000, 2048, 1, dist))

    assert spread(LengthDist("fixed")) == 0
    assert spread(LengthDist("uniform")) < spread(LengthDist("exponential"))
    assert spread(LengthDist("lognormal", 0.5)) < spread(LengthDist("lognormal", 1.2))


@pytest.mark.parametrize(
    "args, message",
    [
        (["--sigma", "0"], "sigma must be in"),
        (["--sigma", "9"], "sigma must be in"),
        (["--length-dist", "uniform", "--sigma", "0.5"], "only to --length-dist lognormal"),
    ],
)
def test_bad_length_options_are_one_line_errors(args, message):
    rc, _, err = _simulate("--requests", "5", *args)
    assert rc == 2 and message in err and "Traceback" not in err


def test_length_dist_rejects_unknown_names():
    with pytest.raises(InvalidConfigError, match="unknown length distribution"):
        LengthDist("zipf")


def test_fig13_ratios_are_computed_from_the_cited_values():
    assert round(paper.fig13_ratio("sharegpt", "pow2"), 2) == 1.40
    assert round(paper.fig13_ratio("sharegpt", "oracle"), 2) == 1.95
    assert round(paper.fig13_ratio("sharegpt", "paged"), 2) == 4.35


def test_a_policy_run_says_how_far_it_is_and_the_request_cap_is_minutes_not_hours(monkeypatch):
    from paged.engine.cli import simulate as cmd_simulate

    monkeypatch.setattr(cmd_simulate, "PROGRESS_EVERY_S", 0.0)  # a line per step
    rc, _, err = _simulate("--requests", "30", "--policies", "max,paged", "--json")
    said = [ln.strip() for ln in err.splitlines() if "requests finished" in ln]
    for policy in ("max", "paged"):
        mine = [int(ln.split()[1].split("/")[0]) for ln in said if ln.startswith(f"{policy}:")]
        assert rc == 0 and mine and mine == sorted(mine) and mine[-1] <= 30
    # 10,000 requests took about 2 min of CPU under max: a million was hours and ~30 GB
    rc, _, err = _simulate("--requests", str(cmd_simulate.MAX_SIM_REQUESTS + 1))
    assert rc == 2 and "--requests at most 20,000" in err


def test_rows_share_one_averaging_window_and_say_which():
    """10 requests: paging never makes one wait. Were its row to fall back to all steps while
    max's stays on its waiting steps, under one label, max would look better than paging."""
    rc, out, err = _simulate("--requests", "10", "--json")
    rc2, out2, _ = _simulate("--requests", "10", "--json", "--all-steps")
    assert rc == rc2 == 0
    got, every = json.loads(out), json.loads(out2)
    assert got["workload"]["averaged_over"] == "all steps"
    assert "paged" in got["workload"]["why_all_steps"] and "paged" in err.split("note: ")[1]
    assert got["policies"] == every["policies"]
    assert got["policies"]["paged"]["token_states"] > got["policies"]["max"]["token_states"]
    # saturated: the default label, no note
    rc, out, err = _simulate("--requests", "300", "--json", "--policies", "max,paged")
    assert json.loads(out)["workload"]["averaged_over"] == "steps with a non-empty queue"
    assert "note:" not in err


def test_a_run_with_no_waiting_step_has_no_saturated_average():
    from paged.engine.sim.simulate import common_window

    items = generate("alpaca", 3, 256, 0, LengthDist("fixed"))
    res = run_policy("paged", build_requests(items, 256), 64, 16, 256)
    assert not res.waited and not common_window([res])
    with pytest.raises(ValueError, match="no request ever waited"):
        res.shares()
    assert sum(res.shares(False).values()) == pytest.approx(1.0)


def test_one_step_requests_are_counted_as_they_held_memory_not_as_a_hole():
    """A max_model_len of 50 cuts every request to one step (49 in, 1 out): a waiter refused
    before the finisher let go saw no room; an account with the finisher's memory freed and
    the refusal standing would read 100 % external fragmentation with no token ever held. The
    finisher counts in its step, as the viewer draws it: 49 of 96 slots hold tokens, and the
    32-slot buddy half nobody fits is the hole."""
    rc, out, _ = _simulate(
        "--requests", "5", "--num-slots", "100", "--max-model-len", "50", "--json"
    )
    assert rc == 0
    rows = json.loads(out)["policies"]
    for policy, row in rows.items():
        assert row["token_states"] == pytest.approx(49 / 96, abs=1e-4), policy  # JSON: 4 places
    assert rows["max"]["external"] < 0.5 and rows["paged"]["external"] == 0


def test_mean_running_is_the_mean_batch_size_counting_a_request_in_its_last_step(monkeypatch):
    """Fig. 13 averages the requests in each step's batch. A request that makes its last token
    in a step ran in that step's batch, but the mean counted only those still running at the
    step's end: one-step requests (the second run) read 0. Here every step's batch is measured
    where the model would see it, in the runner, and the mean must be exactly that."""
    from paged.engine.sim import simulate

    sizes: list[int] = []

    class CountingRunner(simulate.DryRunner):
        def execute(self, batch):
            sizes.append(len(batch.seqs))
            return super().execute(batch)

    monkeypatch.setattr(simulate, "DryRunner", CountingRunner)
    cases = [(generate("sharegpt", 40, 512, 1), 512, 48), (generate("alpaca", 9, 50, 2), 50, 6)]
    for items, max_len, num_blocks in cases:
        for policy in paper.POLICIES:
            sizes.clear()
            res = run_policy(policy, build_requests(items, max_len), num_blocks, 16, max_len)
            # a step the runner never sees (nothing to run or copy) ran a batch of none
            assert res.mean_running(False) == pytest.approx(sum(sizes) / res.steps), policy
            assert max(a.batched for a in res.accounts) == max(sizes), policy
            assert all(a.batched >= a.running for a in res.accounts)
