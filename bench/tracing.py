"""Throughput with tracing on / off, measured in the same run on the real model.

Runs the six-step scenario (both allocators, lockstep) repeatedly, alternating a run that writes
every event to a JSONL trace with one that has no subscriber at all, and prints tokens/s for each
and their ratio (goal >= 0.95). Alternating and taking the best of several rounds keeps the
machine's noise out of the ratio.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from paged.engine.threads import configure_openmp  # noqa: E402

configure_openmp()  # before torch loads

from paged.engine.model.loader import load_model  # noqa: E402
from paged.engine.trace.recorder import record  # noqa: E402
from paged.engine.trace.scenario import load  # noqa: E402


def _run(sc, model, traced: bool) -> float:
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        runs = record(
            sc, ["max", "paged"], os.path.join(d, "t.jsonl") if traced else None, model=model
        ).runs
        dt = time.perf_counter() - t0
    tokens = sum(len(r.output_token_ids) for run in runs.values() for r in run.requests)
    return tokens / dt


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default="paged/lessons/six-steps/scenario.toml")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--device", default="auto")
    args = ap.parse_args()
    model = load_model(None, device=args.device)
    sc = load(args.scenario)
    _run(sc, model, False)  # warm-up
    on, off = [], []
    for i in range(args.rounds):
        off.append(_run(sc, model, False))
        on.append(_run(sc, model, True))
        print(f"round {i + 1}: off {off[-1]:.1f} tok/s, on {on[-1]:.1f} tok/s", file=sys.stderr)
    best_on, best_off = max(on), max(off)
    print(f"tracing off: {best_off:.1f} tok/s")
    print(f"tracing on:  {best_on:.1f} tok/s")
    print(f"ratio on/off: {best_on / best_off:.3f}  (goal >= 0.95)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
