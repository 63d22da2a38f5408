"""Lecture figures: each lesson step's side-by-side frame as PNG, SVG or PDF.

    python -m paged export --lesson six-steps --out figures/ --format png,svg,pdf [--lang en,zh]
    python -m paged export --lesson six-steps --out out/ --format html,gif,mp4 [--frames 0:40]
    python -m paged export --lesson six-steps --out out/ --format csv
    python -m paged export --lesson six-steps --out out/ --format quiz
    python -m paged export --trace run.jsonl --out out/ --format html,svg

writes one file per step, language and format (``six-steps-step3-en.png``), drawn by
``paged.viz.render.figures.side_by_side_figure`` at the step's keyframe: the same figure, colours and words
as the app. Images are rendered by kaleido (>= 1) in the system Chromium; export keeps one
Chromium running for the whole lesson, so each image after the first takes well under a second.
SVG and PDF are vector throughout (no cell is a bitmap). A kernel lesson has one figure per
chapter, drawn as SVG (``paged.viz.render.kernel.figure_svg``) and printed by Chromium as PDF
and PNG (paged/viz/export/svg_print.py), at the same sizes.

``html`` writes the whole lesson as one self-contained page (paged/viz/export/standalone.py: the app's
player, both languages, offline); ``gif`` and ``mp4`` write the lesson (or ``--frames A:B``) as
an animation at ``--fps`` with the player's captions burned in (paged/viz/export/animate.py), one per
language (``NAME.gif``, or ``NAME-zh.gif`` when several languages are asked for).

``csv`` writes every frame's numbers, one row per run per frame as the player shows it
(paged/viz/export/frame_csv.py; ``NAME.csv``, or ``NAME-zh.csv`` when several languages are asked for:
only the chapter titles differ).

``quiz`` writes the lesson's exercises as a printable Markdown worksheet with an answer key, one
per language (paged/viz/export/quiz.py; ``NAME-quiz-en.md``, ``NAME-quiz-zh.md``): both languages
unless ``--lang`` names some.

``--trace FILE`` folds any trace the app accepts as an upload instead (the same reader, limits
and lesson steps: ``--lesson``'s, six-steps by default) and names the files after it
(``run-step3-en.svg``).

The app's per-step download button uses ``download_args`` (lazy: nothing is rendered until the
button is clicked). No Streamlit, no torch.
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import shutil
import sys
import threading
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path

import plotly.graph_objects as go

from paged.engine.files import read_bounded
from paged.engine.trace import io as T
from paged.viz import safe
from paged.viz.fold.kernel.frames import (
    CHAPTERS,
    KernelLesson,
    chapter_keyframe,
    fold_kernel,
    kernel_lessons,
    load_kernel_spec,
)
from paged.viz.fold.lesson import Lesson, build
from paged.viz.fold.lesson_folder import LESSONS_DIR, LessonError, load_spec, trace_path
from paged.viz.fold.narration import render_step

MIME = {"png": "image/png", "svg": "image/svg+xml", "pdf": "application/pdf"}
FORMATS = tuple(MIME)
LESSON_FORMATS = ("html", "gif", "mp4", "csv", "quiz")  # one file per lesson, not per step
ALL_FORMATS = FORMATS + LESSON_FORMATS
LANGS = ("en", "zh")

#: A figure without its own size is laid out at 1280 x 720 CSS px: text drawn in px is then a
#: quarter larger against the slide than in a 1600-px layout, which is what a back row needs.
LAYOUT_SIZE = (1280, 720)
PNG_SCALE = 2.0  # 2560 x 1440 px from 1280 x 720: sharp on a 1440p projector


class ExportError(ValueError):
    """An export cannot be made; the message is one line saying why."""


def _ensure_browser() -> None:
    # kaleido looks for Chrome on its own; Debian names the binary chromium.
    if not os.environ.get("BROWSER_PATH"):
        for name in ("chromium", "chromium-browser", "google-chrome"):
            path = shutil.which(name)
            if path:
                os.environ["BROWSER_PATH"] = path
                return


def browser_available() -> bool:
    """Whether kaleido has a Chromium to draw with (else figure_bytes raises ExportError)."""
    _ensure_browser()
    return bool(os.environ.get("BROWSER_PATH")) and os.path.exists(os.environ["BROWSER_PATH"])


def step_figure(lesson: Lesson, k: int, lang: str = "en") -> go.Figure:
    """Step ``k`` (0-based) of ``lesson`` at its keyframe, as one 16:9 figure. A step whose
    keyframe the trace never shows is drawn at the last frame (its narration says so by
    showing ``?`` where numbers are missing)."""
    from paged.viz.render.figures import scoreboard_lecture_figure, side_by_side_figure

    kf = lesson.keyframes[k]
    i = kf if kf is not None else lesson.num_frames - 1
    titles = (lesson.left.title[lang], lesson.right.title[lang])
    if lesson.spec.steps[k].rule.get("frame") == "last":  # the scoreboard: empty arenas by then
        return scoreboard_lecture_figure(
            lesson.left.summary, lesson.right.summary, render_step(lesson, k, lang), lang, titles
        )
    fig = side_by_side_figure(
        lesson.left.at(i), lesson.right.at(i), render_step(lesson, k, lang), lang, titles
    )
    return fig if isinstance(fig, go.Figure) else go.Figure(fig)


def figure_bytes(fig: go.Figure, fmt: str, size: tuple[int, int] | None = None) -> bytes:
    """Render ``fig`` as ``fmt`` (png, svg or pdf) at ``size`` CSS px (default: the figure's
    own width and height, else ``LAYOUT_SIZE``); PNG at ``PNG_SCALE``. Raises ExportError for
    an unknown format or when no Chromium can be started."""
    if fmt not in MIME:
        raise ExportError(f"unknown format {fmt!r}; choose from {', '.join(FORMATS)}")
    _ensure_browser()
    width, height = size or (
        fig.layout.width or LAYOUT_SIZE[0],
        fig.layout.height or LAYOUT_SIZE[1],
    )
    scale = PNG_SCALE if fmt == "png" else 1.0
    with _one_browser():  # ours, not plotly's one-off server, which would fetch MathJax
        for attempt in (1, 2):
            try:
                with warnings.catch_warnings():
                    # plotly passes Chromium options even to a running server, which ignores them
                    warnings.filterwarnings("ignore", message="The kopts argument is ignored")
                    return fig.to_image(format=fmt, width=width, height=height, scale=scale)
            except Exception as e:  # kaleido raises unrelated types when Chromium is missing
                if attempt == 1 and STALE_TAB in str(e):
                    _one_browser.restart()
                    continue
                raise ExportError(f"cannot render {fmt}: {type(e).__name__}: {e}") from None
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises


def file_name(lesson_name: str, k: int, lang: str, fmt: str) -> str:
    return f"{lesson_name}-step{k + 1}-{lang}.{fmt}"


def step_image(lesson: Lesson | KernelLesson, k: int, lang: str = "en", fmt: str = "png") -> bytes:
    """The bytes of step ``k``'s lecture figure (a kernel lesson's: chapter ``k``'s): what
    the download button hands out."""
    if isinstance(lesson, KernelLesson):
        if fmt not in MIME:
            raise ExportError(f"unknown format {fmt!r}; choose from {', '.join(FORMATS)}")
        return kernel_images(lesson, lang, [fmt], [k])[0][fmt]
    return figure_bytes(step_figure(lesson, k, lang), fmt)


def download_args(
    lesson: Lesson | KernelLesson, k: int, lang: str = "en", fmt: str = "png"
) -> dict:
    """Keyword arguments for ``st.download_button``: the image is rendered only when clicked
    (``data`` is a callable), so stepping through frames costs nothing."""
    return dict(
        data=lambda: step_image(lesson, k, lang, fmt),
        file_name=file_name(lesson.spec.name, k, lang, fmt),
        mime=MIME[fmt],
        on_click="ignore",
    )


def load_lesson(name: str, root: Path = LESSONS_DIR) -> Lesson | KernelLesson:
    """Fold a lesson's recorded trace (a kernel lesson's too). Raises ExportError (one line)
    for a missing lesson or an unusable trace."""
    try:
        if name in kernel_lessons(root):
            kspec = load_kernel_spec(name, root)
            return fold_kernel(kspec, T.read(kspec.folder / kspec.trace_file))
        spec = load_spec(name, root)
        return build(spec, T.read(trace_path(spec)))
    except (LessonError, T.TraceError) as e:
        raise ExportError(str(e)) from None


def load_trace(path: str | Path, lesson: str = "six-steps", root: Path = LESSONS_DIR) -> Lesson:
    """Fold a trace file as the app folds an upload: at most ``safe.MAX_UPLOAD_MB``, UTF-8, the
    same reader and limits, ``lesson``'s steps over its contiguous and paged runs. Raises
    ExportError (one line) for anything the app would refuse."""
    p = Path(path)
    try:
        # a FIFO with no writer, or a device, would block or never end: refused unread
        data = read_bounded(p, safe.UPLOAD_BYTES)
    except OSError as e:
        raise ExportError(f"cannot read {str(path)[:200]}: {e.strerror or e}") from None
    name = safe.one_line(p.name)
    if data is None:
        raise ExportError(f"{name} is larger than an upload may be ({safe.MAX_UPLOAD_MB} MB)")
    try:
        return build(load_spec(lesson, root), T.loads(data.decode("utf-8")), source=p.name)
    except UnicodeDecodeError:
        raise ExportError(f"{name} is not a text trace (it is binary)") from None
    except (LessonError, T.TraceError) as e:
        raise ExportError(f"{name}: {e}") from None
    except Exception as e:  # a received file is untrusted: one line, never a traceback
        raise ExportError(safe.report(e, f"{name} could not be folded")) from None


def trace_stem(path: str | Path) -> str:
    """A file-name stem from a trace's name: letters, digits, ``-`` and ``_`` only."""
    return re.sub(r"[^A-Za-z0-9_-]+", "_", Path(path).stem)[:80].strip("_") or "trace"


