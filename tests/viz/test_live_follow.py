"""A live run folds as it streams: each tick reads, checks, folds and draws only what is new,
and what it shows is what folding the whole stream so far shows, at every tick."""

from __future__ import annotations

import base64
import codecs
import dataclasses
import io
import json
import random
import zlib
from pathlib import Path

import pytest

from paged.engine.trace import check
from paged.engine.trace.io import TraceError, loads, parse_lines
from paged.engine.trace.recorder import record
from paged.engine.trace.scenario import load
from paged.viz.fold import lesson as L
from paged.viz.fold.lesson_folder import LessonSpec, load_spec
from paged.viz.fold.reducer import replay_settled
from paged.viz.live import follow
from paged.viz.live.follow import LiveLesson, _SideFold
from paged.viz.player import live as live_player
from paged.viz.player import payload as player
from paged.viz.player.live import LivePayload

ROOT = Path(__file__).resolve().parents[2]
SIX = ROOT / "paged" / "lessons" / "six-steps"
TITLE = "Six steps — 六步"  # multi-byte characters in the header line: a split may fall in one


def _waves(n: int) -> bytes:
    """The six-step scenario's requests ``n`` times over, a wave every 30 steps, recorded as
    a dry run in lockstep (as a live child writes it): requests overlap across steps, so the
    scoreboard's hindsight keeps steps open while later ones arrive."""
    sc = load(SIX / "scenario.toml")
    reqs, raw = [], []
    for w in range(n):
        for r, d in zip(sc.requests, sc.raw["requests"], strict=True):
            step = r.arrival_step + 30 * w
            reqs.append(dataclasses.replace(r, id=f"{r.id}{w}", arrival_step=step))
            raw.append({**d, "id": f"{r.id}{w}", "arrival_step": step})
    sc = dataclasses.replace(
        sc, requests=tuple(reqs), raw={**sc.raw, "title": TITLE, "requests": raw}
    )
    buf = io.StringIO()
    record(sc, ["max", "paged"], buf, forward="skip")
    return buf.getvalue().encode("utf-8")


@pytest.fixture(scope="module")
def stream() -> bytes:
    return _waves(3)


@pytest.fixture(scope="module")
def spec() -> LessonSpec:
    return load_spec("six-steps")


