"""Every page of the app and the offline player, in English and Chinese, pass axe-core's WCAG
2.2 AA rules with no serious or critical violation: contrast, names of images and controls,
tables, landmarks. axe-core comes from package.json (``make js``), injected by Playwright."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from paged.viz.export import lecture as export
from paged.viz.export.serve import wait_idle, wait_painted, wait_ready

pytestmark = [pytest.mark.browser]

ROOT = Path(__file__).resolve().parents[2]
AXE = ROOT / "node_modules" / "axe-core" / "axe.min.js"
TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa"]
# The app's pages by address (the kernel lesson is the lesson page with its own renderer).
PAGES = [
    "",
    "capacity",
    "paper",
    "block-size",
    "stack",
    "lab",
    "watch",
    "?lesson=inside-the-kernel",
]
LESSONS = ["six-steps", "inside-the-kernel"]

RUN_JS = """async (tags) => {
  const r = await axe.run(document, {runOnly: {type: 'tag', values: tags}});
  return r.violations.filter((v) => v.impact === 'serious' || v.impact === 'critical')
    .map((v) => ({rule: v.id, nodes: v.nodes.slice(0, 4).map((n) => n.target.join(' ')
      + ': ' + (n.failureSummary || '').split('\\n').slice(1, 2).join('').trim())}));
}"""


STILL_JS = "() => !document.querySelector('[data-stale=\"true\"]')"
# Streamlit fades a running fragment's elements after a delay; under load a rerun starts while
# axe reads the page and its colours are caught mid-fade. That fade is Streamlit's
# "running" cue, not the page a reader reads between runs, so it is switched off for the check.
NO_FADE_CSS = (
    '[data-stale="true"], [data-stale="true"] * { opacity: 1 !important;'
    " transition: none !important; }"
)


def serious(page) -> list[dict]:
    """axe's serious and critical violations on the page as it stands."""
    if not AXE.exists():
        pytest.fail(f"{AXE.relative_to(ROOT)} is missing: run `make js`", pytrace=False)
    if not page.evaluate("() => typeof window.axe === 'object'"):
        page.add_script_tag(content=AXE.read_text(encoding="utf-8"))
        page.add_style_tag(content=NO_FADE_CSS)
    # a fragment that reruns each second (the watch page) fades its elements while it runs:
    # what a reader sees between runs is what is checked
    page.wait_for_function(STILL_JS, timeout=30_000)
    return page.evaluate(RUN_JS, TAGS)


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("path", PAGES)
def test_every_app_page_has_no_serious_accessibility_violation(app_url, page, path, lang):
    sep = "&" if "?" in path else "?"
    page.set_viewport_size({"width": 1280, "height": 720})
    page.goto(f"{app_url}/{path}{sep}lang={lang}", wait_until="domcontentloaded")
    wait_idle(page, 240_000)
    if page.query_selector("#pk-player"):  # its controls are named once its frames are unpacked
        wait_ready(page)
    found = serious(page)
    assert found == [], json.dumps(found, ensure_ascii=False, indent=1)


@pytest.fixture(scope="module")
def offline(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("axe")
    for name in LESSONS:
        assert export.main(["--lesson", name, "--out", str(out), "--format", "html"]) == 0
    return {name: out / f"{name}.html" for name in LESSONS}


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("lesson", LESSONS)
def test_the_offline_player_has_none_on_any_chapter_presenting_or_not(
    browser, offline, lesson, lang
):
    """Each chapter's first frame, in normal and in presenter mode, and with the help open:
    a frame's drawing changes what axe sees (a label's ink on its fill, an image's name)."""
    ctx = browser.new_context(viewport={"width": 1280, "height": 720})
    try:
        page = ctx.new_page()
        page.goto(offline[lesson].as_uri() + f"#frame=0&lang={lang}")
        wait_ready(page)
        starts = page.evaluate("() => window.pkPlayer.data.chapters.map((c) => c.start)")
        found = []
        for present in (False, True):
            page.evaluate(f"() => window.pkPlayer.setPresent({str(present).lower()})")
            for f in starts:
                page.evaluate(f"() => window.pkPlayer.go({f})")
                wait_painted(page, f)
                found += [dict(v, frame=f, present=present) for v in serious(page)]
        page.evaluate("() => window.pkPlayer.help(true)")
        found += [dict(v, help=True) for v in serious(page)]
        assert found == [], json.dumps(found[:6], ensure_ascii=False, indent=1)
    finally:
        ctx.close()


LIVE_JS = """() => { const c = document.querySelector('#pk-caption');
  return {live: c.getAttribute('aria-live'), text: c.textContent.trim()}; }"""


def test_each_frames_caption_is_announced_and_the_grids_are_numbers_too(browser, offline):
    """A screen reader hears each new caption (a polite live region whose text changes with the
    frame), reads each grid as a table of the frame's numbers, and a Tab to a control shows a
    ring."""
    ctx = browser.new_context(viewport={"width": 1280, "height": 720})
    try:
        page = ctx.new_page()
        page.goto(offline["six-steps"].as_uri() + "#frame=3")
        wait_ready(page)
        before = page.evaluate(LIVE_JS)
        page.keyboard.press("ArrowRight")
        wait_painted(page, 4)
        after = page.evaluate(LIVE_JS)
        assert before["live"] == after["live"] == "polite"
        assert before["text"] and after["text"] and before["text"] != after["text"]
        tables = page.evaluate(
            "() => [...document.querySelectorAll('#pk-lg table.pk-sr, #pk-rg table.pk-sr')]"
            ".map((t) => [...t.querySelectorAll('td')].map((d) => d.textContent))"
        )
        assert len(tables) == 2 and all(any(c.strip() for c in t) for t in tables)
        for _ in range(12):  # past the file's own header, to the player's first control
            page.keyboard.press("Tab")
            if page.evaluate("() => !!document.activeElement.closest('#pk-player')"):
                break
        ring = page.evaluate(
            "() => { const e = document.activeElement, s = getComputedStyle(e);"
            " return [e.tagName, s.outlineStyle, parseFloat(s.outlineWidth)]; }"
        )
        assert ring[1] != "none" and ring[2] >= 2, ring
    finally:
        ctx.close()
