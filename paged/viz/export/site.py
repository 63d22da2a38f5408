"""The course pack: every lesson as one folder a student opens without Python.

    paged site DIR [--no-gif] [--no-figures] [--frames A:B] [--lesson NAME ...] [--lessons-dir D]
    python -m paged export --site DIR ...

writes ``index.html`` (each lesson with a thumbnail, its title and one-line summary in English
and 中文, and links to its player, animations and figures), ``lessons/NAME.html`` (the one-file
player of paged/viz/export/standalone.py, both languages), ``media/NAME/`` (the lecture figures of
every step and language, a GIF per language) and ``sources.html`` (the paper by section and
figure, the essay by its title, and the essay's corrections from paged/viz/paper/essay_fixes.py).

Every link is relative and nothing is fetched, so the folder works from ``file://`` and from any
static host. Lesson text is data: it is escaped wherever it reaches HTML. No Streamlit, no torch.
Figures and GIFs need Chromium; without it the command builds the rest and says what it skipped.
The site is built next to DIR and renamed into place, so DIR is a whole site or as it was, and
nothing is written through a link inside DIR (a linked ``DIR/index.html`` is replaced, its
target untouched). An empty DIR, or the current folder or one above it, is refused.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from urllib.parse import quote

from paged.engine.cli.main import stop_signals_unwind
from paged.viz import ui_text
from paged.viz.export import lecture, standalone
from paged.viz.fold.kernel.frames import KernelLesson, kernel_lessons
from paged.viz.fold.lesson import Lesson
from paged.viz.fold.lesson_folder import LESSONS_DIR, available
from paged.viz.player.payload import markdown
from paged.viz.render.style import stylesheet
from paged.viz.safe import html_text

LANGS = ("en", "zh")
HTML_LANG = {"en": "en", "zh": "zh-Hans"}
THUMB_WIDTH = 640  # px: sharp in a card of ~320 CSS px on a 2x screen
#: Everything a build writes at the top of DIR: a folder holding only these may be replaced.
SITE_NAMES = frozenset({"index.html", "sources.html", "lessons", "media"})


@dataclass(frozen=True)
class SiteOptions:
    """What goes in: ``lessons`` (empty: every shipped one) from ``root``; ``gif`` and
    ``figures`` need Chromium; ``frames`` (``A:B``) bounds each animation."""

    lessons: tuple[str, ...] = ()
    root: Path = LESSONS_DIR
    gif: bool = True
    figures: bool = True
    frames: str | None = None


@dataclass
class Entry:
    """One lesson's card on the index: its texts and its files, relative to the site."""

    name: str
    title: dict[str, str]
    summary: dict[str, str]
    steps: int
    frames: int
    page: str
    thumb: str | None = None
    gifs: dict[str, str] = field(default_factory=dict)
    figures: dict[str, list[str]] = field(default_factory=dict)


def build_site(
    out: str | Path,
    options: SiteOptions = SiteOptions(),
    progress: Callable[[str], None] | None = None,
) -> list[Path]:
    """Write the site into ``out`` (created if missing, replaced if a previous site); returns
    the files written. It is built in a hidden folder beside ``out`` and renamed into place, so
    a failure or Ctrl-C leaves ``out`` as it was. Raises lecture.ExportError (one line) for a
    lesson that cannot be read or drawn, and for an ``out`` holding anything a site does not."""
    say = progress or (lambda msg: None)
    if not str(out).strip():
        # Path("") is the current folder, which the swap below would rename away
        raise lecture.ExportError("give a folder for the site (DIR is empty)")
    site = Path(out).resolve()  # a link to a site: the site is replaced, the link stays
    here = Path.cwd().resolve()
    if site == here or site in here.parents:
        raise lecture.ExportError(
            f"{str(out)[:200]} is the current folder or holds it: give a folder below it"
        )
    _check_replaceable(site, str(out))
    names = list(options.lessons) or course_lessons(options.root)
    if not names:
        raise lecture.ExportError(f"no lessons to write (none found under {options.root.name}/)")
    site.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{site.name[:100]}.", suffix=".part", dir=site.parent))
    try:
        written = _write(work / "site", names, options, say)
        _swap(work / "site", site, work / "old")
    finally:
        shutil.rmtree(work, ignore_errors=True)  # the unfinished build, or the previous site
    return [site / p.relative_to(work / "site") for p in written]


