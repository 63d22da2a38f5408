"""Mutation fuzzer over the shipped traces (and random dry-run recordings): every mutated trace is either refused with one
``TraceError`` line or accepted, and an accepted one folds on both sides into possible frames
(categories non-negative and summing to the arena, shares in [0, 1], owners and blocks inside
the arena) that the app's own renderers draw without error.

Seeded random, so a failure names its case and replays. ``FUZZ_CASES`` (default 2000: every
one of the 17 mutation kinds is then applied over a hundred times, and the test asserts each
was applied) and ``FUZZ_SECONDS`` (default 60, a cap for slow machines) run it longer on demand,
e.g. ``FUZZ_CASES=20000 FUZZ_SECONDS=1200 pytest tests/engine/test_trace_fuzz.py -s``.
"""

from __future__ import annotations

import functools
import io
import json
import math
import os
import random
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from engine.core import events as E
from engine.core.accounting import CATEGORIES
from engine.trace.io import Trace, TraceError, loads
from engine.trace.recorder import record
from engine.trace.scenario import Scenario, ScenarioRequest
from viz.fold import sweep
from viz.fold.lesson import build
from viz.fold.lesson_folder import LANGS, LessonSpec, load_spec
from viz.fold.narration import render_step
from viz.fold.reducer import (
    FREE,
    HOLE,
    INTERNAL,
    RESERVED,
    TOKEN,
    Frame,
    replay,
)
from viz.render import html, svg
from viz.render.layout import GridLayout, grid_layout

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [
    ROOT / "lessons" / "six-steps" / "trace.jsonl",
    *sorted((ROOT / "lessons" / "block-size" / "traces").glob("*.jsonl")),
]
CASES = int(os.environ.get("FUZZ_CASES", "2000"))
SECONDS = float(os.environ.get("FUZZ_SECONDS", "60"))
SEED = int(os.environ.get("FUZZ_SEED", "9"))
RECORDED = 24  # random dry-run recordings mutated alongside the shipped traces
RENDER_FRAMES = 3  # frames drawn per accepted case (every frame is folded and checked)

KINDS = list(E.EVENT_TYPES)
ODD_VALUES = [
    -1,
    0,
    1,
    2,
    3,
    15,
    16,
    17,
    255,
    256,
    2**31 - 1,
    2**31,
    2**63,
    10**30,
    -(10**9),
    0.5,
    1.0,
    16.0,
    1e308,
    float("nan"),
    float("inf"),
    True,
    False,
    None,
    "5",
    "",
    "A",
    "B",
    "Z",
    "paged",
    "max",
    "x" * 300,
    "\u2028",
    "<script>",
    [],
    {},
    [1],
    [0, 1],
    {"a": 1},
    "no_hole",
    "eos",
]


@dataclass
class Tally:
    cases: int = 0
    accepted: int = 0
    rejected: int = 0
    failures: list[str] = field(default_factory=list)
    kinds: Counter[str] = field(default_factory=Counter)  # mutations applied, by kind


# --- mutations -------------------------------------------------------------------------------


def _leaf_paths(obj, path=()):
    yield path
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _leaf_paths(v, path + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj[:40]):
            yield from _leaf_paths(v, path + (i,))


def _get(obj, path):
    for p in path:
        obj = obj[p]
    return obj


def _set(obj, path, value):
    if not path:
        return value
    _get(obj, path[:-1])[path[-1]] = value
    return obj


