"""The class answers together, in Chromium on the app's own server (classroom.py): the lecturer
opens a room from the lesson page, a follower's page follows each frame the lecturer shows and
cannot step away; at a question the follower answers on its own page, the lecturer's page shows
the live bars, and the reveal shows the follower its answer graded with the frame's why."""

from __future__ import annotations

import pytest

from paged.viz.export.serve import SERVER_POLL_MS, wait_idle, wait_ready
from tests.app_server import running_app

pytestmark = [pytest.mark.browser]

STATE_JS = """() => { const d = document.querySelector('#pk-player').dataset;
  return { frame: Number(d.frame), asking: d.asking,
    fb: document.querySelector('#pk-ex') ? document.querySelector('#pk-ex').innerText : '' }; }"""


def _frame_is(page, frame: int) -> None:
    page.wait_for_function(
        "(f) => Number(document.querySelector('#pk-player').dataset.frame) === f",
        arg=frame,
        timeout=15000,
        polling=SERVER_POLL_MS,
    )


def test_a_follower_follows_the_lecturer_and_answers_on_its_own_page(browser):
    with running_app(script="classroom.py") as url:
        ctx = browser.new_context(viewport={"width": 1280, "height": 900})
        lecturer = ctx.new_page()
        lecturer.goto(f"{url}/?frame=0")
        wait_ready(lecturer)
        wait_idle(lecturer)
        lecturer.click(".pk-class-btn")
        lecturer.wait_for_selector(".pk-class-link b", timeout=30000)
        code = lecturer.inner_text(".pk-class-link b")
        data = lecturer.evaluate("() => window.pkPlayer.data.exercises")
        q = next(x for x in data if x["form"] == "yesno" and x["frame"] >= 1)

        follower = ctx.new_page()
        errors: list[str] = []
        follower.on("pageerror", lambda e: errors.append(str(e)))
        follower.goto(f"{url}/pk/class/{code}")
        wait_ready(follower)
        _frame_is(follower, 0)

        lecturer.evaluate("(f) => window.pkPlayer.go(f)", q["frame"])
        _frame_is(follower, q["frame"])
        follower.keyboard.press("End")  # a follower cannot step away from the lecturer
        assert follower.evaluate(STATE_JS)["frame"] == q["frame"]
        follower.wait_for_function(
            "(id) => document.querySelector('#pk-player').dataset.asking !== ''",
            arg=q["id"],
            timeout=10000,
        )
        while (asking := follower.evaluate(STATE_JS)["asking"]) != q["id"]:
            follower.keyboard.press("s")  # other questions of that frame: shown, not answered
            assert asking
        right = q["answer"]
        follower.keyboard.press(str([c["value"] for c in q["choices"]].index(right) + 1))
        assert "Sent" in follower.evaluate(STATE_JS)["fb"]
        assert follower.evaluate(STATE_JS)["frame"] == q["frame"]  # the follower waits

        bar = f".pk-class-q[data-q='{q['id']}'] .pk-class-bar"
        lecturer.wait_for_function(
            "(sel) => [...document.querySelectorAll(sel)].some((b) => b.innerText.endsWith('1'))",
            arg=bar,
            timeout=10000,
        )
        lecturer.click(".pk-class button[data-reveal]")
        follower.wait_for_function(
            "(id) => !!document.querySelector(`#pk-ex .pk-ex-ok[data-q='${id}']`)",
            arg=q["id"],
            timeout=10000,
        )
        lecturer.wait_for_selector(f"{bar}.pk-class-right", timeout=10000)
        assert lecturer.locator(f"{bar}.pk-class-right").count() == 1
        lecturer.keyboard.press("ArrowRight")
        _frame_is(follower, q["frame"] + 1)
        assert not errors
        ctx.close()
