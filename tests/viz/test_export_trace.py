"""``python -m paged export --trace FILE``: a recorded or received trace becomes a page (or figures)
from the command line, folded as the app folds an upload; a refused one is one line, exit 2."""

from __future__ import annotations

import os
import re
import shutil
import threading
from pathlib import Path

import pytest

from paged.engine.trace import io as T
from paged.viz import safe
from paged.viz.export import lecture as export
from paged.viz.export import standalone
from paged.viz.fold.lesson import build
from paged.viz.fold.lesson_folder import load_spec

LESSONS = Path(__file__).resolve().parents[2] / "paged" / "lessons"


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: "), err
    return err


def test_a_received_trace_becomes_one_page_named_after_it(tmp_path, capsys):
    trace = tmp_path / "our run (2).jsonl"
    shutil.copy(LESSONS / "shared-prompt" / "trace.jsonl", trace)
    out = tmp_path / "out"
    assert export.main(["--trace", str(trace), "--out", str(out), "--format", "html"]) == 0
    page = out / "our_run_2.html"
    assert [p.name for p in out.iterdir()] == [page.name]
    # the app's one-file page of that trace, folded as its upload
    want = standalone.page(export.load_trace(trace), standalone.LANGS)
    assert page.read_text(encoding="utf-8") == want


def test_the_trace_folds_as_an_upload_does():
    text = (LESSONS / "parallel-sampling" / "trace.jsonl").read_text(encoding="utf-8")
    upload = build(load_spec("six-steps"), T.loads(text), source="x.jsonl")
    got = export.load_trace(LESSONS / "parallel-sampling" / "trace.jsonl")
    assert got.num_frames == upload.num_frames
    assert [f.cells for f in got.right.frames] == [f.cells for f in upload.right.frames]
    assert got.keyframes == upload.keyframes


def test_a_refused_trace_is_one_error_line_and_exit_2(tmp_path, capsys):
    lines = (LESSONS / "shared-prompt" / "trace.jsonl").read_text(encoding="utf-8").split("\n")
    k = next(i for i, s in enumerate(lines) if '"block_shared"' in s)
    lines[k] = re.sub(r'"physical":\d+', '"physical":1', lines[k])  # A's second block, first
    bad = tmp_path / "moved.jsonl"
    bad.write_text("\n".join(lines), encoding="utf-8")
    out = tmp_path / "out"
    assert export.main(["--trace", str(bad), "--out", str(out), "--format", "html"]) == 2
    assert "moved.jsonl: trace is corrupt: line" in _one_error_line(capsys)
    assert not out.exists()  # nothing written for a refused trace


def test_a_binary_missing_or_oversized_file_is_one_error_line(tmp_path, capsys, monkeypatch):
    binary = tmp_path / "b.jsonl"
    binary.write_bytes(b"\xff\xfe\x00")
    assert export.main(["--trace", str(binary), "--out", str(tmp_path), "--format", "html"]) == 2
    assert "not a text trace" in _one_error_line(capsys)
    missing = tmp_path / "none.jsonl"
    assert export.main(["--trace", str(missing), "--out", str(tmp_path), "--format", "html"]) == 2
    assert "cannot read" in _one_error_line(capsys)
    monkeypatch.setattr(safe, "UPLOAD_BYTES", 100)
    big = LESSONS / "six-steps" / "trace.jsonl"
    assert export.main(["--trace", str(big), "--out", str(tmp_path), "--format", "html"]) == 2
    assert "larger than an upload may be" in _one_error_line(capsys)


def test_a_fifo_or_a_device_is_refused_unread_in_one_line(tmp_path, capsys):
    """Opening a FIFO with no writer waits for one, for ever: it is refused without waiting."""
    fifo = tmp_path / "t.jsonl"
    os.mkfifo(fifo)
    for path in (fifo, Path("/dev/zero")):
        rc: list[int] = []
        argv = ["--trace", str(path), "--out", str(tmp_path / "out"), "--format", "html"]
        worker = threading.Thread(
            target=lambda a=argv, out=rc: out.append(export.main(a)), daemon=True
        )
        worker.start()
        worker.join(20)
        if worker.is_alive():
            with open(fifo, "wb"):  # let the stuck open() return before failing
                pass
            pytest.fail(f"export --trace {path} blocked")
        assert rc == [2]
        assert "not a regular file" in _one_error_line(capsys)
    assert not (tmp_path / "out").exists()