def _splits(data: bytes, n: int, seed: int) -> list[int]:
    """``n`` tick boundaries at random byte offsets, with one inside a line and one inside a
    multi-byte character on purpose."""
    rng = random.Random(seed)
    inside_char = data.index(TITLE.encode()) + len("Six steps ") + 1  # within the dash's bytes
    line_end = data.index(b"\n", len(data) // 2)
    cuts = {inside_char, line_end - 7, *rng.sample(range(1, len(data)), n)}
    return sorted(cuts)


def _whole(spec: LessonSpec, seen: bytes) -> L.Lesson | None:
    """What the page showed before: every whole line so far parsed and folded at once."""
    lines = [line + "\n" for line in seen.decode("utf-8", "ignore").split("\n")[:-1]]
    if not lines:
        return None
    tr = parse_lines(lines, require_end=False)
    if not all(any(e.kind == "step_end" for e in evs) for evs in tr.runs.values()):
        return None
    return L.build(spec, L.live_edge(tr), source="live", partial=True)


def _shown(data: dict) -> tuple[dict, list[list[str]]]:
    """A payload as the player sees it: each frame's pieces as text, and every other field."""
    body = json.loads(zlib.decompress(base64.b64decode(data["z"])))
    rest = {k: v for k, v in data.items() if k != "z"}
    return rest, [[body["pieces"][j] for j in frame] for frame in body["frames"]]


def test_the_incremental_fold_equals_the_whole_fold_at_every_tick(stream, spec):
    """Ticks at arbitrary byte offsets (in a line, in a character): after each, the lesson
    (frames, arena as left, scoreboard, keyframes) and the player's frames are the whole
    fold's, and the finished stream gives its replay's."""
    live, drawn = LiveLesson(spec), LivePayload("en")
    decode = codecs.getincrementaldecoder("utf-8")()
    splits = _splits(stream, 30, seed=7)
    prev, folded = 0, 0
    for n, cut in enumerate(splits):
        live.feed(decode.decode(stream[prev:cut]))
        prev = cut
        got, want = live.lesson(), _whole(spec, stream[:cut])
        assert got == want, cut
        if got is not None:
            folded += 1
            if n % 6 == 0 or n == len(splits) - 1:  # the payloads cost more: every sixth
                assert _shown(drawn.update(got)) == _shown(player.payload(want, "en")), cut
    assert folded > 20
    live.feed(decode.decode(stream[prev:], final=True))
    done = live.lesson(finished=True)
    replay = L.build(spec, loads(stream.decode("utf-8")), source="live")
    assert done == replay and not done.partial
    assert any(s.rule.get("frame") == "last" for s in spec.steps)
    assert _shown(drawn.update(done)) == _shown(player.payload(replay, "en"))
    zh = LivePayload("zh")
    assert _shown(zh.update(done)) == _shown(player.payload(replay, "zh"))


def test_each_line_is_checked_once_and_each_frame_drawn_once(stream, spec, monkeypatch):
    """The point of it: a tick reads the lines that are new and draws the frames that are
    new (a frame that was the newest is drawn again at most once, when it stops being it)."""
    checked, parts = [], []
    real_line, real_parts = check.TraceChecker.line, live_player.frame_parts
    monkeypatch.setattr(
        check.TraceChecker,
        "line",
        lambda self, n, line: (checked.append(n), real_line(self, n, line)),
    )
    monkeypatch.setattr(
        live_player,
        "frame_parts",
        lambda lesson, i, lang: (parts.append(i), real_parts(lesson, i, lang))[1],
    )
    live, drawn = LiveLesson(spec), LivePayload("en")
    ticks = 0
    decode = codecs.getincrementaldecoder("utf-8")()
    prev = 0
    for cut in _splits(stream, 40, seed=3):
        live.feed(decode.decode(stream[prev:cut]))
        prev = cut
        lesson = live.lesson()
        if lesson is not None:
            drawn.update(lesson)
            ticks += 1
    assert checked == list(range(1, len(checked) + 1))  # every line once, in order
    assert len(checked) == stream[:prev].count(b"\n")
    frames = lesson.num_frames
    assert len(set(parts)) == frames and len(parts) <= frames + 2 * ticks


def test_a_corrupt_line_ends_the_stream_with_one_error_every_tick(stream, spec):
    lines = stream.decode("utf-8").splitlines(keepends=True)
    bad = lines[:120] + ['{"kind": "step_end", "run": "paged", "step": -1, "seq": 5}\n']
    with pytest.raises(TraceError) as whole:
        parse_lines(bad, require_end=False)
    live = LiveLesson(spec)
    live.feed_lines(lines[:120])
    assert live.lesson() is not None
    for _ in range(2):  # and on every tick after it, with no more lines read
        with pytest.raises(TraceError) as got:
            live.feed_lines(bad[120:])
        assert str(got.value) == str(whole.value) and "\n" not in str(got.value)
    with pytest.raises(TraceError, match="line 121"):
        live.lesson()


def test_a_stream_that_ends_without_its_end_line_is_truncated(stream, spec):
    live = LiveLesson(spec)
    live.feed(stream.decode("utf-8").rsplit('{"end"', 1)[0])
    assert live.lesson() is not None
    with pytest.raises(TraceError, match="truncated"):
        live.lesson(finished=True)


def test_a_cut_that_moves_back_folds_that_side_again(stream, spec):
    """Only a hostile stream moves the live edge back (a run that looked done steps again):
    the side is folded again from its start, and is what a fold of the shorter cut gives."""
    live = LiveLesson(spec)
    live.feed(stream.decode("utf-8"))
    events = live.stream.events("paged")
    info = live.stream.trace(finished=True)
    assert info is not None
    run = info.run_header("paged")
    ends = [j + 1 for j, e in enumerate(events) if e.kind == "step_end"]
    back, fresh = _SideFold(run), _SideFold(run)
    third = len(events) // 3 + 1  # in the middle of a step: its events so far are a tail
    back.advance(events, ends, 2 * third)
    back.side(events, {})
    back.advance(events, ends, third)
    fresh.advance(events, ends, third)
    got = back.side(events, {})
    assert got == fresh.side(events, {}) and back.tail
    frames, settled = replay_settled(events[:third], run)
    assert got.frames == frames and got.settled == settled
    assert got.summary == L.summarize(frames, events[:third])


def test_the_live_edge_is_counted_as_live_edge_cuts(stream, spec):
    """``edge_cuts`` keeps exactly the events ``live_edge`` keeps, at every line."""
    lines = stream.decode("utf-8").splitlines(keepends=True)
    counts: dict[str, follow._Counts] = {}
    for k in range(1, len(lines) - 1, 13):
        tr = parse_lines(lines[:k], require_end=False)
        for name, evs in tr.runs.items():
            counts.setdefault(name, follow._Counts()).update(evs)
        if not all(c.ends for c in counts.values()):
            continue
        want = {n: len(evs) for n, evs in L.live_edge(tr).runs.items()}
        assert follow.edge_cuts(counts, tr.info.requests_named) == want, k
