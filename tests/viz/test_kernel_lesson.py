"""The kernel lesson (paged/lessons/inside-the-kernel/): its frames folded from the recorded
``attention_read`` events, every number its captions and narration say recomputed here from
those events, the player's payload in both languages, and hostile ids kept as text."""

from __future__ import annotations

import base64
import json
import shutil
import xml.etree.ElementTree as ET
import zlib
from pathlib import Path

import pytest

from paged.engine.core import events as E
from paged.engine.trace.io import TraceError, read
from paged.viz.fold.kernel.frames import (
    CHAPTERS,
    caption,
    chapter_keyframe,
    fold_kernel,
    kernel_lessons,
    load_kernel_spec,
    narration,
)
from paged.viz.fold.lesson_folder import LESSONS_DIR
from paged.viz.player.kernel import kernel_payload
from paged.viz.render.kernel import figure_svg, state_panel

NAME = "inside-the-kernel"


@pytest.fixture(scope="module")
def lesson():
    spec = load_kernel_spec(NAME)
    return fold_kernel(spec, read(spec.folder / spec.trace_file))


def test_it_is_a_shipped_kernel_lesson_with_four_chapters_in_order(lesson):
    assert NAME in kernel_lessons()
    chapters = [f.chapter for f in lesson.frames]
    assert chapters == sorted(chapters, key=CHAPTERS.index) and set(chapters) == set(CHAPTERS)
    n = len(lesson.zoom.physical)
    assert chapters.count("table") == n and chapters.count("walk") == n + 1
    assert chapters.count("heat") == len(lesson.reads) > 10


def test_the_zoomed_step_shows_scattered_and_shared_blocks(lesson):
    """Chapter 1's premise, from the arena at that step: not one contiguous run of blocks,
    and at least one block held by another request's table too."""
    zoom = lesson.zoom
    arena = lesson.frames[0].arena
    assert arena.step == zoom.step
    assert list(zoom.physical) != list(
        range(zoom.physical[0], zoom.physical[0] + len(zoom.physical))
    )
    others = {b for r, t in arena.block_tables.items() if r != zoom.req for b in t}
    shared = [b for b in zoom.physical if b in others]
    assert shared
    # and the narration names exactly those blocks, in both languages
    for lang in ("en", "zh"):
        assert f"**{' '.join(map(str, shared))}**" in narration(lesson, 0, lang)
    assert tuple(arena.block_tables[zoom.req][: len(zoom.physical)]) == zoom.physical


def _f(x: float) -> str:
    return f"{x:.3f}"


def test_each_tiles_caption_is_its_translation_and_the_events_m_and_l(lesson):
    zoom, bs, h = lesson.zoom, lesson.block_size, lesson.head
    tiles = [i for i, f in enumerate(lesson.frames) if f.stage == "tile"]
    for t, i in enumerate(tiles):
        left, right = caption(lesson, i, "en")
        first, last = t * bs, min((t + 1) * bs, zoom.position + 1) - 1
        assert (
            f"p = {first}…{last} → logical {first // bs} → physical {zoom.physical[t]} "
            f"→ offsets {first % bs}…{last % bs}"
        ) in left
        rose = t and zoom.tile_m[t][h] > zoom.tile_m[t - 1][h]
        if rose:  # what the new max did to the sum so far, in the events' numbers
            old, new = _f(zoom.tile_m[t - 1][h]), _f(zoom.tile_m[t][h])
            sub = f"({new})" if zoom.tile_m[t][h] < 0 else new
            assert f"m rose {old} → {new}, the sum so far × exp({old} − {sub})" in right
            assert f"l = {_f(zoom.tile_l[t][h])}" in right
        else:
            assert f"m = {_f(zoom.tile_m[t][h])}, l = {_f(zoom.tile_l[t][h])}" in right
        zh_left, zh_right = caption(lesson, i, "zh")
        assert str(zoom.physical[t]) in zh_left and _f(zoom.tile_l[t][h]) in zh_right
    # the head followed is one whose running max moves: the rescaling is on screen
    assert any(zoom.tile_m[t][h] > zoom.tile_m[t - 1][h] for t in range(1, len(tiles)))


