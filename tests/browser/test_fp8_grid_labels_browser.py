"""The fp8 lesson's right grid at a 1280x720 window, EN and 中文, at a desk and in presenter
mode: its rows are half as tall as the left's (the same bytes, twice the blocks), and it had
no block names and a row number on every third row. Now every block a request holds is named
on the grid and the row numbers skip no more than a label's height forces: none at a desk,
every other row at most in presenter mode. No grid label under 12 px, none over another."""

from __future__ import annotations

from pathlib import Path

import pytest

from paged.engine.trace import io as T
from paged.viz.export.serve import wait_idle, wait_ready
from paged.viz.fold.lesson import build
from paged.viz.fold.lesson_folder import load_spec, trace_path

pytestmark = [pytest.mark.browser]

LESSON = "fp8-twice"
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"

# Each visible label of one grid: its text, class, px size and box.
LABELS_JS = """(id) => {
  const svg = document.querySelector('#' + id + ' svg.pk-arena');
  return [...svg.querySelectorAll('text.pk-rl, text.pk-nm')]
    .filter((t) => t.getBoundingClientRect().width && getComputedStyle(t).display !== 'none')
    .map((t) => { const r = t.getBoundingClientRect();
      return {text: t.textContent, cls: t.getAttribute('class'),
              px: parseFloat(getComputedStyle(t).fontSize) * t.getScreenCTM().a,
              box: [r.left, r.top, r.right, r.bottom]}; });
}"""


def _blocks(frame: int) -> tuple[set[str], int]:
    """The right run's blocks at ``frame`` as the grid names them (request, logical index),
    and how many rows of blocks its arena has."""
    spec = load_spec(LESSON)
    lesson = build(spec, T.read(trace_path(spec)))
    right = lesson.right.at(frame)
    names = {
        f"{right.requests[r].name}{i}"
        for r, table in right.block_tables.items()
        for i, _ in enumerate(table)
    }
    return names, right.run.num_blocks


def _meet(a: list[float], b: list[float]) -> bool:
    return min(a[2], b[2]) - max(a[0], b[0]) > 0.5 and min(a[3], b[3]) - max(a[1], b[1]) > 0.5


@pytest.mark.parametrize("present", [False, True])
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_fp8_grid_names_every_block_and_numbers_its_rows(app_url, page, lang, present):
    frame = 5  # the second step's keyframe: every request holds two blocks on the right
    names, rows = _blocks(frame)
    assert len(names) >= 12
    page.set_viewport_size({"width": 1280, "height": 720})
    flag = "&present=1" if present else ""
    page.goto(
        f"{app_url}/?lesson={LESSON}&lang={lang}&frame={frame}{flag}",
        wait_until="domcontentloaded",
    )
    wait_ready(page)
    wait_idle(page, 120_000)
    got = page.evaluate(LABELS_JS, "pk-rg")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"fp8-grid-{lang}{'-present' if present else ''}.png"))
    shown = {g["text"] for g in got if g["cls"] == "pk-nm"}
    assert shown == names, (sorted(names - shown), sorted(shown - names))
    numbered = {int(g["text"].lstrip("#")) for g in got if g["cls"] == "pk-rl"}
    unnumbered = sorted(set(range(rows)) - numbered)
    if present:  # never two rows running without a number
        assert all(b - a > 1 for a, b in zip(unnumbered, unnumbered[1:], strict=False)), unnumbered
    else:
        assert unnumbered == []
    least = min(got, key=lambda g: g["px"])
    assert least["px"] >= 12, least
    for k, a in enumerate(got):
        for b in got[k + 1 :]:
            assert not _meet(a["box"], b["box"]), (a["text"], b["text"])