def _write(
    site: Path, names: list[str], options: SiteOptions, say: Callable[[str], None]
) -> list[Path]:
    (site / "lessons").mkdir(parents=True)
    parts = ["page", *(["figures"] if options.figures else []), *(["GIFs"] if options.gif else [])]
    written: list[Path] = []
    entries = []
    for n, name in enumerate(names, start=1):
        say(f"lesson {n} of {len(names)}: {name} ({', '.join(parts)})")
        t0 = time.monotonic()
        entry, files = _lesson(name, site, options, lambda msg: say(f"  {msg}"))
        entries.append(entry)
        written += files
        say(f"  {name}: {len(files)} files in {time.monotonic() - t0:.1f} s")
    say("index and sources")
    for file_name, text in (("index.html", index_page(entries)), ("sources.html", sources_page())):
        path = site / file_name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def _check_replaceable(site: Path, shown: str) -> None:
    """Why refuse: replacing a folder deletes what is in it, so only a new folder, an empty
    one or a previous site may become the site."""
    if not site.is_dir():
        if site.exists():
            raise lecture.ExportError(f"{shown[:200]} is a file, not a folder")
        return
    foreign = sorted(p.name for p in site.iterdir() if p.name not in SITE_NAMES)
    if foreign:
        raise lecture.ExportError(
            f"{shown[:200]} holds {foreign[0][:80]!r}, which no site build writes: "
            "give a new or empty folder, or a previous site"
        )


def _swap(new: Path, site: Path, old: Path) -> None:
    """Rename ``new`` to ``site``, moving a previous ``site`` to ``old`` first (and back, if
    the second rename fails): two renames on one filesystem, never a half-copied folder."""
    if site.exists():
        os.replace(site, old)
    try:
        os.replace(new, site)
    except BaseException:
        if old.exists():
            os.replace(old, site)
        raise


def _lesson(
    name: str, site: Path, options: SiteOptions, say: Callable[[str], None]
) -> tuple[Entry, list[Path]]:
    lesson = lecture.load_lesson(name, options.root)
    page = site / "lessons" / f"{name}.html"
    page.write_text(standalone.page(lesson, LANGS, home="../index.html"), encoding="utf-8")
    entry = _entry(name, lesson, page.relative_to(site).as_posix())
    formats = [f for f, on in (("gif", options.gif), ("png", options.figures)) if on]
    if not formats:
        return entry, [page]
    media = site / "media" / name
    files = lecture.export_lesson(
        name,
        media,
        formats,
        LANGS,
        root=options.root,
        progress=say,
        frames=options.frames if options.gif else None,
    )
    rel = {p: p.relative_to(site).as_posix() for p in files}
    for lg in LANGS:
        gif = media / f"{name}-{lg}.gif"
        if gif in rel:
            entry.gifs[lg] = rel[gif]
        figures = [media / lecture.file_name(name, k, lg, "png") for k in range(entry.steps)]
        entry.figures[lg] = [rel[p] for p in figures if p in rel]
    if entry.figures.get("en"):
        thumb = thumbnail(site / entry.figures["en"][0], media / f"{name}-thumb.png")
        entry.thumb = thumb.relative_to(site).as_posix()
        files.append(thumb)
    return entry, [page, *files]


def chromium_ready() -> bool:
    """Whether figures and GIFs can be drawn: kaleido (a side-by-side lesson's figures) finds a
    Chromium on PATH, and Playwright (GIFs, the kernel lesson's figures) starts serve.CHROMIUM."""
    from paged.viz.export.serve import CHROMIUM

    return lecture.browser_available() and os.access(CHROMIUM, os.X_OK)


def without_browser(options: SiteOptions) -> tuple[SiteOptions, list[str]]:
    """``options`` less what needs Chromium where there is none, and what that left out."""
    if chromium_ready():
        return options, []
    skipped = [
        what for what, on in (("lecture figures", options.figures), ("GIFs", options.gif)) if on
    ]
    return replace(options, gif=False, figures=False, frames=None), skipped


def course_lessons(root: Path) -> list[str]:
    """Every lesson the course pack holds: the side-by-side ones, then the kernel lessons."""
    return available(root) + kernel_lessons(root)


def _entry(name: str, lesson: Lesson | KernelLesson, page: str) -> Entry:
    spec = lesson.spec
    return Entry(
        name=name,
        title=spec.title,
        summary=spec.summary or {lg: "" for lg in LANGS},
        steps=len(spec.steps),
        frames=lesson.num_frames,
        page=page,
    )


def thumbnail(figure: Path, out: Path) -> Path:
    """The first step's figure, ``THUMB_WIDTH`` wide: a card should not load a 2560-px PNG."""
    from PIL import Image

    with Image.open(figure) as im:
        height = round(im.height * THUMB_WIDTH / im.width)
        im.convert("RGB").resize((THUMB_WIDTH, height), Image.Resampling.LANCZOS).save(
            out, optimize=True
        )
    return out


