"""What one tick of a live run costs near its start and near its end: incremental vs refolding.

A live run (paged/viz/live/run.py) streams its trace and the lesson page folds it every 0.75 s. This
builds a long lockstep dry-run trace (the six-step scenario's requests arriving in waves,
recorded by the engine with its forward pass skipped: no model) and feeds it in ``--ticks``
equal chunks, cut at byte offsets, so mid-line. A tick is what the page does: read the new
text, fold, and make the player's payload. It prints the median cost of ``--sample`` ticks
near the start and near the end and their ratio end / start (goal <= 2) for

- ``incremental``: paged/viz/live/follow.py and paged/viz/player/live.py, fed every tick in turn;
- ``refold``, the peer: ``parse_lines`` of everything so far, ``build(live_edge(...))`` and
  ``payload`` of every frame, measured on the same sampled ticks only (every tick would take
  minutes: that is the point).

Both must give the same frames: the last tick's payloads are decoded and compared.

    .venv/bin/python bench/live_tick.py [--events 10000] [--ticks 100]
"""

from __future__ import annotations

import argparse
import base64
import codecs
import dataclasses
import io
import json
import statistics
import sys
import time
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from paged.engine.trace.io import parse_lines  # noqa: E402
from paged.engine.trace.recorder import record  # noqa: E402
from paged.engine.trace.scenario import Scenario, load  # noqa: E402
from paged.viz.fold.lesson import build, live_edge  # noqa: E402
from paged.viz.fold.lesson_folder import load_spec  # noqa: E402
from paged.viz.live.follow import LiveLesson  # noqa: E402
from paged.viz.player import payload as player  # noqa: E402
from paged.viz.player.live import LivePayload  # noqa: E402

LESSON = "six-steps"
WAVE_STEPS = 30  # a wave of requests every this many steps: the arena fills and drains


def waves(sc: Scenario, n: int) -> Scenario:
    """``sc``'s requests ``n`` times over, wave ``w`` arriving ``w * WAVE_STEPS`` steps later."""
    reqs, raw = [], []
    for w in range(n):
        for r, d in zip(sc.requests, sc.raw["requests"], strict=True):
            step = r.arrival_step + w * WAVE_STEPS
            reqs.append(dataclasses.replace(r, id=f"{r.id}{w}", arrival_step=step))
            raw.append({**d, "id": f"{r.id}{w}", "arrival_step": step})
    return dataclasses.replace(sc, requests=tuple(reqs), raw={**sc.raw, "requests": raw})


def long_trace(min_events: int) -> bytes:
    """A lockstep two-run trace (max, paged) of at least ``min_events`` events."""
    sc = load(ROOT / "paged" / "lessons" / LESSON / "scenario.toml")
    n = 1
    while True:
        buf = io.StringIO()
        record(waves(sc, n), ["max", "paged"], buf, forward="skip")
        text = buf.getvalue()
        if text.count("\n") - 2 >= min_events:
            return text.encode("utf-8")
        n = max(n + 1, n * min_events // max(1, text.count("\n") - 2))


def whole_lines(data: bytes) -> list[str]:
    return [line + "\n" for line in data.decode("utf-8", "ignore").split("\n")[:-1]]


def refold_tick(spec, data: bytes, lang: str) -> dict | None:
    tr = parse_lines(whole_lines(data), require_end=False)
    if not all(any(e.kind == "step_end" for e in evs) for evs in tr.runs.values()):
        return None
    return player.payload(build(spec, live_edge(tr), source="live", partial=True), lang)


def shown(data: dict) -> tuple[dict, list[list[str]]]:
    """A payload as the player sees it: every field, and each frame's pieces as text."""
    body = json.loads(zlib.decompress(base64.b64decode(data["z"])))
    rest = {k: v for k, v in data.items() if k != "z"}
    return rest, [[body["pieces"][j] for j in f] for f in body["frames"]]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=10_000, help="events the run grows to")
    ap.add_argument("--ticks", type=int, default=100, help="equal byte chunks it arrives in")
    ap.add_argument("--sample", type=int, default=5, help="ticks timed near each end")
    ap.add_argument("--lang", default="en")
    args = ap.parse_args(argv)

    data = long_trace(args.events)
    spec = load_spec(LESSON)
    cuts = [len(data) * t // args.ticks for t in range(1, args.ticks)]  # the end line: never
    follow, pay = LiveLesson(spec), LivePayload(args.lang)
    decode = codecs.getincrementaldecoder("utf-8")()
    cost: list[float] = []
    frames: list[int] = []
    prev = 0
    for cut in cuts:
        t0 = time.process_time()
        follow.feed(decode.decode(data[prev:cut]))
        lesson = follow.lesson()
        out = pay.update(lesson) if lesson is not None else None
        dt = time.process_time() - t0
        prev = cut
        if out is not None:
            cost.append(dt)
            frames.append(lesson.num_frames)
    first = len(cuts) - len(cost)  # ticks before the first frame
    start = list(range(1, 1 + args.sample))  # the first tick draws every frame so far
    end = list(range(len(cost) - args.sample, len(cost)))
    old = {
        i: _timed(lambda i=i: refold_tick(spec, data[: cuts[first + i]], args.lang))
        for i in start + end
    }
    last = refold_tick(spec, data[: cuts[-1]], args.lang)
    assert last is not None and out is not None and shown(out) == shown(last), "frames differ"

    events = data.count(b"\n") - 2
    print(
        f"trace: {events:,} events, {len(data) / 1e6:.1f} MB, {args.ticks} ticks of "
        f"{len(data) // args.ticks:,} bytes (~{events // args.ticks} events), {frames[-1]} frames"
    )
    print(f"{'':12} {'start (ms)':>11} {'end (ms)':>9} {'end/start':>10}")
    for name, times in (("incremental", cost), ("refold", old)):
        s = statistics.median(times[i] for i in start) * 1e3
        e = statistics.median(times[i] for i in end) * 1e3
        print(f"{name:12} {s:11.1f} {e:9.1f} {e / s:10.2f}")
    print(
        f"start: ticks {start[0]}..{start[-1]} ({frames[start[0]]}..{frames[start[-1]]} frames); "
        f"end: ticks {end[0]}..{end[-1]} ({frames[end[0]]}..{frames[end[-1]]} frames); "
        "the last tick's frames are identical both ways"
    )
    return 0


def _timed(f) -> float:
    t0 = time.process_time()
    f()
    return time.process_time() - t0


if __name__ == "__main__":
    sys.exit(main())
