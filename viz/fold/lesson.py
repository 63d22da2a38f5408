"""Lessons: a folder ``lessons/<name>/`` with a ``lesson.toml`` and the trace it replays.

``lesson.toml`` names the runs that go left and right and lists the steps. A step finds its
keyframe by a *rule* over frames, never by a frame number, so re-recording the trace (or opening
another trace of the same scenario) moves the keyframes with the events::

    [[steps]]
    title = { en = "...", zh = "..." }
    keyframe = { side = "left", event = "admission_blocked", match = { reason = "no_hole" } }
    narration = { en = "...{ev.need_slots}...", zh = "..." }

Rule keys (all optional, all must hold): ``side`` (left / right / any), ``event`` (an event kind
that happened in the frame) with ``match`` (fields it must have) and ``during_decode`` (its
request was admitted in an earlier frame), ``min_running`` (requests running on ``side``),
``frame = "last"``. A rule searches after the previous step's keyframe unless ``after = false``.

Narration may quote numbers only through ``{placeholders}`` filled from the frames (see
``narration_context``): every number on screen comes from the engine's events.

Narration must stay true for any scenario, not only the one it was written for. A paragraph
that starts with ``[if NAME]`` (or ``[unless NAME]``) is shown only when the named fact (see
``CONDITIONS``) holds at the keyframe, so "paging finished in 40 steps instead of 40" is never
said. A step whose keyframe never comes says nothing of it: its text is the step's ``absent``
text (or a generic line), and the player greys it.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import re
import string
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace

from engine.core import events as E
from engine.core.accounting import CATEGORIES, account, time_averaged_shares
from engine.trace.io import Trace, TraceError
from viz.fold import fp8_data
from viz.fold.percent import percents
from viz.fold.reducer import CONTIGUOUS, PAGED, Frame, RunInfo, replay_settled
from viz.fold.tier_facts import TIER_CONDITIONS, tier_facts
from viz.safe import md_text
from viz.ui_text import load as load_text

LESSONS_DIR = Path(__file__).resolve().parents[2] / "lessons"
LANGS = ("en", "zh")
SIDES = ("left", "right")


class LessonError(ValueError):
    """A lesson folder cannot be used; the message is one line saying why."""


@dataclass(frozen=True)
class LessonStep:
    title: dict[str, str]
    narration: dict[str, str]
    rule: dict
    absent: dict[str, str] | None = None  # said instead when the keyframe never comes


@dataclass(frozen=True)
class LessonSpec:
    """What ``lesson.toml`` says."""

    name: str
    folder: Path
    title: dict[str, str]
    trace_file: str
    runs: dict[str, str]  # side -> run name in the trace
    side_titles: dict[str, dict[str, str]]
    steps: tuple[LessonStep, ...]


@dataclass(frozen=True)
class Summary:
    """One run over its whole length: the scoreboard's numbers."""

    shares: dict[str, float]  # time-averaged share per accounting category
    #: the largest and the mean batch size: a request counts in every step it ran in, the one
    #: that made its last token too (StepAccount.batched), as simulate's mean_running does
    max_running: int
    mean_running: float
    steps: int
    finished: int
    preemptions: int


@dataclass(frozen=True)
class Side:
    run: RunInfo
    frames: list[Frame]
    title: dict[str, str]
    summary: Summary
    #: the arena as the run left it (reducer.settle), shown once it has ended; None: the last
    #: frame stays
    settled: Frame | None = None

    def at(self, i: int) -> Frame:
        """Frame ``i``; a run that ended earlier shows the arena as it left it: its last frame,
        less the memory that frame's finishing requests let go of."""
        if i >= len(self.frames) and self.settled is not None:
            return self.settled
        return self.frames[max(0, min(i, len(self.frames) - 1))]


@dataclass(frozen=True)
class Lesson:
    """A spec folded over a trace: both sides' frames and each step's keyframe (None when the
    trace never shows what the step's rule looks for)."""

    spec: LessonSpec
    left: Side
    right: Side
    keyframes: tuple[int | None, ...]
    source: str  # "lesson", a file name, or "live"
    key: str = ""  # content hash when cached (a stable cache key)
    origin: tuple[tuple[str, str], ...] = ()  # the trace header's model, device, created...
    #: A live run still going: its last frame is where the stream has got to, not the end, so
    #: no step keyed to "the last frame" (the scoreboard: "every request has finished") is shown.
    partial: bool = False

    @property
    def num_frames(self) -> int:
        return max(len(self.left.frames), len(self.right.frames))

    def side(self, name: str) -> Side:
        return self.left if name == "left" else self.right

    def clamp(self, i: int) -> int:
        return max(0, min(i, self.num_frames - 1))

    def step_of(self, frame: int) -> int:
        """The lesson step (0-based) a frame belongs to: the last keyframe at or before it."""
        current = 0
        for k, kf in enumerate(self.keyframes):
            if kf is not None and kf <= frame:
                current = k
        return current