def href(path: str) -> str:
    """A relative link to a file of the site, safe in a quoted attribute whatever the lesson's
    folder is called (``#`` or ``?`` in a name would otherwise cut the path)."""
    return html_text(quote(path))


#: The site's pages' look (site.css beside this file, fonts filled in as it is read).
SITE_CSS_FILE = Path(__file__).resolve().parent / "site.css"


def _doc(title: str, body: str) -> str:
    return (
        "<!doctype html>\n<html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{html_text(title)}</title><style>{stylesheet(SITE_CSS_FILE, system_fonts=standalone.SYSTEM_FONTS)}</style></head>"
        f"<body><main>{body}</main></body></html>\n"
    )


def index_page(entries: list[Entry]) -> str:
    """The course's front page: both languages on one page, a card per lesson."""
    t = ui_text.load("site")
    head = (
        f"<h1>{html_text(t['en']['title'])}</h1>"
        f"<p class='zh' lang='zh-Hans'><b>{html_text(t['zh']['title'])}</b></p>"
        "<div class='intro'>"
        + "".join(f"<div lang='{HTML_LANG[lg]}'>{markdown(t[lg]['intro'])}</div>" for lg in LANGS)
        + "</div>"
    )
    cards = "".join(_card(e, t) for e in entries)
    foot = (
        f"<footer><p><a href='sources.html'>{html_text(t['en']['sources'])}</a> · "
        f"<a href='sources.html' lang='zh-Hans'>{html_text(t['zh']['sources'])}</a></p>"
        + "".join(f"<p lang='{HTML_LANG[lg]}'>{html_text(t[lg]['made'])}</p>" for lg in LANGS)
        + "</footer>"
    )
    return _doc(t["en"]["title"], f"{head}<div class='cards'>{cards}</div>{foot}")


def _card(e: Entry, t: dict) -> str:
    page = href(e.page)
    image = (
        f"<img src='{href(e.thumb)}' alt='{html_text(e.title['en'])}' loading='lazy'>"
        if e.thumb
        else "<div class='noimg'></div>"
    )
    texts = "".join(
        f"<p lang='{HTML_LANG[lg]}'{' class=zh' if lg == 'zh' else ''}>"
        f"{html_text(e.summary.get(lg, ''))}</p>"
        for lg in LANGS
        if e.summary.get(lg)
    )
    opens = " · ".join(
        f"<a class='open' data-lang='{lg}' href='{page}{'#lang=zh' if lg == 'zh' else ''}'>"
        f"{html_text(t[lg]['open'])}</a>"
        for lg in LANGS
    )
    links = [f"<p class='links'>{opens}</p>"]
    if e.gifs:
        gifs = " ".join(
            f"<a href='{href(e.gifs[lg])}'>{'EN' if lg == 'en' else '中文'}</a>"
            for lg in LANGS
            if lg in e.gifs
        )
        links.append(f"<p class='links'>{html_text(t['en']['gif'])} / {t['zh']['gif']}: {gifs}</p>")
    for lg in LANGS:
        figs = e.figures.get(lg) or []
        if figs:
            items = " ".join(
                f"<a href='{href(f)}'>{html_text(t[lg]['step'].format(n=k + 1))}</a>"
                for k, f in enumerate(figs)
            )
            links.append(f"<p class='links'>{html_text(t[lg]['figures'])}: {items}</p>")
    meta = " · ".join(html_text(t[lg]["steps"].format(n=e.steps, frames=e.frames)) for lg in LANGS)
    return (
        f"<article class='card' data-lesson='{html_text(e.name)}'>"
        f"<a href='{page}'>{image}</a>"
        f"<h2><a href='{page}'>{html_text(e.title['en'])}</a></h2>"
        f"<p class='zh' lang='zh-Hans'>{html_text(e.title['zh'])}</p>"
        f"{texts}<p class='meta'>{meta}</p>{''.join(links)}</article>"
    )


