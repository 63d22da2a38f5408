"""The scenario lab in Chromium: a 3-request scenario opened from a link, recorded as a dry
run and stepped to its end; bad values named by field with nothing recorded; the link on the
page round-trips the scenario exactly."""

from __future__ import annotations

import contextlib
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import playwright.sync_api as playwright
import pytest

from paged.viz.export import serve
from paged.viz.export.serve import shown_frame, wait_idle, wait_painted, wait_ready
from paged.viz.live import lab as S

pytestmark = [
    pytest.mark.browser,
]

THREE = S.Lab(
    (
        S.LabRequest("A", "Tell me about the moon and its phases", 30, 0),
        S.LabRequest("Bee", "One word: sky colour?", 25, 1, 3),
        S.LabRequest("C7", "Write two lines about rain", 20, 2),
    ),
    num_blocks=8,
    block_size=8,
    max_model_len=56,
    policy="pow2",
)


@pytest.fixture
def page(page):
    """The shared tab (tests/conftest.py, which accepts downloads) at the lab's size."""
    page.set_viewport_size({"width": 1400, "height": 1000})
    return page


def _open(page, app_url: str, lab: S.Lab | None = None, token: str | None = None) -> None:
    tok = token if token is not None else S.encode(lab)
    page.goto(f"{app_url}/lab?scenario={tok}")
    page.get_by_role("button", name="Record (dry run)").wait_for(timeout=60_000)


def _record_and_step(page, app_url: str, frames: int) -> None:
    """Open THREE in the lab, record its dry run and step it to frame ``frames``."""
    _open(page, app_url, THREE)
    page.get_by_role("button", name="Record (dry run)").click()
    assert wait_ready(page) == 0
    for f in range(1, frames + 1):
        page.keyboard.press("ArrowRight")
        wait_painted(page, f)


def _link(page) -> str:
    code = page.locator("[data-testid='stCode']").filter(has_text="scenario=").first
    code.wait_for(timeout=30_000)
    return code.inner_text().strip()


def test_a_linked_scenario_records_dry_and_steps_to_its_end(page, app_url):
    _open(page, app_url, THREE)
    link = _link(page)
    got, errors = S.decode(parse_qs(urlparse(link).query)["scenario"][0])
    assert got == THREE and errors == []  # the form read the link back exactly
    page.get_by_role("button", name="Record (dry run)").click()
    assert wait_ready(page) == 0
    last = page.evaluate("() => window.pkPlayer.frames.length - 1")
    assert last > 5
    page.keyboard.press("ArrowRight")
    wait_painted(page, 1)
    page.keyboard.press("End")
    wait_painted(page, last)
    assert shown_frame(page) == last
    # the ids are shown whole on the grid, not cut to one letter
    page.keyboard.press("Home")
    wait_painted(page, 0)
    for f in range(1, min(last, 8)):
        page.keyboard.press("ArrowRight")
        wait_painted(page, f)
    grids = page.locator("#pk-player").inner_text()
    assert "Bee" in grids and "C7" in grids
    # the recording travels as one offline file too
    button = page.get_by_role("button", name="Download as one HTML file")
    with page.expect_download(timeout=60_000) as dl:
        button.click()
    text = Path(dl.value.path()).read_text(encoding="utf-8")
    assert "window.pkPlayer" in text and '"lesson":"lab"' in text
    # a fresh page from the link opens the same scenario
    page.goto(link.replace(urlparse(link).netloc, urlparse(app_url).netloc))
    again = S.decode(parse_qs(urlparse(_link(page)).query)["scenario"][0])[0]
    assert again == THREE
    # on that sound scenario, an arena smaller than one prompt is named and records nothing
    blocks = page.get_by_label("Blocks")
    blocks.fill("1")
    blocks.press("Enter")
    msg = page.locator("[data-testid='stAlert']").filter(has_text="more than the whole arena")
    msg.wait_for(timeout=30_000)
    assert page.get_by_role("button", name="Record (dry run)").is_disabled()
    assert page.locator("#pk-player").count() == 0


def test_the_table_keeps_its_keys_while_the_player_is_open(page, app_url):
    """With a recording open below it, the table's arrow keys move its own selection and a
    typed letter edits a cell: the player stepped instead (an F turned presenter mode on)."""
    _open(page, app_url, THREE)
    page.get_by_role("button", name="Record (dry run)").click()
    assert wait_ready(page) == 0
    wait_idle(page)  # a run still finishing would draw the table afresh under its editor
    box = page.locator("[data-testid='stDataFrame'] canvas").first.bounding_box()
    cell = "() => document.activeElement.id === 'glide-cell-2-0'"
    for x in range(8, int(box["width"]), 24):  # the first row's id cell, wherever columns fall
        page.mouse.click(box["x"] + x, box["y"] + 50)
        try:  # the table moves focus to the cell it selected, a moment later
            page.wait_for_function(cell, timeout=1500)
            break
        except playwright.TimeoutError:
            page.keyboard.press("Escape")
    else:
        pytest.fail("could not select the first row's id cell")
    page.keyboard.press("ArrowRight")  # on to the prompt
    with contextlib.suppress(playwright.TimeoutError):
        page.wait_for_function("() => document.activeElement.id === 'glide-cell-3-0'", timeout=5000)
    assert page.evaluate("() => document.activeElement.id") == "glide-cell-3-0"
    page.keyboard.press("Enter")
    editing = "() => document.activeElement.tagName === 'TEXTAREA'"
    page.wait_for_function(editing, timeout=10_000)
    assert page.evaluate("() => document.activeElement.value") == THREE.requests[0].prompt
    page.keyboard.press("Escape")
    page.wait_for_function(f"() => !({editing})()")
    page.keyboard.press("f")  # typing over the selected prompt, not presenter mode
    page.wait_for_function(editing, timeout=10_000)
    assert page.evaluate("() => document.activeElement.value") == "f"
    page.keyboard.press("Escape")
    player = page.evaluate("() => ({...document.querySelector('#pk-player').dataset})")
    assert shown_frame(page) == 0 and player["present"] == "0"