@dataclass(frozen=True)
class RenderedStep:
    """A step's text in one language, placeholders filled."""

    number: int
    title: str
    narration: str
    missing: tuple[str, ...] = ()


# --- reading lesson.toml ---------------------------------------------------------------------


def available(root: Path = LESSONS_DIR) -> list[str]:
    """Lesson names, sorted, that have a lesson.toml."""
    return sorted(p.parent.name for p in root.glob("*/lesson.toml"))


def lesson_titles(root: Path = LESSONS_DIR) -> dict[str, dict[str, str]]:
    """Each available lesson's title by language, from its lesson.toml: what the lesson picker
    shows (the folder name stays the lesson's id, in the URL). A lesson whose file will not
    read, or that has no title, is left out: the picker then shows its folder name."""
    titles = {}
    for name in available(root):
        with contextlib.suppress(LessonError, KeyError, TypeError, AttributeError):
            titles[name] = texts(
                read_lesson_toml(name, "lesson.toml", root, LessonError)[1]["title"]
            )
    return titles


def read_lesson_toml(
    name: str, file_name: str, root: Path, error: type[ValueError], what: str = "lesson"
) -> tuple[Path, dict]:
    """Find ``root/name/file_name`` (refusing names that leave ``root``) and parse it. Raises
    ``error`` with one line for a missing lesson or bad TOML."""
    folder = root / name
    path = folder / file_name
    if "/" in name or name.startswith(".") or not path.is_file():
        raise error(f"no {what} named {name!r}")
    try:
        return folder, tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise error(f"lessons/{name}/{file_name} is not valid TOML: {e}") from None


def load_spec(name: str, root: Path = LESSONS_DIR) -> LessonSpec:
    """Parse ``root/name/lesson.toml``. Raises LessonError (one line) when it is unusable."""
    folder, doc = read_lesson_toml(name, "lesson.toml", root, LessonError)
    try:
        steps = tuple(
            LessonStep(
                texts(s["title"]),
                texts(s["narration"]),
                dict(s["keyframe"]),
                texts(s["absent"]) if "absent" in s else None,
            )
            for s in doc["steps"]
        )
        for st in steps:
            for text in st.narration.values():
                unknown = {n for _, n in IF_TAG.findall(text)} - set(CONDITIONS)
                if unknown:
                    raise LessonError(
                        f"lessons/{name}/lesson.toml: unknown condition "
                        f"[if {min(unknown)}]; known: "
                        f"{', '.join(sorted(CONDITIONS))}"
                    )
        return LessonSpec(
            name=name,
            folder=folder,
            title=texts(doc["title"]),
            trace_file=doc.get("trace", "trace.jsonl"),
            runs={side: doc[side]["run"] for side in SIDES},
            side_titles={side: texts(doc[side]["title"]) for side in SIDES},
            steps=steps,
        )
    except (KeyError, TypeError) as e:
        raise LessonError(f"lessons/{name}/lesson.toml lacks {e}") from None


def texts(v) -> dict[str, str]:
    """A TOML text: one string for every language, or a table by language (English fills gaps)."""
    if isinstance(v, str):
        return {lang: v for lang in LANGS}
    return {lang: v.get(lang) or v["en"] for lang in LANGS}


def trace_path(spec: LessonSpec) -> Path:
    return spec.folder / spec.trace_file