def export_lesson(
    name: str,
    out_dir: str | Path,
    formats: Iterable[str] = FORMATS,
    lang: str | Iterable[str] = "en",
    root: Path = LESSONS_DIR,
    progress: Callable[[str], None] | None = None,
    frames: str | None = None,
    fps: float | None = None,
    trace: str | Path | None = None,
) -> list[Path]:
    """Write every step of lesson ``name`` in each format and language to ``out_dir`` (created
    if missing); with ``trace``, of that trace file folded as an upload (``load_trace``), the
    files named after it. Returns the written paths in order. ``frames`` (``A:B``) and ``fps``
    (default ``animate.DEFAULT_FPS``) shape the gif/mp4 animations only. Raises ExportError
    (one line) for a bad lesson, trace, format or language, a bad ``frames`` or ``fps`` where an
    animation is asked for, and either of them given where none is (it would do nothing)."""
    formats = _checked(list(formats), ALL_FORMATS, "format")
    langs = _checked([lang] if isinstance(lang, str) else list(lang), LANGS, "language")
    from paged.viz.export import animate

    animated = any(f in animate.WRITERS for f in formats)
    if not animated:
        _refuse_unused(formats, frames=frames, fps=fps)
    fps = animate.DEFAULT_FPS if fps is None else fps
    try:
        if animated:
            animate.check_fps(fps, formats)
        if trace is None:
            lesson = load_lesson(name, root)
        elif name in kernel_lessons(root):
            raise ExportError(
                "--trace folds side-by-side lessons only; the kernel lesson has one run"
            )
        else:
            lesson, name = load_trace(trace, name, root), trace_stem(trace)
        span = range(lesson.num_frames)
        if animated:
            span = animate.bounded(animate.frame_range(frames, lesson.num_frames))
    except animate.AnimationError as e:
        raise ExportError(str(e)) from None
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    say = progress or (lambda msg: None)
    written = _lesson_files(
        lesson, name, out, [f for f in formats if f in LESSON_FORMATS], langs, span, fps, say
    )
    figure_formats = [f for f in formats if f in FORMATS]
    if not figure_formats:
        return written
    if isinstance(lesson, KernelLesson):
        return written + _kernel_figures(lesson, name, out, figure_formats, langs, say)
    jobs = [(k, lg) for lg in langs for k in range(len(lesson.spec.steps))]
    with _one_browser():
        for n, (k, lg) in enumerate(jobs, start=1):
            fig = step_figure(lesson, k, lg)
            for fmt in figure_formats:
                path = out / file_name(name, k, lg, fmt)
                path.write_bytes(figure_bytes(fig, fmt))
                written.append(path)
            say(f"[{n}/{len(jobs)}] step {k + 1} ({lg}): {', '.join(figure_formats)}")
    return written


