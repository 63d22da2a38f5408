"""``python -m paged simulate``: the paper's Fig. 2 comparison at a scale no CPU could run."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any

from paged.engine.core import events as E
from paged.engine.core.allocators import ALLOCATORS, check_allocator, check_block_size
from paged.engine.engine_args import MAX_ARENA_SLOTS, EngineArgs
from paged.engine.errors import InvalidConfigError
from paged.engine.sim import workload
from paged.engine.sim.paper import OPT_MAX_SEQ_LEN, ORCA_PLACEMENT
from paged.engine.sim.simulate import DEFAULT_NUM_SLOTS, build_requests, common_window, run_policy

#: Measured on a 2-core CPU: 10,000 requests took 28 s under paging and 21 s under max
#: (the work grows with the tokens generated), so this cap costs at most about 15 minutes for
#: all four policies; a cap of a million would run for hours and need more memory than the
#: machine has.
MAX_SIM_REQUESTS = 20_000
#: How often a policy's run says how far it is, in seconds.
PROGRESS_EVERY_S = 2.0


def add_parser(sub) -> None:
    p = sub.add_parser(
        "simulate",
        help="dry-run the scheduler and allocators on a synthetic workload (forward pass skipped)",
    )
    p.add_argument("--workload", default="sharegpt", choices=sorted(workload.WORKLOADS))
    p.add_argument("--requests", type=int, default=1000)
    p.add_argument(
        "--policies",
        default="max,pow2,oracle,paged",
        help="comma-separated subset of " + ",".join(ALLOCATORS),
    )
    # no model is loaded: left out, --max-model-len is the paper's OPT-13B context and
    # --placement its Orca's buddy allocator
    EngineArgs.add_cli_args(
        p, only=("block_size", "max_model_len", "placement"), unset=("placement",)
    )
    p.add_argument(
        "--num-slots",
        type=int,
        default=DEFAULT_NUM_SLOTS,
        help="KV arena size in token slots (default: OPT-13B on an A100-40GB)",
    )
    p.add_argument(
        "--length-dist",
        default="lognormal",
        choices=workload.LENGTH_DISTS,
        help="shape of the input and output lengths around the paper's means",
    )
    p.add_argument(
        "--sigma",
        type=float,
        default=workload.SIGMA,
        help=f"log-normal spread (default {workload.SIGMA})",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--all-steps",
        action="store_true",
        help="average over every step, not only while requests wait",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=run)


def _check(args) -> list[str]:
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    if not policies:
        raise InvalidConfigError(f"no policy given; choose from {', '.join(ALLOCATORS)}")
    for policy in policies:
        check_allocator(policy)
    check_block_size(args.block_size)
    if args.max_model_len is None:
        args.max_model_len = OPT_MAX_SEQ_LEN
    if args.placement is None:
        args.placement = ORCA_PLACEMENT
    if args.max_model_len < workload.MIN_MODEL_LEN:
        raise InvalidConfigError(
            f"--max-model-len must be at least {workload.MIN_MODEL_LEN}: room for a one-token "
            f"prompt and one generated token, got {args.max_model_len}"
        )
    for name in ("requests", "num_slots"):
        if getattr(args, name) <= 0:
            raise InvalidConfigError(f"--{name.replace('_', '-')} must be positive")
    if args.num_slots > MAX_ARENA_SLOTS or args.requests > MAX_SIM_REQUESTS:
        raise InvalidConfigError(
            f"--num-slots is at most {MAX_ARENA_SLOTS:,} and --requests at "
            f"most {MAX_SIM_REQUESTS:,}"
        )
    if args.num_slots < args.max_model_len:
        raise InvalidConfigError("--num-slots must hold at least one max-model-len request")
    if args.block_size > args.num_slots:  # the arena would have no whole block
        raise InvalidConfigError(
            f"--block-size {args.block_size:,} is more than the arena's {args.num_slots:,} slots"
        )
    return policies


def _dist(args) -> workload.LengthDist:
    if args.sigma != workload.SIGMA and args.length_dist != "lognormal":
        raise InvalidConfigError("--sigma applies only to --length-dist lognormal")
    return workload.LengthDist(args.length_dist, args.sigma)


def run(args) -> int:
    policies = _check(args)
    dist = _dist(args)
    items = workload.generate(args.workload, args.requests, args.max_model_len, args.seed, dist)
    reqs = build_requests(items, args.max_model_len)
    num_blocks = args.num_slots // args.block_size
    out: dict[str, Any] = {
        "forward": "skipped",
        "workload": {
            "name": args.workload,
            "requests": args.requests,
            "seed": args.seed,
            "length_dist": dist.name,
            **({"sigma": dist.sigma} if dist.name == "lognormal" else {}),
            "placement": args.placement,
            "mean_input": sum(i.input_len for i in items) / len(items),
            "mean_output": sum(i.output_len for i in items) / len(items),
            "max_model_len": args.max_model_len,
            "block_size": args.block_size,
            "num_slots": num_blocks * args.block_size,
        },
        "policies": {},
    }
    results = []
    for policy in policies:
        print(f"simulating {policy} ...", file=sys.stderr, flush=True)
        res = run_policy(
            policy,
            reqs,
            num_blocks,
            args.block_size,
            args.max_model_len,
            sinks=(_progress(policy, len(reqs)),),
            placement=args.placement,
        )
        results.append(res)
    saturated = common_window(results, not args.all_steps)
    out["workload"]["averaged_over"] = "steps with a non-empty queue" if saturated else "all steps"
    if saturated != (not args.all_steps):  # one window for every row, said where it changed
        never = ", ".join(r.policy for r in results if not r.waited)
        out["workload"]["why_all_steps"] = f"no request ever waited under {never}"
        print(
            f"note: no request ever waited under {never}, so every policy is averaged over all "
            "its steps (more --requests saturate the arena)",
            file=sys.stderr,
        )
    for res in results:
        shares = res.shares(saturated)
        out["policies"][res.policy] = {
            **{k: round(v, 4) for k, v in shares.items()},
            "buddy_slack": round(res.slack_share(saturated), 4),
            "mean_running": round(res.mean_running(saturated), 2),
            "steps": res.steps,
            "preemptions": res.num_preemptions,
        }
    if args.json:
        print(json.dumps(out))
    else:
        _print_table(out)
    return 0


def _progress(policy: str, total: int) -> Callable[[E.Event], None]:
    """A bus sink that says on stderr, at most every ``PROGRESS_EVERY_S``, how many requests
    the policy's run has finished (a large run takes minutes)."""
    done, last = 0, time.monotonic()

    def sink(ev: E.Event) -> None:
        nonlocal done, last
        match ev:
            case E.Finished():
                done += 1
            case E.StepEnd() if time.monotonic() - last >= PROGRESS_EVERY_S:
                last = time.monotonic()
                print(f"  {policy}: {done}/{total} requests finished", file=sys.stderr, flush=True)

    return sink


def _print_table(out: dict) -> None:
    cols = ("token_states", "reservation", "internal", "external", "free", "mean_running")
    print(f"{'policy':8}" + "".join(f"{c:>14}" for c in cols))
    for name, row in out["policies"].items():
        cells = [f"{row[c]:>13.1%} " if c != "mean_running" else f"{row[c]:>14.1f}" for c in cols]
        print(f"{name:8}" + "".join(cells))
