"""The app through Streamlit's AppTest: what the server hands the player (start frame, frames,
language), the URL, lessons, uploads, live runs. No browser; stepping, keys and the URL the
player writes are tested in test_player_browser.py."""

from __future__ import annotations

import base64
import json
import shutil
import time
import zlib
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from paged.engine.trace.io import loads, read
from paged.viz.fold.lesson import Lesson, build
from paged.viz.fold.lesson_folder import available, load_spec
from paged.viz.fold.narration import render_step

ROOT = Path(__file__).resolve().parents[2]
SIX = ROOT / "paged" / "lessons" / "six-steps"


@pytest.fixture(scope="module")
def lesson() -> Lesson:
    return build(load_spec("six-steps"), read(SIX / "trace.jsonl"))


def open_app(query: dict | None = None, lessons: Path | None = None, monkeypatch=None) -> AppTest:
    if lessons is not None:
        monkeypatch.setenv("PAGED_KV_LESSONS", str(lessons))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    for k, v in (query or {}).items():
        at.query_params[k] = v
    at.run()
    assert not at.exception, at.exception
    return at


def player(at: AppTest) -> dict:
    """The data the server handed the lesson player (one component per page)."""
    [el] = [e for e in at.get("bidi_component") if e.proto.component_name == "pk_player"]
    return json.loads(el.proto.json)


def address(at: AppTest) -> dict:
    """The query parameters the page asks the browser to write in place (viz.app.address)."""
    out: dict = {}
    for el in at.get("bidi_component"):
        if el.proto.component_name == "pk_address":
            out.update(json.loads(el.proto.json)["params"])
    return out


def frames(data: dict) -> dict:
    """The player's frames and pieces, inflated as the browser inflates them."""
    return json.loads(zlib.decompress(base64.b64decode(data["z"])).decode("utf-8"))


def shown_frame(at: AppTest) -> int:
    """The frame the player opens on."""
    return player(at)["start"]


def url_frame(at: AppTest) -> str | None:
    return at.query_params.get("frame")


def press(at: AppTest, key: str) -> AppTest:
    at.button(key=key).click().run()
    assert not at.exception, at.exception
    return at


@pytest.fixture(scope="module")
def default_app() -> AppTest:
    """The app opened with no query, for the tests that only read what it sent."""
    return open_app()


def test_opens_on_frame_zero_of_the_six_step_lesson(lesson, default_app):
    at = default_app
    data = player(at)
    assert data["start"] == 0 and data["num_frames"] == lesson.num_frames
    assert at.session_state["pk_lesson"] == "six-steps"
    # the player writes lesson and frame into the URL, in place: a write from the server is
    # a history entry of its own (an opened link took three presses of Back to leave)
    assert data["lesson"] == "six-steps" and "lesson" not in at.query_params
    assert len(frames(data)["frames"]) == lesson.num_frames
    assert not at.error


def test_frame_param_opens_that_frame():
    assert shown_frame(open_app({"frame": "12"})) == 12


def test_frame_param_is_clamped_to_the_last_frame(lesson):
    assert shown_frame(open_app({"frame": "99999"})) == lesson.num_frames - 1


@pytest.mark.parametrize("raw", ["abc", "1.5", ""])
def test_bad_frame_param_shows_frame_zero_with_a_note_not_a_traceback(raw):
    at = open_app({"frame": raw})
    assert shown_frame(at) == 0
    assert not at.exception and not at.error
    assert any("not a frame number" in i.value for i in at.info)


def test_negative_frame_is_clamped_to_zero():
    assert shown_frame(open_app({"frame": "-4"})) == 0


def test_present_param_opens_presenter_mode(default_app):
    assert player(open_app({"present": "1"}))["present"] is True
    assert player(default_app)["present"] is False


def test_every_frame_is_sent_once_with_its_own_grids(lesson, default_app):
    """Each frame's record points at grids drawn for that very frame (data-pk-frame), and the
    chapters cover every frame exactly once."""
    data = player(default_app)
    body = frames(data)
    for i, rec in enumerate(body["frames"]):
        for slot in (1, 4):
            assert f"data-pk-frame='{i}'" in body["pieces"][rec[slot]]
    covered = [i for c in data["chapters"] for i in range(c["start"], c["end"] + 1)]
    assert covered == list(range(lesson.num_frames))


