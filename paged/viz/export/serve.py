"""Drive Debian's Chromium over the player: what the exports and the site build need, and what
the browser tests and ``bench/frames.py`` read a page with. Never downloads a browser."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def launch_chromium(playwright, extra: Sequence[str] = ()):
    """Debian's Chromium through Playwright, headless, no network chatter (``extra``: more
    command-line switches)."""
    return playwright.chromium.launch(executable_path=CHROMIUM, args=[*CHROMIUM_ARGS, *extra])


#: The functions Playwright evaluates in a page, a file of their own (linted with the player's):
#: one expression whose value holds them by name.
PROBES = Path(__file__).with_name("probes.js").read_text(encoding="utf-8").rstrip().rstrip(";")


def probe(name: str) -> str:
    """The function ``name`` of probes.js as Playwright takes one: a string that evaluates to
    the function, which Playwright then calls with its argument."""
    if not re.search(rf"^\s*function {re.escape(name)}\(", PROBES, re.MULTILINE):
        raise KeyError(f"probes.js has no function {name!r}")
    return f"({PROBES}).{name}"


def shown_frame(page) -> int | None:
    """The frame number the player currently shows (from the indicator's data-frame)."""
    return page.evaluate(probe("shownFrame"))


#: Polling for waits on the server (a page load, a script run), in ms. Why not every animation
#: frame: a test waits on the server for about a minute in all, and polling each frame kept
#: the renderer busy the whole time (~0.1 s of CPU per second waited, on a 2-core machine).
#: Waits for a paint after a key (``wait_painted``) still poll every frame: they time it.
SERVER_POLL_MS = 50


def wait_ready(page, timeout_ms: float = 60000) -> int:
    """Wait until the lesson player has its frames and shows one; returns that frame."""
    page.wait_for_function(probe("ready"), timeout=timeout_ms, polling=SERVER_POLL_MS)
    frame = current_frame(page)
    wait_painted(page, frame, timeout_ms)
    return frame


def current_frame(page) -> int:
    """The frame the player shows; raises when there is no player on the page."""
    frame = shown_frame(page)
    if frame is None:
        raise RuntimeError("no lesson player on the page")
    return frame


def wait_painted(page, frame: int, timeout_ms: float = 30000) -> None:
    """Wait until the indicator and both arena grids show ``frame``."""
    page.wait_for_function(probe("painted"), arg=frame, timeout=timeout_ms, polling="raf")


def url_after_one_animation_frame(page) -> str:
    """``location.search`` once the player's pending address write (made in an animation
    frame) has landed: read two animation frames on."""
    return page.evaluate(probe("searchAfterTwoFrames"))


def wait_idle(page, timeout_ms: float = 30000) -> None:
    """Wait until no script run is in flight. A key pressed while a full-page run is still
    finishing can be dropped by Streamlit, so tests settle here before each key."""
    page.wait_for_function(probe("idle"), timeout=timeout_ms, polling=SERVER_POLL_MS)


def settle_after_load(page) -> None:
    """A freshly loaded page sometimes drops a key pressed within a few hundred milliseconds
    of its first run going idle (about 1 in 12 in our runs; never later, never for a person,
    who cannot press that fast). Tests and the bench wait that out once per page load."""
    wait_idle(page)
    page.wait_for_timeout(600)


def hold_unpacking(page) -> None:
    """Hold the player's next unpacking of frames (the first frames of a new player, or another
    language's) until ``release_unpacking``, at a gate in the page's ``Response.text`` with no
    timing in it; ``wait_unpacking_held`` waits until it is held."""
    page.evaluate(probe("holdUnpacking"))


def hold_first_unpacking(page) -> None:
    """``hold_unpacking`` from before the page's own scripts run, for a page that unpacks its
    frames as it loads (an offline file). It holds on every later load of ``page`` too."""
    page.add_init_script(f"{probe('holdUnpacking')}();")  # a script: it calls the function


def wait_unpacking_held(page, timeout_ms: float = 60000) -> None:
    page.wait_for_function(probe("unpackingHeld"), timeout=timeout_ms, polling="raf")


def release_unpacking(page) -> None:
    page.evaluate(probe("releaseUnpacking"))
