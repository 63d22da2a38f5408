"""A lesson as an animation for slides: GIF and MP4, 16:9, captions burned in.

Each frame is the standalone lesson file (paged/viz/export/standalone.py) in presenter mode at 1280 x 720,
photographed by Debian's Chromium: the very frame, caption and chapter title the player shows,
nothing redrawn. The images are encoded by imageio (Pillow for GIF, imageio-ffmpeg's bundled
ffmpeg for MP4, H.264 in yuv420p so slides software plays it).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from paged.viz.export.serve import probe

SIZE = (1280, 720)
DEFAULT_FPS = 2.0
MAX_FRAMES = 600  # an animation's frames are held as PNGs (about 0.1 MB each)
MAX_GIF_FPS = 50


@dataclass(frozen=True)
class Shot:
    """One photographed frame: its PNG and the caption that was on screen when taken."""

    frame: int
    png: bytes
    caption: tuple[str, str]


#: The caption on screen; what is on screen only for a while or on a key (a photographed
#: frame with it would differ from run to run); fonts in and rows fitted to presenter mode.
CAPTION_JS, TRANSIENTS_JS, SETTLED_JS = map(probe, ("caption", "transients", "settled"))


class AnimationError(ValueError):
    """An animation cannot be made; the message is one line saying why."""


class TransientShown(AnimationError):
    """A transient element was on screen as a frame was photographed."""


def frame_range(spec: str | None, num_frames: int) -> range:
    """``--frames A:B`` as a range of frames: Python slice rules (A included, B not; either may
    be left out, negative counts from the end). Raises AnimationError for anything else or an
    empty range."""
    if spec is None or spec.strip() in ("", ":"):
        return range(num_frames)  # checked against MAX_FRAMES only when animating
    parts = spec.split(":")
    if len(parts) != 2:
        raise AnimationError(f"--frames {spec!r} is not A:B (e.g. 0:20)")
    try:
        bounds = [int(p) if p.strip() else None for p in parts]
    except ValueError:
        raise AnimationError(f"--frames {spec!r}: A and B must be whole numbers") from None
    r = range(num_frames)[slice(bounds[0], bounds[1])]
    if len(r) == 0:
        raise AnimationError(
            f"--frames {spec!r} selects no frame (the lesson has frames 0 to {num_frames - 1})"
        )
    return bounded(r)


def bounded(r: range) -> range:
    """``r`` if an animation may hold that many frames, else AnimationError."""
    if len(r) > MAX_FRAMES:
        raise AnimationError(
            f"{len(r)} frames is more than one animation holds ({MAX_FRAMES}); "
            f"choose a part with --frames A:B"
        )
    return r


def check_fps(fps: float, formats: Iterable[str] = ()) -> float:
    if not 0.1 <= fps <= 60:
        raise AnimationError(f"--fps {fps:g} is out of range (0.1 to 60)")
    if "gif" in formats and fps > MAX_GIF_FPS:  # its delays are whole hundredths of a second
        raise AnimationError(
            f"--fps {fps:g} is faster than a GIF plays (at most {MAX_GIF_FPS}: browsers slow "
            "shorter delays to a tenth of a second); an MP4 takes up to 60"
        )
    return fps


def screenshots(
    html_text: str, frames: range, lang: str, progress: Callable[[str], None] | None = None
) -> list[Shot]:
    """Each frame in ``frames`` photographed: the standalone page in presenter mode at
    ``SIZE``, every non-file request refused (there should be none). Runs in a thread of its
    own: Playwright's sync API refuses a thread whose asyncio loop is already running (a
    caller that drives a browser itself, or kaleido)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(lambda: list(_photograph(html_text, frames, lang, progress))).result()


def _photograph(
    html_text: str, frames: range, lang: str, progress: Callable[[str], None] | None
) -> Iterator[Shot]:
    from playwright.sync_api import sync_playwright

    from paged.viz.export.serve import launch_chromium, wait_painted, wait_ready

    say = progress or (lambda msg: None)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "lesson.html"
        path.write_text(html_text, encoding="utf-8")
        with sync_playwright() as p:
            browser = launch_chromium(p)
            try:
                ctx = browser.new_context(viewport={"width": SIZE[0], "height": SIZE[1]})
                ctx.route(
                    "**/*",
                    lambda r: (
                        r.continue_()
                        if r.request.url.startswith(("file:", "data:", "blob:"))
                        else r.abort()
                    ),
                )
                page = ctx.new_page()
                # still=1: nothing transient on the frames (no hint, no pointing, no reading page)
                page.goto(f"{path.as_uri()}#frame={frames[0]}&lang={lang}&present=1&still=1")
                wait_ready(page)
                page.evaluate(SETTLED_JS)
                for n, i in enumerate(frames, start=1):
                    page.evaluate(probe("goTo"), i)
                    wait_painted(page, i)
                    cap = page.evaluate(CAPTION_JS)
                    before = page.evaluate(TRANSIENTS_JS)
                    png = page.screenshot(type="png")
                    shown = sorted({*before, *page.evaluate(TRANSIENTS_JS)})
                    if shown:  # a frame that would differ on the next run: refused, not kept
                        raise TransientShown(
                            f"frame {i} was photographed with {', '.join(shown)} on screen"
                        )
                    yield Shot(i, png, (cap[0], cap[1]))
                    if n % 20 == 0 or n == len(frames):
                        say(f"[{n}/{len(frames)}] frames photographed")
            finally:
                browser.close()


def _images(shots: list[Shot]) -> Iterator:
    """Each shot decoded when it is needed: all of them at once, as RGB arrays, once held
    about 9 MB per frame while a GIF was encoded (5 GB at MAX_FRAMES)."""
    import io

    from PIL import Image

    for s in shots:
        with Image.open(io.BytesIO(s.png)) as im:
            yield im.convert("RGB")


def gif_delay_ms(fps: float) -> int:
    """How long a GIF shows each frame: GIF stores delays in hundredths of a second, and
    browsers slow anything under two of them to a tenth of a second."""
    return 10 * max(2, round(100 / fps))


def write_gif(path: Path, shots: list[Shot], fps: float) -> Path:
    """An endlessly looping GIF, one image per frame, each shown ``gif_delay_ms(fps)``."""
    frames = _images(shots)
    first = next(frames)
    first.save(
        path,
        format="GIF",
        save_all=True,
        append_images=frames,
        duration=gif_delay_ms(fps),
        loop=0,
        optimize=False,
    )
    return path


def write_mp4(path: Path, shots: list[Shot], fps: float) -> Path:
    """H.264 MP4 (yuv420p, plays in PowerPoint, Keynote and browsers) at ``fps``."""
    import imageio.v2 as iio2

    with iio2.get_writer(
        path,
        format="FFMPEG",
        mode="I",
        fps=fps,
        codec="libx264",
        pixelformat="yuv420p",
        quality=8,
        macro_block_size=16,
        ffmpeg_log_level="error",
    ) as w:
        import numpy as np

        for im in _images(shots):
            w.append_data(np.asarray(im))  # type: ignore[attr-defined]  # imageio's, untyped
    return path


WRITERS = {"gif": write_gif, "mp4": write_mp4}