def file_digest(path: Path) -> str:
    """Content hash: the cache key for a lesson's precomputed frames."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --- folding a trace into a lesson -----------------------------------------------------------


def build(spec: LessonSpec, trace: Trace, source: str = "lesson", partial: bool = False) -> Lesson:
    """Fold both sides and find the keyframes. A trace whose run names differ from the spec's
    (an uploaded file) puts its contiguous run left and its paged run right. A stream still
    running (``partial``; cut with ``live_edge``) folds to the first frames of its finished
    trace: no frame reads ahead."""
    runs = pick_runs(spec, trace)
    sides = {side: _side(trace, runs[side], spec.side_titles[side]) for side in SIDES}
    origin = tuple(
        (k, str(trace.header[k]))
        for k in ("model", "device", "created", "forward")
        if trace.header.get(k) not in (None, "")
    )
    lesson = Lesson(spec, sides["left"], sides["right"], (), source, origin=origin, partial=partial)
    return replace(lesson, keyframes=find_keyframes(lesson))


def live_edge(trace: Trace) -> Trace:
    """A stream's trace cut at the last step every run still stepping has ended. The recorder
    steps its runs in lockstep and writes each run's step in turn, so a stream read between two
    runs' lines held one side a step ahead: the newest frame showed the other side's previous
    frame, labelled as ended, and differed from the finished trace's frame. A run is done when
    every request the header's scenario names (with its samples) has finished and that step has
    ended."""
    scenario = trace.header.get("scenario")
    requests = scenario.get("requests") if isinstance(scenario, dict) else None
    listed = [r for r in requests if isinstance(r, dict)] if isinstance(requests, list) else []
    total = sum(n if type(n := r.get("n", 1)) is int and n > 0 else 1 for r in listed)
    steps = {n: sum(e.kind == "step_end" for e in evs) for n, evs in trace.runs.items()}
    going = [
        steps[n]
        for n, evs in trace.runs.items()
        if not total  # no scenario to count by: treat as still stepping
        or sum(e.kind == "finished" for e in evs) < total
        or evs[-1].kind != "step_end"  # its last request finished; its last step has not ended
    ]
    if not going:
        return trace
    k = min(going)
    runs = {}
    for n, evs in trace.runs.items():
        seen, cut = 0, len(evs)
        for j, e in enumerate(evs):
            if e.kind == "step_end":
                seen += 1
                if seen == k:
                    cut = j + 1
                    break
        runs[n] = evs[:cut] if steps[n] > k else evs
    return Trace(trace.header, runs)


def pick_runs(spec: LessonSpec, trace: Trace) -> dict[str, str]:
    names = trace.run_names
    if all(spec.runs[s] in names for s in SIDES):
        return dict(spec.runs)
    kinds = {n: RunInfo.from_header(trace.run_config(n)).allocator for n in names}
    left = next((n for n in names if kinds[n] == CONTIGUOUS), None)
    right = next((n for n in names if kinds[n] == PAGED), None)
    if left is None or right is None:
        raise TraceError(
            "this trace needs one contiguous run and one paged run to compare "
            f"(it has {', '.join(f'{n} ({kinds[n]})' for n in names)})"
        )
    return {"left": left, "right": right}


def _side(trace: Trace, run: str, title: dict) -> Side:
    info = RunInfo.from_header(trace.run_config(run))
    events = trace.runs[run]
    frames, settled = replay_settled(events, info)
    if not frames:
        raise TraceError(f"run {run!r} has no finished engine step yet")
    return Side(info, frames, title, summarize(frames, events), settled)


def summarize(frames: list[Frame], events: list[E.Event]) -> Summary:
    """The scoreboard. Its shares look back over every step knowing each final length the
    events tell (the frames could not know them yet), so what a request held and never filled
    counts as internal on every step it was held, as the paper's Fig. 2 counts it."""
    accounts = [f.account for f in frames]
    run = frames[0].run
    looking_back = account(
        events,
        run.num_slots,
        run.block_size,
        run.num_cpu_blocks,
        hindsight=True,
        show_finishing=True,
    )
    return Summary(
        shares=time_averaged_shares(looking_back),
        max_running=max(a.batched for a in accounts),
        mean_running=sum(a.batched for a in accounts) / len(accounts),
        steps=len(frames),
        finished=sum(1 for e in events if e.kind == E.Finished.kind),
        preemptions=sum(1 for e in events if e.kind == E.Preempted.kind),
    )


def find_keyframes(lesson: Lesson) -> tuple[int | None, ...]:
    """Each step's keyframe: the first match after the previous step's keyframe; a step whose
    event happened only earlier (another scenario than the one the lesson was written for)
    takes its first match on a frame no other step holds, then any match. None means the
    event never happens in this run, so the step's ``absent`` text is true."""
    out: list[int | None] = []
    prev = -1
    for step in lesson.spec.steps:
        start = prev + 1 if step.rule.get("after", True) else max(prev, 0)
        kf = next(
            (i for i in range(start, lesson.num_frames) if _matches(lesson, i, step.rule)), None
        )
        if kf is None:
            hits = [i for i in range(lesson.num_frames) if _matches(lesson, i, step.rule)]
            kf = next((i for i in hits if i not in out), hits[0] if hits else None)
        out.append(kf)
        if kf is not None:
            prev = max(prev, kf)
    return tuple(out)


