"""The kernel lesson's offline page in Chromium, as a lecturer drives it: the player's keys
step frames and chapters, F presents, a link opens a frame in a language, and nothing is
fetched. Its presenter-mode captions are the engine's numbers (the fold's own captions)."""

from __future__ import annotations

import pytest

from paged.engine.trace.io import read
from paged.viz.exercises.kernel import kernel_questions, read_answer
from paged.viz.export import standalone
from paged.viz.export.serve import wait_painted, wait_ready
from paged.viz.fold.kernel.frames import caption, chapter_keyframe, fold_kernel, load_kernel_spec


@pytest.fixture(scope="module")
def lesson():
    spec = load_kernel_spec("inside-the-kernel")
    return fold_kernel(spec, read(spec.folder / spec.trace_file))


@pytest.fixture(scope="module")
def page_file(lesson, tmp_path_factory):
    path = tmp_path_factory.mktemp("kernel") / "inside-the-kernel.html"
    path.write_text(standalone.page(lesson), encoding="utf-8")
    return path


def _frame(page) -> int:
    return int(page.evaluate("document.querySelector('#pk-frame').dataset.frame"))


def test_keys_step_frames_and_chapters_and_f_presents(page, page_file, lesson):
    fetched = []
    page.on(
        "request",
        lambda r: (
            fetched.append(r.url) if not r.url.startswith(("file:", "data:", "blob:")) else None
        ),
    )
    page.goto(page_file.as_uri() + "#frame=6")
    wait_ready(page)
    assert _frame(page) == 6
    page.keyboard.press("ArrowRight")
    wait_painted(page, 7)
    page.keyboard.press("PageDown")  # the next chapter: where the attention goes
    heat = lesson.chapter_range("heat")[0]
    wait_painted(page, heat)
    assert lesson.spec.chapter_titles["heat"]["en"] in page.inner_text("#pk-chapter")
    page.keyboard.press("f")
    page.wait_for_function(
        "() => document.querySelector('#pk-player').classList.contains('pk-present')"
    )
    left, _ = caption(lesson, heat, "en")
    assert left in page.inner_text("#pk-caption")
    # T: the projector theme, its drawings kept on white cards; the help lists every key
    page.keyboard.press("t")
    assert page.evaluate("document.querySelector('#pk-player').classList.contains('pk-hc')")
    card = "getComputedStyle(document.querySelector('#pk-lg svg.pk-k-arena')).backgroundColor"
    assert page.evaluate(card) == "rgb(255, 255, 255)"
    page.keyboard.press("t")
    page.keyboard.press("?")
    keys = page.evaluate("[...document.querySelectorAll('#pk-help kbd')].map((k) => k.textContent)")
    assert {"F", "T", "R", "C", "H"} <= set(keys), keys
    page.keyboard.press("Escape")
    # H: how to read this screen, its panels numbered on screen
    page.keyboard.press("h")
    read = page.evaluate(
        "() => { const r = document.querySelector('.pk-read'); return {shown: !r.hidden,"
        " items: r.querySelectorAll('li[data-panel]').length,"
        " nums: r.querySelectorAll('.pk-read-num').length}; }"
    )
    assert read["shown"] and read["items"] >= 6 and read["nums"] >= 4, read
    page.keyboard.press("h")
    # R: points at a request, lighting its blocks in the arena and dimming the others'
    page.keyboard.press("r")
    lit = page.evaluate(
        "() => [document.querySelector('#pk-player').dataset.focus,"
        " document.querySelectorAll('#pk-lg rect[data-req].pk-on').length,"
        " document.querySelectorAll('#pk-lg rect[data-req]:not(.pk-on)').length]"
    )
    assert lit[0] == "1" and lit[1] > 0 and lit[2] > 0, lit
    page.keyboard.press("Escape")
    assert not fetched


def test_a_link_opens_the_walks_result_in_chinese(page, page_file, lesson):
    i = chapter_keyframe(lesson, "walk")
    page.goto(page_file.as_uri() + f"#frame={i}&lang=zh")
    wait_ready(page)
    assert _frame(page) == i
    _, right = caption(lesson, i, "zh")
    assert right in page.inner_text("#pk-caption")
    assert lesson.spec.chapter_titles["walk"]["zh"] in page.inner_text("#pk-chapter")


def test_exercise_mode_asks_the_kernel_lessons_questions_and_scores_them(page, page_file, lesson):
    """E, then every question answered from the keyboard, alternately right and wrong, each
    right answer read afresh from the next frame's fold; the score counts the right ones."""
    asked = {q.id: q for q in kernel_questions(lesson)}
    page.goto(page_file.as_uri() + "#frame=0")
    wait_ready(page)
    page.keyboard.press("e")
    state = (
        "() => [document.querySelector('#pk-player').dataset.asking,"
        " Number(document.querySelector('#pk-frame').dataset.frame)]"
    )
    played: dict[str, bool] = {}
    for _ in range(200):
        qid, frame = page.evaluate(state)
        if qid:
            q = asked[qid]
            answer = read_answer(lesson, q)
            right = len(played) % 2 == 0
            given = (
                answer
                if right
                else (answer + 1 if q.form == "number" else "no" if answer == "yes" else "yes")
            )
            if q.form == "number":
                page.keyboard.type(str(given))
                page.keyboard.press("Enter")
            else:
                page.keyboard.press(str(q.choices.index(given) + 1))
            played[qid] = right
            continue
        if frame >= lesson.num_frames - 1:
            break
        page.keyboard.press("End")  # stops at the next question on the way
    assert set(played) == set(asked)
    text = page.inner_text("#pk-ex")
    assert f"Score: {sum(played.values())} of {len(asked)}." in text
