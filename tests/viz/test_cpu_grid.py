"""The CPU tier in the viewer: frames count each swapped request's CPU blocks, the grid draws
them under the device arena in the owner's label, and a run without a tier draws as before."""

from __future__ import annotations

import re

from paged.engine.core.accounting import account
from paged.engine.trace import io as T
from paged.engine.trace.header import RunHeader
from paged.viz.fold.reducer import replay
from paged.viz.render import svg
from paged.viz.render.cpu_grid import cpu_owners, moved_cpu_blocks
from paged.viz.render.layout import grid_layout
from tests.engine.test_swap import BLOCK, NUM_CPU, _dry_run

NUM_BLOCKS = 12


def _frames(mode: str, num_cpu: int):
    text, _ = _dry_run(mode, num_cpu)
    events = T.loads(text).runs["paged"]
    info = RunHeader("paged", "paged", NUM_BLOCKS * BLOCK, BLOCK, num_cpu_blocks=num_cpu)
    return events, replay(events, info)


def test_frames_count_each_swapped_requests_cpu_blocks_as_the_tally_does():
    events, frames = _frames("swap", NUM_CPU)
    accts = account(events, NUM_BLOCKS * BLOCK, BLOCK, NUM_CPU)
    parked = [f for f in frames if f.cpu_tables]
    assert parked, "the dry run should swap someone out"
    for f, a in zip(frames, accts, strict=True):
        per_request = {r: v.cpu_blocks for r, v in f.requests.items() if v.cpu_blocks}
        assert per_request == {r: len(t) for r, t in f.cpu_tables.items()}
        assert sum(per_request.values()) == a.cpu_used
        assert len(per_request) == a.swapped
        for r in per_request:  # parked on the CPU: it holds nothing in the device arena
            assert f.requests[r].held == 0 and r not in f.block_tables
            assert f.requests[r].status == "waiting"


def test_the_cpu_tier_is_drawn_under_the_arena_with_each_owners_blocks():
    _, frames = _frames("swap", NUM_CPU)
    f = next(f for f in frames if f.cpu_tables)
    layout = grid_layout(f.run.num_slots, BLOCK)
    out = svg.arena_svg(f, layout)
    tier = re.search(r"<g class='pk-cpu'>(.*)</g>", out)
    assert tier is not None
    owners = cpu_owners(f)
    for req, table in f.cpu_tables.items():
        name = f.requests[req].name
        for logical, cpu in enumerate(table):
            assert owners[cpu] == (req, logical)
            assert f"CPU block c{cpu} · {name}{logical}" in tier.group(1)
    boxes = re.findall(r"<rect [^>]*rx='3' fill='[^']+'><title>", tier.group(1))
    assert len(boxes) == NUM_CPU
    # the tier sits below the device rows: the picture is taller than the grid alone
    height = float(re.search(r"viewBox='[^ ]+ [^ ]+ [^ ]+ ([0-9.]+)'", out).group(1))
    assert height > layout.rows * svg.CELL + 20


def test_a_swap_frame_outlines_the_cpu_blocks_it_moved():
    _, frames = _frames("swap", NUM_CPU)
    f = next(f for f in frames if any(e.kind == "swapped_out" for e in f.events))
    ev = next(e for e in f.events if e.kind == "swapped_out")
    assert {c for _, c in ev.block_map} <= moved_cpu_blocks(f)
    back = next(f for f in frames if any(e.kind == "swapped_in" for e in f.events))
    ev_in = next(e for e in back.events if e.kind == "swapped_in")
    assert {c for c, _ in ev_in.block_map} <= moved_cpu_blocks(back)
    assert ev_in.req not in back.cpu_tables


def test_a_run_without_a_cpu_tier_draws_no_tier_and_the_same_height():
    _, frames = _frames("recompute", 0)
    f = frames[len(frames) // 2]
    layout = grid_layout(f.run.num_slots, BLOCK)
    out = svg.arena_svg(f, layout)
    assert "pk-cpu" not in out and f.cpu_tables == {}
    assert f"{layout.rows * svg.CELL - svg.GAP + 6}'" in out  # the viewBox height as before
    assert all(v.cpu_blocks == 0 for v in f.requests.values())


def test_the_chinese_grid_names_the_tier_in_chinese():
    _, frames = _frames("swap", NUM_CPU)
    f = next(f for f in frames if f.cpu_tables)
    out = svg.arena_svg(f, grid_layout(f.run.num_slots, BLOCK), lang="zh")
    assert "CPU 层" in out and "swap space" not in out


def test_the_tables_panel_lists_each_swapped_requests_cpu_blocks():
    from paged.viz.render import html

    _, frames = _frames("swap", NUM_CPU)
    f = next(f for f in frames if f.cpu_tables)
    panel = html.tables_panel(f, "en")
    for req, table in f.cpu_tables.items():
        assert f"{f.requests[req].name}</span>" in panel
        for n, c in enumerate(table):
            assert f"<span class='pk-map'>{n}→c{c}</span>" in panel
    _, plain = _frames("recompute", 0)
    assert "→c" not in html.tables_panel(plain[len(plain) // 2], "en")
