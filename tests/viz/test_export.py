"""Lecture figures: every step of six-steps in every format, legible and not blank."""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image, ImageStat

from paged.viz.export import lecture as export
from paged.viz.fold.lesson_folder import load_spec

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def needs_chromium(test):
    """kaleido draws through Chromium: a browser test."""
    no_chromium = pytest.mark.skipif(CHROMIUM is None, reason="no system Chromium for kaleido")
    return pytest.mark.browser(no_chromium(test))


STEPS = len(load_spec("six-steps").steps)


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("figures")
    export.export_lesson("six-steps", out, ["png", "svg", "pdf"], "en")
    return out


@needs_chromium
@pytest.mark.parametrize("fmt", export.FORMATS)
def test_export_writes_one_file_per_step_per_format(exported, fmt):
    files = sorted(exported.glob(f"*.{fmt}"))
    assert [f.name for f in files] == [f"six-steps-step{k}-en.{fmt}" for k in range(1, STEPS + 1)]


@needs_chromium
def test_png_is_16_by_9_at_least_1600_by_900_and_not_blank(exported):
    for path in exported.glob("*.png"):
        img = Image.open(io.BytesIO(path.read_bytes())).convert("L")
        assert img.width >= 1600 and img.height >= 900, path.name
        assert img.width * 9 == img.height * 16, path.name
        assert ImageStat.Stat(img).stddev[0] > 20, f"{path.name} looks blank"


@needs_chromium
def test_svg_text_is_real_text_elements(exported):
    svg = (exported / "six-steps-step5-en.svg").read_text(encoding="utf-8")
    assert svg.count("<text") > 20
    assert "A large request arrives" in svg  # the step title, as characters, not outlines


@needs_chromium
def test_pdf_is_a_pdf(exported):
    for path in exported.glob("*.pdf"):
        assert path.read_bytes().startswith(b"%PDF"), path.name


