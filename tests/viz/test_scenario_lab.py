"""The scenario lab's model (paged/viz/live/lab.py): field-level checks, the link as hostile
input, the TOML the engine reads, and the dry run in-process equal to the engine's CLI."""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import sys
import zlib
from dataclasses import replace
from pathlib import Path

import pytest

from paged.engine.trace import io as T
from paged.engine.trace import scenario as engine_scenario
from paged.viz.live import lab as S

ROOT = Path(__file__).resolve().parents[2]
LAB = S.Lab(
    (
        S.LabRequest("A", "Tell me about the moon", 30, 0),
        S.LabRequest("Bé", 'One word: "sky" colour?\\n', 25, 1, 3),
        S.LabRequest("long", "Write two lines about rain", 20, 2),
    ),
    num_blocks=10,
    block_size=8,
    max_model_len=64,
    policy="oracle",
)


def _token(d: object) -> str:
    raw = json.dumps(d).encode()
    return base64.urlsafe_b64encode(zlib.compress(raw)).decode().rstrip("=")


def test_the_link_round_trips_exactly_and_is_short():
    tok = S.encode(LAB)
    assert S.decode(tok) == (LAB, [])
    assert len(tok) < 600 and tok.isascii() and "=" not in tok and "+" not in tok


@pytest.mark.parametrize(
    "token, says",
    [
        ("", "empty"),
        ("A" * (S.MAX_LINK_CHARS + 1), "longer"),
        ("!!!!", "damaged"),
        ("bm90IGRlZmxhdGVk", "damaged"),
        (base64.urlsafe_b64encode(zlib.compress(b"0" * 3_000_000, 9)).decode(), "too large"),
        (_token([1, 2]), "version"),
        (_token({"v": 1}), "not a scenario"),
        (_token({"v": 1, "requests": [1]}), "not a table"),
        (_token({"v": 1, "requests": [{}] * (S.MAX_REQUESTS + 1)}), "at most"),
        # 5,000 levels of [ deflate to 30 bytes; json.loads raised RecursionError
        (base64.urlsafe_b64encode(zlib.compress(b"[" * 5000)).decode(), "damaged"),
    ],
)
def test_hostile_links_are_one_line_errors(token, says):
    with pytest.raises(S.LabError) as e:
        S.decode(token)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_wrong_types_in_a_link_become_field_errors_not_crashes():
    lab, errors = S.decode(
        _token(
            {
                "v": 1,
                "num_blocks": "lots",
                "policy": "best",
                "requests": [
                    {
                        "id": 7,
                        "prompt": ["x"],
                        "max_tokens": True,
                        "arrival_step": 1.5,
                        "stop_after": "soon",
                    }
                ],
            }
        )
    )
    fields = {(e.row, e.field) for e in errors}
    assert fields == {
        (None, "num_blocks"),
        (None, "policy"),
        (0, "id"),
        (0, "prompt"),
        (0, "max_tokens"),
        (0, "arrival_step"),
        (0, "stop_after"),
    }
    assert lab.policy == "max"


def _link_with(arena: dict | None = None, **req0) -> str:
    d = {"v": 1, **S.to_dict(LAB), **(arena or {})}
    d["requests"][0].update(req0)
    return _token(d)


#: Values a looser check would pass and that would then break the page for the whole session:
#: text str.isdigit() takes but int() refuses, and numbers past what Streamlit's widgets draw.
BROKE_THE_PAGE = {
    "superscript digit": ("max_tokens", _link_with(max_tokens="²")),
    "double minus": ("arrival_step", _link_with(arrival_step="--3")),
    "past a browser number": ("num_blocks", _link_with({"num_blocks": 2**53})),
    "past a table cell": ("max_tokens", _link_with(max_tokens=10**30)),
}


@pytest.mark.parametrize("field, token", BROKE_THE_PAGE.values(), ids=BROKE_THE_PAGE)
def test_a_link_value_no_widget_can_show_is_a_field_error(field, token):
    lab, errors = S.decode(token)
    assert [(e.field, e.message) for e in errors] == [(field, S.NOT_A_NUMBER)]
    assert abs(getattr(lab, field, None) or getattr(lab.requests[0], field)) < 10**10


