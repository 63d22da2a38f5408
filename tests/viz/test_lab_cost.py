"""What a scenario link may cost the server: a scenario past the drawing budget is refused
from its table before anything runs, or stopped at the step that passes it; a link opened
again (by this session or another) is neither recorded nor drawn again."""

from __future__ import annotations

import random
import time

import pytest

from paged.viz.live import lab as S

#: The most a link may ask: 8 requests of 512 tokens, 1-slot blocks, the largest arena, the
#: policy that runs one request at a time.
AT_THE_LIMITS = S.Lab(
    tuple(S.LabRequest(f"R{i}", "Tell me a long story.", S.MAX_TOKENS, 0) for i in range(8)),
    num_blocks=S.MAX_SLOTS,
    block_size=1,
    max_model_len=S.MAX_SLOTS,
    policy="max",
)


def _random_lab(rng: random.Random) -> S.Lab:
    bs = rng.choice([1, 4, 16, 64])
    nb = rng.randint(1, S.MAX_SLOTS // bs)
    mml = rng.randint(2, min(nb * bs, 1024))
    reqs = []
    for i in range(rng.randint(1, S.MAX_REQUESTS)):
        mt = rng.randint(1, rng.choice([8, 64, S.MAX_TOKENS]))
        stop = rng.choice([None, rng.randint(1, mt - 1)]) if mt > 1 else None
        arrival = rng.choice([0, rng.randint(0, S.MAX_ARRIVAL)])
        reqs.append(S.LabRequest(f"R{i}", "hi " * rng.randint(1, 30), mt, arrival, stop))
    return S.Lab(tuple(reqs), nb, bs, mml, rng.choice(S.POLICIES))


def test_the_least_steps_from_the_table_never_exceed_the_recorded_steps():
    rng, recorded = random.Random(7), 0
    while recorded < 25:
        lab = _random_lab(rng)
        if S.check(lab):
            continue
        try:
            rec = S.record_dry(lab)
        except S.TooLarge:
            continue
        recorded += 1
        assert S.least_steps(lab) <= sum(rec.steps.values()), lab


def test_a_link_at_the_limits_is_refused_before_anything_runs(monkeypatch):
    from paged.engine.trace import recorder

    def no(*a, **k):
        raise AssertionError("recorded a scenario its table already shows is too large")

    monkeypatch.setattr(recorder, "record", no)
    lab, errors = S.decode(S.encode(AT_THE_LIMITS))
    assert errors == [] and S.check(lab) == []
    t0 = time.process_time()
    with pytest.raises(S.TooLarge) as e:
        S.record_dry(lab)
    assert time.process_time() - t0 < 2
    assert e.value.slots == S.MAX_SLOTS and e.value.steps * S.MAX_SLOTS > S.MAX_FRAME_CELLS
    assert "too large to draw" in str(e.value) and "\n" not in str(e.value)


def test_a_recording_is_stopped_at_the_step_that_passes_the_budget(monkeypatch):
    """A scenario the table cannot show to be too large (here: the bound is lowered under it)
    is stopped while it records, not recorded whole and then refused."""
    lab = S.Lab(
        tuple(S.LabRequest(f"R{i}", "hi there", 200, 0) for i in range(4)),
        num_blocks=16,
        block_size=16,
        max_model_len=256,
        policy="max",
    )
    full = S.record_dry(lab)
    monkeypatch.setattr(S, "MAX_STEPS", 50)
    monkeypatch.setattr(S, "check_size", lambda lab: None)
    with pytest.raises(S.TooLarge) as e:
        S.record_dry(lab)
    assert e.value.steps == 51 < max(full.steps.values())


def _lab_page():
    from paged.viz import ui_text
    from paged.viz.app.boundary import boundary
    from paged.viz.app.lab import render

    boundary(ui_text.load("safe")["en"]["page_failed"])(render)("en")


def _open(token: str):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_function(_lab_page, default_timeout=90)
    at.query_params["scenario"] = token
    at.query_params["frame"] = "2"  # a shared frame: the link records and draws on open
    at.run()
    return at


def test_a_link_at_the_limits_is_one_line_on_the_page():
    at = _open(S.encode(AT_THE_LIMITS))
    assert not at.exception
    assert len(at.error) == 1 and "too large to draw" in at.error[0].value
    assert "\n" not in at.error[0].value


def test_a_second_session_opening_the_same_link_records_and_draws_nothing(monkeypatch):
    from paged.viz.app import lab as page
    from paged.viz.player import payload as player

    page.LAB_HELD.clear()
    calls = {"record": 0, "draw": 0}
    record, draw = S.record_dry, player.payload

    def counted_record(lab):
        calls["record"] += 1
        return record(lab)

    def counted_draw(lesson, lang):
        calls["draw"] += 1
        return draw(lesson, lang)

    monkeypatch.setattr(S, "record_dry", counted_record)
    monkeypatch.setattr(player, "payload", counted_draw)
    lab = S.example()
    for _ in range(2):
        at = _open(S.encode(lab))
        assert not at.exception and not at.error
        assert "Recorded" in " ".join(c.value for c in at.caption)
    assert calls == {"record": 1, "draw": 1}
    at.run()  # a rerun of the same session folds nothing either
    assert calls == {"record": 1, "draw": 1}
