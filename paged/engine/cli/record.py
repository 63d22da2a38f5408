"""``python -m paged record``: run a scenario on the real model and write its trace."""

from __future__ import annotations

import dataclasses
import sys

from paged.engine.cli.generate import hold_publisher, warn_if_app_refuses
from paged.engine.engine_args import EngineArgs, check_output_path
from paged.engine.errors import InvalidConfigError
from paged.engine.run_args import KVEventArgs, ModelArgs
from paged.engine.trace import scenario as scenario_mod
from paged.engine.trace.recorder import record, stderr_progress


def add_parser(sub) -> None:
    p = sub.add_parser("record", help="run a scenario under several allocators and write one trace")
    p.add_argument("--scenario", required=True, help="scenario TOML file")
    p.add_argument("--out", required=True, help="trace path (JSONL), or - for stdout")
    p.add_argument(
        "--allocators",
        default=None,
        help="comma-separated allocators to record side by side, one run named after each "
        "(default: the scenario's [[runs]], else max,paged)",
    )
    p.add_argument(
        "--forward",
        default="model",
        choices=("model", "skip"),
        help="skip: dry run, requests stop at their output_len",
    )
    ModelArgs.add_cli_args(p)
    EngineArgs.add_cli_args(
        p, only=("kv_cache_dtype", "enable_prefix_caching"), unset=("enable_prefix_caching",)
    )
    KVEventArgs.add_cli_args(p)
    p.set_defaults(run=run)


def run(args) -> int:
    sc = scenario_mod.load(args.scenario)
    if args.enable_prefix_caching is not None:
        sc = dataclasses.replace(sc, enable_prefix_caching=args.enable_prefix_caching)
    if args.allocators is None:
        allocators = [] if sc.runs else ["max", "paged"]
    else:
        allocators = [a.strip() for a in args.allocators.split(",") if a.strip()]
        if not allocators:
            raise InvalidConfigError("--allocators names no allocator")
        if twice := sorted({a for a in allocators if allocators.count(a) > 1}):
            raise InvalidConfigError(f"--allocators names {', '.join(twice)} twice")
    if args.enable_prefix_caching:  # asked for here, so it must apply to some run
        plans = allocators or [r.allocator for r in sc.runs]
        if "paged" not in plans:
            raise InvalidConfigError(
                f"--enable-prefix-caching applies to paged runs; {', '.join(plans)} has none"
            )
    out = sys.stdout if args.out == "-" else check_output_path(args.out, "--out", (args.scenario,))
    publisher, sinks = _kv_events(args, allocators, sc.runs)
    try:
        _record(args, sc, allocators, out, sinks)
        if args.out != "-":
            warn_if_app_refuses(args.out)
        if publisher is not None:
            publisher.flush()  # the hold's announcement says the stream is complete
            hold_publisher(args.kv_events_hold)
    finally:
        if publisher is not None:
            publisher.close()
    return 0


def _record(args, sc, allocators: list[str], out, sinks) -> None:
    """Record the scenario, then say how each run went (before any hold)."""
    runs = record(
        sc,
        allocators,
        out,
        forward=args.forward,
        model_path=args.model,
        device=args.device,
        dtype=args.dtype,
        attention=args.attention,
        progress=stderr_progress(),
        sinks=sinks,
        kv_cache_dtype=args.kv_cache_dtype,
    ).runs
    for name, r in runs.items():
        print(
            f"{name}: {r.core.step_count} steps, {r.core.num_preemptions} preemptions",
            file=sys.stderr,
            flush=True,
        )


def _kv_events(args, allocators: list[str], runs):
    """One publisher for one run (the paged one, else the first): two allocators' caches on one
    stream would read as one server's."""
    kv = KVEventArgs.from_cli_args(args)
    if kv.kv_events is None:
        return None, None
    from paged.engine.errors import InvalidRequestError
    from paged.engine.interop.kv_events import (
        EndpointError,
        EngineEventTranslator,
        KVEventPublisher,
    )

    try:
        pub = KVEventPublisher(kv.kv_events, allow_remote=kv.kv_events_allow_remote)
    except EndpointError as e:
        raise InvalidRequestError(str(e)) from None
    names = allocators or [r.label for r in runs]
    name = "paged" if "paged" in names else names[0] if names else "paged"
    return pub, {name: [EngineEventTranslator(pub)]}