def _matches(lesson: Lesson, i: int, rule: dict) -> bool:
    if rule.get("frame") == "last":
        return not lesson.partial and i == lesson.num_frames - 1
    sides = SIDES if rule.get("side", "any") == "any" else (rule["side"],)
    return any(_side_matches(lesson.side(s), i, rule) for s in sides)


def _side_matches(side: Side, i: int, rule: dict) -> bool:
    if i >= len(side.frames):
        return False  # this run has ended: nothing happens on its side any more
    frame = side.frames[i]
    if "min_running" in rule and len(frame.running) < rule["min_running"]:
        return False
    return "event" not in rule or matching_event(side, i, rule) is not None


def matching_event(side: Side, i: int, rule: dict) -> E.Event | None:
    """The first event of frame ``i`` on ``side`` that satisfies the rule's event clauses."""
    frame = side.frames[i]
    want = rule.get("match", {})
    for ev in frame.events:
        if ev.kind != rule["event"] or any(getattr(ev, k, None) != v for k, v in want.items()):
            continue
        if rule.get("during_decode") and _admitted_in(frame, ev):
            continue
        return ev
    return None


def _admitted_in(frame: Frame, ev: E.Event) -> bool:
    req = getattr(ev, "req", None)
    return any(isinstance(e, E.Admitted) and e.req == req for e in frame.events)


# --- narration -------------------------------------------------------------------------------


def req_label(frame: Frame, req: str) -> str:
    view = frame.requests.get(req)
    return view.name if view else req


def pct(x: float) -> str:
    """A share as a percentage; small ones keep a decimal so 0.4% does not read as nothing."""
    return f"{100 * x:.1f}%" if 0 < x < 0.095 else f"{100 * x:.0f}%"


def narration_context(lesson: Lesson, k: int) -> dict:
    """Values a step's narration may quote, taken at its keyframe (the last frame when the
    trace lacks one). Sides are ``L`` and ``R``; ``ev`` is the event that matched the rule, with
    ``req`` replaced by the request's display label and ``req_id`` keeping the engine's id."""
    kf = lesson.keyframes[k]
    i = kf if kf is not None else lesson.num_frames - 1
    rule = lesson.spec.steps[k].rule
    ctx = {
        "L": _side_ns(lesson.left, i),
        "R": _side_ns(lesson.right, i),
        "frame": i,
        "block_size": lesson.right.run.block_size,
        "num_slots": lesson.right.run.num_slots,
        "num_blocks": lesson.right.run.num_slots // lesson.right.run.block_size,
        "max_model_len": lesson.left.run.max_model_len or lesson.right.run.max_model_len,
    }
    ev = _rule_event(lesson, i, rule)
    if ev is not None:
        ctx["ev"] = _event_ns(lesson, i, ev)
    accuracy = fp8_data.narration_ns()  # {fp8.e4m3_top1}: measured by bench/fp8_accuracy.py
    if accuracy is not None:
        ctx["fp8"] = accuracy
    return ctx


def _rule_event(lesson: Lesson, i: int, rule: dict) -> E.Event | None:
    if "event" not in rule:
        return None
    sides = SIDES if rule.get("side", "any") == "any" else (rule["side"],)
    for s in sides:
        side = lesson.side(s)
        if i < len(side.frames):
            ev = matching_event(side, i, rule)
            if ev is not None:
                return ev
    return None