def test_language_switch_sends_chinese_frames_and_keeps_the_url(lesson):
    at = open_app({"frame": str(lesson.keyframes[4])})
    press(at, "lang_zh")
    data = player(at)
    assert data["lang"] == "zh" and data["start"] == lesson.keyframes[4]
    assert any("外部碎片" in p for p in frames(data)["pieces"])
    # the browser writes the language in place; a write from the server is a history entry
    assert address(at) == {"lang": "zh"} and "lang" not in at.query_params
    press(at, "lang_en")
    assert address(at) == {"lang": None}


def test_lang_param_opens_in_chinese():
    data = player(open_app({"lang": "zh"}))
    assert data["lang"] == "zh" and "帧" in data["text"]["frame_of"]


@pytest.fixture
def two_lessons(tmp_path: Path) -> Path:
    """six-steps plus a second lesson: the same scenario recorded as a dry run."""
    shutil.copytree(SIX, tmp_path / "six-steps")
    other = tmp_path / "dry-run"
    shutil.copytree(SIX, other)
    from paged.engine.trace import scenario
    from paged.engine.trace.recorder import record

    (other / "trace.jsonl").unlink()
    record(
        scenario.load(str(other / "scenario.toml")),
        ["max", "paged"],
        str(other / "trace.jsonl"),
        forward="skip",
    )
    toml = (other / "lesson.toml").read_text(encoding="utf-8")
    (other / "lesson.toml").write_text(
        toml.replace('en = "PagedAttention in six steps"', 'en = "Dry-run lesson"'), "utf-8"
    )
    return tmp_path


def test_lesson_param_opens_that_lesson(two_lessons, monkeypatch):
    at = open_app({"lesson": "dry-run", "frame": "3"}, two_lessons, monkeypatch)
    assert at.session_state["pk_lesson"] == "dry-run"
    assert any("Dry-run lesson" in md.value for md in at.markdown)
    assert shown_frame(at) == 3


def test_switching_lessons_starts_at_frame_zero_and_updates_the_url(two_lessons, monkeypatch):
    at = open_app({"frame": "7"}, two_lessons, monkeypatch)
    press(at, "pk_lesson_pick_dry-run")
    assert not at.exception
    assert shown_frame(at) == 0 and at.session_state["pk_lesson"] == "dry-run"
    assert player(at)["lesson"] == "dry-run"  # which the player writes into the URL


def test_with_no_player_shown_the_lesson_is_written_into_the_url_in_place():
    """A file not chosen yet shows no player, so the page itself keeps the lesson in the URL:
    in place, as the player does (through st.query_params it was a history entry of its own,
    and coming back to the page from another made that one change two entries)."""
    at = press(open_app({"frame": "7"}), "pk_source_pick_upload")
    assert not [e for e in at.get("bidi_component") if e.proto.component_name == "pk_player"]
    assert address(at) == {"lang": None, "lesson": "six-steps", "frame": None}
    assert "lesson" not in at.query_params


def test_unknown_lesson_falls_back_with_a_note(two_lessons, monkeypatch):
    at = open_app({"lesson": "nope"}, two_lessons, monkeypatch)
    assert at.session_state["pk_lesson"] == "six-steps"
    assert any("no lesson named" in i.value for i in at.info)