def _nudge(rng: random.Random, v):
    """A value near ``v``: the mutations most likely to slip past shallow checks."""
    if type(v) is int:
        return rng.choice([v + 1, v - 1, v + 16, v - 16, v * 2, v // 2, -v, v + 1000])
    return rng.choice(ODD_VALUES)


def mutate_json(rng: random.Random, lines: list[str]) -> str:
    i = rng.randrange(len(lines))
    try:
        obj = json.loads(lines[i])
    except (ValueError, RecursionError):  # a line an earlier mutation broke or nested deep
        return "skip"
    paths = list(_leaf_paths(obj))
    path = rng.choice(paths)
    op = rng.randrange(6)
    if op == 0:
        obj = _set(obj, path, _nudge(rng, _get(obj, path)))
        what = f"nudge {path}"
    elif op == 1:
        obj = _set(obj, path, rng.choice(ODD_VALUES))
        what = f"odd value at {path}"
    elif op == 2 and path:
        parent = _get(obj, path[:-1])
        del parent[path[-1]]
        what = f"drop {path}"
    elif op == 3 and isinstance(obj, dict):
        obj["kind"] = rng.choice(KINDS)
        what = "change kind"
    elif op == 4 and isinstance(obj, dict) and "req" in obj:
        obj["req"] = rng.choice(["A", "B", "C", "D", "H", "r0", "0", "nobody"])
        what = "change req"
    else:
        if isinstance(obj, dict):
            obj[rng.choice(["run", "step", "seq", "extra", "end"])] = rng.choice(ODD_VALUES)
        what = "set a key"
    lines[i] = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    return f"line {i + 1}: {what}"


def mutate_lines(rng: random.Random, lines: list[str]) -> str:
    op = rng.randrange(9)
    i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
    if op == 0:
        del lines[i]
        return f"delete line {i + 1}"
    if op == 1:
        lines.insert(j, lines[i])
        return f"duplicate line {i + 1} at {j + 1}"
    if op == 2:
        lines[i], lines[j] = lines[j], lines[i]
        return f"swap lines {i + 1}, {j + 1}"
    if op == 3:
        k = min(i + 1, len(lines) - 1)
        lines[i], lines[k] = lines[k], lines[i]
        return f"swap neighbours at {i + 1}"
    if op == 4:
        n = rng.choice([40, 5000, 200_000])
        lines.insert(i, '{"kind":"step_end","run":"paged","x":' + "[" * n + "]" * n + "}")
        return f"nesting {n} at {i + 1}"
    if op == 5:
        lines.insert(i, '{"run":"paged","kind":"admitted","pad":"' + "a" * (1 << 21) + '"}')
        return f"long line at {i + 1}"
    if op == 6:
        k = rng.randrange(len(lines[i]) + 1)
        lines[i] = (
            lines[i][:k] + rng.choice(["\u2028", "\n", "\r", "\x00", "\ufeff", "}"]) + lines[i][k:]
        )
        return f"insert a character in line {i + 1}"
    if op == 7:
        lines[i] = lines[i][: rng.randrange(len(lines[i]) + 1)]
        return f"cut line {i + 1}"
    lines[:] = lines[:i]
    return f"truncate at line {i + 1}"


HOSTILE_NAMES = [
    "<script>alert(1)</script>",
    "a\u2028b",
    "x" * 200,
    "\U0001f642",
    "A B",
    '"q"',
    "</svg><img src=x>",
    "{L.running}",
    "![i](http://example.invalid/x)",
    "r\u0000",
    "\\",
    "AA",
]


def mutate_rename(rng: random.Random, lines: list[str]) -> str:
    """Rename one request or run everywhere it appears: a valid trace whose names are hostile."""
    kind = rng.choice(["req", "run"])
    names = sorted({m for line in lines[1:60] for m in re.findall(f'"{kind}":"([^"]*)"', line)})
    if not names:
        return "skip"
    old, new = rng.choice(names), json.dumps(rng.choice(HOSTILE_NAMES), ensure_ascii=False)
    keys = ("req", "id") if kind == "req" else ("run", "name")
    for i, line in enumerate(lines):
        for key in keys:
            line = line.replace(f'"{key}":"{old}"', f'"{key}":{new}')
        lines[i] = line
    return f"rename {kind} {old!r} to {new}"


MUTATION_KINDS = {
    "nudge",
    "odd value at",
    "drop",
    "change kind",
    "change req",
    "set a key",
    "delete line",
    "duplicate line",
    "swap lines",
    "swap neighbours at",
    "nesting",
    "long line at",
    "insert a character in line",
    "cut line",
    "truncate at line",
    "rename req",
    "rename run",
}


def mutation_kind(done: str) -> str:
    """The kind of a mutation from its description ("line 3: nudge ('req',)" -> "nudge")."""
    m = re.match(r"[a-z]+(?: [a-z]+)*", re.sub(r"^line \d+: ", "", done))
    return m.group() if m else done


def mutate(rng: random.Random, text: str) -> tuple[str, list[str]]:
    lines = text.split("\n")
    done = []
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        if not lines:
            break
        r = rng.random()
        op = mutate_json if r < 0.5 else mutate_lines if r < 0.85 else mutate_rename
        done.append(op(rng, lines))
    return "\n".join(lines), done


def recorded_texts(rng: random.Random, n: int) -> dict[str, str]:
    """Traces of random small scenarios on the real scheduler and allocators (dry runs): every
    policy, preemptions, late arrivals, block sizes from 1 up. The reader must accept them all."""
    out = {}
    for k in range(n):
        bs, mml = rng.choice([1, 2, 4, 8, 16]), rng.choice([16, 32, 64])
        need = -(-mml // bs)  # blocks for one request of max_model_len
        reqs = []
        for i in range(rng.randint(1, 8)):
            p = rng.randint(1, mml - 1)
            reqs.append(
                ScenarioRequest(
                    id=rng.choice([f"R{i}", str(i), f"request-{i}-" + "x" * rng.randint(0, 8)]),
                    max_tokens=rng.randint(1, mml - p + 1),
                    prompt_len=p,
                    ignore_eos=rng.random() < 0.5,
                    arrival_step=rng.randint(0, 6),
                    output_len=rng.randint(1, 24),
                )
            )
        sc = Scenario("fuzz", rng.randint(need, 3 * need), bs, mml, tuple(reqs))
        buf = io.StringIO()
        record(sc, [rng.choice(["max", "pow2", "oracle"]), "paged"], buf, forward="skip")
        out[f"recorded-{k}"] = buf.getvalue()
    return out


# --- what an accepted trace must satisfy -----------------------------------------------------


def check_frame(f: Frame) -> None:
    a, n = f.account, f.run.num_slots
    counts = [getattr(a, c) for c in CATEGORIES]
    assert min(counts) >= 0 and sum(counts) == n, counts
    shares = a.shares()
    assert all(0 <= s <= 1 for s in shares.values()) and math.isclose(sum(shares.values()), 1)
    assert len(f.cells) == len(f.owners) == n
    assert (f.count(TOKEN), f.count(RESERVED), f.count(INTERNAL), f.count(HOLE), f.count(FREE)) == (
        a.token_states,
        a.reservation,
        a.internal,
        a.external,
        a.free,
    )
    assert set(f.owners) - {None} <= f.requests.keys()
    assert all(0 <= v.filled <= v.held <= n for v in f.requests.values())
    num_blocks = n // f.run.block_size
    for req, table in f.block_tables.items():
        assert req in f.requests and all(0 <= b < num_blocks for b in table)
    for req, (start, length) in f.reservations.items():
        assert req in f.requests and start >= 0 and length > 0 and start + length <= n
    assert all(r in f.requests for r in (*f.running, *f.waiting))


def render(frame: Frame, layout: GridLayout, lang: str) -> None:
    out = [
        svg.arena_svg(frame, layout, lang, meta=frame.index),
        html.metrics_strip(frame, lang),
        html.tables_panel(frame, lang),
        html.queue_panel(frame, lang),
    ]
    assert all(isinstance(s, str) and s for s in out)


@functools.cache
def six_steps() -> LessonSpec:
    return load_spec("six-steps")


def check_accepted(trace: Trace, rng: random.Random) -> None:
    spec = six_steps()
    try:
        lesson = build(spec, trace, source="fuzz")
    except TraceError as e:  # one contiguous and one paged run are needed: one line, then
        assert "\n" not in str(e)
        lesson = None
    folded = set()
    if lesson is not None:
        folded = {lesson.left.run.name, lesson.right.run.name}
        layout = grid_layout(lesson.right.run.num_slots, lesson.right.run.block_size)
        for side in (lesson.left, lesson.right):
            for f in side.frames:
                check_frame(f)
            html.scoreboard_card(side.summary, "en")
            assert all(0 <= s <= 1 for s in side.summary.shares.values())
        for i in rng.sample(range(lesson.num_frames), min(RENDER_FRAMES, lesson.num_frames)):
            for side in ("left", "right"):
                render(lesson.side(side).at(i), layout, rng.choice(LANGS))
        for k in range(len(spec.steps)):
            render_step(lesson, k, "en")
    for name in trace.run_names:  # runs the lesson did not show: the viewer's fold all the same
        if name in folded:
            continue
        info = trace.run_header(name)
        frames = replay(trace.runs[name], info)
        for f in frames:
            check_frame(f)
        layout = grid_layout(info.num_slots, info.block_size)
        for f in rng.sample(frames, min(RENDER_FRAMES, len(frames))):
            render(f, layout, "en")
    if (
        "paged" in trace.run_names
        and trace.runs["paged"]
        and any(e.kind == E.StepEnd.kind for e in trace.runs["paged"])
    ):
        res = sweep.analyse(trace)  # the block-size page's fold
        assert all(0 <= s <= 1 for s in res.arena_shares.values())


def run_case(text: str, rng: random.Random, tally: Tally, label: str) -> None:
    tally.cases += 1
    try:
        trace = loads(text)
    except TraceError as e:
        msg = str(e)
        if not msg or "\n" in msg or "\r" in msg or "\u2028" in msg:
            tally.failures.append(f"{label}: TraceError is not one line: {msg!r:.200}")
        tally.rejected += 1
        return
    except Exception as e:  # noqa: BLE001 - exactly what the fuzzer hunts
        tally.failures.append(f"{label}: loads raised {type(e).__name__}: {e!s:.200}")
        return
    tally.accepted += 1
    try:
        check_accepted(trace, rng)
    except Exception as e:  # noqa: BLE001
        tally.failures.append(f"{label}: accepted, then {type(e).__name__}: {e!s:.200}")


def test_mutated_traces_are_refused_in_one_line_or_fold_into_possible_frames():
    texts = {p.name: p.read_text(encoding="utf-8") for p in SOURCES if p.is_file()}
    assert texts, "no shipped traces to mutate"
    rng = random.Random(SEED)
    texts.update(recorded_texts(rng, RECORDED))
    tally = Tally()
    for name, text in texts.items():  # the unmutated traces must pass the whole check
        run_case(text, rng, tally, f"{name} as shipped")
    assert tally.accepted == len(texts), tally.failures
    t0 = time.monotonic()
    names = sorted(texts)
    for case in range(CASES):
        if time.monotonic() - t0 > SECONDS:
            break
        name = rng.choice(names)
        mutated, done = mutate(rng, texts[name])
        tally.kinds.update(mutation_kind(d) for d in done)
        run_case(mutated, random.Random(case), tally, f"case {case} {name} {done}")
    print(
        f"\nfuzz: {tally.cases} cases ({len(texts)} unmutated) in "
        f"{time.monotonic() - t0:.1f} s: {tally.accepted} accepted, {tally.rejected} refused, "
        f"{len(tally.failures)} failures; fewest mutations of one kind: "
        f"{min(tally.kinds[k] for k in MUTATION_KINDS)}"
    )
    assert not tally.failures, "\n".join(tally.failures[:10])
    assert tally.rejected > 0 and tally.accepted > len(texts)  # both outcomes were exercised
    assert set(tally.kinds) - {"skip"} == MUTATION_KINDS, tally.kinds  # and every mutation


@pytest.mark.parametrize(
    "doc",
    [
        "{}",
        "[]",
        "null",
        "5",
        '"x"',
        "{" * 100_000,
        "[" * 100_000,
        '{"format":"paged-kv-trace","schema_version":1,"runs":' + "[" * 50_000 + "]" * 50_000 + "}",
        "\u2028",
        "\x00" * 1000,
        "\ufeff{}",
    ],
)
def test_odd_documents_are_one_trace_error(doc):
    with pytest.raises(TraceError) as info:
        loads(doc)
    assert "\n" not in str(info.value)
