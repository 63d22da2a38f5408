"""The paper page's simulation results: shipped for the defaults, computed for anything else.

A thousand ShareGPT requests take the dry run several seconds per workload, too long to wait for
on every page open, so the default configuration's results ship as ``paged/viz/data/
paper_results.json`` and the page computes only when the reader changes a setting (its policies
side by side: ``paged.viz.paper.parallel``). Regenerate
the file after changing the simulator or its defaults:

    .venv/bin/python -m paged.viz.paper.results   # writes paged/viz/data/paper_results.json

It holds every default setting for each seed in ``SEEDS`` (about 20 s a seed on 2 cores), so
the page can say how far one draw of synthetic lengths is from another.

A test regenerates it on a small case and checks the shipped file carries the current defaults.
Pure Python (no torch).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from paged.engine.core import events as E
from paged.engine.core.accounting import CATEGORIES
from paged.engine.sim import workload as wl
from paged.engine.sim.paper import OPT_MAX_SEQ_LEN, ORCA_PLACEMENT, POLICIES
from paged.engine.sim.simulate import DEFAULT_NUM_SLOTS, build_requests, run_policy

SHIPPED = Path(__file__).resolve().parent.parent / "data" / "paper_results.json"
WORKLOADS = ("sharegpt", "alpaca")
FORMAT = "paper-results/1"
#: The workload seeds shipped for each default setting: one run is one draw of synthetic
#: lengths, and the page shows how far the shares move between draws.
SEEDS = (0, 1, 2, 3, 4)


@dataclass(frozen=True)
class SimConfig:
    """Everything a simulation result depends on; equal configs give equal results."""

    workload: str = "sharegpt"
    requests: int = 1000
    length_dist: str = "lognormal"
    sigma: float = wl.SIGMA
    placement: str = ORCA_PLACEMENT
    num_slots: int = DEFAULT_NUM_SLOTS
    block_size: int = 16
    max_model_len: int = OPT_MAX_SEQ_LEN
    seed: int = 0

    @property
    def dist(self) -> wl.LengthDist:
        return wl.LengthDist(self.length_dist, self.sigma)


@dataclass(frozen=True)
class PolicyRow:
    """One policy's run, reduced to what the page shows: averages over the steps in which
    requests waited, or over all steps when ``waited`` is false (no request ever waited)."""

    policy: str
    shares: dict[str, float]  # time-averaged share per accounting category
    buddy_slack: float  # the part of external + free that is buddy rounding slack
    mean_running: float
    steps: int
    preemptions: int
    waited: bool = True
    #: The same three averages over all steps (shares, buddy_slack, mean_running), for a row
    #: shown beside one whose run never saturated; None in rows written before it existed.
    all_steps: dict | None = None

    def over_all_steps(self) -> PolicyRow:
        """This row averaged over all its steps."""
        if not self.waited:
            return self
        if self.all_steps is None:
            raise ValueError(f"{self.policy}: no all-steps averages kept")
        return replace(self, waited=False, all_steps=None, **self.all_steps)


def compared(rows: list[PolicyRow]) -> tuple[list[PolicyRow], list[str]]:
    """``rows`` averaged over one window: the saturated regime when every run had one, else
    all steps for every row (a row of each kind side by side once made preallocation look
    better than paging). Also the policies under which no request ever waited."""
    never = [r.policy for r in rows if not r.waited]
    return ([r.over_all_steps() for r in rows] if never else rows), never


@dataclass(frozen=True)
class WorkloadResult:
    config: SimConfig
    mean_input: float
    mean_output: float
    rows: dict[str, PolicyRow] = field(default_factory=dict)


def simulate_policy(
    config: SimConfig, policy: str, on_finished: Callable[[int], None] | None = None
) -> PolicyRow:
    """Run ``config``'s workload under ``policy``; ``on_finished(count)`` follows progress."""
    items = wl.generate(
        config.workload, config.requests, config.max_model_len, config.seed, config.dist
    )
    sinks: tuple = ()
    if on_finished is not None:
        done = [0]

        def count(ev: E.Event) -> None:
            match ev:
                case E.Finished():
                    done[0] += 1
                    on_finished(done[0])

        sinks = (count,)
    res = run_policy(
        policy,
        build_requests(items, config.max_model_len),
        config.num_slots // config.block_size,
        config.block_size,
        config.max_model_len,
        sinks=sinks,
        placement=config.placement,
    )
    overall: dict = {
        "shares": res.shares(False),
        "buddy_slack": res.slack_share(False),
        "mean_running": res.mean_running(False),
    }
    if not res.waited:
        row = PolicyRow(policy, {}, 0.0, 0.0, res.steps, res.num_preemptions, all_steps=overall)
        return row.over_all_steps()
    return PolicyRow(
        policy,
        res.shares(),
        res.slack_share(),
        res.mean_running(),
        res.steps,
        res.num_preemptions,
        all_steps=overall,
    )


