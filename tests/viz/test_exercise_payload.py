"""What exercise mode (paged/viz/player/asking.js) reads from a payload: a grid for each
click-a-cell question that puts every cell where the renderer draws it, the mode's words in both
languages, and generated questions for an uploaded trace too."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from paged.engine.trace import io as T
from paged.viz.fold.lesson import build
from paged.viz.fold.lesson_folder import available, load_spec, trace_path
from paged.viz.player import payload as player
from paged.viz.render import svg, to_scale

PLAYER = Path(player.__file__).resolve().parent
LESSONS = [n for n in available() if load_spec(n).steps]


def _lesson(name: str, source: str = "lesson"):
    spec = load_spec(name)
    return build(spec, T.read(trace_path(spec)), source=source)


@pytest.mark.parametrize("name", LESSONS)
def test_a_cell_question_maps_each_cell_to_where_the_grid_draws_it(name):
    lesson = _lesson(name)
    layouts = dict(
        zip(
            ("left", "right"), to_scale.side_layouts(lesson.left.run, lesson.right.run), strict=True
        )
    )
    for q in (d for d in player.exercises_data(lesson, "en") if d["form"] == "cells"):
        g, layout = q["grid"], layouts[q["side"]]
        per = layout.block_size if q["unit"] == "block" else 1
        assert g["per"] == per and q["cells"] * per <= layout.num_slots
        for k in range(q["cells"]):
            col, row = layout.xy(k * per)
            x0, y0, x1, y1 = svg.cell_box(row, col, col + per - 1, layout)
            # the box exercise.js cellBox draws, from the payload's numbers alone
            box = (g["x0"] + col * g["cell"], row * g["pitch"])
            assert box == pytest.approx((x0, y0))
            assert per * g["cell"] - g["gap"] == pytest.approx(x1 - x0)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_every_word_exercise_mode_shows_is_in_the_payload_escaped(lang):
    js = "".join((PLAYER / f).read_text(encoding="utf-8") for f in ("asking.js", "follow.js"))
    used = set(re.findall(r"\b(ex_\w+)\b", js))
    used |= {"ex_slot"}  # exercise.js answerHtml
    words = player.payload(_lesson("six-steps"), lang)["exercise_text"]
    assert used and used <= set(words)
    assert all(w and "<" not in w for w in words.values())


def test_an_uploaded_trace_offers_its_generated_questions_to_exercise_mode():
    upload = _lesson("shared-prompt", source="mine.jsonl")
    data = player.payload(upload, "en")["exercises"]
    assert len(data) > len(upload.spec.exercises) >= 5
    assert {"cells", "number", "yesno"} <= {d["form"] for d in data}
    assert all("grid" in d for d in data if d["form"] == "cells")
