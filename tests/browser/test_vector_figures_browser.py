"""Lecture figures survive a slide and a printer: every SVG and PDF figure of every lesson, in
both languages, is vector end to end (no embedded bitmap that blurs when enlarged), its text is
text, and the kernel lesson's figures come in the same formats and sizes as the others'."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from PIL import Image

from paged.viz.export import lecture
from paged.viz.fold.kernel.frames import kernel_lessons
from paged.viz.fold.lesson_folder import available

LESSONS = available() + kernel_lessons()
LANGS = ("en", "zh")

#: A PDF image XObject's dictionary, however its writer spaces it.
PDF_IMAGE = re.compile(rb"/Subtype\s*/Image\b")
#: An SVG bitmap: an <image> element, or a data: URL of one anywhere (a CSS background).
SVG_IMAGE = re.compile(r"<image\b|data:image/", re.IGNORECASE)


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> dict[str, list[Path]]:
    out = tmp_path_factory.mktemp("vector")
    return {
        name: lecture.export_lesson(name, out / name, ["svg", "pdf"], list(LANGS))
        for name in LESSONS
    }


def test_every_lesson_has_figures_in_svg_and_pdf_in_both_languages(exported):
    for name, paths in exported.items():
        lesson = lecture.load_lesson(name)
        n = len(lecture.figure_titles(lesson, "en"))
        assert n > 0, name
        assert sorted(p.name for p in paths) == sorted(
            lecture.file_name(name, k, lg, fmt)
            for k in range(n)
            for lg in LANGS
            for fmt in ("svg", "pdf")
        )


def test_no_svg_figure_embeds_a_raster_image(exported):
    rasters = {
        p.name: len(SVG_IMAGE.findall(p.read_text(encoding="utf-8")))
        for paths in exported.values()
        for p in paths
        if p.suffix == ".svg"
    }
    assert len(rasters) == sum(len(v) for v in exported.values()) // 2
    assert {k: v for k, v in rasters.items() if v} == {}


def test_no_pdf_figure_embeds_a_raster_image(exported):
    rasters = {}
    for paths in exported.values():
        for p in (p for p in paths if p.suffix == ".pdf"):
            data = p.read_bytes()
            assert data.startswith(b"%PDF"), p.name
            # object streams would hide dictionaries from this scan: none may be there
            assert b"/ObjStm" not in data, p.name
            assert b"/Font" in data, f"{p.name}: no font, so its text is not text"
            rasters[p.name] = len(PDF_IMAGE.findall(data))
    assert rasters and {k: v for k, v in rasters.items() if v} == {}


def test_every_svg_figure_carries_its_title_as_text(exported):
    for name, paths in exported.items():
        lesson = lecture.load_lesson(name)
        for lg in LANGS:
            for k, title in enumerate(lecture.figure_titles(lesson, lg)):
                svg = next(p for p in paths if p.name == lecture.file_name(name, k, lg, "svg"))
                text = svg.read_text(encoding="utf-8")
                assert "<text" in text and title.split()[0] in text, (svg.name, title)


def test_a_kernel_lessons_figures_are_the_other_lessons_formats_and_size(tmp_path):
    (name,) = kernel_lessons()[:1]
    paths = lecture.export_lesson(name, tmp_path, ["png", "svg", "pdf"], "zh")
    png = [p for p in paths if p.suffix == ".png"]
    assert len(png) == len(paths) // 3 > 0
    for p in png:
        with Image.open(io.BytesIO(p.read_bytes())) as im:
            assert im.size == (2560, 1440), p.name
    for p in (p for p in paths if p.suffix == ".pdf"):
        # 1280 x 720 CSS px is 960 x 540 pt: the page the side-by-side figures print on
        assert re.search(rb"/MediaBox\s*\[\s*0 0 960 540\s*\]", p.read_bytes()), p.name