def _lab_page():
    from paged.viz import ui_text
    from paged.viz.app.boundary import boundary
    from paged.viz.app.lab import render

    boundary(ui_text.load("safe")["en"]["page_failed"])(render)("en")


@pytest.mark.parametrize("field, token", BROKE_THE_PAGE.values(), ids=BROKE_THE_PAGE)
def test_the_lab_page_opens_such_a_link_with_a_notice_and_stays_usable(field, token):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_function(_lab_page, default_timeout=60)
    at.query_params["scenario"] = token
    at.run()
    assert not at.exception and not at.error  # the boundary's line is an st.error
    [notice] = [w.value for w in at.warning]
    assert "1 unreadable value" in notice and field.replace("_", "\\_") in notice
    assert len(at.number_input) == 3  # the arena's fields: the form is drawn
    at.run()  # a later rerun of the same session
    assert not at.exception and not at.error and len(at.number_input) == 3


@pytest.mark.parametrize(
    "change, row, field, says",
    [
        ({"req": {"max_tokens": 0}}, 0, "max_tokens", "1 to"),
        (
            {"num_blocks": 1, "block_size": 2, "max_model_len": 2},
            0,
            "prompt",
            "more than the whole arena",
        ),
        ({"req": {"id": "toolong"}}, 0, "id", "1 to 4"),
        ({"req": {"id": "Bé"}}, 1, "id", "used twice"),
        ({"req": {"prompt": "  "}}, 0, "prompt", "empty"),
        ({"req": {"stop_after": 30}}, 0, "stop_after", "max_tokens"),
        ({"req": {"arrival_step": -1}}, 0, "arrival_step", "0 to"),
        ({"max_model_len": 1000}, None, "max_model_len", "more than the arena"),
        ({"num_blocks": 1000}, None, "num_blocks", "readable grid"),
        ({"block_size": 0}, None, "block_size", "1 to"),
    ],
)
def test_each_bad_value_is_named_by_row_and_field(change, row, field, says):
    change = dict(change)
    req = change.pop("req", None)
    lab = LAB
    if req:
        lab = replace(lab, requests=(replace(lab.requests[0], **req),) + lab.requests[1:])
    lab = replace(lab, **change)
    errors = S.check(lab)
    assert any(e.row == row and e.field == field and says in e.message for e in errors), errors
    with pytest.raises(S.LabError):
        S.record_dry(lab)  # nothing runs


def test_the_toml_is_an_engine_scenario_with_the_same_requests(tmp_path):
    path = tmp_path / "lab.toml"
    path.write_text(S.to_toml(LAB), encoding="utf-8")
    sc = engine_scenario.load(path)
    assert (sc.num_blocks, sc.block_size, sc.max_model_len) == (10, 8, 64)
    assert [(r.id, r.prompt, r.max_tokens, r.arrival_step, r.output_len) for r in sc.requests] == [
        (r.id, r.prompt, r.max_tokens, r.arrival_step, r.stop_after) for r in LAB.requests
    ]
    assert [r.ignore_eos for r in sc.requests] == [True, False, True]
    # the comparison the lab drew: LAB's oracle on the left, paging on the right
    assert [(r.label, r.allocator) for r in sc.runs] == [("oracle", "oracle"), ("paged", "paged")]
    # the lab builds the very scenario (header text included) without writing the file
    direct = S.engine_scenario(LAB)
    assert direct == sc and direct.raw == sc.raw


def test_the_in_process_dry_run_equals_the_engines_cli(tmp_path):
    """The lab records in-process; the engine's CLI on the lab's TOML gives the same events."""
    path = tmp_path / "lab.toml"
    path.write_text(S.to_toml(LAB), encoding="utf-8")
    out = tmp_path / "cli.jsonl"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "paged",
            "record",
            "--scenario",
            str(path),
            "--out",
            str(out),
            "--forward",
            "skip",
        ],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=120,
    )
    dry = S.record_dry(LAB)
    mine, cli = dry.trace(), T.read(out)
    assert mine == T.loads(dry.trace_text)  # folded as built: the same trace its file reads as
    assert mine.run_names == cli.run_names == ["oracle", "paged"]
    for name in mine.run_names:
        assert mine.runs[name] == cli.runs[name]
    sides = {s: {"en": s, "zh": s} for s in ("left", "right")}
    lesson = S.lesson_for(LAB, S.record_dry(LAB), sides, {"en": "t", "zh": "t"})
    assert lesson.left.run.allocator != lesson.right.run.allocator
    names = {v.name for f in lesson.right.frames for v in f.requests.values()}
    assert names >= {"A", "Bé", "long"}