def _event_ns(lesson: Lesson, i: int, ev: E.Event) -> SimpleNamespace:
    d = ev.to_dict()
    req = d.get("req")
    if req is not None:
        left, right = lesson.left.at(i), lesson.right.at(i)
        view = left.requests.get(req) or right.requests.get(req)
        d["req_id"] = req
        d["req"] = view.name if view else req
        if view:
            bs = lesson.right.run.block_size
            d.update(
                prompt_len=view.prompt_len,
                max_tokens=view.max_tokens,
                prompt_blocks=math.ceil(view.prompt_len / bs),
            )
        run = left.reservations.get(req)
        # A request that stops in the step it is admitted in (its first token is its last)
        # reserves and releases its run within this one frame: the frame's reservations no
        # longer list it, but it was held, and the caption quotes these same events.
        mine = _own_events(lesson.left, i, req)
        got = next((e.length for e in mine if isinstance(e, E.SlotsReserved)), 0)
        let_go = next((e.length for e in mine if isinstance(e, E.ReservationReleased)), 0)
        d["left_reserved"] = run[1] if run else got
        d["left_released"] = 0 if run else let_go  # the run it held until now
        d["left_never"] = left.never_filled(req)  # hatched there: it stopped in this frame
        d["right_never"] = right.never_filled(req)
        d["hole_between"] = _hole_between(lesson, i, req)
        d["right_finished"] = any(
            isinstance(e, E.Finished) for e in _own_events(lesson.right, i, req)
        )
        if "block_map" in d:  # a swap: device -> CPU blocks out, CPU -> device blocks in
            arrow = "#{}→c{}" if ev.kind == E.SwappedOut.kind else "c{}→#{}"
            d["moves"] = ", ".join(arrow.format(a, b) for a, b in d["block_map"])
        table = right.block_tables.get(req) or _table_as_it_stopped(lesson.right, i, req)
        d["right_blocks"] = len(table)
        d["right_table"] = ", ".join(f"{n}→#{p}" for n, p in enumerate(table)) or "-"
    return SimpleNamespace(**d)


def _own_events(side: Side, i: int, req: str) -> list[E.Event]:
    """``req``'s events in frame ``i`` of ``side`` (none once that run has ended)."""
    if i >= len(side.frames):
        return []
    return [e for e in side.frames[i].events if getattr(e, "req", None) == req]


def _table_as_it_stopped(side: Side, i: int, req: str) -> tuple[int, ...]:
    """The block table ``req`` held in frame ``i`` if it finished there (the grid still draws
    those blocks, hatched where never filled): its table of the frame before, with the
    entries this frame gave it. Empty for a request that did not stop in frame ``i``."""
    mine = _own_events(side, i, req)
    if not any(isinstance(e, E.Finished) for e in mine):
        return ()
    table = dict(enumerate(side.frames[i - 1].block_tables.get(req, ()))) if i > 0 else {}
    for e in mine:
        if isinstance(e, E.Preempted):
            table = {}
        elif isinstance(e, (E.BlockAllocated, E.BlockShared)):
            table[e.logical] = e.physical
        elif isinstance(e, E.BlockCopied):
            table[e.logical] = e.dst
    return tuple(table[n] for n in sorted(table))


def _hole_between(lesson: Lesson, i: int, req: str) -> bool:
    """Whether the left run ``req`` held just before frame ``i`` (and no longer holds) lies
    between two runs still alive at ``i``."""
    if i == 0 or i >= len(lesson.left.frames):
        return False
    gone = lesson.left.frames[i - 1].reservations.get(req)
    live = lesson.left.frames[i].reservations
    if gone is None or req in live:
        return False
    start, length = gone
    return any(s + n <= start for s, n in live.values()) and any(
        s >= start + length for s, n in live.values()
    )


def _side_ns(side: Side, i: int) -> SimpleNamespace:
    f = side.at(i)
    a, s = f.account, side.summary
    blocked = f.blocked[0] if f.blocked else None
    # Shares as the strip (whole) and the scoreboard (one decimal) print them: each set sums to 100.
    now, avg = percents(a.shares()), percents(s.shares, 1)
    return SimpleNamespace(
        running=len(f.running),
        waiting=len(f.waiting),
        step=f.step,
        **{f"{c.removesuffix('_states')}_share": now[c] for c in CATEGORIES},
        token_states=a.token_states,
        reservation=a.reservation,
        internal=a.internal,
        external=a.external,
        free=a.free,
        waste=a.reservation + a.internal + a.external,
        blocks=sum(len(t) for t in f.block_tables.values()),
        avg_token_share=avg["token_states"],
        avg_waste_share=f"{100 - float(avg['token_states'].rstrip('%')):.1f}%",
        **{f"avg_{c}_share": avg[c] for c in CATEGORIES if c != "token_states"},
        max_running=s.max_running,
        mean_running=f"{s.mean_running:.1f}",
        steps=s.steps,
        blocked_req=req_label(f, blocked.req) if blocked else "-",
        blocked_reason=blocked.reason if blocked else "-",
        shared=a.shared,
        saved=a.saved,
        saved_share=pct(a.saved / a.num_slots if a.num_slots else 0.0),
        **_sharing_so_far(side, i),
        **tier_facts(side.run, side.frames, i),
    )