CORRUPT = [
    ("truncated.jsonl", lambda good: good[: len(good) // 2], "truncated"),
    ("garbage.jsonl", lambda good: "this is not json\n", "corrupt"),
    ("foreign.jsonl", lambda good: '{"hello": 1}\n', "not a paged-KV trace"),
    ("binary.jsonl", None, "binary"),
]


@pytest.mark.parametrize("name,make,words", CORRUPT)
def test_a_corrupt_upload_shows_one_clear_error(name, make, words):
    good = (SIX / "trace.jsonl").read_text(encoding="utf-8")
    data = bytes([0xFF, 0xFE, 0x00, 0x81]) * 8 if make is None else make(good).encode()
    at = open_app()
    press(at, "pk_source_pick_upload")
    at.file_uploader(key="pk_upload").set_value((name, data, "application/jsonl")).run()
    assert not at.exception
    assert len(at.error) == 1 and words in at.error[0].value
    assert "Traceback" not in at.error[0].value and "\n" not in at.error[0].value


def test_a_good_upload_replays(lesson):
    at = open_app()
    press(at, "pk_source_pick_upload")
    data = (SIX / "trace.jsonl").read_bytes()
    at.file_uploader(key="pk_upload").set_value(("mine.jsonl", data, "application/jsonl")).run()
    assert not at.exception and not at.error
    data = player(at)
    assert (
        data["num_frames"] == lesson.num_frames and len(frames(data)["frames"]) == lesson.num_frames
    )


def test_a_corrupt_recorded_lesson_trace_shows_one_error(tmp_path, monkeypatch):
    shutil.copytree(SIX, tmp_path / "six-steps")
    (tmp_path / "six-steps" / "trace.jsonl").write_text('{"format": "paged-kv-trace"}\n')
    at = open_app(None, tmp_path, monkeypatch)
    assert len(at.error) == 1 and "schema version" in at.error[0].value


def test_live_dry_run_streams_frames_into_the_same_view(lesson):
    """Run the scenario on the engine now (its dry-run forward, no model): frames appear in the
    same view, and the finished stream shows exactly what a replay of its text shows."""
    at = open_app()
    press(at, "pk_source_pick_live")
    press(at, "pk_forward_skip")
    at.button(key="pk_live_btn").click().run()
    run = at.session_state["pk_live"]
    deadline = time.monotonic() + 120
    while not run.done and time.monotonic() < deadline:
        time.sleep(0.2)
    assert run.done and run.returncode == 0, run.error()
    at.run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert any("Recorded" in s.value for s in at.success)
    replayed = build(load_spec("six-steps"), loads(run.text()))
    data = player(at)
    assert data["num_frames"] == replayed.num_frames
    starts = [c["start"] for c in data["chapters"] if c["step"] is not None]
    assert starts == [k for k in replayed.keyframes if k is not None]


def test_a_stopped_live_run_keeps_the_frames_that_arrived(tmp_path):
    """A child that streams part of a trace and then hangs: stopping it is not a failure, and
    what arrived folds into frames."""
    import sys

    from paged.viz.live.run import LiveRun

    lines = (SIX / "trace.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    part = tmp_path / "part.jsonl"
    part.write_text("".join(lines[:200]), encoding="utf-8")
    code = (
        f"import sys, time\nsys.stdout.write(open({str(part)!r}).read()); sys.stdout.flush()\n"
        "print('working', file=sys.stderr, flush=True)\ntime.sleep(600)\n"
    )
    run = LiveRun.start([sys.executable, "-c", code])
    deadline = time.monotonic() + 60
    while len(run.snapshot()[0]) < 200 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert run.progress() == "working" or not run.done
    run.stop()
    assert run.done and run.stopped and run.error() is None
    partial = build(load_spec("six-steps"), run.trace())
    assert (
        0 < partial.num_frames < build(load_spec("six-steps"), read(SIX / "trace.jsonl")).num_frames
    )


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_figures_are_valid_plotly_at_every_keyframe(lesson, lang):
    """The lecture figure (what the exporter writes) builds through plotly's own validation at
    every keyframe, and the SVG grid the app draws says which frame it shows."""
    from paged.viz.render import figures, svg
    from paged.viz.render.layout import grid_layout

    titles = (lesson.left.title[lang], lesson.right.title[lang])
    layout = grid_layout(lesson.right.run.num_slots, lesson.right.run.block_size)
    for k, kf in enumerate(lesson.keyframes):
        left, right = lesson.left.at(kf), lesson.right.at(kf)
        fig = figures.side_by_side_figure(left, right, render_step(lesson, k, lang), lang, titles)
        assert fig.layout.width * 9 == fig.layout.height * 16
        for frame in (left, right):
            drawn = svg.arena_svg(frame, layout, lang, meta=kf)
            assert drawn.startswith("<svg") and f"data-pk-frame='{kf}'" in drawn


def test_every_step_offers_its_lecture_figure_for_download(lesson, monkeypatch):
    from paged.viz.export import lecture as export

    monkeypatch.setattr(export, "browser_available", lambda: True)
    at = open_app()
    keys = {getattr(b, "key", None) for b in at.get("download_button")}
    for k in range(len(lesson.keyframes)):
        assert {f"pk_fig_{fmt}_{k}" for fmt in ("png", "svg", "pdf")} <= keys, k


def test_the_kernel_lesson_offers_each_chapters_figure_in_every_format(monkeypatch):
    from paged.viz.export import lecture as export
    from paged.viz.fold.kernel.frames import CHAPTERS

    monkeypatch.setattr(export, "browser_available", lambda: True)
    at = open_app({"lesson": "inside-the-kernel"})
    assert not at.exception
    keys = {getattr(b, "key", None) for b in at.get("download_button")}
    want = {f"pk_fig_{fmt}_{k}" for fmt in export.FORMATS for k in range(len(CHAPTERS))}
    assert want <= keys
    assert not {k for k in keys if str(k).startswith("pk_fig")} - want  # no more than that


def test_without_chromium_the_page_says_how_to_get_figures(monkeypatch):
    from paged.viz.export import lecture as export

    monkeypatch.setattr(export, "browser_available", lambda: False)
    at = open_app({"frame": "3"})
    assert not [
        b for b in at.get("download_button") if str(getattr(b, "key", "")).startswith("pk_fig")
    ]
    assert any("make browser" in c.value for c in at.caption)
    assert not at.exception


def test_a_live_run_killed_from_outside_says_so_not_its_last_progress_line():
    """A SIGKILLed engine was 'explained' by its last progress line: "The live run failed:
    step 19: 3/10 requests finished"."""
    import os
    import signal
    import sys

    from paged.viz.live.run import LiveRun

    code = (
        "import sys, time\nprint('step 19: 3/10 requests finished', file=sys.stderr, flush=True)\n"
    )
    run = LiveRun.start([sys.executable, "-c", code + "time.sleep(600)\n"])
    deadline = time.monotonic() + 30
    while run.progress() == "" and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(run.proc.pid, signal.SIGKILL)
    run.proc.wait(timeout=30)
    while not run.done and time.monotonic() < deadline:
        time.sleep(0.05)
    assert run.error() == "the engine was killed (SIGKILL) after “step 19: 3/10 requests finished”"
    failed = LiveRun.start([sys.executable, "-c", "import sys; sys.exit('error: no room')"])
    failed.proc.wait(timeout=30)
    while not failed.done and time.monotonic() < deadline:
        time.sleep(0.05)
    assert failed.error() == "error: no room"  # a failure's own last line is its reason


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_the_lesson_picker_shows_each_lessons_title_and_keeps_its_folder_name_as_the_id(lang):
    """The picker showed folder names (`fp8-twice`, `recompute-or-swap`), in 中文 too. Each
    button now says the lesson's title in the page's language, from its own lesson.toml; the
    URL's ``?lesson=`` still names the folder."""
    import tomllib

    at = open_app({"lang": lang})
    picks = {(b.key or "").removeprefix("pk_lesson_pick_"): b.label for b in at.button}
    picks = {k: v for k, v in picks.items() if k in available()}
    assert sorted(picks) == available() and len(picks) > 1
    # the introduction first (it was last, after fp8-twice ... shared-prompt), then the rest
    assert list(picks) == ["six-steps"] + [n for n in available() if n != "six-steps"]
    for name, label in picks.items():
        toml = tomllib.loads((ROOT / "paged" / "lessons" / name / "lesson.toml").read_text("utf-8"))
        assert label == toml["title"][lang] != name
    other = next(n for n in picks if n != "six-steps")
    press(at, f"pk_lesson_pick_{other}")
    assert at.session_state["pk_lesson"] == other and player(at)["lesson"] == other


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("source", ["lesson", "run.jsonl"])
def test_a_dry_runs_source_line_says_what_ran(lesson, lang, source):
    """A dry run's header names no model: the line read "recorded running none (forward
    skipped) on none", and its English "(dry run: ...)" tail was added on a Chinese page too.
    It now says the engine's own scheduler and allocators ran with the forward pass skipped."""
    from dataclasses import replace

    from paged.viz.app import lesson as page

    t = page.UI[lang]
    dry = replace(
        lesson,
        source=source,
        origin=(("model", "none (forward skipped)"), ("device", "none"), ("created", "2026-12-01")),
    )
    line = page._origin(dry, t)
    assert "none" not in line and "2026-12-01" in line, line
    want = t["recorded_dry" if source == "lesson" else "uploaded_dry"]
    assert line == want.format(name=source, created="2026-12-01"), line
    real = page._origin(replace(lesson, source=source), t)
    assert "SmolLM2" in real and real != line  # a real run still names its model
