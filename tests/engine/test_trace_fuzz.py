"""Trace fuzzer: shipped traces (and random dry-run recordings) mutated, and traces written from
the format itself (``grammar_trace``: random well-formed headers, runs, requests and event
sequences that now and then slip). Every case is either refused with one ``TraceError`` line or
accepted, and an accepted one folds on both sides into possible frames (categories non-negative
and summing to the arena, shares in [0, 1], owners and blocks inside the arena) whose drawn
cells per category are the frame's numbers, which are the engine's own account of the same
events, and that the app's own renderers draw without error (sampled frames: the SVG's cells
counted per category too), and that its generated exercises are safe: each answer is what the
next frame shows, a possible answer (a cell of the grid, one of the choices), and its words are
one line in both languages.

Seeded random, so a failure names its case and replays. ``FUZZ_CASES`` (default 2000: a third
grammar traces, and every one of the 17 mutation kinds is applied dozens of times, and the test
asserts each was) and ``FUZZ_SECONDS`` (default 60, a cap for slow machines) run it longer on
demand, e.g. ``FUZZ_CASES=20000 FUZZ_SECONDS=1200 pytest tests/engine/test_trace_fuzz.py -s``.
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

from paged.engine.core import events as E
from paged.engine.core.accounting import CATEGORIES, account
from paged.engine.trace.header import RunHeader
from paged.engine.trace.io import Trace, TraceError, loads
from paged.engine.trace.recorder import record
from paged.engine.trace.scenario import Scenario, ScenarioRequest
from paged.viz.exercises import grade, questions, read_answer
from paged.viz.exercises.facts import CELLS
from paged.viz.fold import sweep
from paged.viz.fold.lesson import build
from paged.viz.fold.lesson_folder import LANGS, LessonSpec, load_spec
from paged.viz.fold.narration import render_step
from paged.viz.fold.reducer import (
    FREE,
    HOLE,
    INTERNAL,
    RESERVED,
    TOKEN,
    Frame,
    replay,
)
from paged.viz.render import html, svg
from paged.viz.render.layout import GridLayout, grid_layout
from paged.viz.render.style import CATEGORY_COLOURS, cell_category
from tests.engine.test_shared_block_refusals import emit_a_block_shared_in_part

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [
    *(
        ROOT / "paged" / "lessons" / name / "trace.jsonl"
        for name in (
            "six-steps",
            "shared-prompt",
            "parallel-sampling",
            "recompute-or-swap",
            "inside-the-kernel",
        )
    ),
    *sorted((ROOT / "paged" / "lessons" / "block-size" / "traces").glob("*.jsonl")),
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
    outcomes: Counter[str] = field(default_factory=Counter)  # (source kind, accepted/refused)


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
    drawn = Counter(cell_category(c) for c in f.cells)  # the category each cell is painted in
    assert all(drawn[c] == getattr(a, c) for c in CATEGORIES), (f.index, drawn, a)
    assert set(f.owners) - {None} <= f.requests.keys()
    assert all(0 <= v.filled <= v.held <= n for v in f.requests.values())
    num_blocks = n // f.run.block_size
    for req, table in f.block_tables.items():
        assert req in f.requests and all(0 <= b < num_blocks for b in table)
    for req, (start, length) in f.reservations.items():
        assert req in f.requests and start >= 0 and length > 0 and start + length <= n
    assert all(r in f.requests for r in (*f.running, *f.waiting))


def check_numbers(frames: list[Frame], events: list[E.Event], info: RunHeader) -> None:
    """The frames' numbers are the engine's own account of the same events (the fold the
    metrics and ``simulate`` use, as the viewer runs it: no hindsight, finishing requests
    shown): the grid counts cell by cell, Tally request by request, and a trace on which the
    two part is one the reader should have refused."""
    tally = account(
        events,
        info.num_slots,
        info.block_size,
        info.num_cpu_blocks,
        hindsight=False,
        show_finishing=True,
    )
    assert len(tally) == len(frames)
    for f, t in zip(frames, tally, strict=True):
        got = tuple(getattr(f.account, c) for c in CATEGORIES)
        want = tuple(getattr(t, c) for c in CATEGORIES)
        assert got == want, f"frame {f.index} draws {got}, the account says {want}"


_PATTERN = re.compile(r"<pattern id='([^']+)'[^>]*><rect [^>]*fill='([^']+)'")
_RUN = re.compile(r"<rect x='[^']*' y='[^']*' width='([^']+)' height='[^']*' fill='([^']+)'")
_COLOUR_CATEGORY = {v: k for k, v in CATEGORY_COLOURS.items()}


def drawn_cells(picture: str) -> Counter[str]:
    """Cells per category as the SVG paints them: each run of the grid is one rect whose width
    spans its cells and whose fill (or pattern's fill) is its category's colour."""
    defs, body = picture.split("</defs>", 1)
    fills = {f"url(#{pid})": colour for pid, colour in _PATTERN.findall(defs)}
    runs = body.split("<path", 1)[0]  # the runs come first, before the gaps are cut
    out: Counter[str] = Counter()
    for width, fill in _RUN.findall(runs):
        cells = (float(width) + svg.GAP) / svg.CELL
        assert cells == int(cells), width
        out[_COLOUR_CATEGORY[fills.get(fill, fill)]] += int(cells)
    return out


def render(frame: Frame, layout: GridLayout, lang: str) -> None:
    picture = svg.arena_svg(frame, layout, lang, meta=frame.index)
    drawn = drawn_cells(picture)
    a = frame.account
    assert all(drawn[c] == getattr(a, c) for c in CATEGORIES), (frame.index, drawn, a)
    out = [
        picture,
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
            check_numbers(side.frames, trace.runs[side.run.name], side.run)
            html.scoreboard_card(side.summary, "en")
            assert all(0 <= s <= 1 for s in side.summary.shares.values())
        for i in rng.sample(range(lesson.num_frames), min(RENDER_FRAMES, lesson.num_frames)):
            for side in ("left", "right"):
                render(lesson.side(side).at(i), layout, rng.choice(LANGS))
        for k in range(len(spec.steps)):
            render_step(lesson, k, "en")
        check_exercises(lesson)
    for name in trace.run_names:  # runs the lesson did not show: the viewer's fold all the same
        if name in folded:
            continue
        info = trace.run_header(name)
        frames = replay(trace.runs[name], info)
        for f in frames:
            check_frame(f)
        check_numbers(frames, trace.runs[name], info)
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


def check_exercises(lesson) -> None:
    """An uploaded trace's questions: answerable from the fold, possible, and plain text."""
    for q in questions(lesson):
        assert 0 <= q.frame < len(lesson.side(q.side).frames) - 1
        assert read_answer(lesson, q) == q.answer and grade(q, q.answer), q
        if q.form == CELLS:
            assert q.answer and all(0 <= b < q.cells for b in q.answer), q  # type: ignore[union-attr]
        elif q.choices:
            assert q.answer in q.choices, q
        for lang in LANGS:
            d = q.to_dict(lang)
            json.dumps(d)
            for words in (d["prompt"], d["why"], *(c["label"] for c in d["choices"])):
                assert words and "\n" not in words and "\u2028" not in words, (q, words)


def run_case(text: str, rng: random.Random, tally: Tally, label: str, kind: str = "") -> None:
    tally.cases += 1
    try:
        trace = loads(text)
    except TraceError as e:
        msg = str(e)
        if not msg or "\n" in msg or "\r" in msg or "\u2028" in msg:
            tally.failures.append(f"{label}: TraceError is not one line: {msg!r:.200}")
        tally.rejected += 1
        tally.outcomes[kind, "refused"] += 1
        return
    except Exception as e:  # noqa: BLE001 - exactly what the fuzzer hunts
        tally.failures.append(f"{label}: loads raised {type(e).__name__}: {e!s:.200}")
        return
    tally.accepted += 1
    tally.outcomes[kind, "accepted"] += 1
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
        if case % 3 == 2:  # a third written from the format itself
            text = grammar_trace(random.Random(f"grammar {case}"))
            run_case(text, random.Random(case), tally, f"case {case} grammar", "grammar")
            continue
        name = rng.choice(names)
        mutated, done = mutate(rng, texts[name])
        tally.kinds.update(mutation_kind(d) for d in done)
        run_case(mutated, random.Random(case), tally, f"case {case} {name} {done}", "mutated")
    o = tally.outcomes
    print(
        f"\nfuzz: {tally.cases} cases ({len(texts)} unmutated) in "
        f"{time.monotonic() - t0:.1f} s: {tally.accepted} accepted, {tally.rejected} refused "
        f"(mutated {o['mutated', 'accepted']}/{o['mutated', 'refused']}, grammar "
        f"{o['grammar', 'accepted']}/{o['grammar', 'refused']}), "
        f"{len(tally.failures)} failures; fewest mutations of one kind: "
        f"{min(tally.kinds[k] for k in MUTATION_KINDS)}"
    )
    assert not tally.failures, "\n".join(tally.failures[:10])
    assert tally.rejected > 0 and tally.accepted > len(texts)  # both outcomes were exercised
    assert o["grammar", "accepted"] and o["grammar", "refused"], o  # of both kinds of case
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


# --- traces written from the format, not from a shipped one ----------------------------------


class _RunWriter:
    """One run's events as the trace format defines them, from a small model of a scheduler
    (arrivals, admission or refusal, blocks allocated, forks that share a sibling's prompt
    blocks and copy the last one on write, tokens written, preemption, finishing). ``slip`` is
    the chance that a field of an event is drawn anew from its type's range instead: many such
    traces are refused, some are accepted with values the model never picks."""

    def __init__(
        self, rng: random.Random, name: str, allocator: str, slip: float, num_slots: int, mml: int
    ) -> None:
        self.rng, self.name, self.allocator, self.slip = rng, name, allocator, slip
        self.paged = allocator == "paged"
        self.bs = rng.choice([1, 2, 4, 8, 16]) if self.paged else 1
        self.mml, self.num_slots = mml, num_slots
        blocks = num_slots // self.bs
        self.free_blocks = list(range(blocks))
        rng.shuffle(self.free_blocks)
        self.occupied = [False] * self.num_slots
        self.refs = [0] * blocks
        self.lines: list[dict] = []
        self.step = 0
        self.reqs: dict[str, dict] = {}
        self.waiting: list[str] = []
        self.running: list[str] = []

    def header(self) -> dict:
        bs = self.bs
        config = {
            "num_blocks": self.num_slots // bs,
            "block_size": bs,
            "num_slots": self.num_slots,
            "max_model_len": self.mml,
            "view_block_size": bs if self.paged else 1,
        }
        return {"name": self.name, "allocator": self.allocator, "config": config}

    def emit(self, kind: str, **fields) -> None:
        if fields and self.rng.random() < self.slip:
            key = self.rng.choice(sorted(fields))
            v = fields[key]
            if type(v) is int:
                fields[key] = self.rng.choice([v + 1, v - 1, 0, self.rng.randrange(64)])
            elif isinstance(v, str) and key == "req":
                fields[key] = self.rng.choice(sorted(self.reqs) or ["A"])
            elif isinstance(v, list) and v:
                fields[key] = v[::-1] if len(v) > 1 else []
        self.lines.append({"kind": kind, "step": self.step, "seq": 0, **fields, "run": self.name})

    # -- the model --

    def arrive(self, req: str, prompt_len: int, max_tokens: int, out_len: int, parent) -> None:
        self.reqs[req] = dict(
            p=prompt_len,
            max=max_tokens,
            out=out_len,
            gen=0,
            filled=0,
            table=[],
            run=None,
            parent=parent,
        )
        self.waiting.append(req)
        self.emit("request_arrived", req=req, prompt_len=prompt_len, max_tokens=max_tokens)

    def _alloc(self, req: str) -> None:
        r = self.reqs[req]
        b = self.free_blocks.pop()
        self.refs[b] = 1
        r["table"].append(b)
        self.emit("block_allocated", req=req, logical=len(r["table"]) - 1, physical=b)

    def _release(self, req: str) -> None:
        r = self.reqs[req]
        if self.paged:
            for b in reversed(r["table"]):
                self.refs[b] -= 1
                if self.refs[b] == 0:
                    self.free_blocks.append(b)
                self.emit("block_freed", req=req, physical=b, ref_count=self.refs[b])
            r["table"] = []
        elif r["run"] is not None:
            start, length = r["run"]
            self.occupied[start : start + length] = [False] * length
            self.emit("reservation_released", req=req, start=start, length=length)
            r["run"] = None

    def _holes(self) -> list[tuple[int, int]]:
        out, s = [], None
        for i, o in enumerate([*self.occupied, True]):
            if not o and s is None:
                s = i
            elif o and s is not None:
                out.append((s, i - s))
                s = None
        return out

    def _try_admit(self, req: str) -> bool:
        r = self.reqs[req]
        n = r["p"] + r["gen"]
        if self.paged:
            parent = self.reqs.get(r["parent"]) if r["parent"] else None
            if parent is not None and r["parent"] in self.running and parent["filled"] < r["p"]:
                return False  # as the engine, wait for the parent to compute the shared prompt
            fork = (
                parent is not None
                and r["gen"] == 0
                and r["p"] > 1
                and parent["filled"] >= r["p"]
                and parent["table"]
            )
            # a fork: a block more, for a copy or for a share that carried too many tokens
            need = -(-n // self.bs) - (((r["p"] - 1) // self.bs - 1) if fork else 0)
            if need > len(self.free_blocks) or (fork and not self.free_blocks):
                free = len(self.free_blocks) * self.bs
                self.emit(
                    "admission_blocked",
                    req=req,
                    reason="no_free_block",
                    need_slots=max(1, need * self.bs),
                    free_slots=free,
                    largest_hole=free,
                )
                return False
            self.emit("admitted", req=req, num_tokens=n)
            if fork:
                self._fork(req, r, parent)
            while len(r["table"]) * self.bs < max(n, r["filled"] + 1):
                self._alloc(req)
        else:
            length = r["p"] + r["max"] - 1
            holes = self._holes()
            hole = next((h for h in holes if h[1] >= length), None)
            if hole is None:
                free = sum(self.occupied[i] is False for i in range(self.num_slots))
                biggest = max((h[1] for h in holes), default=0)
                self.emit(
                    "admission_blocked",
                    req=req,
                    reason="no_hole" if length <= free else "no_space",
                    need_slots=length,
                    free_slots=free,
                    largest_hole=biggest,
                )
                return False
            self.emit("admitted", req=req, num_tokens=n)
            start = hole[0]
            self.occupied[start : start + length] = [True] * length
            r["run"] = (start, length)
            self.emit("slots_reserved", req=req, start=start, length=length)
        self.waiting.remove(req)
        self.running.append(req)
        return True

    def _fork(self, req: str, r: dict, parent: dict) -> None:
        """Share the parent's blocks holding the first ``prompt_len - 1`` tokens, and copy the
        last if the first write lands in it. Now and then a share the engine never makes,
        told consistently from then on (the child's writes follow its table): blocks moved to
        other logical indices, or a block carrying the wrong number of tokens."""
        bs, shared = self.bs, r["p"] - 1
        blocks = parent["table"][: -(-shared // bs)]
        tokens = [min(bs, shared - i * bs) for i in range(len(blocks))]
        if len(blocks) > 1 and self.rng.random() < 5 * self.slip:
            i, j = self.rng.sample(range(len(blocks)), 2)
            blocks[i], blocks[j] = blocks[j], blocks[i]
        if self.rng.random() < 5 * self.slip:
            tokens[-1] = self.rng.randint(1, bs)
        for i, (b, n) in enumerate(zip(blocks, tokens, strict=True)):
            self.refs[b] += 1
            r["table"].append(b)
            self.emit(
                "block_shared", req=req, logical=i, physical=b, ref_count=self.refs[b], num_tokens=n
            )
        r["filled"] = sum(tokens)
        if tokens[-1] < bs:  # its first write lands in the last shared block: copy it
            r["copy"] = (len(r["table"]) - 1, self.free_blocks.pop(), tokens[-1])
            if self.rng.random() >= 5 * self.slip:  # else: a step later, writing nothing now
                self._copy(req, r)

    def _copy(self, req: str, r: dict) -> None:
        logical, dst, n = r.pop("copy")
        src = r["table"][logical]
        self.refs[src] -= 1
        self.refs[dst] = 1
        r["table"][logical] = dst
        self.emit(
            "block_copied",
            req=req,
            logical=logical,
            src=src,
            dst=dst,
            src_ref_count=self.refs[src],
            num_tokens=n,
        )

    def _slot(self, r: dict, pos: int) -> int:
        if self.paged:
            return r["table"][pos // self.bs] * self.bs + pos % self.bs
        return r["run"][0] + pos

    def run_step(self, arrivals: list[tuple]) -> None:
        for a in arrivals:
            self.arrive(*a)
        preempted = False
        for req in list(self.running):
            if req not in self.running:
                continue
            r = self.reqs[req]
            if "copy" in r:
                self._copy(req, r)
            while self.paged and len(r["table"]) * self.bs <= r["filled"]:
                if self.free_blocks:
                    self._alloc(req)
                    continue
                victim = self.running[-1]
                self._release(victim)
                self.running.remove(victim)
                self.waiting.insert(0, victim)
                v = self.reqs[victim]
                self.emit("preempted", req=victim, num_generated=v["gen"])
                v["filled"] = 0
                if "copy" in v:  # the block kept for its copy goes back
                    self.free_blocks.append(v.pop("copy")[1])
                preempted = True
                if victim == req:
                    break
        if not preempted:
            for req in list(self.waiting):
                if not self._try_admit(req):
                    break
        for req in list(self.running):
            r = self.reqs[req]
            if "copy" in r:
                continue
            # a prefill writes what the request has not computed, a decode step one token
            positions = list(range(r["filled"], max(r["filled"] + 1, r["p"] + r["gen"])))
            self.emit(
                "tokens_written",
                req=req,
                positions=positions,
                slots=[self._slot(r, p) for p in positions],
            )
            if self.paged and r["gen"] and len(positions) == 1 and self.rng.random() < 0.5:
                self.emit(
                    "attention_read", **_attention_read(self.rng, req, r, positions[0], self.bs)
                )
            r["filled"] = positions[-1] + 1
            r["gen"] += 1
            if r["gen"] >= r["out"]:
                self._release(req)
                self.running.remove(req)
                self.emit(
                    "finished",
                    req=req,
                    final_len=r["filled"],
                    # what its written slots say it generated: a lying share stays told
                    num_generated=r["filled"] - r["p"] + 1,
                    reason=self.rng.choice(["eos", "length"]),
                )
        self.emit("step_end", num_running=len(self.running), num_waiting=len(self.waiting))
        self.step += 1


def _attention_read(rng: random.Random, req: str, r: dict, pos: int, bs: int) -> dict:
    """A decode token's reading as the engine records it: random scores for a random group of
    heads, walked one block at a time (the shares are a mean of their softmaxes)."""
    n, g = pos // bs + 1, rng.randint(1, 3)
    scores = [[rng.uniform(-8, 8) for _ in range(pos + 1)] for _ in range(g)]
    tile_m, tile_l, part_m, part_l = [], [], [], []
    m, total = [-math.inf] * g, [0.0] * g
    for t in range(n):
        tile = [row[t * bs : (t + 1) * bs] for row in scores]
        pm = [max(x) for x in tile]
        pl = [sum(math.exp(v - mx) for v in x) for x, mx in zip(tile, pm, strict=True)]
        new = [max(a, b) for a, b in zip(m, pm, strict=True)]
        total = [
            lo * math.exp(a - b) + pls * math.exp(c - b)
            for lo, a, b, pls, c in zip(total, m, new, pl, pm, strict=True)
        ]
        m = new
        tile_m.append(m)
        tile_l.append(total)
        part_m.append(pm)
        part_l.append(pl)
    share = [0.0] * n
    for row, mx, lo in zip(scores, m, total, strict=True):
        for p, v in enumerate(row):
            share[p // bs] += math.exp(v - mx) / lo / g
    return dict(
        req=req,
        position=pos,
        physical=r["table"][:n],
        mass=share,
        layer=rng.randrange(30),
        kv_head=0,
        heads=list(range(g)),
        tile_m=tile_m,
        tile_l=tile_l,
        part_m=part_m,
        part_l=part_l,
        merged_m=m,
        merged_l=total,
        full_m=m,
        full_l=total,
        max_diff=rng.choice([0.0, 3e-8]),
        out_diff=rng.choice([0.0, 1e-7]),
    )


def grammar_trace(rng: random.Random) -> str:
    """A random trace written from the format: a header of one to three runs (any allocator,
    block size, arena and max_model_len), the same random requests (some parallel samples of
    an earlier one, arriving with it or after) arriving in each, and each run's events from
    ``_RunWriter``. A quarter of the traces are written without a slip; the rest slip now and
    then."""
    slip = rng.choice([0.0, 0.002, 0.01, 0.05])
    kinds = rng.sample(["max", "pow2", "oracle", "paged", "paged"], rng.randint(1, 3))
    mml = rng.choice([8, 16, 32, 64])
    num_slots = 16 * rng.randint(1, 4) * -(-mml // 16)  # room for one request at least
    writers = [_RunWriter(rng, f"{k}{i}", k, slip, num_slots, mml) for i, k in enumerate(kinds)]
    steps = rng.randint(1, 40)
    arrivals: dict[int, list[tuple]] = {}
    prompts: dict[int, tuple[int, int, int]] = {}
    for i in range(rng.randint(1, 8)):
        p = rng.randint(1, mml - 1)
        mt = rng.randint(1, mml - p + 1)
        at, parent = rng.randrange(steps), None
        if i and rng.random() < 0.5:  # a sample of an earlier request: the same prompt
            k = rng.randrange(i)
            p, mt, at = prompts[k]
            at, parent = at + rng.randint(0, 2), f"R{k}"
        prompts[i] = (p, mt, at)
        arrivals.setdefault(at, []).append((f"R{i}", p, mt, rng.randint(1, mt), parent))
    for w in writers:
        for s in range(steps + 3 * mml):
            if s >= steps and not w.waiting and not w.running:
                break
            w.run_step(arrivals.get(s, []))
    header = {
        "format": "paged-kv-trace",
        "schema_version": 1,
        "model": "grammar",
        "device": "cpu",
        "runs": [w.header() for w in writers],
    }
    events = [e for w in writers for e in w.lines]
    for seq, e in enumerate(events):
        e["seq"] = seq
    end = {"end": True, "num_events": len(events)}
    return "\n".join(json.dumps(x, separators=(",", ":")) for x in [header, *events, end]) + "\n"


def test_the_numbers_check_fails_on_a_share_the_grid_and_the_account_count_apart():
    """What the check is for: B takes one of the two tokens of A's block 1 and never copies it.
    The reader refuses that trace (tests/engine/test_shared_block_refusals.py); folded anyway,
    the grid draws A's six tokens, the engine's account five (B's share is one token, the
    duplicate taken out two)."""
    run = RunHeader("paged", "paged", num_slots=16, block_size=4)
    bus = E.EventBus()
    events: list[E.Event] = []
    bus.subscribe(events.append)
    emit_a_block_shared_in_part(bus, copied=False)
    frames = replay(events, run)
    assert Counter(cell_category(c) for c in frames[1].cells)["token_states"] == 6
    with pytest.raises(AssertionError, match="frame 1 draws"):
        check_numbers(frames, events, run)