def test_bad_values_are_named_by_field_and_record_nothing(page, app_url):
    bad = S.Lab(
        (S.LabRequest("A", "Tell me about the moon", 0, 0),) + THREE.requests[1:],
        num_blocks=8,
        block_size=8,
        max_model_len=56,
    )
    _open(page, app_url, bad)
    alert = page.locator("[data-testid='stAlert']").filter(has_text="max_tokens")
    alert.wait_for(timeout=30_000)
    assert "Request 1" in alert.inner_text()
    assert page.get_by_role("button", name="Record (dry run)").is_disabled()
    assert page.locator("#pk-player").count() == 0
    # an arena smaller than one prompt: checked on the linked scenario's page (test above)


def test_a_damaged_link_says_so_and_opens_the_example(page, app_url):
    _open(page, app_url, token="eJzLSM3JyVcozy_KSQEAGgQEXQ" + "A" * 7000)
    warn = page.locator("[data-testid='stAlert']").filter(has_text="could not be opened")
    warn.wait_for(timeout=30_000)
    got = S.decode(parse_qs(urlparse(_link(page)).query)["scenario"][0])[0]
    assert got == S.example()


@pytest.mark.model
def test_a_scenario_records_on_the_real_model_with_progress(page, app_url):
    """The same table on SmolLM2 in a child process: progress while it runs, then the player
    on the finished trace (its header says which model)."""
    small = S.Lab(
        (
            S.LabRequest("A", "The capital of France is", 6, 0),
            S.LabRequest("B2", "Count: one, two,", 5, 1),
        ),
        num_blocks=8,
        block_size=4,
        max_model_len=24,
        policy="max",
    )
    _open(page, app_url, small)
    page.get_by_role("button", name="Record on the real model").click()
    page.locator("[data-testid='stAlert']").filter(has_text="Recording on the real model").wait_for(
        timeout=60_000
    )
    assert wait_ready(page, timeout_ms=300_000) == 0
    page.keyboard.press("End")
    last = page.evaluate("() => window.pkPlayer.frames.length - 1")
    wait_painted(page, last)
    assert last >= 5


def test_the_address_of_a_dry_run_reopens_its_frame(page, app_url):
    """The player keeps ``?lesson=lab&frame=N`` in the address bar, as on the lesson page: a
    fresh page from that address records the same dry run and opens on frame N (it opened the
    table with nothing recorded). Once the table changes, the frames on screen are not the
    linked scenario's any more: the address names no frame, and stepping writes none."""
    _record_and_step(page, app_url, 3)
    page.wait_for_function("() => /[?&]frame=3(&|$)/.test(location.search)")
    here = page.evaluate("location.href")
    page.goto(here)
    assert wait_ready(page) == 3
    assert S.decode(parse_qs(urlparse(here).query)["scenario"][0])[0] == THREE
    wait_idle(page)
    blocks = page.get_by_label("Blocks")
    blocks.fill(str(THREE.num_blocks + 1))
    blocks.press("Enter")
    page.get_by_text("The table has changed since this recording").wait_for(timeout=30_000)
    page.wait_for_function("() => !/[?&](lesson|frame)=/.test(location.search)")
    # the address and the player hear of the change in separate mounts; a key the player took
    # before its own wrote frame= back until that mount took it away again
    page.wait_for_function("() => window.pkPlayer && window.pkPlayer.linkFrame === false")
    page.evaluate("() => document.activeElement.blur()")  # the keys are the player's again
    page.keyboard.press("ArrowRight")
    wait_painted(page, 4)
    search = serve.url_after_one_animation_frame(page)
    assert "frame=" not in search and "scenario=" in search


def test_a_new_recording_opens_on_its_first_frame_not_the_last_ones(page, app_url):
    """Every recording is lesson "lab" to the player, which kept its frame for the "same
    lesson": after stepping one recording to frame 3, the next scenario's recording opened on
    frame 3 too. A new recording opens where the lab says: frame 0."""
    _record_and_step(page, app_url, 3)
    first = page.evaluate("() => window.pkPlayer.data.id")
    wait_idle(page)
    blocks = page.get_by_label("Blocks")
    blocks.fill(str(THREE.num_blocks + 1))
    blocks.press("Enter")
    page.get_by_text("The table has changed since this recording").wait_for(timeout=30_000)
    wait_idle(page)
    page.get_by_role("button", name="Record (dry run)").click()
    # the new frames are in once the player holds the new payload (load sets both at once)
    page.wait_for_function(
        "(old) => window.pkPlayer.data.id !== old", arg=first, timeout=60_000, polling=50
    )
    assert shown_frame(page) == 0
    page.wait_for_function("() => /[?&]frame=0(&|$)/.test(location.search)")


def test_keys_pressed_while_the_first_frames_unpack_count(page, app_url):
    """A recording's first frames take a moment to unpack; arrows pressed meanwhile (the
    keys' focus is on the Record button just clicked) were dropped, now each counts once."""
    _open(page, app_url, THREE)
    serve.hold_unpacking(page)
    page.get_by_role("button", name="Record (dry run)").click()
    serve.wait_unpacking_held(page)
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowRight")
    # with no frame shown yet, the address names none (not frame=-1)
    search = serve.url_after_one_animation_frame(page)
    assert "frame=" not in search
    serve.release_unpacking(page)
    assert wait_ready(page) == 2
    page.wait_for_function("() => /[?&]frame=2(&|$)/.test(location.search)")
