"""Exercise mode in the offline player (paged/viz/player/asking.js), from the keyboard and the
mouse alone: a lesson's questions played through, alternately right and wrong, each right answer
read afresh from the fold of the frame after the question, never from the payload."""

from __future__ import annotations

from pathlib import Path

import pytest

from paged.engine.trace import io as T
from paged.viz.exercises import questions, read_answer
from paged.viz.export import lecture as export
from paged.viz.export.serve import wait_ready
from paged.viz.fold.lesson import build
from paged.viz.fold.lesson_folder import load_spec, trace_path

pytestmark = [pytest.mark.browser]

LESSON = "six-steps"
STATE_JS = """() => { const d = document.querySelector('#pk-player').dataset;
  const fb = [...document.querySelectorAll('#pk-ex .pk-ex-fb')];
  return { frame: Number(d.frame), asking: d.asking, exercise: d.exercise,
    ok: fb.filter((p) => p.classList.contains('pk-ex-ok')).map((p) => p.dataset.q),
    no: fb.filter((p) => p.classList.contains('pk-ex-no')).map((p) => p.dataset.q),
    text: document.querySelector('#pk-ex').innerText }; }"""
# the middle of cell ``k`` of the asked side's grid, in page coordinates
CELL_JS = """(k) => { const p = window.pkPlayer, q = p.ex.asking[0];
  const svg = document.querySelector(q.side === 'left' ? '#pk-lg svg' : '#pk-rg svg');
  const slot = k * q.grid.per, g = q.grid;
  const pt = new DOMPoint(g.x0 + (slot % g.cols) * g.cell + g.cell / 2,
    Math.floor(slot / g.cols) * g.pitch + g.pitch / 2).matrixTransform(svg.getScreenCTM());
  return [pt.x, pt.y]; }"""


def _wrong(q, answer):
    if q.form == "cells":
        return [(answer[0] + 1) % q.cells]
    if q.form == "number":
        return answer + 1
    return next(c for c in q.choices if c != answer)


def _play(page, q, given) -> None:
    """Answer ``q`` with ``given`` as a student would: a key for a choice, typing for a number,
    clicking the grid for one cell and typing for several."""
    if q.form in ("yesno", "choose"):
        page.keyboard.press(str(q.choices.index(given) + 1))
    elif q.form == "cells" and len(given) == 1:
        x, y = page.evaluate(CELL_JS, given[0])
        page.mouse.click(x, y)
        page.keyboard.press("Enter")
    else:
        text = str(given) if q.form == "number" else ", ".join(f"#{b}" for b in given)
        page.keyboard.type(text)
        page.keyboard.press("Enter")


def test_a_lesson_played_right_and_wrong_ends_with_its_score(browser, tmp_path: Path) -> None:
    assert export.main(["--lesson", LESSON, "--out", str(tmp_path), "--format", "html"]) == 0
    spec = load_spec(LESSON)
    lesson = build(spec, T.read(trace_path(spec)))
    asked = {q.id: q for q in questions(lesson)}
    assert len(asked) >= 5
    ctx = browser.new_context(viewport={"width": 1280, "height": 720})
    page = ctx.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto((tmp_path / f"{LESSON}.html").as_uri() + "#frame=0")
    wait_ready(page)
    page.keyboard.press("?")  # the keys' help names the mode's key
    assert "E" in page.locator("#pk-help kbd").all_inner_texts()
    page.keyboard.press("Escape")
    page.keyboard.press("e")
    played: dict[str, bool] = {}
    for _ in range(400):
        s = page.evaluate(STATE_JS)
        if s["asking"]:
            q = asked[s["asking"]]
            answer = read_answer(lesson, q)
            right = len(played) % 2 == 0
            if not right:  # a step forward waits for the answer
                page.keyboard.press("ArrowRight")
                assert page.evaluate(STATE_JS)["frame"] == q.frame
            _play(page, q, answer if right else _wrong(q, answer))
            played[q.id] = right
            after = page.evaluate(STATE_JS)
            if after["frame"] == q.frame + 1:  # every question of its frame answered
                for qid in [k for k, v in asked.items() if v.frame == q.frame]:
                    assert qid in (after["ok"] if played[qid] else after["no"])
                    assert asked[qid].why["en"].split(" ")[-1] in after["text"]
            continue
        if s["frame"] >= lesson.num_frames - 1:
            break
        page.keyboard.press("End")  # stops at the next question on the way
    assert set(played) == set(asked)
    right = sum(played.values())
    assert f"Score: {right} of {len(asked)}." in page.evaluate(STATE_JS)["text"]
    page.keyboard.press("e")  # leaves exercise mode: the question box goes
    assert page.evaluate("() => document.querySelector('#pk-ex').hidden")
    assert not errors
    ctx.close()
