"""``attention_read`` events in a trace: the kernel lesson's recording from the real model is
read back whole, its shares add up and name the request's own blocks, and every impossible
reading of K/V is one ``TraceError`` naming its line."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from paged.engine.core import events as E
from paged.engine.trace.io import TraceError, loads

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "paged" / "lessons" / "inside-the-kernel" / "trace.jsonl"


def _lines() -> list[str]:
    return TRACE.read_text(encoding="utf-8").splitlines()


def _reads(lines: list[str]) -> list[int]:
    return [i for i, line in enumerate(lines) if '"attention_read"' in line]


def test_the_recorded_reads_sum_to_one_and_name_the_requests_table_at_their_step():
    """Told apart from the checker: tables rebuilt here from the block events alone."""
    trace = loads(TRACE.read_text(encoding="utf-8"))
    (events,) = trace.runs.values()
    bs = trace.run_header(trace.run_names[0]).block_size
    tables: dict[str, list[int]] = {}
    reads = 0
    for ev in events:
        if isinstance(ev, (E.BlockAllocated, E.BlockShared)):
            tables.setdefault(ev.req, []).append(ev.physical)
        elif isinstance(ev, E.BlockCopied):
            tables[ev.req][ev.logical] = ev.dst
        elif isinstance(ev, E.Finished):
            tables.pop(ev.req, None)
        elif isinstance(ev, E.AttentionRead):
            reads += 1
            assert abs(sum(ev.mass) - 1) < 1e-3
            assert list(ev.physical) == tables[ev.req][: ev.position // bs + 1]
            assert ev.max_diff < 1e-5 and ev.out_diff < 1e-4
    assert reads >= 10  # one per decode step of the chosen request


def _edit(lines: list[str], nth: int, **changes) -> str:
    i = _reads(lines)[nth]
    obj = json.loads(lines[i])
    for key, fn in changes.items():
        obj[key] = fn(obj[key]) if callable(fn) else fn
    lines = list(lines)
    lines[i] = json.dumps(obj).replace('"HUGE"', "1e400")
    return "\n".join(lines) + "\n"


def _swap(v):
    return [v[1], v[0], *v[2:]]


def _falls(rows):
    return [[x + 5 for x in rows[0]], *rows[1:]]


EDITS = {
    "another request's table": (dict(physical=_swap), "names blocks"),
    "a block too many": (dict(physical=lambda v: [*v, 23]), "names blocks"),
    "a position past the table": (dict(position=lambda p: p + 64), "names blocks"),
    "a share missing": (dict(mass=lambda v: v[:-1]), "shares in \\[0, 1\\]"),
    "a share above 1": (dict(mass=lambda v: [1.5, *v[1:]]), "shares in \\[0, 1\\]"),
    "shares that do not add up": (dict(mass=lambda v: [x / 2 for x in v]), "sum to"),
    # written as the text 1e400, which JSON reads as infinity (json.dumps would write Infinity)
    "an infinite share": (dict(mass=lambda v: ["HUGE", *v[1:]]), "finite"),
    "a share that is text": (dict(mass=lambda v: ["0.5", *v[1:]]), "finite"),
    "shares nested": (dict(mass=lambda v: [v]), "finite"),
    "a boolean difference": (dict(max_diff=True), "finite"),
    "a negative difference": (dict(out_diff=-0.1), "differences"),
    "a tile row too few": (dict(tile_m=lambda v: v[:-1]), "tile_m needs"),
    "a head too many": (dict(part_l=lambda v: [[*r, 1.0] for r in v]), "part_l needs"),
    "a running max that falls": (dict(tile_m=_falls), "running max falls"),
    "a sum below one": (dict(part_l=lambda v: [[0.5 for _ in r] for r in v]), "below 1"),
    "a merge that is not the walk's": (dict(merged_m=lambda v: [x + 1 for x in v]), "merged"),
    "a softmax that is not the walk's": (dict(full_l=lambda v: [x * 2 for x in v]), "all-at-once"),
    "a head named twice": (dict(heads=lambda v: [v[0]] * len(v)), "distinct"),
    "a request that never came": (dict(req="nobody"), "never arrived"),
}


@pytest.mark.parametrize("edit,message", EDITS.values(), ids=EDITS.keys())
def test_an_impossible_attention_read_is_one_trace_error_naming_its_line(edit, message):
    lines = _lines()
    with pytest.raises(TraceError, match=message) as err:
        loads(_edit(lines, 3, **edit))
    assert "\n" not in str(err.value)
    assert f"line {_reads(lines)[3] + 1}" in str(err.value)


def test_an_attention_read_in_a_contiguous_run_is_refused():
    lines = _lines()
    header = json.loads(lines[0])
    assert header["runs"][0]["allocator"] == "paged"
    text = "\n".join(lines) + "\n"
    loads(text)  # as recorded: accepted
    header["runs"][0]["allocator"] = "max"
    bad = "\n".join([json.dumps(header), *(line for line in lines[1:])]) + "\n"
    with pytest.raises(TraceError):
        loads(bad)


def test_the_walk_in_the_trace_is_finite_and_monotone():
    for line in (_lines()[i] for i in _reads(_lines())):
        ev = json.loads(line)
        for row_a, row_b in zip(ev["tile_m"], ev["tile_m"][1:], strict=False):
            assert all(b >= a for a, b in zip(row_a, row_b, strict=True))
        assert all(math.isfinite(x) for row in ev["tile_l"] for x in row)


@pytest.mark.parametrize(
    "table,message",
    [
        ('requests = ["Z"]', "requests must list ids"),
        ("requests = []", "requests must list ids"),
        ('requests = ["A"]\nlayer = -1', "layer must be an integer"),
        ('requests = ["A"]\nkv_head = 1.5', "kv_head must be an integer"),
        ('requests = ["A"]\nheads = 2', "unknown key 'heads'"),
    ],
)
def test_a_scenario_asks_for_attention_of_its_own_requests_only(tmp_path, table, message):
    from paged.engine.errors import InvalidConfigError
    from paged.engine.trace.scenario import load

    path = tmp_path / "s.toml"
    path.write_text(
        f'[arena]\nnum_blocks = 4\n[[requests]]\nid = "A"\nprompt = "hi"\nmax_tokens = 2\n'
        f"[attention]\n{table}\n",
        encoding="utf-8",
    )
    with pytest.raises(InvalidConfigError, match=message):
        load(path)
