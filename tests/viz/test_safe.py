"""Hostile text stays text (viz.safe at every output), a drawing error is one line, and live
runs are limited: one per server, ended with their session, never left as zombies."""

from __future__ import annotations

import logging
import os
import re
import sys
import time
from html.parser import HTMLParser
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from paged.engine.trace.io import loads
from paged.viz import safe
from paged.viz.app.live_registry import LiveRegistry
from paged.viz.fold.lesson import build
from paged.viz.fold.lesson_folder import load_spec
from paged.viz.fold.narration import render_step
from paged.viz.render import figures, html, svg
from paged.viz.render.layout import grid_layout
from tests.hostile_traces import REQUEST_IDS, RUN_NAMES, hostile_trace_text

ROOT = Path(__file__).resolve().parents[2]


# --- escaping --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "![x](http://127.0.0.2:9/x.png)",
        "<img src=x onerror=alert(1)>",
        ":red[red] $x$ **b**",
        "- item",
        "# head",
        "1. first",
        "> quote",
        "a\nb\u2028c",
        "`code` ```fence```",
        "see www.example.com or a@b.co",
        "\\![x](y)",
    ],
)
def test_md_text_leaves_no_markup(text):
    out = safe.md_text(text)
    assert "\n" not in out and "\u2028" not in out
    plain = re.sub(r"`+ .*? `+", "", out)  # code spans are literal: markup inside is text
    for mark in ("![", "](", "<", ":red[", "**", "$x$"):
        assert mark not in plain.replace("\\" + mark[0], ""), (text, out)
    assert not re.match(r"^(?:[-#>+*]|\d+[.)])", out), out


def test_one_line_is_bounded_and_printable():
    s = safe.one_line("a\x00b\u202ec" + "x" * 1000, limit=50)
    assert len(s) == 50 and s.endswith("…") and "\x00" not in s and "\u202e" not in s


class _Tags(HTMLParser):
    """Every tag and attribute a piece of HTML/SVG really contains."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: set[str] = set()
        self.attrs: dict[str, set[str]] = {}

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        for k, v in attrs:
            self.attrs.setdefault(k, set()).add(v or "")


def test_every_frame_of_a_hostile_trace_draws_only_our_own_markup():
    lesson = build(load_spec("six-steps"), loads(hostile_trace_text()), source="x.jsonl")
    layout = grid_layout(lesson.right.run.num_slots, lesson.right.run.block_size)
    parser = _Tags()
    for i in range(lesson.num_frames):
        for side in ("left", "right"):
            frame = lesson.side(side).at(i)
            parser.feed(
                svg.arena_svg(frame, layout, meta=i)
                + html.tables_panel(frame)
                + html.queue_panel(frame)
                + html.metrics_strip(frame)
            )
    assert parser.tags <= {
        "svg",
        "defs",
        "pattern",
        "rect",
        "path",
        "text",
        "title",
        "div",
        "span",
        "h5",
        "b",
    }
    assert not [a for a in parser.attrs if a.startswith("on") or a in ("href", "src")]
    assert {i for i in parser.attrs.get("id", set())} <= {"pk-contiguous-0", "pk-paged-0"}
    assert "u" not in parser.tags and REQUEST_IDS["C"] not in "".join(parser.attrs["class"])


def test_hostile_names_in_plotly_text_are_escaped():
    lesson = build(load_spec("six-steps"), loads(hostile_trace_text()))
    for kf in (k for k in lesson.keyframes if k is not None):
        left, right = lesson.left.at(kf), lesson.right.at(kf)
        fig = figures.side_by_side_figure(
            left, right, render_step(lesson, 0, "en"), "en", ("l", "r")
        )
        text = repr(fig.to_dict())  # hover text, grid labels and annotations alike
        for payload in (*REQUEST_IDS.values(), *RUN_NAMES.values()):
            if payload.startswith(("<", "'")):
                assert payload not in text


# --- the error boundary ----------------------------------------------------------------------


def test_an_error_while_drawing_a_frame_is_one_line_without_paths(monkeypatch, caplog):
    def broken(*a, **k):
        raise RuntimeError("/srv/secret/server/path.py exploded")

    monkeypatch.setattr(html, "tables_panel", broken)
    from paged.viz.app import lesson as lesson_page

    lesson_page._recorded_payload.clear()  # frames drawn by an earlier test would hide the failure
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    with caplog.at_level(logging.ERROR, logger="paged.viz.safe"):
        at.run()
    assert not at.exception
    assert len(at.error) == 1
    line = at.error[0].value
    assert "RuntimeError" in line and "/srv" not in line and "\n" not in line
    ref = re.search(r"ref ([0-9a-f]{8})", line).group(1)
    logged = [r for r in caplog.records if ref in r.getMessage()]
    assert logged and "/srv/secret" in str(logged[0].exc_info[1])  # details stay server-side
    assert at.button(key="pk_source_pick_upload")  # what was drawn before the failure stays


def test_an_error_in_any_page_is_one_line(monkeypatch):
    from paged.viz.app import capacity as capacity_page

    def broken(t, lang):
        raise KeyError("/etc/passwd")

    monkeypatch.setattr(capacity_page, "_pick_model", broken)

    def page():
        from paged.viz.app import pages

        pages._page_body(pages.PAGES[1])()

    at = AppTest.from_function(page, default_timeout=60).run()
    assert not at.exception
    assert len(at.error) == 1 and "KeyError" in at.error[0].value
    assert "passwd" not in at.error[0].value


# --- live runs -------------------------------------------------------------------------------

SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]
# A child that starts a grandchild in its process group, then waits.
FAMILY = [
    sys.executable,
    "-c",
    (
        "import subprocess, sys, time\n"
        "g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        "print(g.pid, flush=True)\ntime.sleep(600)\n"
    ),
]


def _state(pid: int) -> str | None:
    """The /proc state letter of ``pid`` (Z = zombie), or None when it no longer exists."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):  # gone before, or while, it was read
        return None
    return stat.rsplit(")", 1)[1].split()[0]


