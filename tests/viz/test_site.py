"""The course pack without a browser: every shipped lesson is on the index and has its page, every
link is relative and lands on a file of the site, the sources cite the paper and the essay by
name, and a lesson's own text reaches the index only escaped. (Figures and GIFs need Chromium:
tests/browser/test_site_browser.py and tests/viz/test_wheel.py build those.)"""

from __future__ import annotations

import re
import shutil
import signal
import sys
from pathlib import Path
from urllib.parse import unquote

import pytest

from paged.viz.export import site
from paged.viz.export.lecture import ExportError
from paged.viz.fold.lesson_folder import LESSONS_DIR, available

PAGES_ONLY = site.SiteOptions(gif=False, figures=False)
NO_MEDIA = {"gif": False, "figures": False}
LINK = re.compile(r"""\b(?:href|src)=['"]([^'"]*)['"]""")


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    site.build_site(out, PAGES_ONLY)
    return out


def links(page: Path) -> list[str]:
    return LINK.findall(page.read_text(encoding="utf-8"))


def test_the_index_links_every_shipped_lesson_to_its_page(built):
    names = site.course_lessons(LESSONS_DIR)
    assert len(available()) >= 5 and "inside-the-kernel" in names
    hrefs = links(built / "index.html")
    for name in names:
        assert f"lessons/{name}.html" in hrefs
        assert (built / "lessons" / f"{name}.html").stat().st_size > 10_000


def test_each_lesson_shows_its_summary_in_both_languages(built):
    text = (built / "index.html").read_text(encoding="utf-8")
    assert "claims one block at a time" in text
    assert "分页则一次只领一个 block" in text


def test_every_link_is_relative_and_lands_on_a_file_of_the_site(built):
    pages = sorted(built.rglob("*.html"))
    assert {p.name for p in pages} >= {"index.html", "sources.html"}
    for page in pages:
        for link in links(page):
            if link.startswith("data:"):
                continue  # the player's icon, inline
            assert not re.match(r"^[a-z][a-z0-9+.-]*:|^//|^/", link, re.I), (page.name, link)
            target = (page.parent / unquote(link.split("#")[0])).resolve()
            assert target.is_file() and built.resolve() in target.parents, (page.name, link)


def test_the_sources_name_the_paper_by_section_and_the_essay_by_its_title(built):
    text = (built / "sources.html").read_text(encoding="utf-8")
    assert "Efficient Memory Management for Large Language Model Serving" in text
    assert "SOSP 2023" in text and "§4.5" in text and "Fig. 13" in text
    assert "PagedAttention：当 KV Cache 遇到操作系统分页" in text
    assert "shared/seed" not in text and "/work" not in text  # a title, never a path
    assert "61.8 %" in text  # one of the essay's claims, corrected
    assert "{" not in re.sub(r"<style>.*?</style>", "", text, flags=re.S)  # every value filled


HOSTILE = "<script>alert(1)</script><img src=x onerror=alert(2)>"


def test_a_lessons_own_text_is_escaped_on_the_index(tmp_path):
    root = tmp_path / "lessons"
    shutil.copytree(LESSONS_DIR / "six-steps", root / "evil")
    toml = root / "evil" / "lesson.toml"
    text = toml.read_text(encoding="utf-8")
    text = re.sub(
        r"^title = .*$", f"title = {{ en = '{HOSTILE}', zh = 'x' }}", text, count=1, flags=re.M
    )
    text = re.sub(r"^summary = .*$", f"summary = '{HOSTILE}'", text, count=1, flags=re.M)
    toml.write_text(text, encoding="utf-8")
    site.build_site(tmp_path / "out", site.SiteOptions(root=root, gif=False, figures=False))
    index = (tmp_path / "out" / "index.html").read_text(encoding="utf-8")
    assert "&lt;script&gt;alert(1)" in index
    assert "<script" not in index and "<img src=x" not in index


def test_an_unknown_lesson_is_refused_in_one_line(tmp_path):
    with pytest.raises(ExportError, match="no lesson named 'nope'"):
        site.build_site(tmp_path, site.SiteOptions(lessons=("nope",), gif=False, figures=False))


def test_python_m_viz_export_site_builds_the_same_folder(tmp_path, capsys):
    code = site.export_main(["--site", str(tmp_path / "s"), "--no-gif", "--no-figures"])
    assert code == 0
    assert (tmp_path / "s" / "index.html").is_file()
    assert f"wrote {len(site.course_lessons(LESSONS_DIR)) + 2} files" in capsys.readouterr().err


