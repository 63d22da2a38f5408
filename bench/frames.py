"""Keypress -> new frame painted, in headless Chromium, on a 10k-event trace.

Builds a trace of at least ``--events`` events with the engine's dry-run simulator (the real
scheduler and allocators, forward pass skipped), serves it as a lesson through the real app,
presses → ``--presses`` times and reports the median time from the key going down to the frame
indicator *and* every plotly chart showing the new frame, plus two animation frames (painted).

    .venv/bin/python bench/frames.py            # goal: median <= 150 ms
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine import events as E  # noqa: E402
from engine.simulate import build_requests, run_policy  # noqa: E402
from engine.trace import TraceWriter, make_header  # noqa: E402
from engine.workload import generate  # noqa: E402

NUM_BLOCKS, BLOCK_SIZE, MAX_MODEL_LEN = 64, 16, 256
POLICIES = ("max", "paged")


def make_trace(path: Path, min_events: int, seed: int = 0) -> int:
    """Write a two-run trace (max, paged) with at least ``min_events`` events; return the count.
    Requests arrive a few per step so the arena fills, frees and refills many times."""
    n = 40
    while True:
        items = generate("alpaca", n, MAX_MODEL_LEN, seed)
        reqs = build_requests(items, MAX_MODEL_LEN, arrivals=[i // 3 for i in range(n)])
        counter = E.ListSink()
        for policy in POLICIES:
            run_policy(policy, reqs, NUM_BLOCKS, BLOCK_SIZE, MAX_MODEL_LEN, sinks=(counter,))
        if len(counter.events) >= min_events:
            break
        n = int(n * min_events / max(1, len(counter.events))) + 10
    runs = [{"name": p, "allocator": p,
             "config": {"num_blocks": NUM_BLOCKS, "block_size": BLOCK_SIZE,
                        "num_slots": NUM_BLOCKS * BLOCK_SIZE, "max_model_len": MAX_MODEL_LEN}}
            for p in POLICIES]
    header = make_header(runs, model="dry-run (bench/frames.py)", device="none",
                         scenario={"title": f"{n} alpaca-shaped requests"})
    with TraceWriter(path, header) as w:
        for policy in POLICIES:
            run_policy(policy, reqs, NUM_BLOCKS, BLOCK_SIZE, MAX_MODEL_LEN, sinks=(w.sink(policy),))
        return w.num_events


def lesson_dir(trace: Path) -> Path:
    """A lessons folder holding the six-step lesson's text over the benchmark trace."""
    root = Path(tempfile.mkdtemp(prefix="bench-frames-"))
    (root / "six-steps").mkdir()
    shutil.copy(ROOT / "lessons" / "six-steps" / "lesson.toml", root / "six-steps")
    shutil.copy(trace, root / "six-steps" / "trace.jsonl")
    return root


def measure(url: str, presses: int, start: int, viewport=(1600, 1000)) -> list[float]:
    from playwright.sync_api import sync_playwright

    from viz.serve import launch_chromium, settle_after_load, shown_frame, wait_idle, wait_painted
    times = []
    with sync_playwright() as p:
        browser = launch_chromium(p)
        page = browser.new_page(viewport={"width": viewport[0], "height": viewport[1]})
        page.goto(f"{url}/?frame={start}")
        page.wait_for_selector("#pk-frame", timeout=120_000)
        wait_painted(page, start, timeout_ms=120_000)
        settle_after_load(page)
        for _ in range(3):  # warm-up: first renders allocate, JIT, fill caches
            wait_idle(page)
            f = shown_frame(page)
            page.keyboard.press("ArrowRight")
            wait_painted(page, f + 1)
        for _ in range(presses):
            wait_idle(page)  # each press starts from a settled page (not timed)
            f = shown_frame(page)
            t0 = time.perf_counter()
            page.keyboard.press("ArrowRight")
            wait_painted(page, f + 1)
            page.evaluate("() => new Promise(r => requestAnimationFrame("
                          "() => requestAnimationFrame(r)))")
            times.append(1000 * (time.perf_counter() - t0))
        browser.close()
    return times


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=10_000)
    ap.add_argument("--presses", type=int, default=30)
    ap.add_argument("--start", type=int, default=0, help="frame to start stepping from")
    ap.add_argument("--trace", type=Path, default=None,
                    help="bench this trace instead (e.g. lessons/six-steps/trace.jsonl)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    from viz.serve import running_app
    work = Path(tempfile.mkdtemp(prefix="bench-trace-"))
    trace = work / "trace.jsonl"
    t = time.perf_counter()
    if args.trace:
        shutil.copy(args.trace, trace)
        n = sum(1 for line in trace.open(encoding="utf-8")) - 2  # less header and end line
    else:
        n = make_trace(trace, args.events)
    print(f"trace: {n} events ({time.perf_counter() - t:.1f}s to prepare)", file=sys.stderr)
    lessons = lesson_dir(trace)
    try:
        with running_app(env={"PAGED_KV_LESSONS": str(lessons)}) as url:
            times = measure(url, args.presses, args.start)
    finally:
        shutil.rmtree(lessons, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)
    out = {"events": n, "presses": len(times), "median_ms": round(statistics.median(times), 1),
           "p90_ms": round(sorted(times)[int(0.9 * (len(times) - 1))], 1),
           "min_ms": round(min(times), 1), "goal_ms": 150}
    if args.json:
        print(json.dumps(out))
    else:
        print(f"keypress -> frame painted: median {out['median_ms']} ms, p90 {out['p90_ms']} ms, "
              f"min {out['min_ms']} ms over {out['presses']} presses ({n} events; goal <= 150 ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