def test_each_recording_is_its_own_content_to_the_player_and_each_language_the_same():
    """Every lab recording is lesson "lab": the player took a new recording for the same
    lesson in another language and kept the last one's frame. The payload now says which
    trace its frames show, the same in both languages and new with each recording."""
    from paged.viz.player import payload as player

    sides = {s: {"en": s, "zh": s} for s in ("left", "right")}
    title = {"en": "t", "zh": "t"}
    one = S.lesson_for(LAB, S.record_dry(LAB), sides, title)
    other_lab = replace(LAB, num_blocks=LAB.num_blocks + 1)
    other = S.lesson_for(other_lab, S.record_dry(other_lab), sides, title)
    en, zh, new = player.payload(one, "en"), player.payload(one, "zh"), player.payload(other, "en")
    assert en["lesson"] == new["lesson"] == "lab"  # the link's name: why it could not tell
    assert en["content"] == zh["content"] and en["id"] != zh["id"]
    assert new["content"] != en["content"]


def test_a_scenario_too_big_to_draw_is_refused_in_one_line():
    big = S.Lab(
        tuple(
            S.LabRequest(f"R{i}", "tell me about the sky and the sea", 500, i * 5) for i in range(8)
        ),
        num_blocks=256,
        block_size=16,
        max_model_len=600,
    )
    assert S.check(big) == []
    with pytest.raises(S.LabError) as e:
        S.record_dry(big)
    assert "fewer blocks or shorter answers" in str(e.value) and "\n" not in str(e.value)


#: A link that could break the lab page for the rest of the session in another way: a lone
#: surrogate (valid JSON) reaching the table fails its Arrow conversion on every rerun.
SURROGATE = _link_with(prompt="hi \ud800 there")


def test_a_lone_surrogate_in_a_link_is_a_field_error():
    lab, errors = S.decode(SURROGATE)
    assert [(e.row, e.field, e.message) for e in errors] == [
        (0, "prompt", "is not valid Unicode text")
    ]
    lab.requests[0].prompt.encode("utf-8")  # what the table gets encodes


@pytest.mark.parametrize(
    "token, notice",
    [
        (SURROGATE, "1 unreadable value"),
        (base64.urlsafe_b64encode(zlib.compress(b"[" * 5000)).decode(), "damaged"),
    ],
    ids=["lone surrogate", "deep nesting"],
)
def test_the_lab_page_survives_links_that_broke_it_for_the_session(token, notice):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_function(_lab_page, default_timeout=60)
    at.query_params["scenario"] = token
    at.run()
    assert any(notice in w.value for w in at.warning)
    for _ in range(2):  # the first run and a later rerun of the same session
        assert not at.exception and not at.error
        assert len(at.number_input) == 3  # the form is drawn
        at.run()


def test_the_real_model_is_not_run_on_a_lab_the_dry_run_refuses():
    """Too long to draw: the dry run refuses it, so the real-model button must not start a run
    whose trace would then break the page on every rerun (TraceTooLarge)."""
    from streamlit.testing.v1 import AppTest

    from paged.viz.app.live_registry import REGISTRY

    reqs = tuple(
        S.LabRequest(f"R{i}", "Tell me a story about a cat.", 500, i * 25) for i in range(8)
    )
    big = S.Lab(reqs, num_blocks=256, block_size=16, max_model_len=1024, policy="max")
    assert S.check(big) == []
    with pytest.raises(S.LabError, match="more than the player draws"):
        S.record_dry(big)
    at = AppTest.from_function(_lab_page, default_timeout=60)
    at.query_params["scenario"] = S.encode(big)
    at.run()
    try:
        at.button(key="lab_model").click().run()
        assert not at.exception
        assert any("Not run on the real model" in e.value for e in at.error)
        assert REGISTRY.running() == {}  # nothing was started
    finally:
        REGISTRY.stop_all()


