"""The course pack as a student opens it: a folder on disk, from ``file://``, with every network
request refused. The index links every shipped lesson and shows its thumbnail, each lesson page
steps with the arrow keys, and nothing asks the network for anything or throws."""

from __future__ import annotations

from pathlib import Path

import pytest

from paged.viz.export import site
from paged.viz.export.serve import current_frame, wait_painted, wait_ready
from paged.viz.fold.lesson_folder import LESSONS_DIR

#: every lesson the course pack holds, the kernel lesson too
COURSE = site.course_lessons(LESSONS_DIR)

LOCAL = ("file:", "data:", "blob:")

#: every image has finished: loaded, or failed (a broken one is ``complete`` with no width)
SETTLED_JS = "() => [...document.images].every(i => i.complete)"


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """The shipped lessons with their figures (the thumbnails are the first step's); the GIFs
    take minutes for every lesson, so tests/viz/test_wheel.py builds a short one instead."""
    out = tmp_path_factory.mktemp("course")
    site.build_site(out, site.SiteOptions(gif=False))
    return out


def _failed(request, errors: list[str]) -> None:
    """A local file that could not be read is an error; one whose load was cancelled because
    the test clicked on to the next page before it finished is not."""
    if request.url.startswith(LOCAL) and "ERR_ABORTED" in (request.failure or ""):
        return
    errors.append(f"failed: {request.url} ({request.failure})")


@pytest.fixture
def offline(browser):
    """A tab whose every non-file request is refused and recorded, with its page errors."""
    ctx = browser.new_context(viewport={"width": 1280, "height": 720})
    asked: list[str] = []
    errors: list[str] = []

    def route(r):
        if r.request.url.startswith(LOCAL):
            r.continue_()
        else:
            asked.append(r.request.url)
            r.abort()

    ctx.route("**/*", route)
    page = ctx.new_page()
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("requestfailed", lambda r: _failed(r, errors))
    yield page, asked, errors
    ctx.close()


def test_the_index_links_every_lesson_and_shows_its_thumbnail(built, offline):
    page, asked, errors = offline
    page.goto((built / "index.html").as_uri())
    page.wait_for_load_state("load")
    cards = page.eval_on_selector_all("article.card", "els => els.map(e => e.dataset.lesson)")
    assert sorted(cards) == sorted(COURSE) and "inside-the-kernel" in cards
    # the thumbnails load lazily, so Chromium may start even the visible ones after the load
    # event: bring each into view as a reader scrolling would, then wait for it to settle
    images = page.locator("img")
    for i in range(images.count()):
        images.nth(i).scroll_into_view_if_needed()
    page.wait_for_function(SETTLED_JS, timeout=30000)
    broken = page.eval_on_selector_all(
        "img", "els => els.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src)"
    )
    assert images.count() == len(cards) and not broken
    assert asked == [] and errors == []


@pytest.mark.parametrize("name", COURSE)
def test_each_lesson_page_steps_with_the_arrow_keys_offline(built, offline, name):
    page, asked, errors = offline
    page.goto((built / "index.html").as_uri())
    page.click(f"article[data-lesson='{name}'] a.open[data-lang='en']")
    # the player may already have written its frame into the hash
    assert page.url.split("#")[0].endswith(f"/lessons/{name}.html")
    start = wait_ready(page)
    page.keyboard.press("ArrowRight")
    wait_painted(page, start + 1)
    page.keyboard.press("ArrowRight")
    wait_painted(page, start + 2)
    page.keyboard.press("ArrowLeft")
    wait_painted(page, start + 1)
    assert current_frame(page) == start + 1
    assert asked == [] and errors == []


def test_the_chinese_link_opens_the_lesson_in_chinese_and_it_leads_back(built, offline):
    page, asked, errors = offline
    page.goto((built / "index.html").as_uri())
    page.click("article[data-lesson='six-steps'] a.open[data-lang='zh']")
    wait_ready(page)
    assert page.evaluate("document.documentElement.lang") == "zh-Hans"
    page.click("a.pk-sa-home")
    assert page.url.endswith("/index.html")
    assert asked == [] and errors == []


def test_the_sources_page_opens_from_the_index_and_leads_back(built, offline):
    page, asked, errors = offline
    page.goto((built / "index.html").as_uri())
    page.click("footer a[href='sources.html'] >> nth=0")
    assert "SOSP 2023" in page.content()
    page.click("section[lang='en'] a[href='index.html']")
    assert page.url.endswith("/index.html")
    assert asked == [] and errors == []