def test_unknown_lesson_is_one_line_and_exit_2(capsys):
    assert export.main(["--lesson", "no-such-lesson", "--out", "unused"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no-such-lesson" in err


def test_unknown_format_is_one_line_and_exit_2(capsys, tmp_path):
    assert export.main(["--out", str(tmp_path), "--format", "png,webm"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "webm" in err
    assert not list(tmp_path.iterdir())


def test_an_output_folder_that_cannot_be_written_is_one_line_and_exit_2(capsys, tmp_path):
    """Each once ended in a traceback: a file where the folder goes, a file under it, a folder
    where the page goes; an empty --out wrote into the current folder."""
    (tmp_path / "afile").write_text("kept")
    (tmp_path / "x" / "six-steps.html").mkdir(parents=True)
    for out, says in [
        (tmp_path / "afile", "afile"),
        (tmp_path / "afile" / "sub", "afile"),
        (tmp_path / "x", "six-steps.html"),
        ("", "--out is empty"),
    ]:
        assert export.main(["--out", str(out), "--format", "html"]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: ") and err.count("\n") == 0 and says in err, err
    assert (tmp_path / "afile").read_text() == "kept"


def test_a_page_in_another_language_opens_in_it_and_carries_both(tmp_path, capsys):
    assert export.main(["--out", str(tmp_path), "--format", "html", "--lang", "zh,zh"]) == 0
    assert "wrote 1 files" in capsys.readouterr().err  # zh,zh is one language
    text = (tmp_path / "six-steps.html").read_text(encoding="utf-8")
    assert text.startswith("<!doctype html>\n<html lang='zh-Hans'>")
    assert "data-lang='zh'" in text and "data-lang='en'" in text


def test_module_runs_as_a_script(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "paged", "export", "--out", str(tmp_path), "--lang", "fr"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "fr" in proc.stderr


def test_download_args_render_nothing_until_clicked():
    lesson = export.load_lesson("six-steps")
    args = export.download_args(lesson, 2, "zh", "svg")
    assert args["file_name"] == "six-steps-step3-zh.svg"
    assert args["mime"] == "image/svg+xml" and callable(args["data"])


def test_every_step_has_a_figure_with_its_title():
    lesson = export.load_lesson("six-steps")
    for k, step in enumerate(lesson.spec.steps):
        fig = export.step_figure(lesson, k, "zh")
        texts = " ".join(
            [fig.layout.title.text or ""] + [a.text or "" for a in fig.layout.annotations]
        )
        assert step.title["zh"] in texts


def test_kaleidos_page_is_reloaded_only_every_so_many_images():
    """Between images kaleido hands its tab back to a queue; we skip its reload there except
    every RELOAD_EVERY images, and undo that when the batch ends."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    from kaleido.kaleido import Kaleido

    original = Kaleido._return_kaleido_tab

    class Tab:
        reloads = 0
        tab = type("Target", (), {"target_id": "fake-target"})  # kaleido logs its id

        async def reload(self) -> None:
            Tab.reloads += 1

    class Fake:  # what kaleido's method reads of its instance: the queue of ready tabs
        def __init__(self) -> None:
            self.tabs_ready: asyncio.Queue = asyncio.Queue()

    async def batch(n: int) -> int:
        fake, tab = Fake(), Tab()
        for _ in range(n):
            await Kaleido._return_kaleido_tab(fake, tab)
            assert await fake.tabs_ready.get() is tab  # handed back every time
        return Tab.reloads

    def run(n: int) -> int:  # in a thread: a Playwright test may hold this thread's loop
        with ThreadPoolExecutor(1) as pool:
            return pool.submit(asyncio.run, batch(n)).result()

    restore = export.fewer_reloads()
    assert restore is not None and Kaleido._return_kaleido_tab is not original
    try:
        assert run(2 * export.RELOAD_EVERY + 3) == 2
    finally:
        restore()
    assert Kaleido._return_kaleido_tab is original
    Tab.reloads = 0
    assert run(3) == 3  # kaleido's own again: a reload per image


def test_kaleido_runs_offline_one_server_per_batch(monkeypatch):
    """Every image goes through our kaleido server, started without MathJax (kaleido's default
    page fetches it from a CDN for each image: a download at run time), and a batch shares one
    server however its calls nest."""
    import kaleido
    import plotly.graph_objects as go

    calls: list[tuple[str, dict]] = []
    monkeypatch.setattr(kaleido, "start_sync_server", lambda **kw: calls.append(("start", kw)))
    monkeypatch.setattr(kaleido, "stop_sync_server", lambda **kw: calls.append(("stop", kw)))
    monkeypatch.setattr(go.Figure, "to_image", lambda self, **kw: b"img")
    fig = go.Figure()
    assert export.figure_bytes(fig, "svg") == b"img"
    with export._one_browser():
        for fmt in ("png", "pdf"):
            assert export.figure_bytes(fig, fmt) == b"img"
    assert [c[0] for c in calls] == ["start", "stop", "start", "stop"]
    assert all(kw.get("mathjax") is False for name, kw in calls if name == "start")


def test_a_tab_set_up_in_the_wrong_context_gets_a_fresh_server_once(monkeypatch):
    """kaleido can keep a tab whose page script is not where it evaluates (a busy machine): the
    image is drawn again on a fresh server; a second failure, or any other, is one error."""
    import kaleido
    import plotly.graph_objects as go

    calls: list[str] = []
    monkeypatch.setattr(kaleido, "start_sync_server", lambda **kw: calls.append("start"))
    monkeypatch.setattr(kaleido, "stop_sync_server", lambda **kw: calls.append("stop"))
    answers = iter([RuntimeError(f"ReferenceError: {export.STALE_TAB}"), b"img"])

    def to_image(self, **kw):
        a = next(answers)
        if isinstance(a, Exception):
            raise a
        return a

    monkeypatch.setattr(go.Figure, "to_image", to_image)
    assert export.figure_bytes(go.Figure(), "png") == b"img"
    assert calls == ["start", "stop", "start", "stop"]
    calls.clear()
    stale = RuntimeError(f"ReferenceError: {export.STALE_TAB}")
    answers = iter([stale, stale])
    with pytest.raises(export.ExportError, match="cannot render png: RuntimeError"):
        export.figure_bytes(go.Figure(), "png")
    assert calls == ["start", "stop", "start", "stop"]  # one fresh server, not a loop
    answers = iter([ValueError("no Chromium")])
    with pytest.raises(export.ExportError, match="no Chromium"):
        export.figure_bytes(go.Figure(), "png")


def test_kernel_figures_in_svg_need_no_browser_and_hold_no_bitmap(tmp_path, monkeypatch):
    """A kernel lesson's SVG is drawn, not printed: written where no Chromium is, one per
    chapter and language, 1280 x 720 like the other figures, vector."""
    import xml.etree.ElementTree as ET

    from paged.viz.fold.kernel.frames import CHAPTERS

    monkeypatch.setattr(export, "browser_available", lambda: False)
    paths = export.export_lesson("inside-the-kernel", tmp_path, ["svg"], ["en", "zh"])
    assert len(paths) == 2 * len(CHAPTERS)
    for p in paths:
        text = p.read_text(encoding="utf-8")
        assert "<image" not in text and "data:image" not in text, p.name
        root = ET.fromstring(text)
        assert (root.get("width"), root.get("height")) == ("1280", "720"), p.name


def test_kernel_figures_in_pdf_without_chromium_are_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(export, "browser_available", lambda: False)
    with pytest.raises(export.ExportError, match=r"^pdf figures of a kernel lesson need Chromium"):
        export.export_lesson("inside-the-kernel", tmp_path, ["svg", "pdf"], "en")
