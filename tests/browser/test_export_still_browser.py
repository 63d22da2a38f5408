"""GIF exports are deterministic: no transient hint in any photographed frame, and the same
command twice gives the same frames, byte for byte. Presenter mode shows "F: leave presenter
mode" for a few seconds after it opens: photographed, whether it showed depended on how fast
the capture ran."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from PIL import Image, ImageSequence

from paged.viz.export import animate, standalone
from paged.viz.export import lecture as export
from paged.viz.export.serve import wait_ready

pytestmark = [pytest.mark.browser]

#: The first frames: photographed within the hint's seconds of the page opening.
FRAMES = "0:4"


def _frames(gif: Path) -> list[bytes]:
    with Image.open(gif) as im:
        return [f.convert("RGB").tobytes() for f in ImageSequence.Iterator(im)]


def _export(out: Path) -> Path:
    argv = ["--lesson", "six-steps", "--format", "gif", "--frames", FRAMES, "--out", str(out)]
    assert export.main(argv) == 0  # a frame taken with a transient on screen is refused
    return out / "six-steps.gif"


def test_a_gif_exported_twice_has_byte_identical_frames(tmp_path):
    first, second = _export(tmp_path / "a"), _export(tmp_path / "b")
    a, b = _frames(first), _frames(second)
    assert len(a) == 4 and len(set(a)) == 4  # four different frames...
    assert [hashlib.sha256(x).hexdigest() for x in a] == [
        hashlib.sha256(x).hexdigest() for x in b
    ]  # ...the same four both times
    assert first.read_bytes() == second.read_bytes()


#: Presenter mode entered afresh, and what is on screen at once: no timer can run in between.
ENTER_JS = f"""() => {{ const p = window.pkPlayer; p.setPresent(false); p.setPresent(true);
  return ({animate.TRANSIENTS_JS})(); }}"""


@pytest.mark.parametrize("still, shown", [("", ["pk-hint"]), ("&still=1", [])])
def test_a_still_page_never_shows_presenter_modes_hint(tmp_path, browser, still, shown):
    """The check the export makes at each capture sees the hint where a lecturer's page shows
    it, and the page the export photographs never shows it. (The worker's one browser: a
    second sync Playwright in this thread would meet the first one's event loop.)"""
    page_file = tmp_path / "lesson.html"
    page_file.write_text(
        standalone.page(export.load_lesson("shared-prompt"), ("en",)), encoding="utf-8"
    )
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    try:
        page.goto(f"{page_file.as_uri()}#frame=2&present=1{still}")
        wait_ready(page)
        assert page.evaluate(ENTER_JS) == shown
        hint = page.locator("#pk-hint")
        assert hint.is_visible() == bool(shown)
        if shown:
            assert hint.inner_text() == "F: leave presenter mode"
        page.keyboard.press("?")  # the help is transient too
        assert "pk-help" in page.evaluate(animate.TRANSIENTS_JS)
    finally:
        page.close()


def test_a_frame_photographed_with_the_help_open_is_refused(tmp_path, monkeypatch, capsys):
    opened = "() => { window.pkPlayer.help(true); return ['', '']; }"
    monkeypatch.setattr(animate, "CAPTION_JS", opened)
    argv = ["--lesson", "six-steps", "--format", "gif", "--frames", "0:1", "--out", str(tmp_path)]
    assert export.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1
    assert "TransientShown: frame 0 was photographed with pk-help on screen" in err
    assert not (tmp_path / "six-steps.gif").exists()