def workload_means(config: SimConfig) -> tuple[float, float]:
    items = wl.generate(
        config.workload, config.requests, config.max_model_len, config.seed, config.dist
    )
    return (
        sum(i.input_len for i in items) / len(items),
        sum(i.output_len for i in items) / len(items),
    )


def simulate(config: SimConfig) -> WorkloadResult:
    inp, out = workload_means(config)
    return WorkloadResult(config, inp, out, {p: simulate_policy(config, p) for p in POLICIES})


def to_json(results: list[WorkloadResult]) -> dict:
    return {
        "format": FORMAT,
        "results": [
            {
                "config": asdict(r.config),
                "mean_input": r.mean_input,
                "mean_output": r.mean_output,
                "rows": {p: asdict(row) for p, row in r.rows.items()},
            }
            for r in results
        ],
    }


def from_json(data: dict) -> list[WorkloadResult]:
    """Parse ``to_json`` output; raises ValueError on anything else (the file is ours, but a
    stale or hand-edited one must fail loudly, not draw wrong bars)."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"not a {FORMAT} file")
    out = []
    try:
        for r in data["results"]:
            rows = {p: PolicyRow(**row) for p, row in r["rows"].items()}
            if set(rows) != set(POLICIES) or any(
                set(x.shares) != set(CATEGORIES) for x in rows.values()
            ):
                raise ValueError("results lack a policy or a category")
            out.append(
                WorkloadResult(
                    SimConfig(**r["config"]), float(r["mean_input"]), float(r["mean_output"]), rows
                )
            )
    except (KeyError, TypeError) as e:
        raise ValueError(f"malformed paper results: {e}") from None
    return out


def over_seeds(
    shipped: dict[SimConfig, WorkloadResult], config: SimConfig
) -> list[WorkloadResult] | None:
    """``config``'s results for every seed in ``SEEDS``, when all of them are shipped; else None
    (a setting the reader changed is simulated for one seed only)."""
    out = [shipped.get(replace(config, seed=s)) for s in SEEDS]
    return None if any(r is None for r in out) else [r for r in out if r is not None]


def load_shipped(path: Path = SHIPPED) -> dict[SimConfig, WorkloadResult]:
    """The shipped results by config; empty when the file is missing or unreadable."""
    try:
        return {r.config: r for r in from_json(json.loads(path.read_text(encoding="utf-8")))}
    except (OSError, ValueError):
        return {}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Regenerate the paper page's shipped results.")
    p.add_argument("--requests", type=int, default=SimConfig.requests)
    p.add_argument("--out", default=str(SHIPPED))
    p.add_argument(
        "--seeds",
        type=int,
        default=len(SEEDS),
        help="workload seeds 0 .. N-1 (default: %(default)s)",
    )
    args = p.parse_args(argv)
    results = []
    for name in WORKLOADS:
        for seed in range(max(1, args.seeds)):
            print(
                f"simulating {name} ({args.requests} requests, seed {seed}) ...",
                file=sys.stderr,
                flush=True,
            )
            results.append(simulate(SimConfig(workload=name, requests=args.requests, seed=seed)))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(to_json(results), indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
