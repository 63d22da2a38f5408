"""The two tier lessons, "Out of memory: recompute or swap" and "FP8: the same bytes, twice the
requests": their recorded traces show what the narration says, every step has its keyframe and
all its numbers in both languages, and a paragraph behind ``[if ...]`` shows only when its fact
holds (checked on a dry run whose CPU tier is too small, so swap falls back)."""

from __future__ import annotations

import dataclasses
import io
import re
from pathlib import Path

import pytest

from paged.engine.trace import io as T
from paged.engine.trace.recorder import record
from paged.engine.trace.scenario import load
from paged.viz.export import standalone
from paged.viz.fold.lesson import Lesson, build
from paged.viz.fold.lesson_folder import SIDES, load_spec, trace_path
from paged.viz.fold.narration import narration_context, render_step
from paged.viz.player import payload as player

ROOT = Path(__file__).resolve().parents[2]
CJK = re.compile(r"[\u4e00-\u9fff]")


def _lesson(name: str) -> Lesson:
    spec = load_spec(name)
    return build(spec, T.read(trace_path(spec)))


@pytest.fixture(scope="module")
def swap() -> Lesson:
    return _lesson("recompute-or-swap")


@pytest.fixture(scope="module")
def fp8() -> Lesson:
    return _lesson("fp8-twice")


@pytest.mark.parametrize("name", ["recompute-or-swap", "fp8-twice"])
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_every_step_finds_its_keyframe_and_all_its_numbers(name, lang):
    lesson = _lesson(name)
    assert lesson.origin and dict(lesson.origin)["forward"] == "model"  # the real model
    assert None not in lesson.keyframes
    for k in range(len(lesson.spec.steps)):
        step = render_step(lesson, k, lang)
        assert not step.missing, (k, step.missing)
        assert "[if" not in step.narration and "{" not in step.narration
        if lang == "zh":
            assert CJK.search(step.narration) and CJK.search(step.title)


def test_swap_lesson_shows_blocks_leaving_and_coming_back_elsewhere(swap):
    events = {side: [e for f in swap.side(side).frames for e in f.events] for side in SIDES}
    outs = [e for e in events["right"] if e.kind == "swapped_out"]
    ins = [e for e in events["right"] if e.kind == "swapped_in"]
    assert outs and len(ins) == len(outs)
    assert not any(e.kind.startswith("swap") for e in events["left"])
    assert any(e.kind == "preempted" for e in events["left"])
    left_from = {e.req: [d for d, _ in e.block_map] for e in outs}
    # some block came back into another physical block than the one it left
    assert any([d for _, d in e.block_map] != left_from[e.req] for e in ins)
    last = narration_context(swap, len(swap.spec.steps) - 1)
    assert last.R.relocated > 0 and last.R.swaps_out == len(outs)
    assert last.L.recomputed > last.R.recomputed
    # the CPU tier is on screen while someone is parked there
    parked = next(f for f in swap.right.frames if f.cpu_tables)
    assert "pk-cpu" in player._grid(swap, "right", parked.index, "en")
    left_svg = player._grid(swap, "left", parked.index, "en")
    assert "pk-cpu" not in left_svg
    # the side without a tier keeps the room, so both grids are drawn at one scale
    box = re.compile(r"viewBox='([^']+)'")
    right_svg = player._grid(swap, "right", parked.index, "en")
    assert box.search(left_svg).group(1) == box.search(right_svg).group(1)


def test_fp8_lesson_runs_more_at_once_and_queues_less_in_the_same_bytes(fp8):
    lr, rr = fp8.left.run, fp8.right.run
    assert rr.kv_cache_dtype.startswith("float8") and lr.kv_cache_dtype == "bfloat16"
    assert rr.num_slots == 2 * lr.num_slots and lr.block_bytes == 2 * rr.block_bytes
    assert fp8.right.summary.mean_running > fp8.left.summary.mean_running
    assert fp8.right.summary.steps < fp8.left.summary.steps
    ctx = narration_context(fp8, len(fp8.spec.steps) - 1)
    assert ctx.R.waited < ctx.L.waited
    assert ctx.L.arena_mib == ctx.R.arena_mib
    assert (
        ctx.fp8 is not None
    )  # the measured accuracy is quoted from paged/viz/data/fp8_accuracy.json