def sources_page() -> str:
    """The paper by section and figure, the essay by its title, and what the essay gets wrong
    (every corrected number computed by viz.paper.essay_fixes), in both languages."""
    from paged.viz.paper import essay_fixes

    t = ui_text.load("site")
    fix_text = ui_text.load("paper_fidelity")
    fixes = [
        *essay_fixes.table_fixes(),
        essay_fixes.concurrency_fix(),
        *essay_fixes.arithmetic_fixes(),
    ]
    sections = []
    for lg in LANGS:
        s, f = t[lg], fix_text[lg]
        uses = "".join(f"<li>{markdown(u)}</li>" for u in s["uses"].values())
        corrections = "".join(
            "<li>"
            + markdown(
                f[x.key].format(**x.values) + " " + f["source"].format(src=f["sources"][x.source])
            )
            + "</li>"
            for x in fixes
        )
        sections.append(
            f"<section lang='{HTML_LANG[lg]}'><h1>{html_text(s['sources_title'])}</h1>"
            f"<p><a href='index.html'>{html_text(s['back'])}</a></p>"
            f"<h2>{html_text(s['paper_h'])}</h2>{markdown(s['paper_cite'])}"
            f"<p>{html_text(s['paper_intro'])}</p><ul>{uses}</ul>"
            f"<h2>{html_text(s['essay_h'])}</h2>{markdown(s['essay_cite'])}"
            f"<h2>{html_text(s['fixes_h'])}</h2><ul>{corrections}</ul></section>"
        )
    return _doc(t["en"]["sources_title"], "".join(sections))


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse's own usage errors: one line, exit 2
        print(f"error: {message}", file=sys.stderr)
        raise SystemExit(2)


def parser(prog: str) -> argparse.ArgumentParser:
    p = _Parser(
        prog=prog,
        description="Write the course as one folder of offline pages: an index, a player per "
        "lesson (English and 中文), lecture figures, GIFs and the sources.",
    )
    p.add_argument("folder", metavar="DIR", help="folder to write into (created if missing)")
    p.add_argument(
        "--lesson",
        action="append",
        default=[],
        metavar="NAME",
        help="only this lesson (repeatable; default: every shipped lesson)",
    )
    p.add_argument(
        "--lessons-dir",
        type=Path,
        default=LESSONS_DIR,
        metavar="DIR",
        help="a folder of lesson folders of your own (default: the shipped lessons)",
    )
    p.add_argument("--no-gif", action="store_true", help="leave out the animations (the slow part)")
    p.add_argument("--no-figures", action="store_true", help="leave out the lecture figures")
    p.add_argument("--frames", metavar="A:B", help="each animation: frames A to B only")
    return p


def site_argv(argv: list[str]) -> list[str] | None:
    """``--site DIR`` anywhere in ``argv``: the rest of the line as viz.export.site reads it
    (DIR first), else None."""
    for i, a in enumerate(argv):
        if a.startswith("--site="):
            return [a.partition("=")[2], *argv[:i], *argv[i + 1 :]]
        if a == "--site":
            return [*argv[i + 1 : i + 2], *argv[:i], *argv[i + 2 :]]
    return None


def export_main(argv: list[str] | None = None, prog: str = "python -m paged export") -> int:
    """``python -m paged export``: the course with ``--site DIR``, else one lesson's exports."""
    argv = list(sys.argv[1:] if argv is None else argv)
    rest = site_argv(argv)
    if rest is None:
        return lecture.main(argv, prog)
    return main(rest, f"{prog} --site")


def main(argv: list[str] | None = None, prog: str = "python -m paged export --site") -> int:
    args = parser(prog).parse_args(sys.argv[1:] if argv is None else argv)
    if args.no_gif and args.frames is not None:
        print(
            "error: --frames shapes the animations, and --no-gif leaves them out", file=sys.stderr
        )
        return 2
    options, skipped = without_browser(
        SiteOptions(
            lessons=tuple(args.lesson),
            root=args.lessons_dir,
            gif=not args.no_gif,
            figures=not args.no_figures,
            frames=args.frames,
        )
    )
    # a full build takes minutes: say what it is doing, but only to a person watching
    say = (lambda m: print(m, file=sys.stderr, flush=True)) if sys.stderr.isatty() else None
    t0 = time.monotonic()
    try:
        # `kill PID` or a closed terminal unwinds the build as Ctrl-C does: no .part is left
        with stop_signals_unwind():
            paths = build_site(args.folder, options, say)
    except lecture.ExportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        where = e.filename or args.folder
        print(f"error: cannot write {str(where)[:200]}: {e.strerror or e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"interrupted: {args.folder} is as it was", file=sys.stderr)
        return 130
    if skipped:
        print(
            f"skipped: {' and '.join(skipped)} need Chromium (apt-get install chromium); "
            "the rest is built",
            file=sys.stderr,
        )
    size = sum(p.stat().st_size for p in paths)
    print(
        f"wrote {len(paths)} files ({size / 1e6:.1f} MB) to {args.folder} "
        f"in {time.monotonic() - t0:.0f} s; open {Path(args.folder) / 'index.html'}",
        file=sys.stderr,
    )
    return 0