def test_site_argv_takes_the_folder_wherever_the_flag_stands():
    assert site.site_argv(["--no-gif", "--site", "out"]) == ["out", "--no-gif"]
    assert site.site_argv(["--site=out", "--no-gif"]) == ["out", "--no-gif"]
    assert site.site_argv(["--out", "x"]) is None


def test_every_flag_the_docs_give_the_course_pack_is_one_it_takes():
    docs = (Path(__file__).resolve().parents[2] / "docs" / "app.md").read_text(encoding="utf-8")
    section = docs.split("## The course pack")[1].split("\n## ")[0]
    flags = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", section))
    taken = {o for a in site.parser("paged site")._actions for o in a.option_strings}
    assert {"--no-gif", "--lesson"} <= flags
    assert flags <= taken | {"--site", "--format"}  # those two are viz.export's own


def test_a_folder_of_ones_own_lessons_is_read_instead_of_the_shipped_ones(tmp_path, capsys):
    mine = tmp_path / "mine"
    shutil.copytree(LESSONS_DIR / "parallel-sampling", mine / "sampling")
    argv = [str(tmp_path / "out"), "--lessons-dir", str(mine), "--no-gif", "--no-figures"]
    assert site.main(argv) == 0
    assert sorted(p.name for p in (tmp_path / "out" / "lessons").iterdir()) == ["sampling.html"]
    assert site.main([str(tmp_path / "o2"), "--lessons-dir", str(tmp_path / "none")]) == 2
    assert "no lessons to write" in capsys.readouterr().err


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` by its relative path, with its bytes."""
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()
    }


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        ((), "skipped: lecture figures and GIFs need Chromium (apt-get install chromium)"),
        (("--no-gif",), "skipped: lecture figures need Chromium (apt-get install chromium)"),
        (("--no-figures", "--frames", "0:2"), "skipped: GIFs need Chromium"),
        (("--no-gif", "--no-figures"), None),
    ],
)
def test_without_chromium_the_site_builds_the_rest_and_says_what_it_skipped_in_one_line(
    tmp_path, monkeypatch, capsys, flags, said
):
    monkeypatch.setattr(site, "chromium_ready", lambda: False)
    assert site.main([str(tmp_path / "out"), "--lesson", "six-steps", *flags]) == 0
    *skipped, summary = capsys.readouterr().err.splitlines()
    assert summary.startswith("wrote 3 files")
    if said is None:
        assert skipped == []
    else:
        assert len(skipped) == 1 and skipped[0].startswith(said)
        assert skipped[0].endswith("the rest is built")
    assert (tmp_path / "out" / "lessons" / "six-steps.html").is_file()
    assert not (tmp_path / "out" / "media").exists()


def test_with_chromium_nothing_is_left_out(monkeypatch):
    monkeypatch.setattr(site, "chromium_ready", lambda: True)
    options = site.SiteOptions(frames="0:2")
    assert site.without_browser(options) == (options, [])


def test_chromium_is_ready_only_where_its_executable_is(tmp_path, monkeypatch):
    from paged.viz.export import serve

    chromium = tmp_path / "chromium"
    chromium.write_text("#!/bin/sh\n")
    chromium.chmod(0o755)
    monkeypatch.setenv("BROWSER_PATH", str(chromium))
    monkeypatch.setattr(serve, "CHROMIUM", str(chromium))
    assert site.chromium_ready()
    chromium.chmod(0o644)
    assert not site.chromium_ready()
    chromium.unlink()
    assert not site.chromium_ready()
    assert site.without_browser(site.SiteOptions(frames="0:2")) == (
        site.SiteOptions(gif=False, figures=False),
        ["lecture figures", "GIFs"],
    )


@pytest.mark.parametrize(
    ("failure", "code"),
    [
        (OSError(28, "No space left on device"), 2),
        (KeyboardInterrupt(), 130),
        (signal.SIGTERM, 130),  # `kill PID`
        (signal.SIGHUP, 130),  # the terminal closed
    ],
)
def test_a_build_that_fails_midway_leaves_the_previous_site_untouched_and_no_temp_folder(
    tmp_path, monkeypatch, capsys, failure, code
):
    out = tmp_path / "course"
    assert site.main([str(out), "--lesson", "six-steps", "--no-gif", "--no-figures"]) == 0
    before = snapshot(out)
    pages = []

    def fail_on_the_second_lesson(lesson, *args, **kwargs):
        pages.append(lesson)
        if len(pages) == 2 and isinstance(failure, signal.Signals):
            # what the signal would run, called here: a default handler would end pytest too
            handler = signal.getsignal(failure)
            assert callable(handler), f"{failure.name} would end the build where it stands"
            handler(failure, None)
        elif len(pages) == 2:
            raise failure
        return "<p>new</p>"

    monkeypatch.setattr(site.standalone, "page", fail_on_the_second_lesson)
    argv = [str(out), "--lesson", "parallel-sampling", "--lesson", "six-steps", "--no-gif"]
    assert site.main([*argv, "--no-figures"]) == code
    assert len(pages) == 2  # the first lesson's page was written before the failure
    assert snapshot(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["course"]
    assert capsys.readouterr().err.splitlines()[-1].startswith(("error: ", "interrupted: "))


def test_a_failed_first_build_leaves_no_folder_at_all(tmp_path):
    with pytest.raises(ExportError, match="no lesson named 'nope'"):
        site.build_site(
            tmp_path / "new", site.SiteOptions(lessons=("six-steps", "nope"), **NO_MEDIA)
        )
    assert list(tmp_path.iterdir()) == []


def test_a_new_build_replaces_the_previous_site_instead_of_merging_into_it(tmp_path):
    out = tmp_path / "course"
    site.build_site(out, site.SiteOptions(lessons=("six-steps",), **NO_MEDIA))
    written = site.build_site(out, site.SiteOptions(lessons=("parallel-sampling",), **NO_MEDIA))
    assert sorted(p.name for p in (out / "lessons").iterdir()) == ["parallel-sampling.html"]
    assert sorted(written) == sorted(p for p in out.rglob("*") if p.is_file())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["course"]


def test_a_rename_that_fails_puts_the_previous_site_back(tmp_path, monkeypatch):
    out = tmp_path / "course"
    site.build_site(out, site.SiteOptions(lessons=("six-steps",), **NO_MEDIA))
    before = snapshot(out)
    real, renames = site.os.replace, []

    def replace(src, dst):
        renames.append(dst)
        if len(renames) == 2:  # the new site into place, after the old one moved aside
            raise OSError(18, "Invalid cross-device link")
        real(src, dst)

    monkeypatch.setattr(site.os, "replace", replace)
    with pytest.raises(OSError, match="cross-device"):
        site.build_site(out, site.SiteOptions(lessons=("parallel-sampling",), **NO_MEDIA))
    assert len(renames) == 3 and snapshot(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["course"]


def test_a_folder_that_is_not_a_site_is_refused_in_one_line_and_kept(tmp_path, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("my notes", encoding="utf-8")
    (mine / "index.html").write_text("my page", encoding="utf-8")
    before = snapshot(mine)
    assert site.main([str(mine), "--no-gif", "--no-figures"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "'notes.txt'" in err and err.count("\n") == 1
    assert snapshot(mine) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]


def test_progress_goes_to_a_terminal_only(tmp_path, monkeypatch, capsys):
    argv = ["--lesson", "six-steps", "--lesson", "parallel-sampling", "--no-gif", "--no-figures"]
    assert site.main([str(tmp_path / "quiet"), *argv]) == 0
    assert capsys.readouterr().err.count("\n") == 1  # the summary, as a pipe or a test sees it
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert site.main([str(tmp_path / "shown"), *argv]) == 0
    err = capsys.readouterr().err
    assert "lesson 1 of 2: six-steps" in err and "lesson 2 of 2: parallel-sampling" in err
    assert err.splitlines()[-1].startswith("wrote 4 files")


@pytest.mark.parametrize(
    "argv", [["site", ""], ["site", "  "], ["export", "--site="], ["site", "."]]
)
def test_an_empty_folder_or_the_current_one_is_refused_and_nothing_is_written(
    tmp_path, monkeypatch, capsys, argv
):
    from paged.viz.cli import main as paged

    here = tmp_path / "here"
    here.mkdir()  # empty: a site could take its place
    monkeypatch.chdir(here)
    assert paged([*argv, "--no-gif", "--no-figures", "--lesson", "six-steps"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "\n" not in err
    assert here.is_dir() and not any(here.iterdir())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["here"]  # no .part left beside


def test_links_inside_the_folder_are_replaced_never_written_through(tmp_path):
    outside = tmp_path / "outside.html"
    outside.write_text("not the site's")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    dest = tmp_path / "site"
    dest.mkdir()
    (dest / "index.html").symlink_to(outside)
    (dest / "lessons").symlink_to(elsewhere)
    site.build_site(dest, site.SiteOptions(lessons=("six-steps",), gif=False, figures=False))
    assert outside.read_text() == "not the site's" and not any(elsewhere.iterdir())
    assert not (dest / "index.html").is_symlink() and not (dest / "lessons").is_symlink()
    assert "<article" in (dest / "index.html").read_text(encoding="utf-8")