def test_the_real_model_scenario_file_is_written_in_a_private_folder(tmp_path, monkeypatch):
    # not /tmp/paged-kv-lab/<hash of the TOML>.toml: a folder any user of the machine could
    # make first, with a link there to a file of the app's user
    import tempfile

    from paged.viz.app import lab as lab_page

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    forget = getattr(getattr(lab_page, "_lab_folder", None), "cache_clear", lambda: None)
    forget()  # a folder made under the real temp dir by an earlier test
    lab = S.example()
    victim = tmp_path / "victim"
    victim.write_text("the teacher's file\n")
    shared = tmp_path / "paged-kv-lab"
    shared.mkdir()
    name = hashlib.sha256(S.to_toml(lab).encode()).hexdigest()[:16]
    (shared / f"{name}.toml").symlink_to(victim)
    try:
        path = lab_page._scenario_file(lab)
        assert victim.read_text() == "the teacher's file\n"
        assert not path.is_symlink() and path.read_text(encoding="utf-8") == S.to_toml(lab)
        assert path.parent.stat().st_mode & 0o077 == 0  # nobody else may place links in it
        assert lab_page._scenario_file(lab) == path  # one file per content
    finally:
        forget()


def _mounted(at, name: str) -> dict:
    """What the page handed component ``name`` (the lab's player, or the address it writes
    in place: viz.app.address), merged over the page's mounts of it."""
    out: dict = {}
    for el in at.get("bidi_component"):
        if el.proto.component_name == name:
            out.update(json.loads(el.proto.json))
    return out


@pytest.mark.parametrize(
    "raw, want, notice",
    [("3", 3, None), ("99999", "last", None), ("-2", 0, None), ("3.5", 0, "not a frame number")],
)
def test_a_link_that_names_a_frame_records_its_dry_run_and_opens_on_it(raw, want, notice):
    """The player keeps ``?lesson=lab&frame=N`` in the address while a dry run is shown, as on
    the lesson page; a dry run is the scenario's alone (the stand-in model is deterministic),
    so opening that address records it again and opens on frame N. It opened the table with
    nothing recorded."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_function(_lab_page, default_timeout=60)
    for k, v in {"scenario": S.encode(LAB), "lesson": "lab", "frame": raw, "present": "1"}.items():
        at.query_params[k] = v
    at.run()
    assert not at.exception and not at.error
    shown = _mounted(at, "pk_player")
    last = shown["num_frames"] - 1
    assert shown["start"] == (last if want == "last" else want) and shown["link_frame"]
    assert shown["present"] is True and last > 5
    warnings = [w.value for w in at.warning]
    assert any(notice in w for w in warnings) if notice else warnings == []
    assert _mounted(at, "pk_address")["params"] == {"scenario": S.encode(LAB)}


def test_a_link_never_names_a_frame_it_cannot_reopen():
    """A run on the real model is not redone from a link, and once the table changes the
    recording shown is not the scenario the link names: the address drops lesson, frame and
    presenter mode, and the player writes none of them."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_function(_lab_page, default_timeout=60)
    at.query_params["scenario"] = S.encode(LAB)
    at.run()
    assert not _mounted(at, "pk_player")  # nothing recorded: no frame to name
    drops = {"lesson": None, "frame": None, "present": None}
    assert _mounted(at, "pk_address")["params"] == {"scenario": S.encode(LAB), **drops}
    at.button(key="lab_record").click().run()
    assert _mounted(at, "pk_player")["link_frame"] is True
    assert _mounted(at, "pk_address")["params"] == {"scenario": S.encode(LAB)}
    at.session_state["lab_rec"] = (LAB, S.Recording(S.record_dry(LAB).trace_text, dry=False))
    at.run()
    assert _mounted(at, "pk_player")["link_frame"] is False
    assert _mounted(at, "pk_address")["params"] == {"scenario": S.encode(LAB), **drops}
    at.button(key="lab_record").click().run()  # a dry run of it again: linkable
    assert _mounted(at, "pk_player")["link_frame"] is True
    blocks = next(n for n in at.number_input if n.key.startswith("lab_num_blocks"))
    blocks.set_value(LAB.num_blocks + 1).run()
    changed = S.encode(replace(LAB, num_blocks=LAB.num_blocks + 1))
    assert not at.exception and _mounted(at, "pk_player")["link_frame"] is False
    assert _mounted(at, "pk_address")["params"] == {"scenario": changed, **drops}