def _lesson_files(
    lesson: Lesson | KernelLesson,
    name: str,
    out: Path,
    formats: list[str],
    langs: list[str],
    span: range,
    fps: float,
    say: Callable[[str], None],
) -> list[Path]:
    """The one-per-lesson files: the frames' numbers, the standalone page, then each
    language's animations."""
    from paged.viz.export import animate, frame_csv, quiz, standalone

    written: list[Path] = []
    for lg in langs if "quiz" in formats else []:
        if isinstance(lesson, KernelLesson):
            raise ExportError("the kernel lesson has one run and no exercises: no quiz to write")
        path = out / f"{name}-quiz-{lg}.md"
        path.write_text(quiz.worksheet(lesson, lg), encoding="utf-8")
        written.append(path)
        say(f"{path.name}: worksheet and answer key")
    for lg in langs if "csv" in formats else []:  # only the chapter titles differ
        stem = name if len(langs) == 1 else f"{name}-{lg}"
        path = out / f"{stem}.csv"
        path.write_text(frame_csv.csv_text(lesson, lg), encoding="utf-8")
        written.append(path)
        runs = 1 if isinstance(lesson, KernelLesson) else 2
        say(f"{path.name}: {lesson.num_frames} frames x {runs} run{'s' * (runs > 1)}")
    # every language, opening in the first one asked (--lang zh: a page that opens in Chinese)
    order = tuple(dict.fromkeys([*langs, *standalone.LANGS]))
    drawn = [f for f in formats if f not in ("csv", "quiz")]
    page = standalone.page(lesson, order) if drawn else ""
    if "html" in formats:
        path = out / f"{name}.html"
        path.write_text(page, encoding="utf-8")
        written.append(path)
        say(f"{path.name}: {path.stat().st_size / 1e6:.2f} MB")
    movies = [f for f in formats if f in animate.WRITERS]
    for lg in langs if movies else []:
        if not browser_available():
            raise ExportError("animations need Chromium (/usr/bin/chromium): run `make browser`")
        try:
            shots = animate.screenshots(page, span, lg, say)
        except Exception as e:  # Playwright raises its own types when Chromium cannot start
            first = (str(e).strip().splitlines() or [""])[0]
            raise ExportError(
                f"cannot photograph the frames: {type(e).__name__}: {first}"
            ) from None
        for fmt in movies:
            stem = name if len(langs) == 1 else f"{name}-{lg}"
            path = animate.WRITERS[fmt](out / f"{stem}.{fmt}", shots, fps)
            written.append(path)
            say(
                f"{path.name}: {len(shots)} frames at {fps:g} fps, "
                f"{path.stat().st_size / 1e6:.2f} MB"
            )
    return written


