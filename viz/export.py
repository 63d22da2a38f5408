"""Lecture figures: each lesson step's side-by-side frame as PNG, SVG or PDF.

    python -m viz.export --lesson six-steps --out figures/ --format png,svg,pdf [--lang en,zh]

writes one file per step, language and format (``six-steps-step3-en.png``), drawn by
``viz.figures.side_by_side_figure`` at the step's keyframe: the same figure, colours and words
as the app. Images are rendered by kaleido (>= 1) in the system Chromium; export keeps one
Chromium running for the whole lesson, so each image after the first takes well under a second.

The app's per-step download button uses ``download_args`` (lazy: nothing is rendered until the
button is clicked). No Streamlit, no torch.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path

import plotly.graph_objects as go

from engine import trace as T
from viz.lesson import LESSONS_DIR, Lesson, LessonError, build, load_spec, render_step, trace_path

MIME = {"png": "image/png", "svg": "image/svg+xml", "pdf": "application/pdf"}
FORMATS = tuple(MIME)
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
    from viz.figures import scoreboard_lecture_figure, side_by_side_figure

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
    try:
        with warnings.catch_warnings():
            # plotly passes Chromium options even to a running server, which ignores them
            warnings.filterwarnings("ignore", message="The kopts argument is ignored")
            return fig.to_image(format=fmt, width=width, height=height, scale=scale)
    except Exception as e:  # kaleido raises several unrelated types when Chromium is missing
        raise ExportError(f"cannot render {fmt}: {type(e).__name__}: {e}") from None


def file_name(lesson_name: str, k: int, lang: str, fmt: str) -> str:
    return f"{lesson_name}-step{k + 1}-{lang}.{fmt}"


def step_image(lesson: Lesson, k: int, lang: str = "en", fmt: str = "png") -> bytes:
    """The bytes of step ``k``'s lecture figure: what the download button hands out."""
    return figure_bytes(step_figure(lesson, k, lang), fmt)


def download_args(lesson: Lesson, k: int, lang: str = "en", fmt: str = "png") -> dict:
    """Keyword arguments for ``st.download_button``: the image is rendered only when clicked
    (``data`` is a callable), so stepping through frames costs nothing."""
    return dict(
        data=lambda: step_image(lesson, k, lang, fmt),
        file_name=file_name(lesson.spec.name, k, lang, fmt),
        mime=MIME[fmt],
        on_click="ignore",
    )


def load_lesson(name: str, root: Path = LESSONS_DIR) -> Lesson:
    """Fold a lesson's recorded trace. Raises ExportError (one line) for a missing lesson or an
    unusable trace."""
    try:
        spec = load_spec(name, root)
        return build(spec, T.read(trace_path(spec)))
    except (LessonError, T.TraceError) as e:
        raise ExportError(str(e)) from None


def export_lesson(
    name: str,
    out_dir: str | Path,
    formats: Iterable[str] = FORMATS,
    lang: str | Iterable[str] = "en",
    root: Path = LESSONS_DIR,
    progress: Callable[[str], None] | None = None,
) -> list[Path]:
    """Write every step of lesson ``name`` in each format and language to ``out_dir`` (created
    if missing). Returns the written paths in order. Raises ExportError (one line) for a bad
    lesson, format or language."""
    formats = _checked(list(formats), FORMATS, "format")
    langs = _checked([lang] if isinstance(lang, str) else list(lang), LANGS, "language")
    lesson = load_lesson(name, root)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    say = progress or (lambda msg: None)
    jobs = [(k, lg) for lg in langs for k in range(len(lesson.spec.steps))]
    written: list[Path] = []
    with _one_browser():
        for n, (k, lg) in enumerate(jobs, start=1):
            fig = step_figure(lesson, k, lg)
            for fmt in formats:
                path = out / file_name(name, k, lg, fmt)
                path.write_bytes(figure_bytes(fig, fmt))
                written.append(path)
            say(f"[{n}/{len(jobs)}] step {k + 1} ({lg}): {', '.join(formats)}")
    return written


def _checked(values: list[str], allowed: tuple[str, ...], what: str) -> list[str]:
    bad = [v for v in values if v not in allowed]
    if bad or not values:
        raise ExportError(
            f"unknown {what} {bad[0] if bad else '(none)'!r}; choose from {', '.join(allowed)}"
        )
    return values


class _one_browser:
    """Keep one Chromium for a batch of images (a fresh one per image costs seconds)."""

    def __enter__(self):
        import kaleido

        _ensure_browser()
        try:
            kaleido.start_sync_server(silence_warnings=True)
        except Exception as e:
            raise ExportError(f"cannot start Chromium for kaleido: {e}") from None
        return self

    def __exit__(self, *exc) -> None:
        import kaleido

        kaleido.stop_sync_server(silence_warnings=True)


def _split(text: str) -> list[str]:
    return [p.strip() for p in text.split(",") if p.strip()]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m viz.export", description="Write each lesson step's side-by-side figure."
    )
    p.add_argument("--lesson", default="six-steps", help="a folder under lessons/")
    p.add_argument("--out", required=True, help="folder to write into (created if missing)")
    p.add_argument("--format", default="png", help="comma-separated: png,svg,pdf")
    p.add_argument("--lang", default="en", help="comma-separated: en,zh")
    args = p.parse_args(argv)
    try:
        paths = export_lesson(
            args.lesson,
            args.out,
            _split(args.format),
            _split(args.lang),
            progress=lambda m: print(m, file=sys.stderr, flush=True),
        )
    except ExportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {len(paths)} files to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