def _gone(pid: int, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _state(pid) is None:
            return True
        time.sleep(0.05)
    return False


def test_a_second_session_is_refused_while_one_live_run_runs():
    reg = LiveRegistry(alive=lambda s: True, interval=0.1)
    first = reg.start("s1", SLEEPER)
    try:
        assert first is not None
        assert reg.start("s2", SLEEPER) is None
        assert reg.start("s1", SLEEPER) is None  # one per server, not one per session
        first.stop()
        assert _gone(first.proc.pid)  # waited for: no zombie
        second = reg.start("s2", SLEEPER)
        assert second is not None and second.proc.poll() is None
    finally:
        reg.stop_all()


def test_a_live_run_stops_when_its_session_ends_and_leaves_no_zombie():
    sessions = {"s1"}
    reg = LiveRegistry(alive=lambda s: s in sessions, interval=0.1)
    run = reg.start("s1", FAMILY)
    try:
        deadline = time.monotonic() + 30
        while not run.snapshot()[0] and time.monotonic() < deadline:
            time.sleep(0.05)
        grandchild = int(run.snapshot()[0][0])
        time.sleep(0.5)
        assert run.proc.poll() is None and _state(grandchild) not in (None, "Z")
        sessions.clear()  # the tab is closed: Streamlit drops the session
        assert _gone(run.proc.pid), _state(run.proc.pid)  # stopped by the reaper and reaped
        assert _gone(grandchild)  # its whole process group went with it
        assert reg.running() == {}
        assert reg.start("s2", SLEEPER) is not None  # the slot is free again
    finally:
        reg.stop_all()


def test_a_finished_child_is_reaped_without_anyone_asking():
    reg = LiveRegistry(alive=lambda s: True, interval=0.1)
    run = reg.start("s1", [sys.executable, "-c", "pass"])
    assert _gone(run.proc.pid), "a finished live run was left a zombie"
    assert reg.running() == {}


def test_the_page_tells_a_second_session_a_live_run_is_in_progress():
    from paged.viz.app.live_registry import REGISTRY

    other = REGISTRY.start("another-session", SLEEPER)
    assert other is not None
    try:
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
        at.button(key="pk_source_pick_live").click().run()
        at.button(key="pk_live_btn").click().run()
        assert not at.exception and "pk_live" not in at.session_state
        assert any("live run is in progress" in w.value for w in at.warning)
    finally:
        REGISTRY.stop_all()
    assert _gone(other.proc.pid)
    assert os.getpid() != other.proc.pid


def test_a_live_run_is_shown_only_on_its_own_lesson():
    """The session's live run was folded under whichever lesson was picked next: six-steps'
    frames under shared-prompt's titles, or another lesson's failure on this one."""
    from paged.viz.app.live_registry import REGISTRY

    try:
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
        at.button(key="pk_source_pick_live").click().run()
        at.button(key="pk_forward_skip").click().run()
        at.button(key="pk_live_btn").click().run()
        end = time.monotonic() + 60
        while not any("frames live" in s.value for s in at.success):
            assert time.monotonic() < end, "the dry run never finished"
            time.sleep(0.5)
            at.run()
        at.button(key="pk_lesson_pick_shared-prompt").click().run()
        assert not at.exception and not at.error
        assert not any("frames live" in s.value for s in at.success)  # not six-steps' run
        at.button(key="pk_lesson_pick_six-steps").click().run()
        assert any("frames live" in s.value for s in at.success)  # its own lesson shows it
    finally:
        REGISTRY.stop_all()
