"""``paged export --format quiz``: a printable worksheet per language whose answer key is what the
next frame of each question shows, and whose text from a trace stays text."""

from __future__ import annotations

import re

import pytest

from paged.engine.trace import io as T
from paged.viz.exercises import questions, read_answer
from paged.viz.export import lecture
from paged.viz.export.quiz import worksheet
from paged.viz.fold.lesson import build
from paged.viz.fold.lesson_folder import load_spec, trace_path
from tests.hostile_traces import SIX_TRACE, hostile_trace_text

CJK = re.compile(r"[\u4e00-\u9fff]")


def _key(md: str) -> list[str]:
    return [
        ln
        for ln in md.split(
            "## ",
        )[-1].splitlines()
        if re.match(r"\d+\. ", ln)
    ]


def test_quiz_alone_writes_both_languages_with_every_question_and_its_key(tmp_path, capsys):
    assert (
        lecture.main(["--lesson", "recompute-or-swap", "--out", str(tmp_path), "--format", "quiz"])
        == 0
    )
    en = (tmp_path / "recompute-or-swap-quiz-en.md").read_text(encoding="utf-8")
    zh = (tmp_path / "recompute-or-swap-quiz-zh.md").read_text(encoding="utf-8")
    spec = load_spec("recompute-or-swap")
    lesson = build(spec, T.read(trace_path(spec)))
    qs = questions(lesson)
    assert en.count("\n## Question ") == len(qs) and zh.count("\n## 第 ") == len(qs)
    for md, lang in ((en, "en"), (zh, "zh")):
        key = _key(md)
        assert len(key) == len(qs)
        for n, (line, q) in enumerate(zip(key, qs, strict=True), start=1):
            shown = read_answer(lesson, q)  # the next frame, read again
            words = dict(zip(q.choices, q.labels[lang], strict=True)).get(str(shown), shown)
            want = ", ".join(f"#{b}" for b in shown) if isinstance(shown, tuple) else str(words)
            assert line.startswith(f"{n}. {want}"), (line, want)
            assert q.why[lang] in line
    assert CJK.search(zh.split("## ", 1)[0]) and "答案" in zh
    assert "Answer key" in en and not CJK.search(en)
    assert "wrote 2 files" in capsys.readouterr().err


def test_the_picture_shows_the_frame_the_question_is_asked_at():
    spec = load_spec("parallel-sampling")
    lesson = build(spec, T.read(trace_path(spec)))
    md = worksheet(lesson, "en")
    first = md.split("## Question 2", 1)[1].split("---", 1)[0]  # S.1 asked at frame 0
    seen = lesson.right.frames[0]
    assert "S.0: " + ", ".join(f"{i}→#{b}" for i, b in enumerate(seen.block_tables["S.0"])) in first
    assert "Waiting: S.1, S.2." in first
    rows = [ln for ln in first.splitlines() if re.match(r"#\d+ ", ln)]  # the block map
    assert len(rows) == 3 and " ".join(rows).count("#") == 20  # 20 blocks, 8 a row
    assert " ".join(rows).count("·") == seen.count("F") // seen.run.block_size  # the free ones


def test_the_kernel_lesson_has_no_quiz_and_says_so_in_one_line(tmp_path, capsys):
    argv = ["--lesson", "inside-the-kernel", "--out", str(tmp_path), "--format", "quiz"]
    assert lecture.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "\n" not in err and "exercises" in err


def test_quiz_with_other_formats_keeps_the_default_language(tmp_path):
    argv = ["--lesson", "six-steps", "--out", str(tmp_path), "--format", "quiz,csv"]
    assert lecture.main(argv) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["six-steps-quiz-en.md", "six-steps.csv"]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_hostile_trace_prints_its_names_as_text(tmp_path, lang):
    path = tmp_path / "run.jsonl"
    path.write_text(hostile_trace_text(SIX_TRACE), encoding="utf-8")
    argv = ["--trace", str(path), "--out", str(tmp_path), "--format", "quiz", "--lang", lang]
    assert lecture.main(argv) == 0
    md = (tmp_path / f"run-quiz-{lang}.md").read_text(encoding="utf-8")
    prose = re.sub(r"(?s)```+text\n.*?\n```+", "", md)  # outside the pictures' fences
    assert md.count("## ") > 5
    assert "<u>" in md and "<u>" not in prose and "\\<u\\>" in prose
    assert "<svg" not in md and "](" not in prose
