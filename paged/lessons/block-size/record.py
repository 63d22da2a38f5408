"""Record this lesson's traces: one workload, the paged allocator, one trace per block size.

    .venv/bin/python paged/lessons/block-size/record.py                 # the real model (CPU: ~1 min)
    .venv/bin/python paged/lessons/block-size/record.py --forward skip  # dry run, forward skipped

The arena keeps the scenario's slot count (num_blocks x block_size) at every size, so each run
has the same KV bytes and only the cut differs. The model is loaded once for all sizes.
Writes ``traces/b{size}.jsonl`` beside this file; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # run as a script from anywhere: the repo root

from paged.engine.threads import configure_openmp  # noqa: E402
from paged.engine.trace import scenario as scenario_mod  # noqa: E402
from paged.engine.trace.recorder import record  # noqa: E402

BLOCK_SIZES = (1, 8, 16, 32, 128, 256)


def at_block_size(sc: scenario_mod.Scenario, block_size: int) -> scenario_mod.Scenario:
    """The same scenario on an arena of equal slot count cut into ``block_size`` blocks."""
    num_slots = sc.num_blocks * sc.block_size
    if num_slots % block_size:
        raise SystemExit(f"error: {num_slots} slots do not divide into blocks of {block_size}")
    arena = {
        **sc.raw.get("arena", {}),
        "num_blocks": num_slots // block_size,
        "block_size": block_size,
    }
    return replace(
        sc,
        num_blocks=num_slots // block_size,
        block_size=block_size,
        raw={**sc.raw, "arena": arena},
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--forward", choices=("model", "skip"), default="model")
    p.add_argument("--sizes", default=",".join(map(str, BLOCK_SIZES)))
    p.add_argument("--out", default=str(HERE / "traces"))
    args = p.parse_args(argv)
    sc = scenario_mod.load(HERE / "scenario.toml")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model = None
    if args.forward == "model":
        configure_openmp()  # before the model loads torch
        from paged.engine.model.loader import load_model

        model = load_model(progress=False)
    for bs in (int(s) for s in args.sizes.split(",")):
        t0 = time.perf_counter()
        runs = record(
            at_block_size(sc, bs),
            ["paged"],
            str(out / f"b{bs}.jsonl"),
            forward=args.forward,
            model=model,
        ).runs
        core = runs["paged"].core
        print(
            f"block {bs:>3}: {core.step_count} steps, {core.num_preemptions} preemptions, "
            f"{time.perf_counter() - t0:.1f}s",
            file=sys.stderr,
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
