"""``python -m paged export --format csv``: every frame's numbers, one row per run per frame, as
the player shows that frame. Each row is checked against the player's own frames and against
the cells of the grid the player draws, counted here from the SVG."""

from __future__ import annotations

import base64
import csv
import json
import re
import shutil
import zlib
from pathlib import Path

import pytest

from paged.viz import safe
from paged.viz.export import frame_csv
from paged.viz.export import lecture as export
from paged.viz.fold.lesson_folder import available
from paged.viz.player import payload as player
from paged.viz.render import svg
from paged.viz.render.style import CATEGORY_COLOURS

ROOT = Path(__file__).resolve().parents[2]
LESSONS = ROOT / "paged" / "lessons"
CONTRACT = ["run", "frame", "step", "tokens", "reserved", "internal", "external", "free"]
CONTRACT += ["running", "waiting"]
#: The CSV's category columns and the colour the grid fills each one's cells with.
FILL_COLUMN = {
    CATEGORY_COLOURS["token_states"]: "tokens",
    CATEGORY_COLOURS["reservation"]: "reserved",
    CATEGORY_COLOURS["internal"]: "internal",
    CATEGORY_COLOURS["external"]: "external",
    CATEGORY_COLOURS["free"]: "free",
}


def _read(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: "), err
    return err


def _drawn_cells(grid: str) -> dict[str, int]:
    """Cells per category column, counted from a grid's SVG as the player paints it: the run
    rectangles between the patterns and the first white path, each ``n`` cells wide, filled
    with its category's colour or with a pattern whose tile has that colour."""
    defs, body = grid.split("</defs>", 1)
    tiles = dict(re.findall(r"<pattern id='([^']+)'[^>]*><rect [^>]*fill='([^']+)'", defs))
    runs = body.split("<path", 1)[0]
    counts = dict.fromkeys(FILL_COLUMN.values(), 0)
    for width, fill in re.findall(
        r"<rect x='[^']+' y='[^']+' width='([^']+)' "
        r"height='[^']+' fill='([^']+)'",
        runs,
    ):
        ref = re.fullmatch(r"url\(#(.+)\)", fill)
        colour = tiles[ref.group(1)] if ref else fill
        cells = (float(width) + svg.GAP) / svg.CELL
        assert cells == int(cells), width
        counts[FILL_COLUMN[colour]] += int(cells)
    return counts


def _player_grids(lesson) -> list[tuple[str, str]]:
    """Each frame's two grids, from the pieces the player is sent."""
    data = player.payload(lesson, "en")
    body = json.loads(zlib.decompress(base64.b64decode(data["z"])).decode("utf-8"))
    lg, rg = data["slots"].index("lg"), data["slots"].index("rg")  # the order the player reads
    return [(body["pieces"][rec[lg]], body["pieces"][rec[rg]]) for rec in body["frames"]]


@pytest.mark.parametrize("name", available(LESSONS))
def test_every_shipped_lessons_csv_is_the_frames_the_player_shows(name, tmp_path):
    assert export.main(["--lesson", name, "--format", "csv", "--out", str(tmp_path)]) == 0
    path = tmp_path / f"{name}.csv"
    assert [p.name for p in tmp_path.iterdir()] == [path.name]
    with path.open(newline="", encoding="utf-8") as f:
        assert next(csv.reader(f))[: len(CONTRACT)] == CONTRACT
    rows = _read(path)
    lesson = export.load_lesson(name)
    assert len(rows) == 2 * lesson.num_frames
    grids = _player_grids(lesson)
    assert len(grids) == lesson.num_frames
    ended_rows = 0
    for k, row in enumerate(rows):
        i, side_name = divmod(k, 2)
        side = lesson.side(frame_csv.SIDES[side_name])
        frame = side.at(i)
        a = frame.account
        assert row["run"] == side.run.name and int(row["frame"]) == i
        assert int(row["step"]) == frame.step
        want = {
            "tokens": a.token_states,
            "reserved": a.reservation,
            "internal": a.internal,
            "external": a.external,
            "free": a.free,
            "running": a.running,
            "waiting": a.waiting,
            "blocked": a.blocked,
            "swapped": a.swapped,
            "slots": side.run.num_slots,
        }
        assert {c: int(row[c]) for c in want} == want, (name, i, side_name)
        # the same counts from the picture: the cells of the grid drawn for this frame
        drawn = _drawn_cells(grids[i][side_name])
        assert drawn == {c: int(row[c]) for c in drawn}, (name, i, side_name)
        assert sum(drawn.values()) == side.run.num_slots
        ended = i >= len(side.frames)
        ended_rows += ended
        assert row["ended"] == str(int(ended))
        if ended:  # the arena as the run left it; no step taken, so no events
            assert int(row["step"]) == side.frames[-1].step and row["events"] == ""
        else:
            kinds = [e.kind for e in frame.events]
            assert row["events"] == ";".join(f"{x}:{kinds.count(x)}" for x in dict.fromkeys(kinds))
            assert len([r for r in row["refused"].split(";") if r]) == len(frame.blocked)
    if name == "six-steps":  # the paged run ends first: its last arena stands beside the left
        assert ended_rows > 0


def test_the_kernel_lessons_csv_is_its_one_run_frame_by_frame(tmp_path):
    """One row per frame of the kernel lesson's one run: the arena the frame draws, at the step
    of the attention read it shows, its counts adding up to the arena."""
    from paged.viz.fold.kernel.frames import KernelLesson

    lesson = export.load_lesson("inside-the-kernel")
    assert isinstance(lesson, KernelLesson)
    export.export_lesson("inside-the-kernel", tmp_path, ["csv"], "en")
    got = _read_text((tmp_path / "inside-the-kernel.csv").read_text(encoding="utf-8"))
    assert len(got) == lesson.num_frames
    for i, (row, f) in enumerate(zip(got, lesson.frames, strict=True)):
        assert row["run"] == lesson.spec.run and int(row["frame"]) == i
        assert int(row["step"]) == f.read.step == f.arena.step
        for col, field in frame_csv.ACCOUNT_FIELDS.items():
            assert int(row[col]) == getattr(f.arena.account, field), (i, col)
        parts = ("tokens", "reserved", "internal", "external", "free")
        assert sum(int(row[c]) for c in parts) == int(row["slots"])
        assert row["chapter"] == lesson.spec.chapter_titles[f.chapter]["en"]


def test_a_wait_for_a_hole_is_in_the_row_with_its_reason():
    rows = list(frame_csv.rows(export.load_lesson("six-steps")))
    waits = [r for r in rows if r["refused"]]
    assert waits and all(r["blocked"] >= 1 for r in waits)
    assert any(r["external"] > 0 and r["refused"].endswith(":no_hole") for r in waits)


def test_chapter_columns_name_the_lesson_steps_and_follow_the_language():
    lesson = export.load_lesson("six-steps")
    en, zh = list(frame_csv.rows(lesson, "en")), list(frame_csv.rows(lesson, "zh"))
    for k, kf in enumerate(lesson.keyframes):
        if kf is None:
            continue
        row = en[2 * kf]
        assert str(k + 1) in row["lesson_step"].split("·")
        assert lesson.spec.steps[k].title["en"] in row["chapter"]
        assert lesson.spec.steps[k].title["zh"] in zh[2 * kf]["chapter"]
    assert [r["tokens"] for r in en] == [r["tokens"] for r in zh]


def test_two_languages_write_one_file_each(tmp_path):
    argv = ["--lesson", "shared-prompt", "--format", "csv", "--lang", "en,zh"]
    assert export.main([*argv, "--out", str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "shared-prompt-en.csv",
        "shared-prompt-zh.csv",
    ]


def test_a_received_trace_becomes_a_csv_named_after_it(tmp_path):
    trace = tmp_path / "our run (2).jsonl"
    shutil.copy(LESSONS / "parallel-sampling" / "trace.jsonl", trace)
    out = tmp_path / "out"
    assert export.main(["--trace", str(trace), "--format", "csv", "--out", str(out)]) == 0
    path = out / "our_run_2.csv"
    assert [p.name for p in out.iterdir()] == [path.name]
    lesson = export.load_trace(trace)
    rows = _read(path)
    assert len(rows) == 2 * lesson.num_frames
    assert [int(r["tokens"]) for r in rows[1::2]] == [
        lesson.right.at(i).account.token_states for i in range(lesson.num_frames)
    ]
    assert path.read_text(encoding="utf-8") == frame_csv.csv_text(lesson)


def test_a_run_name_from_a_trace_is_never_a_spreadsheet_formula(tmp_path):
    text = (LESSONS / "six-steps" / "trace.jsonl").read_text(encoding="utf-8")
    evil = "=HYPERLINK(1)"
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        text.replace('"name":"max"', f'"name":{json.dumps(evil)}').replace(
            '"run":"max"', f'"run":{json.dumps(evil)}'
        ),
        encoding="utf-8",
    )
    lesson = export.load_trace(trace)
    assert lesson.left.run.name == evil
    rows = _read_text(frame_csv.csv_text(lesson))
    assert {r["run"] for r in rows[0::2]} == {"'" + evil}
    assert not any(v.startswith(("=", "+", "-", "@")) for r in rows for v in r.values())


EVIL_NAMES = [
    "x;=cmd|' /C calc'!A0;y",  # a spreadsheet splitting on ; starts a cell at the =
    "x,+1+cmd,y",
    "x\t@SUM(1)",
    "x|-2+3",
    "\ufeff=HYPERLINK(1)",  # a byte-order mark that a spreadsheet skips
    "\uff1dHYPERLINK(1)",  # a full-width = that some spreadsheets fold to ASCII
    "x; \u200b=1",
]


@pytest.mark.parametrize("evil", EVIL_NAMES)
def test_no_separator_a_spreadsheet_splits_on_can_start_a_formula(tmp_path, evil):
    text = (LESSONS / "six-steps" / "trace.jsonl").read_text(encoding="utf-8")
    trace = tmp_path / "t.jsonl"
    named = text.replace('"name":"max"', f'"name":{json.dumps(evil)}')
    trace.write_text(named.replace('"run":"max"', f'"run":{json.dumps(evil)}'), encoding="utf-8")
    lesson = export.load_trace(trace)
    out = frame_csv.csv_text(lesson)
    # every text cell is quoted, so a quote-aware reader gets the name back in one cell
    name = _read_text(out)[0]["run"]
    assert name.replace("'", "") == safe.one_line(evil).replace("'", "")
    # a reader that ignores quotes and splits on any common separator sees no formula either
    line = out.splitlines()[1]
    cells = re.split(r'[,;\t|"]', line)
    formula = ("=", "+", "-", "@", "\uff1d", "\uff0b", "\uff0d", "\uff20")
    starts = [c.lstrip(" \ufeff\u200b") for c in cells]
    assert not [c for c in starts if c.startswith(formula)], line


def _read_text(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(text.splitlines()))


def test_a_refused_trace_is_one_error_line_and_writes_nothing(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text("this is not json\n", encoding="utf-8")
    out = tmp_path / "out"
    assert export.main(["--trace", str(bad), "--format", "csv", "--out", str(out)]) == 2
    assert "bad.jsonl" in _one_error_line(capsys)
    assert not out.exists()


@pytest.mark.parametrize("fmt", ["csvx", "csv,xls", ""])
def test_an_unknown_format_is_one_error_line(tmp_path, capsys, fmt):
    assert export.main(["--lesson", "six-steps", "--format", fmt, "--out", str(tmp_path)]) == 2
    err = _one_error_line(capsys)
    assert "choose from" in err and "csv" in err.split("choose from", 1)[1]
    assert not any(tmp_path.iterdir())


def test_animation_options_are_refused_for_a_csv(tmp_path, capsys):
    argv = ["--lesson", "six-steps", "--format", "csv", "--fps", "4", "--out", str(tmp_path)]
    assert export.main(argv) == 2
    assert "--fps applies only" in _one_error_line(capsys)


def test_the_docs_list_every_column_in_order():
    doc = (ROOT / "docs" / "trace-format.md").read_text(encoding="utf-8")
    section = doc.split("## Every frame's numbers as CSV", 1)[1]
    listed = []
    for line in section.splitlines():
        if line.startswith("| `"):
            listed += re.findall(r"`([a-z_]+)`", line.split("|")[1])
    assert listed == list(frame_csv.COLUMNS)


def test_an_uploaded_trace_offers_its_csv_for_download(monkeypatch):
    """The button's file is made from the upload on screen, named after it."""
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    offered: dict[str, dict] = {}
    real = st.download_button

    def spy(label, *args, **kwargs):
        offered[kwargs.get("key", "")] = kwargs
        return real(label, *args, **kwargs)

    monkeypatch.setattr(st, "download_button", spy)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.run()
    at.button(key="pk_source_pick_upload").click().run()
    data = (LESSONS / "shared-prompt" / "trace.jsonl").read_bytes()
    at.file_uploader(key="pk_upload").set_value(("ours (1).jsonl", data, "application/jsonl"))
    at.run()
    assert not at.exception and not at.error
    button = offered["pk_csv_download"]
    assert button["file_name"] == "ours-1.csv" and button["mime"] == "text/csv"
    got = button["data"]().decode("utf-8")
    # the same bytes folded as `--trace` folds them: the same rows
    lesson = export.load_trace(LESSONS / "shared-prompt" / "trace.jsonl")
    assert got == frame_csv.csv_text(lesson)
    assert len(_read_text(got)) == 2 * lesson.num_frames