def _kernel_figures(
    lesson: KernelLesson,
    name: str,
    out: Path,
    formats: list[str],
    langs: list[str],
    say: Callable[[str], None],
) -> list[Path]:
    """A kernel lesson's figure of each chapter at its key frame, in every figure format."""
    written: list[Path] = []
    for lg in langs:
        drawn = kernel_images(lesson, lg, formats)
        for k, images in enumerate(drawn):
            for fmt in formats:
                path = out / file_name(name, k, lg, fmt)
                path.write_bytes(images[fmt])
                written.append(path)
        say(f"{name} ({lg}): {len(drawn)} chapters: {', '.join(formats)}")
    return written


def kernel_images(
    lesson: KernelLesson, lang: str, formats: list[str], chapters: Iterable[int] | None = None
) -> list[dict[str, bytes]]:
    """Each chapter's figure (``chapters``: their indices; default all) at its key frame, in
    each of ``formats``: the frame's drawings with their captions as one 16:9 SVG
    (``paged.viz.render.kernel.figure_svg``), which Chromium prints as a vector PDF and
    rasterises as a PNG of the other lessons' size. Raises ExportError (one line) when png
    or pdf is asked for and no Chromium can draw it."""
    from paged.viz.export import svg_print
    from paged.viz.render.kernel import figure_svg

    ks = range(len(CHAPTERS)) if chapters is None else chapters
    svgs = [figure_svg(lesson, chapter_keyframe(lesson, CHAPTERS[k]), lang) for k in ks]
    printed = [f for f in formats if f != "svg"]
    shots: list[dict[str, bytes]] = [{} for _ in svgs]
    if printed:
        if not browser_available():
            raise ExportError(
                f"{' and '.join(printed)} figures of a kernel lesson need Chromium "
                "(/usr/bin/chromium)"
            )
        try:
            with _one_browser.lock:  # as kaleido's images: one Chromium at a time, app-wide
                shots = svg_print.printed(svgs, printed)
        except Exception as e:  # Playwright raises its own types when Chromium cannot start
            first = (str(e).strip().splitlines() or [""])[0]
            raise ExportError(f"cannot print the figures: {type(e).__name__}: {first}") from None
    if "svg" in formats:
        for images, svg in zip(shots, svgs, strict=True):
            images["svg"] = svg.encode("utf-8")
    return shots


