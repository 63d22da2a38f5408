"""What the kernel lesson's projected screen says on its own, with the narration hidden
(presenter mode): what m and l are and which pair the tiles hold, each tile's own sum beside
the running one, a step counter that says where it is, no heading over nothing, and the
attention column only once a chapter has said what it is."""

from __future__ import annotations

import html
import re

import pytest

from paged.engine.trace.io import read
from paged.viz.fold.kernel.frames import fold_kernel, load_kernel_spec, num
from paged.viz.player.kernel import frame_parts
from paged.viz.render.kernel import arena_svg, state_panel, table_panel, tiles_svg, words


@pytest.fixture(scope="module")
def lesson():
    spec = load_kernel_spec("inside-the-kernel")
    return fold_kernel(spec, read(spec.folder / spec.trace_file))


def _texts(svg: str) -> list[str]:
    return [html.unescape(t) for t in re.findall(r"<text[^>]*>([^<]*)</text>", svg)]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_each_walk_tile_shows_its_own_sum_and_the_screen_defines_m_and_l(lesson, lang):
    w = words(lang)
    walk = [i for i, f in enumerate(lesson.frames) if f.stage == "tile"]
    assert len(walk) == 6
    for i in walk:
        f, texts = lesson.frames[i], _texts(tiles_svg(lesson, i, lang))
        for t in range((f.logical or 0) + 1):
            own = f"{w['own']} {num(f.read.part_l[t][lesson.head])}"
            assert own in texts, (i, t, own)
        assert any(x.startswith("m") and "Σ exp(s − m)" not in x for x in texts)
        assert any("Σ exp(s − m)" in x for x in texts), texts  # l defined on the screen


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_split_frame_says_its_boxes_hold_each_splits_own_pair(lesson, lang):
    i = next(i for i, f in enumerate(lesson.frames) if f.stage == "split")
    split = words(lang)["define_split"].split("·")[0].strip()
    walk = words(lang)["define_walk"].split("·")[0].strip()
    texts = _texts(tiles_svg(lesson, i, lang))
    assert split in texts and walk not in texts


def test_the_step_counter_says_which_step_of_how_many_and_when_it_replays(lesson):
    last = max(f.read.step for f in lesson.frames)
    for i, f in enumerate(lesson.frames):
        step = frame_parts(lesson, i, "en")[-1]
        assert f"step {f.read.step} of {last}" in step, step
        assert ("replay" in step) == (f.stage == "heat"), (i, step)


def test_no_empty_heading_and_no_attention_column_before_its_chapter(lesson):
    mass = words("en")["mass"]
    heat = lesson.chapter_range("heat")[0]
    for i in range(lesson.num_frames):
        state = state_panel(lesson, i, "en")
        # a heading only over a table of state; without one, only the line naming the kernel
        assert ("pk-k-h" in state) == ("<table" in state), (i, state)
        assert "pk-k-src" in state, i
        assert (mass in table_panel(lesson, i, "en")) == (i >= heat), i


def test_the_other_requests_blocks_are_named_and_pointable(lesson):
    f = lesson.frames[0]
    svg = arena_svg(lesson, 0, "en")
    for req, table in f.arena.block_tables.items():
        assert f"data-req='{req}'" in svg
        if req != f.read.req:  # a block C shares is named as C's (L0, L1)
            own = {f"{req}{k}" for k, b in enumerate(table) if b not in f.read.physical}
            assert own and own <= set(_texts(svg)), req