@pytest.mark.parametrize("name", ["recompute-or-swap", "fp8-twice"])
def test_the_lesson_travels_as_one_offline_file_in_both_languages(name):
    lesson = _lesson(name)
    page = standalone.page(lesson)
    assert lesson.spec.title["en"] in page and lesson.spec.title["zh"] in page
    assert "http://" not in page and "https://" not in page


def _dry_swap(cpu_blocks: int) -> Lesson:
    sc = load(ROOT / "paged" / "lessons" / "recompute-or-swap" / "scenario.toml")
    runs = (sc.runs[0], dataclasses.replace(sc.runs[1], cpu_blocks=cpu_blocks))
    buf = io.StringIO()
    record(dataclasses.replace(sc, runs=runs), None, buf, forward="skip")
    return build(load_spec("recompute-or-swap"), T.loads(buf.getvalue()))


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_fallback_is_said_only_when_the_cpu_tier_ran_out(lang):
    marker = {"en": "fell back to recompute", "zh": "退回重算"}[lang]
    tight = _dry_swap(cpu_blocks=3)
    ctx = narration_context(tight, len(tight.spec.steps) - 1)
    assert ctx.R.fallbacks > 0
    assert marker in render_step(tight, len(tight.spec.steps) - 1, lang).narration
    roomy = _dry_swap(cpu_blocks=14)
    assert narration_context(roomy, len(roomy.spec.steps) - 1).R.fallbacks == 0
    assert marker not in render_step(roomy, len(roomy.spec.steps) - 1, lang).narration


@pytest.mark.parametrize("name", ["recompute-or-swap", "fp8-twice"])
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_lecture_figures_are_valid_plotly_and_show_the_tier_where_there_is_one(name, lang):
    from paged.viz.render import figures

    lesson = _lesson(name)
    titles = (lesson.left.title[lang], lesson.right.title[lang])
    for k, kf in enumerate(lesson.keyframes):
        left, right = lesson.left.at(kf), lesson.right.at(kf)
        fig = figures.side_by_side_figure(left, right, render_step(lesson, k, lang), lang, titles)
        boxes = [s for s in fig.layout.shapes if s.type == "rect" and s.layer == "below"]
        assert len(boxes) == right.run.num_cpu_blocks + left.run.num_cpu_blocks
        # both arenas at one scale: y ranges of one length on both grids (a grid drawn to
        # scale, paged/viz/render/to_scale.py, starts half its shorter row above its first row's centre)
        (a0, a1), (b0, b1) = fig.layout.yaxis.range, fig.layout.yaxis3.range
        assert a0 - a1 == pytest.approx(b0 - b1)


def test_recompute_counts_only_what_the_prefix_cache_does_not_find_again(tmp_path):
    # with caching on, a readmitted victim finds its full blocks again: the lesson must not say
    # all 64 thrown-away slots "had to be computed again" when the cache holds every one
    from paged.viz.fold.tier_facts import tier_facts

    src = ROOT / "paged" / "lessons" / "recompute-or-swap" / "scenario.toml"
    text = src.read_text().replace("[arena]\n", "[arena]\nenable_prefix_caching = true\n", 1)
    (tmp_path / "s.toml").write_text(text)
    buf = io.StringIO()
    record(load(tmp_path / "s.toml"), None, buf, forward="skip")
    tr = T.loads(buf.getvalue())
    lesson = build(load_spec("recompute-or-swap"), tr)
    frames = lesson.left.frames
    owed: dict[str, int] = {}
    truth = hits = 0
    for k, f in enumerate(frames):
        found = {e.req: e.tokens_saved for e in f.events if e.kind == "cache_hit"}
        for ev in f.events:
            if ev.kind == "preempted":
                owed[ev.req] = frames[k - 1].requests[ev.req].filled
            elif ev.kind == "admitted" and ev.req in owed:
                saved = min(owed[ev.req], found.get(ev.req, 0))
                truth, hits = truth + owed.pop(ev.req) - saved, hits + saved
    truth += sum(owed.values())  # thrown away, not yet readmitted
    assert hits > 0  # the cache found some again
    last = len(frames) - 1
    assert tier_facts(lesson.left.run, frames, last).recomputed == truth
