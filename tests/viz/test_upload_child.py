"""An upload folded and drawn in a child process (paged/viz/live/upload.py): the server receives what
folding it in its own process would have drawn, a bad trace is the reader's one line, a child
that runs too long is killed; and the drawing streams its pieces into the deflater without
changing what the player inflates."""

from __future__ import annotations

import base64
import json
import zlib
from pathlib import Path

import pytest

from paged.engine.trace.io import TraceError, loads
from paged.viz.fold import chapters
from paged.viz.fold.lesson import Lesson, build
from paged.viz.fold.lesson_folder import LESSONS_DIR, load_spec
from paged.viz.live import upload
from paged.viz.player import payload as player

SIX = Path(__file__).resolve().parents[2] / "paged" / "lessons" / "six-steps" / "trace.jsonl"


@pytest.fixture(scope="module")
def data() -> bytes:
    return SIX.read_bytes()


@pytest.fixture(scope="module")
def lesson(data) -> Lesson:
    return build(load_spec("six-steps"), loads(data.decode("utf-8")), source="mine.jsonl")


def _inflated(drawn: dict) -> bytes:
    return zlib.decompress(base64.b64decode(drawn["z"]))


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_child_draws_what_the_server_would_have(data, lesson, lang):
    spec = load_spec("six-steps")
    outline, drawn = upload.fold(spec, LESSONS_DIR, data, "mine.jsonl", "upload:k", lang)
    here = player.payload(lesson, lang)
    assert outline.num_frames == lesson.num_frames == drawn["num_frames"]
    assert outline.origin == lesson.origin and outline.key == "upload:k"
    assert outline.spec == spec and outline.source == "mine.jsonl"
    assert drawn["content"] == "upload:k"
    assert _inflated(drawn) == _inflated(here)
    assert {k: v for k, v in drawn.items() if k not in ("z", "id", "content")} == {
        k: v for k, v in here.items() if k not in ("z", "id", "content")
    }


def test_a_bad_trace_is_the_readers_one_line_from_the_child(data):
    cut = data[: len(data) // 2]
    with pytest.raises(TraceError) as bad:
        upload.fold(load_spec("six-steps"), LESSONS_DIR, cut, "cut.jsonl", "k", "en")
    with pytest.raises(TraceError) as here:
        loads(cut.decode("utf-8"))
    assert str(bad.value) == str(here.value) and "\n" not in str(bad.value)


def test_a_child_past_its_time_is_killed_and_said_in_one_line(data, monkeypatch):
    monkeypatch.setattr(upload, "TIMEOUT_S", 0.01)
    with pytest.raises(upload.UploadError, match="took longer than"):
        upload.fold(load_spec("six-steps"), LESSONS_DIR, data, "mine.jsonl", "k", "en")


def test_the_childs_figure_is_the_lecture_figure(data, lesson):
    from paged.viz.export import lecture

    got = json.loads(
        upload.figure_json(load_spec("six-steps"), LESSONS_DIR, data, "mine.jsonl", 2, "zh")
    )
    want = json.loads(lecture.step_figure(lesson, 2, "zh").to_json())
    for fig in (got, want):  # plotly's default theme, as each process happens to have it
        fig["layout"].pop("template", None)
    assert got == want and got["data"]


def test_streamed_pieces_inflate_to_each_distinct_piece_once_in_order(lesson):
    chs = chapters.chapters(lesson)
    of_frame = {i: c for c in chs for i in range(c.start, c.end + 1)}
    kept, streamed = player.Pieces([], {}), player.Deflating()
    records = [
        player.frame_record(lesson, i, "en", of_frame[i], kept) for i in range(lesson.num_frames)
    ]
    again = [
        player.frame_record(lesson, i, "en", of_frame[i], streamed)
        for i in range(lesson.num_frames)
    ]
    assert again == records and len(kept.items) < sum(map(len, records))  # pieces are shared
    body = json.loads(zlib.decompress(streamed.close(again)))
    assert body == {"pieces": kept.items, "frames": records}
