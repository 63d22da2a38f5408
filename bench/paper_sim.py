"""The paper page's re-simulation after a changed setting: today's code against BASE, same run.

For each setting, back to back and alternating, each in a fresh interpreter:

1. ``base``: ``paged.viz.paper.results.simulate`` at BASE (default ``6c5ba9f``, the last commit before
   the dry run was made faster), in a temporary git worktree: the four policies one after another,
   as the page ran them;
2. ``one process``: the same call today (the engine's own speed-up);
3. ``page``: what the page runs today, ``paged.viz.paper.parallel.simulate_rows`` (one child per policy
   when more than one core is usable); its CPU time includes its children's.

It prints the best wall and CPU seconds of ``--rounds`` rounds and their ratios to ``base``, and
checks that today's two computed the same rows (every share, mean and count, exactly); BASE is
timed only, since free slots beside a request refused for want of space in total (not of a hole)
stopped counting as external fragmentation after it, which moves its shares. The page's
goal: a changed setting in under 5 s on a 2-core machine. About 6 min with the defaults (two rounds
of five settings); ``--all`` runs all 108 settings (about 25 min a round).

    .venv/bin/python bench/paper_sim.py [--all] [--rounds 2] [--base REV]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from paged.viz.paper.results import SimConfig  # noqa: E402

BASE = "6c5ba9f"
#: The slowest settings the page offers (1,000 ShareGPT requests), an Alpaca one and a smaller
#: one; ``--all`` runs every setting instead.
SETTINGS = (
    SimConfig(placement="first-fit"),
    SimConfig(length_dist="exponential"),
    SimConfig(sigma=0.4),
    SimConfig(workload="alpaca", placement="first-fit"),
    SimConfig(requests=300, length_dist="uniform"),
)

# Run in the tree named by argv[1]; prints wall s, CPU s (with children) and the rows.
CHILD = """
import json, resource, sys, time
from dataclasses import asdict
sys.path.insert(0, sys.argv[1])
from paged.viz.paper.results import SimConfig, simulate
config, how = SimConfig(**json.loads(sys.argv[2])), sys.argv[3]
t0, c0 = time.perf_counter(), time.process_time()
if how == "page":
    from paged.engine.sim.paper import POLICIES
    from paged.viz.paper.parallel import simulate_rows
    rows = simulate_rows(config, POLICIES)
else:
    rows = simulate(config).rows
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
kids = resource.getrusage(resource.RUSAGE_CHILDREN)
cpu += kids.ru_utime + kids.ru_stime
print(json.dumps({"wall": wall, "cpu": cpu, "rows": {p: asdict(r) for p, r in rows.items()}}))
"""


def every_setting() -> list[SimConfig]:
    from paged.engine.core.placement import PLACEMENTS
    from paged.engine.sim.workload import LENGTH_DISTS, SIGMA, WORKLOADS
    from paged.viz.app.paper import REQUEST_CHOICES, SIGMA_CHOICES  # (imports streamlit)

    return [
        SimConfig(workload=w, requests=n, placement=pl, length_dist=d, sigma=float(s))
        for w in WORKLOADS
        for n in REQUEST_CHOICES
        for pl in PLACEMENTS
        for d in LENGTH_DISTS
        for s in (SIGMA_CHOICES if d == "lognormal" else (SIGMA,))
    ]


def measure(tree: Path, config: SimConfig, how: str) -> dict:
    run = subprocess.run(
        [sys.executable, "-c", CHILD, str(tree), json.dumps(asdict(config)), how],
        cwd=tree,
        capture_output=True,
        text=True,
    )
    if run.returncode != 0:
        sys.exit(f"bench/paper_sim.py: {how} in {tree} failed:\n{run.stderr}")
    return json.loads(run.stdout.strip().splitlines()[-1])


def label(c: SimConfig) -> str:
    dist = f"lognormal {c.sigma:g}" if c.length_dist == "lognormal" else c.length_dist
    return f"{c.workload} {c.requests} {c.placement} {dist}"


def git(*args: str) -> None:
    run = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"bench/paper_sim.py: git {' '.join(args)}: {run.stderr.strip()}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", default=BASE, help=f"the commit to compare with (default {BASE})")
    ap.add_argument("--rounds", type=int, default=2, help="best of this many (default 2)")
    ap.add_argument("--all", action="store_true", help="every setting the page offers")
    args = ap.parse_args()
    settings = every_setting() if args.all else list(SETTINGS)
    ways = ("base", "one process", "page")
    print(
        f"{'setting':<38}" + "".join(f"{w + ' s':>15}" for w in ways) + "  same rows (today's two)"
    )
    worst = 0.0
    with tempfile.TemporaryDirectory(prefix="paper-sim-base-") as tmp:
        tree = Path(tmp) / "tree"
        git("worktree", "add", "--detach", str(tree), args.base)
        try:
            for config in settings:
                best: dict[str, dict] = {}
                for _ in range(args.rounds):
                    for way in ways:
                        got = measure(tree if way == "base" else ROOT, config, way)
                        if way not in best or got["wall"] < best[way]["wall"]:
                            best[way] = got
                same = best["one process"]["rows"] == best["page"]["rows"]
                base = best["base"]["wall"]
                cells = [f"{best['base']['wall']:6.2f} cpu {best['base']['cpu']:5.1f}"]
                cells += [
                    f"{best[w]['wall']:5.2f} {best[w]['wall'] / base:4.2f}x" for w in ways[1:]
                ]
                worst = max(worst, best["page"]["wall"])
                print(
                    f"{label(config):<38}" + "".join(f"{c:>15}" for c in cells),
                    " yes" if same else " NO",
                    flush=True,
                )
        finally:
            git("worktree", "remove", "--force", str(tree))
    print(f"slowest page wall time: {worst:.2f} s (goal < 5 s); {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
