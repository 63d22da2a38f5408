"""What the player can point at, as the server draws it (paged/viz/render/point.py, the markup in
paged/viz/render/svg.py and html.py, paged/viz/player/point.py): each callout's number is an event's and its
place the fold's, every cell and row says whose it is, and the clicker's stops are the lesson's
keyframes. No browser (tests/browser/test_point_browser.py drives the page)."""

from __future__ import annotations

import functools
import re
from dataclasses import replace
from pathlib import Path

from paged.engine.core import events as E
from paged.engine.trace import io as T
from paged.viz.fold.lesson import build
from paged.viz.fold.lesson_folder import load_spec, trace_path
from paged.viz.player import payload, point
from paged.viz.render import html, svg
from paged.viz.render import point as marks
from paged.viz.render.layout import grid_layout

PLAYER_HTML = Path(payload.ASSETS / "player.html").read_text(encoding="utf-8")


@functools.cache
def lesson(name: str):
    spec = load_spec(name)
    return build(spec, T.read(trace_path(spec)))


def _layout(frame):
    return grid_layout(frame.run.num_slots, frame.run.block_size)


def test_a_refusal_for_want_of_a_hole_is_called_out_on_the_hole_of_that_size():
    les = lesson("six-steps")
    frame = les.left.at(les.keyframes[4])
    refused = frame.blocked_by("no_hole")
    (c,) = marks.callouts(frame, "en")
    (start, length), *_ = c.ranges
    assert c.kind == "hole" and length == refused.largest_hole < refused.need_slots
    assert set(frame.owners[start : start + length]) == {None}  # free, every slot of it
    assert c.say == f"largest hole {refused.largest_hole} < {refused.need_slots}"
    assert marks.callouts(frame, "zh")[0].say.startswith("最大空洞")


def test_no_callout_where_no_hole_has_the_size_the_event_reports():
    les = lesson("six-steps")
    frame = les.left.at(les.keyframes[4])
    refused = frame.blocked_by("no_hole")
    wrong = replace(refused, largest_hole=refused.largest_hole + 1)
    blocked = tuple(wrong if b is refused else b for b in frame.blocked)
    assert marks.callouts(replace(frame, blocked=blocked)) == []


def test_copies_and_swaps_are_called_out_on_their_blocks():
    for name, kind, event in (
        ("parallel-sampling", "copied", E.BlockCopied),
        ("recompute-or-swap", "swapped_out", E.SwappedOut),
        ("recompute-or-swap", "swapped_in", E.SwappedIn),
    ):
        side = lesson(name).right
        frame = next(f for f in side.frames if any(isinstance(e, event) for e in f.events))
        evs = [e for e in frame.events if isinstance(e, event)]
        got = [c for c in marks.callouts(frame) if c.kind == kind]
        assert len(got) == min(len(evs), marks.MAX_CALLOUTS), name
        ev, c = evs[0], got[0]
        bs = frame.run.block_size
        if kind == "copied":
            want = [ev.src, ev.dst]
        else:
            want = (
                [d for d, _ in ev.block_map]
                if kind == "swapped_out"
                else [d for _, d in ev.block_map]
            )
        assert [s // bs for s, _ in c.ranges] == want
        assert frame.requests[ev.req].name in c.say


def test_every_cell_row_and_chip_says_whose_it_is_escaped():
    les = lesson("six-steps")
    frame = les.right.at(les.keyframes[2])
    evil = "<b>'x"
    renamed = replace(
        frame,
        owners=tuple(evil if o == "A" else o for o in frame.owners),
        block_tables={(evil if r == "A" else r): t for r, t in frame.block_tables.items()},
        running=tuple(evil if r == "A" else r for r in frame.running),
        requests={(evil if r == "A" else r): v for r, v in frame.requests.items()},
    )
    drawn = svg.arena_svg(renamed, _layout(frame)) + html.tables_panel(renamed)
    drawn += html.queue_panel(renamed)
    assert "<b>'x" not in drawn and "data-req='&lt;b&gt;&#x27;x'" in drawn
    owners = [o for o in frame.owners if o is not None]
    cells = re.findall(r"<rect [^>]*data-req='([^']+)'", svg.arena_svg(frame, _layout(frame)))
    assert set(cells) == set(owners)
    panel = html.tables_panel(frame)
    for req, table in frame.block_tables.items():
        assert f"data-req='{req}' tabindex='0'" in panel
        for b in table:
            assert f"data-block='{b}'" in panel


def test_block_marks_are_the_blocks_the_tables_hold():
    les = lesson("shared-prompt")
    frame = next(f for f in les.right.frames if svg.ref_counts(f))
    got = re.findall(r"data-block='(\d+)'", marks.block_marks(frame, _layout(frame)))
    assert sorted(map(int, got)) == sorted({b for t in frame.block_tables.values() for b in t})
    assert marks.block_marks(les.left.at(frame.index), _layout(frame)) == ""  # no blocks


def test_the_clicker_stops_at_the_keyframes_and_the_reading_page_names_real_panels():
    les = lesson("recompute-or-swap")
    chs = payload.chapters.chapters(les)
    got = point.extras(les, "zh", chs)
    assert [k["frame"] for k in got["keyframes"]] == sorted(set(les.keyframes) - {None})
    assert all(k["title"].startswith(f"{n + 1} ·") for n, k in enumerate(got["keyframes"]))
    for box, _ in point.PANELS:
        assert f'id="{box}"' in PLAYER_HTML, box
    assert got["reading"].count("<li") == len(point.PANELS)
    words = re.sub(r"<[^>]+>", " ", got["reading"])
    assert re.search("[\u4e00-\u9fff]", words) and "How to read" not in words
