"""Shipped results for "The paper's numbers": the default simulation, computed once, kept as data.

Simulating 300 ShareGPT-shaped requests under four policies takes half a minute of pure Python;
a page should open in a moment. ``python -m viz.paper_data`` reruns the simulation and writes
``viz/data/paper_results.json`` with the parameters it used; the page takes a shipped row only
when those parameters are still the page's own, and computes anything else (another request
count, changed settings) live. tests/test_paper_data.py runs this script on a small case.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data" / "paper_results.json"


def parameters() -> dict:
    """What a shipped result depends on: change any of these and it is recomputed."""
    from engine.cmd_simulate import DEFAULT_NUM_SLOTS
    from viz import paper_page as P
    return {"workload": P.WORKLOAD, "block_size": P.BLOCK_SIZE,
            "max_model_len": P.MAX_MODEL_LEN, "seed": P.SEED, "num_slots": DEFAULT_NUM_SLOTS}


def generate(counts: list[int]) -> dict:
    """Simulate every policy for each request count; JSON-ready."""
    from viz import paper_page as P
    return {"parameters": parameters(),
            "results": {str(n): [asdict(P.simulate_policy(p, n)) for p in P.POLICIES]
                        for n in counts}}


def shipped_rows(n: int, path: Path = DATA) -> list | None:
    """The shipped rows for ``n`` requests, or None when there are none for the page's current
    parameters (or the file is missing or unreadable: the page then simulates)."""
    from viz import paper_page as P
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        if doc.get("parameters") != parameters():
            return None
        rows = doc["results"].get(str(n))
        if rows is None:
            return None
        out = [P.PolicyRow(**r) for r in rows]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return out if [r.policy for r in out] == list(P.POLICIES) else None


def main(argv: list[str] | None = None) -> int:
    from viz import paper_page as P
    ap = argparse.ArgumentParser(description="Regenerate the paper page's shipped results.")
    ap.add_argument("--requests", type=int, nargs="+", default=[P.DEFAULT_REQUESTS])
    ap.add_argument("--out", type=Path, default=DATA)
    args = ap.parse_args(argv)
    if any(n <= 0 or n > 100_000 for n in args.requests):
        print("error: --requests must be between 1 and 100000", file=sys.stderr)
        return 2
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(generate(args.requests), indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