def figure_titles(lesson: Lesson | KernelLesson, lang: str) -> list[str]:
    """The title of each figure ``export_lesson`` writes: a step's, or a kernel chapter's."""
    if isinstance(lesson, KernelLesson):
        return [lesson.spec.chapter_titles[c][lang] for c in CHAPTERS]
    return [step.title[lang] for step in lesson.spec.steps]


def _refuse_unused(formats: list[str], **options: object) -> None:
    """Why refuse rather than note: an option that shapes nothing was a mistake in the command
    (a format left out, a flag from another line), and the engine's commands refuse such
    options too (``--sigma`` without lognormal, ``--kv-events-hold`` without ``--kv-events``)."""
    given = [f"--{name}" for name, value in options.items() if value is not None]
    if given:
        verb = "applies" if len(given) == 1 else "apply"
        raise ExportError(
            f"{' and '.join(given)} {verb} only to the gif and mp4 animations, and "
            f"--format {','.join(formats)} asks for neither"
        )


def _checked(values: list[str], allowed: tuple[str, ...], what: str) -> list[str]:
    bad = [v for v in values if v not in allowed]
    if bad or not values:
        raise ExportError(
            f"unknown {what} {bad[0] if bad else '(none)'!r}; choose from {', '.join(allowed)}"
        )
    return list(dict.fromkeys(values))  # zh,zh is one language: one file, said once


#: What kaleido says when it evaluates in a tab whose page script is not in the JavaScript
#: context it kept: its tab set-up can take the blank page's context for the loaded page's on a
#: busy machine, and that tab fails every image until it is set up again.
STALE_TAB = "kaleido_scopes is not defined"


class _one_browser:
    """Keep one Chromium for a batch of images (a fresh one per image costs seconds); nested
    uses share the outer one. Started without MathJax: kaleido's default page loads it from a
    CDN for every image, a download at run time (no figure here has TeX). Its page is reloaded
    only every ``RELOAD_EVERY`` images (see ``fewer_reloads``)."""

    depth = 0
    lock = threading.RLock()  # app sessions export from their own threads: one at a time
    restore: Callable[[], None] | None = None

    def __enter__(self):
        import kaleido

        _one_browser.lock.acquire()
        if _one_browser.depth == 0:
            _ensure_browser()
            try:
                kaleido.start_sync_server(mathjax=False, silence_warnings=True)
            except Exception as e:
                _one_browser.lock.release()
                raise ExportError(f"cannot start Chromium for kaleido: {e}") from None
            _one_browser.restore = fewer_reloads()
        _one_browser.depth += 1
        return self

    @staticmethod
    def restart() -> None:
        """A fresh server, its tabs set up again (called inside ``with _one_browser()``)."""
        import kaleido

        kaleido.stop_sync_server(silence_warnings=True)
        try:
            kaleido.start_sync_server(mathjax=False, silence_warnings=True)
        except Exception as e:
            raise ExportError(f"cannot start Chromium for kaleido: {e}") from None

    def __exit__(self, *exc) -> None:
        import kaleido

        _one_browser.depth -= 1
        try:
            if _one_browser.depth == 0:
                if _one_browser.restore is not None:
                    _one_browser.restore()
                    _one_browser.restore = None
                kaleido.stop_sync_server(silence_warnings=True)
        finally:
            _one_browser.lock.release()


#: How many images kaleido draws between reloads of its page.
RELOAD_EVERY = 32


