"""Narration on every frame: the captions and chapter text shown on a frame say only numbers that
frame's own fold holds, and chapters cover the run with text true on every frame they span."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from paged.engine.core import events as E
from paged.engine.trace import io as T
from paged.engine.trace.io import read
from paged.viz.fold import captions, chapters
from paged.viz.fold.facts import EventFacts
from paged.viz.fold.lesson import Lesson, build
from paged.viz.fold.lesson_folder import available, load_spec, trace_path
from paged.viz.fold.narration import narration_context
from paged.viz.fold.percent import percents

ROOT = Path(__file__).resolve().parents[2]
NUM = re.compile(r"\d+(?:\.\d+)?")


def shipped() -> list[str]:
    return [n for n in available() if trace_path(load_spec(n)).is_file()]


@pytest.fixture(scope="module", params=shipped())
def lesson(request) -> Lesson:
    spec = load_spec(request.param)
    return build(spec, read(trace_path(spec)))


@pytest.fixture(scope="module")
def bench_lesson(tmp_path_factory) -> Lesson:
    """The six-step text over a longer dry-run trace (the benchmark's generator, small)."""
    import importlib.util

    # by path: bench/ on sys.path would stay there for the worker's later tests, and its scripts'
    # names may be those of installed packages
    spec = importlib.util.spec_from_file_location("bench_frames", ROOT / "bench" / "frames.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)

    path = tmp_path_factory.mktemp("cap") / "trace.jsonl"
    bench.make_trace(path, 1500)
    return build(load_spec("six-steps"), read(path))


def _ints(value) -> set[str]:
    out: set[str] = set()
    if isinstance(value, bool):
        return out
    if isinstance(value, (int, float)):
        out.add(str(value))
    elif isinstance(value, str):
        out |= set(NUM.findall(value))
    elif isinstance(value, (tuple, list)):
        for v in value:
            out |= _ints(v)
    return out


def _pct(x: float) -> set[str]:
    return {f"{100 * x:.0f}", f"{100 * x:.1f}"}


def facts(lesson: Lesson, i: int) -> set[str]:
    """Every number frame ``i`` holds, read from the frames directly (not from the captions):
    event fields, per-request event counts, queue sizes, the account, block tables."""
    out = {str(i), str(lesson.num_frames - 1)}
    for side in (lesson.left, lesson.right):
        if i >= len(side.frames):
            continue
        f = side.frames[i]
        counts: dict[tuple[str, str], int] = {}
        for ev in f.events:
            for k, v in ev.to_dict().items():
                if k not in ("step", "seq"):
                    out |= _ints(v)
            if ev.kind == "block_allocated":  # "block {logical - 1} is full"
                out.add(str(ev.logical - 1))
            if ev.kind == "finished":  # "with {tokens} tokens": its prompt and all its output
                out.add(str(f.requests[ev.req].prompt_len + ev.num_generated))
            if ev.kind == "preempted" and i > 0:  # the K/V slots it held the frame before
                out.add(str(side.frames[i - 1].requests[ev.req].filled))
            key = (ev.kind, ev.req if isinstance(ev, E.RequestEvent) else "")
            counts[key] = counts.get(key, 0) + 1
        out |= {str(n) for n in counts.values()} | {"0"}
        out.add(str(len({e.req for e in f.events if e.kind == "tokens_written"})))
        out |= {str(len(f.running)), str(len(f.waiting)), str(f.step)}
        a = f.account
        for c in ("token_states", "reservation", "internal", "external", "free"):
            out.add(str(getattr(a, c)))
            out |= _pct(a.share(c))
        # the shares as the strip prints them (summing to 100: one may round the other way)
        out |= {v.rstrip("%") for v in percents(a.shares()).values()}
        for v in f.requests.values():
            out |= _ints(v.name) | {str(v.prompt_len)}
        for b in f.blocked:
            out |= {str(b.need_slots), str(b.free_slots), str(b.largest_hole)}
        for r in {o for o in f.owners if o is not None}:  # each request's hatched cells
            out.add(
                str(sum(1 for o, c in zip(f.owners, f.cells, strict=True) if o == r and c == "I"))
            )
        for t in f.block_tables.values():
            out |= {str(p) for p in t} | {str(n) for n in range(len(t))}
    return out


def shown(lesson: Lesson, i: int, ch: chapters.Chapter, lang: str) -> str:
    left, right = captions.caption(lesson, i, lang)
    return " ".join(
        (left, right, chapters.title(lesson, ch, lang), chapters.body(lesson, ch, i, lang))
    )


def _literal_numbers(template: str) -> set[str]:
    return set(NUM.findall(re.sub(r"\{[^}]*\}", "", template)))


def _narration_facts(lesson: Lesson, k: int) -> set[str]:
    out: set[str] = set()
    for v in narration_context(lesson, k).names().values():
        if isinstance(v, EventFacts):  # the event's own fields and its request's facts
            parts = [*v.fields.values(), *(vars(v.request).values() if v.request else ())]
        else:
            parts = list(vars(v).values()) if hasattr(v, "__dict__") else [v]
        out |= set().union(*(_ints(x) for x in parts))
    return out


def _check(lesson: Lesson, lang: str) -> None:
    chs = chapters.chapters(lesson)
    assert [i for c in chs for i in range(c.start, c.end + 1)] == list(range(lesson.num_frames))
    for ch in chs:
        for i in range(ch.start, ch.end + 1):
            allowed = facts(lesson, i)
            if ch.phase == chapters.STEP:
                # A step's narration quotes its keyframe, so it is shown there and nowhere else.
                # Two steps on one keyframe both speak there.
                for k in ch.steps:
                    assert ch.start == ch.end == lesson.keyframes[k]
                    step = lesson.spec.steps[k]
                    allowed |= _narration_facts(lesson, k) | {str(k + 1)}
                    allowed |= _literal_numbers(step.narration[lang] + step.title[lang])
            else:
                assert chapters.phase(lesson, i) == ch.phase  # the title holds on this frame
            said = set(NUM.findall(shown(lesson, i, ch, lang)))
            assert said <= allowed, (i, ch, sorted(said - allowed), shown(lesson, i, ch, lang))


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_every_number_shown_on_every_frame_is_that_frames(lesson, lang):
    _check(lesson, lang)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_long_run_is_narrated_frame_by_frame_too(bench_lesson, lang):
    _check(bench_lesson, lang)


def test_a_blocked_request_is_captioned_with_the_allocators_numbers(lesson):
    """Where the left refuses a request for want of a hole, that frame's caption says so with
    the refusal's own numbers."""
    hits = [
        (i, b)
        for i in range(len(lesson.left.frames))
        for b in lesson.left.frames[i].blocked
        if b.reason == "no_hole"
    ]
    if not hits and lesson.spec.name in ("shared-prompt", "parallel-sampling"):
        pytest.skip("the sharing lessons have no external-fragmentation refusal")
    if not hits and lesson.left.run.allocator == "paged":
        pytest.skip("both sides page: no run ever waits for a hole")
    assert hits, "the lesson has no external-fragmentation refusal to caption"
    for i, b in hits:
        text = captions.caption(lesson, i, "en")[0]
        assert (
            f"needs {b.need_slots} slots, {b.free_slots} free, largest hole {b.largest_hole}"
            in text
        )


BACK = re.compile(r"[:;] (\d+) blocks? back to the pool$")


def _paged_sides(lesson: Lesson):
    return [side for side in (lesson.left, lesson.right) if side.run.allocator == "paged"]


def test_paged_captions_count_the_blocks_a_table_gains_and_the_pool_gets_back(lesson):
    """Counted from the block tables, not the events: an admitted request's table holds its
    fresh and its shared blocks; a finished one gives back only the blocks no table holds
    afterwards (once counted every reference dropped, and no cache hit or fork)."""
    checked = 0
    for side in _paged_sides(lesson):
        prev: dict[str, tuple[int, ...]] = {}
        for f in side.frames:
            said = captions.side_phrases(f, "en")
            held_after = {b for t in f.block_tables.values() for b in t}
            for ev in f.events:
                if ev.kind == "admitted" and ev.req in f.block_tables:
                    view = f.requests[ev.req]
                    n = len(f.block_tables[ev.req])
                    s_ = "" if n == 1 else "s"
                    want = (
                        f"{view.name} admitted again: {n} block{s_} for its {ev.num_tokens} tokens"
                        if ev.num_tokens > view.prompt_len
                        else f"{view.name} admitted: {n} block{s_} for its {view.prompt_len}-token"
                    )
                    assert any(p.startswith(want) for p in said), (f.index, want, said)
                    checked += 1
            # requests finishing together: what the pool gets back is theirs, less what any
            # table still holds after the step, in whatever order they let go
            done = [ev.req for ev in f.events if ev.kind == "finished"]
            if done:
                mine = {b for r in done for b in prev.get(r, ())} | {
                    e.physical for e in f.events if e.kind == "block_allocated" and e.req in done
                }
                names = tuple(f.requests[r].name + " " for r in done)
                back = [
                    int(m.group(1))
                    for p in said
                    if p.startswith(names) and (m := BACK.search(p)) is not None
                ]
                assert len(back) == len(done), (f.index, said)
                assert sum(back) == len(mine - held_after), (f.index, said)
                checked += 1
            prev = f.block_tables
    assert checked > 0 or not _paged_sides(lesson)


def test_a_request_held_back_by_a_full_batch_is_not_said_to_lack_memory(tmp_path):
    # two prompts over the step's token budget: B waits for the batch, with memory to spare
    from paged.engine.trace.recorder import record
    from paged.engine.trace.scenario import load

    (tmp_path / "s.toml").write_text(
        "[arena]\nnum_blocks = 1200\nblock_size = 16\nmax_model_len = 6000\n"
        + "".join(f'[[requests]]\nid = "{r}"\nprompt_len = 5000\nmax_tokens = 4\n' for r in "AB")
    )
    buf = io.StringIO()
    record(load(tmp_path / "s.toml"), ["max", "paged"], buf, forward="skip")
    tr = T.loads(buf.getvalue())
    lesson = build(load_spec("six-steps"), tr)
    for side in (lesson.left, lesson.right):
        [f] = [f for f in side.frames if any(b.reason == "batch_full" for b in f.blocked)][:1]
        for lang, words in (("en", "batch is full"), ("zh", "批次已满")):
            text = " ".join(captions.side_phrases(f, lang))
            assert words in text and "slots" not in text.split("B waits")[-1], text


def test_every_step_speaks_on_a_frame_of_its_own(lesson):
    """The shipped lessons give every step a frame of its own (two on one frame both speak
    there, but parallel sampling's sharing step once hid behind another step's)."""
    kfs = [k for k in lesson.keyframes if k is not None]
    assert len(set(kfs)) == len(kfs), lesson.keyframes
    spoken = {c.step for c in chapters.chapters(lesson) if c.phase == chapters.STEP}
    assert spoken == {s for s, k in enumerate(lesson.keyframes) if k is not None}


def test_the_grid_names_each_cell_once(lesson):
    # shared blocks got every holder's name in one cell, printed over each other ("S.00",
    # "S.10" and "S.20" as one smudge on parallel sampling's right)
    from paged.viz.fold.panels import label_starts

    shared = 0
    for side in (lesson.left, lesson.right):
        for f in side.frames:
            slots = [slot for slot, _, _ in label_starts(f)]
            assert len(slots) == len(set(slots)), (side.run.name, f.index)
            held = [b for t in f.block_tables.values() for b in t]
            shared += len(held) - len(set(held))
    if lesson.spec.name in ("shared-prompt", "parallel-sampling"):
        assert shared > 0  # it has blocks in several tables, each to be named once


def test_no_chapter_title_outlives_what_it_says(lesson):
    """A chapter's text is true on each of its frames: a frame where nobody waits on the left
    never sits in a chapter that says the left makes requests wait."""
    for ch in chapters.chapters(lesson):
        if ch.phase == "left_waits":
            for i in range(ch.start, ch.end + 1):
                assert lesson.left.at(i).waiting and not lesson.right.at(i).waiting


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_state_line_quotes_the_strips_percentages(lesson, lang):
    """One number per quantity on a screen: the chapter text once rounded 12.5 % to "12" while
    the metrics strip beside it, which sums to 100, said "13"."""
    for side in (lesson.left, lesson.right):
        for f in side.frames:
            if f.blocked_by("no_hole") is not None:
                continue  # that line gives slots, not shares
            strip = percents(f.account.shares())
            line = captions.state_line(f, lang)
            assert strip["token_states"] in line and strip["free"] in line, (line, strip)


SHARED = re.compile(r"^(\S+) admitted(?: again)?: \d+ blocks? .*\((\d+) blocks? shared\)$")


def test_a_fork_that_copies_on_write_is_captioned_with_what_its_table_shares_after():
    """Parallel samples share the prompt's blocks and, in the same step, copy the partly filled
    last one before writing: the caption's "(k blocks shared)" counts what the table still shares
    when the frame ends (the grid's xN), and the copy itself is said."""
    spec = load_spec("parallel-sampling")
    side = build(spec, read(trace_path(spec))).right
    copies = 0
    for f in side.frames:
        said = captions.side_phrases(f, "en")
        names = {v.name: r for r, v in f.requests.items()}
        for p in said:
            m = SHARED.match(p)
            if m:
                req = names[m.group(1)]
                others = {b for r, t in f.block_tables.items() if r != req for b in t}
                assert int(m.group(2)) == sum(b in others for b in f.block_tables[req]), p
        for e in f.events:
            if e.kind == "block_copied":
                copies += 1
                want = f"copied to #{e.dst} first (copy-on-write)"
                assert any(p.startswith(f.requests[e.req].name) and want in p for p in said)
    assert copies > 0


# what a caption may count instead of saying: a first admission, a block filled
ROUTINE = re.compile(r"^\S+ (admitted: |admitted into the hole)|'s block \d+ is full")


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_short_caption_counts_only_routine_phrases_never_the_frames_event(lesson, lang):
    """Past three phrases a side's caption ended "+1 more", and what it left out was whatever
    came last: S.2's copy-on-write (parallel-sampling, frame 1), D's re-admission after its
    swap (recompute-or-swap, frame 56). Every phrase but a first admission or a filled block
    is said, on every frame; only those are counted."""
    counted = 0
    for i in range(lesson.num_frames):
        pair = captions.caption(lesson, i, lang)
        for side, shown in zip((lesson.left, lesson.right), pair, strict=True):
            if i >= len(side.frames):
                continue
            said = captions.side_phrases(side.frames[i], lang)
            en = captions.side_phrases(side.frames[i], "en")
            for p, p_en in zip(said, en, strict=True):
                if ROUTINE.search(p_en):
                    counted += p not in shown
                else:
                    assert p in shown, (i, p, shown)
            left_out = sum(p not in shown for p in said)
            if left_out:
                assert shown.endswith(captions.text(lang)["more"].format(n=left_out)), shown
    if lesson.spec.name == "parallel-sampling":
        assert counted > 0  # the fork frame still counts its admissions


def test_a_panels_rows_say_which_the_frame_changed_so_presenter_mode_keeps_them(lesson):
    """Presenter mode condenses a panel too long for the screen to the rows the frame changed
    (player.js): a row is marked changed exactly when it gained a block, a reservation or
    moved tiers in this frame, and every panel carries the line that counts the rest."""
    from paged.viz.fold.panels import table_rows
    from paged.viz.render import html

    hot_rows = 0
    for side in (lesson.left, lesson.right):
        for f in side.frames:
            panel = html.tables_panel(f, "en")
            assert "class='pk-dim pk-rest' data-t='+{n} unchanged' hidden" in panel
            marked = re.findall(
                r"<div class='pk-row( pk-hot)?' data-req='([^']*)'><span class='pk-chip[^>]*>"
                r"([^<]+)<",
                panel,
            )
            moved = {e.req for e in f.events if e.kind in ("swapped_out", "swapped_in")}
            for row, (hot, req, label) in zip(table_rows(f), marked, strict=False):
                assert label == row.label and req == row.req  # the row names its request
                want = row.new or row.req in moved or any(m.new for m in row.mappings)
                assert bool(hot) == want, (f.index, label)
                hot_rows += want
    assert hot_rows > 0