def test_the_walks_last_frame_prints_softmax_over_all_scores_and_the_difference(lesson):
    zoom, h = lesson.zoom, lesson.head
    i = chapter_keyframe(lesson, "walk")
    assert lesson.frames[i].stage == "final"
    left, right = caption(lesson, i, "en")
    assert f"m = {_f(zoom.merged_m[h])}, l = {_f(zoom.merged_l[h])}" in left
    assert f"m = {_f(zoom.full_m[h])}, l = {_f(zoom.full_l[h])}" in right
    assert f"{zoom.max_diff:.1e}" in right
    for lang in ("en", "zh"):
        text = narration(lesson, i, lang)
        assert f"{zoom.max_diff:.1e}" in text and f"{zoom.out_diff:.1e}" in text
        assert _f(zoom.full_l[h]) in text and str(zoom.position + 1) in text


def test_the_heat_chapter_says_the_events_shares(lesson):
    heat = [i for i, f in enumerate(lesson.frames) if f.stage == "heat"]
    assert [lesson.frames[i].read for i in heat] == list(lesson.reads)
    for i in heat:
        r = lesson.frames[i].read
        left, _ = caption(lesson, i, "en")
        assert f"first block {100 * r.mass[0]:.1f}%, last block {100 * r.mass[-1]:.1f}%" in left
        assert lesson.frames[i].arena.step == r.step
    sinks = [r.mass[0] for r in lesson.reads]
    text = narration(lesson, heat[0], "zh")
    assert f"{100 * min(sinks):.1f}% 到 {100 * max(sinks):.1f}%" in text
    # what the chapter claims: the first block (the sink) takes more than any block but the
    # newest two at every step (a block just begun holds one token: its neighbour is recent too)
    assert all(r.mass[0] > max(r.mass[1:-2], default=0) for r in lesson.reads)


def test_the_gqa_chapter_counts_reads_and_merges_the_split_states(lesson):
    zoom, h = lesson.zoom, lesson.head
    i = chapter_keyframe(lesson, "gqa")
    _, right = caption(lesson, i, "en")
    assert f"m = {_f(zoom.merged_m[h])}, l = {_f(zoom.merged_l[h])}" in right
    gqa = next(j for j, f in enumerate(lesson.frames) if f.stage == "gqa")
    _, right = caption(lesson, gqa, "en")
    n, g = len(zoom.physical), len(zoom.heads)
    assert f"{n} block reads, not {n * g}" in right and g > 1


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_every_frame_names_the_kernel_that_walked_it(lesson, lang):
    """The shipped trace was recorded by the C kernel, which reported its own walk: every frame
    says so, with the tile and split it ran with; none claims the reference's walk."""
    assert {r.source for r in lesson.reads} == {"cpu"}
    split = lesson.zoom.split
    for i in range(lesson.num_frames):
        line = state_panel(lesson, i, lang)
        assert "C kernel" in line and "cpu.c" in line and str(split) in line
        assert "reference.py" not in line
        assert "cpu.c" in figure_svg(lesson, i, lang)


def test_a_trace_older_than_the_kernels_record_names_the_reference(tmp_path):
    """A trace whose reads carry no source (written before the C kernel reported its walk)
    reads as the reference's walk, and says so on every frame and in the walk's narration."""
    spec = load_kernel_spec(NAME)
    lines = (spec.folder / spec.trace_file).read_text(encoding="utf-8").splitlines()
    old = []
    for line in lines:
        obj = json.loads(line)
        if obj.get("kind") == "attention_read":
            del obj["source"], obj["split"]
        old.append(json.dumps(obj))
    path = tmp_path / "old.jsonl"
    path.write_text("\n".join(old) + "\n", encoding="utf-8")
    past = fold_kernel(spec, read(path))
    assert {r.source for r in past.reads} == {"reference"}
    for lang in ("en", "zh"):
        assert "reference.py" in state_panel(past, 0, lang)
        walk = narration(past, chapter_keyframe(past, "walk"), lang)
        assert "reference.py" in walk and "cpu.c" not in walk


# What the lesson said when the C kernel held a whole score row and did a two-pass softmax,
# and the tiles on screen were the reference's: designs the recording kernel did not have.
RETIRED = (
    "one program per request and KV head",
    "Split here one block per program",
    "split programs, one block each",
    "from the engine's own tensors.",
)