def fewer_reloads() -> Callable[[], None] | None:
    """Why: kaleido reloads its page after every image, parsing plotly.js again: 40% of the
    CPU of exporting a lesson (18 images: 7.5 s instead of 12.5 s of CPU). Drawing leaves
    nothing behind to reload away (plotly draws each image in a scratch element it purges; a
    PDF replaces the one image it prints), so between reloads PNGs come out byte-identical and
    PDFs differ only in their creation date; a reload every ``RELOAD_EVERY`` images still
    bounds what a long batch could accumulate. This wraps kaleido's private tab hand-back
    (kaleido 1.x) and returns the function that undoes it, or None (nothing changed) where
    that method is missing: a kaleido that renamed it simply reloads every time again."""
    try:
        from kaleido.kaleido import Kaleido
    except ImportError:
        return None
    real = getattr(Kaleido, "_return_kaleido_tab", None)
    if real is None:
        return None
    returned = itertools.count(1)

    async def hand_back(self, tab) -> None:
        queue = getattr(self, "tabs_ready", None)
        if queue is None or next(returned) % RELOAD_EVERY == 0:
            await real(self, tab)  # kaleido's own: reload, then back in the queue
        else:
            await queue.put(tab)

    Kaleido._return_kaleido_tab = hand_back

    def restore() -> None:
        Kaleido._return_kaleido_tab = real

    return restore


def _split(text: str) -> list[str]:
    return [p.strip() for p in text.split(",") if p.strip()]


def main(argv: list[str] | None = None, prog: str = "python -m paged export") -> int:
    from paged.viz.export import animate  # light: its heavy imports wait for a gif or mp4

    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(
        prog=prog,
        description="Write a lesson's figures (one per step), its "
        "standalone page or its animations.",
    )
    p.add_argument(
        "--site",
        metavar="DIR",
        help="instead: the whole course as one folder of offline pages "
        "(paged/viz/export/site.py; `--site DIR --help` for its options)",
    )
    p.add_argument("--lesson", default="six-steps", help="a folder under paged/lessons/")
    p.add_argument(
        "--trace",
        metavar="FILE",
        help="instead of the lesson's own trace: any trace the app accepts as an upload "
        "(one contiguous and one paged run), folded with --lesson's steps",
    )
    p.add_argument("--out", required=True, help="folder to write into (created if missing)")
    p.add_argument(
        "--format",
        default="png",
        help="comma-separated: png,svg,pdf (one per step), html,gif,mp4,csv,quiz (one per "
        "lesson; csv: every frame's numbers, one row per run per frame; quiz: a printable "
        "Markdown worksheet with its answer key)",
    )
    p.add_argument(
        "--lang", default=None, help="comma-separated: en,zh (en; --format quiz alone: en,zh)"
    )
    p.add_argument(
        "--frames",
        default=None,
        metavar="A:B",
        help="gif/mp4: frames A (included) to B (not), Python slice rules",
    )
    p.add_argument(
        "--fps",
        default=None,
        type=float,
        help=f"gif/mp4 frames per second ({animate.DEFAULT_FPS:g})",
    )
    for i, a in enumerate(argv[:-1]):  # `--frames -2:` would read as an unknown option
        if a == "--frames" and argv[i + 1].startswith("-"):
            argv[i : i + 2] = [f"--frames={argv[i + 1]}"]
            break
    args = p.parse_args(argv)
    if not args.out.strip():
        print("error: --out is empty; name the folder to write into", file=sys.stderr)
        return 2
    formats = _split(args.format)
    # a worksheet is written for a class: both languages unless asked otherwise
    lang = args.lang if args.lang is not None else ("en,zh" if formats == ["quiz"] else "en")
    try:
        paths = export_lesson(
            args.lesson,
            args.out,
            formats,
            _split(lang),
            progress=lambda m: print(m, file=sys.stderr, flush=True),
            frames=args.frames,
            fps=args.fps,
            trace=args.trace,
        )
    except ExportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # an --out that is a file, a folder in the way, no permission, a full disk
        where = e.filename or args.out
        print(f"error: cannot write {str(where)[:200]}: {e.strerror or e}", file=sys.stderr)
        return 2
    print(f"wrote {len(paths)} files to {args.out}", file=sys.stderr)
    return 0