def _sharing_so_far(side: Side, i: int) -> dict[str, int]:
    """Prefill tokens the cache spared and blocks copied on write, up to frame ``i``."""
    hit = copies = 0
    for f in side.frames[: i + 1]:
        for ev in f.events:
            if isinstance(ev, E.CacheHit):
                hit += ev.tokens_saved
            elif isinstance(ev, E.BlockCopied):
                copies += 1
    return {"hit_tokens": hit, "copies": copies}


class SafeFormatter(string.Formatter):
    """Fills what it can; a placeholder the frames cannot answer shows as ``?`` and is listed,
    so a lesson that quotes a missing number degrades instead of crashing the page."""

    def __init__(self) -> None:
        self.missing: list[str] = []

    def get_field(self, field_name, args, kwargs):
        try:
            return super().get_field(field_name, args, kwargs)
        except (KeyError, AttributeError, IndexError):
            self.missing.append(field_name)
            return "?", field_name

    def format_field(self, value, format_spec):
        # Strings here come from the trace (request ids, reasons): text, never markdown.
        text = super().format_field(value, format_spec)
        return md_text(text) if isinstance(value, str) else text


# --- facts a paragraph may depend on ----------------------------------------------------------

IF_TAG = re.compile(r"^\[(if|unless) ([a-z_]+)\]\s*", re.MULTILINE)


def _ev(ctx: dict, name: str, default=None):
    return getattr(ctx.get("ev"), name, default)


#: ``[if NAME]`` conditions: each reads the narration context at the step's keyframe.
CONDITIONS = {
    # the step's request holds a reservation on the left / blocks on the right at the keyframe
    "left_admitted": lambda ctx: _ev(ctx, "left_reserved", 0) > 0,
    "right_admitted": lambda ctx: _ev(ctx, "right_blocks", 0) > 0,
    # the left run released at the keyframe lay between two runs still alive
    "hole_between": lambda ctx: bool(_ev(ctx, "hole_between", False)),
    # the step's request stopped at the keyframe with left slots it never filled (hatched)
    "left_never": lambda ctx: _ev(ctx, "left_never", 0) > 0,
    # the step's request stops on the right in this same frame (each side keeps its own pace)
    "right_finished": lambda ctx: bool(_ev(ctx, "right_finished", False)),
    "fewer_steps": lambda ctx: ctx["R"].steps < ctx["L"].steps,
    "same_steps": lambda ctx: ctx["R"].steps == ctx["L"].steps,
    "more_steps": lambda ctx: ctx["R"].steps > ctx["L"].steps,
    "more_concurrent": lambda ctx: ctx["R"].max_running > ctx["L"].max_running,
    **TIER_CONDITIONS,
}


def _keep_true_paragraphs(text: str, ctx: dict) -> str:
    """Drop each paragraph whose ``[if NAME]`` is false (or ``[unless NAME]`` true)."""
    out = []
    for para in text.split("\n\n"):
        m = IF_TAG.match(para)
        if m:
            holds = CONDITIONS[m.group(2)](ctx)
            if holds != (m.group(1) == "if"):
                continue
            para = para[m.end() :]
        out.append(para)
    return "\n\n".join(out)


def render_step(lesson: Lesson, k: int, lang: str) -> RenderedStep:
    """Step ``k``'s narration filled from its keyframe. A step the trace never shows says so
    (its ``absent`` text) and claims nothing of it."""
    step = lesson.spec.steps[k]
    if lesson.keyframes and lesson.keyframes[k] is None:
        absent = step.absent[lang] if step.absent else load_text("captions")[lang]["step_absent"]
        return RenderedStep(k + 1, step.title[lang], _unwrap(absent, lang))
    fmt = SafeFormatter()
    ctx = narration_context(lesson, k)
    text = _keep_true_paragraphs(_unwrap(step.narration[lang], lang), ctx)
    text = fmt.vformat(text, (), ctx)
    return RenderedStep(k + 1, step.title[lang], text, tuple(fmt.missing))


def _unwrap(text: str, lang: str) -> str:
    """Join the TOML's hard-wrapped lines into paragraphs (Chinese needs no space between
    lines; a space there would show as a gap between characters)."""
    glue = "" if lang == "zh" else " "
    paras = [glue.join(line.strip() for line in p.splitlines()) for p in text.strip().split("\n\n")]
    return "\n\n".join(p for p in paras if p)