def test_no_frame_claims_a_design_the_recording_kernel_does_not_have(lesson):
    for i in range(lesson.num_frames):
        text = narration(lesson, i, "en") + " ".join(caption(lesson, i, "en"))
        assert not [s for s in RETIRED if s in text], i
    walk = narration(lesson, chapter_keyframe(lesson, "walk"), "en")
    assert "never holds all" in walk and "cpu.c" in walk
    for title in ("§5.1", "vLLM Paged Attention", "FlashAttention-2"):  # how vLLM's differ
        assert title in walk
    gqa = narration(lesson, chapter_keyframe(lesson, "gqa"), "en")
    assert "one split" in gqa and f"every {lesson.zoom.split} tiles" in gqa


def _unpack(payload: dict) -> dict:
    return json.loads(zlib.decompress(base64.b64decode(payload["z"])))


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_payload_is_the_players_with_every_frame_and_chapter(lesson, lang):
    p = kernel_payload(lesson, lang)
    body = _unpack(p)
    assert p["num_frames"] == len(body["frames"]) == lesson.num_frames
    assert all(len(f) == len(p["slots"]) for f in body["frames"])  # named for the player
    spans = [(c["start"], c["end"]) for c in p["chapters"]]
    assert spans[0][0] == 0 and spans[-1][1] == lesson.num_frames - 1
    assert all(b[0] == a[1] + 1 for a, b in zip(spans, spans[1:], strict=False))
    assert [s["chapter"] for s in p["steps"]] == list(range(len(CHAPTERS)))
    grid = body["pieces"][body["frames"][7][p["slots"].index("lg")]]
    assert "data-pk-frame='7'" in grid


def test_a_chapter_figure_is_well_formed_svg(lesson):
    for c in CHAPTERS:
        ET.fromstring(figure_svg(lesson, chapter_keyframe(lesson, c), "zh"))


def test_a_hostile_request_id_stays_text(tmp_path):
    evil = '<img src=x onerror="alert(1)">**b**'
    root = tmp_path / "lessons"
    shutil.copytree(LESSONS_DIR / NAME, root / NAME)
    trace = root / NAME / "trace.jsonl"
    lines = trace.read_text(encoding="utf-8").splitlines()
    out = []
    for n, line in enumerate(lines):
        obj = json.loads(line)
        if n and obj.get("req") == "C":
            obj["req"] = evil
        out.append(json.dumps(obj))
    trace.write_text("\n".join(out) + "\n", encoding="utf-8")
    toml = root / NAME / "kernel.toml"
    toml.write_text(
        toml.read_text(encoding="utf-8").replace('request = "C"', f"request = {json.dumps(evil)}"),
        encoding="utf-8",
    )
    spec = load_kernel_spec(NAME, root)
    lesson = fold_kernel(spec, read(trace))
    p = kernel_payload(lesson, "en")
    text = json.dumps(_unpack(p)) + p["legend"]
    assert "<img" not in text and "&lt;img" in text
    assert "<b>b</b>" not in text  # the id's markdown is not markup either


def test_a_trace_without_attention_reads_is_one_line():
    spec = load_kernel_spec(NAME)
    trace = read(LESSONS_DIR / "shared-prompt" / "trace.jsonl")
    with pytest.raises(TraceError, match="no attention reads") as err:
        fold_kernel(spec, trace)
    assert "\n" not in str(err.value)
    assert not any(isinstance(e, E.AttentionRead) for e in trace.runs["paged"])


def test_the_kernel_lesson_is_not_taken_for_a_side_by_side_one():
    from paged.viz.fold.lesson_folder import available

    assert NAME not in available()
    assert not (Path(LESSONS_DIR) / NAME / "lesson.toml").exists()


def test_the_app_opens_the_kernel_lesson_at_the_linked_frame_in_the_one_player():
    from streamlit.testing.v1 import AppTest

    root = Path(__file__).resolve().parents[2]
    at = AppTest.from_file(str(root / "app.py"), default_timeout=120)
    at.query_params["lesson"] = NAME
    at.query_params["frame"] = "9"
    at.run()
    assert not at.exception, at.exception
    [el] = [e for e in at.get("bidi_component") if e.proto.component_name == "pk_player"]
    data = json.loads(el.proto.json)
    assert data["start"] == 9 and data["lesson"] == NAME
    assert data["num_frames"] == len(_unpack(data)["frames"])
    assert any("Inside the kernel" in m.value for m in at.markdown)
