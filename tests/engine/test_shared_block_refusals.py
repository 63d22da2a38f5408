"""A ``block_shared`` the engine never emits is refused in one line: the viewer's grid and its
numbers would count such a block differently (tokens drawn as reserved, reserved drawn as never
filled). Each case takes a shipped lesson with sharing and moves one share."""

import json
from pathlib import Path

import pytest

from paged.engine.core import events as E
from paged.engine.trace.header import PAGED, RunHeader
from paged.engine.trace.io import TraceError, TraceWriter, loads, make_header, read

LESSONS = Path(__file__).resolve().parents[2] / "paged" / "lessons"


def _edited(lesson: str, line: int, **fields) -> str:
    lines = (LESSONS / lesson / "trace.jsonl").read_text(encoding="utf-8").split("\n")
    obj = json.loads(lines[line - 1])
    assert obj["kind"] == "block_shared", obj  # the case edits the share it means to
    obj.update(fields)
    lines[line - 1] = json.dumps(obj)
    return "\n".join(lines)


@pytest.mark.parametrize("lesson", ["shared-prompt", "parallel-sampling"])
def test_the_shipped_sharing_lessons_are_accepted(lesson):
    loads((LESSONS / lesson / "trace.jsonl").read_text(encoding="utf-8"))


@pytest.mark.parametrize(
    "lesson, line, fields, message",
    [
        # B shares A's block 1 as its first block: A has it second
        (
            "shared-prompt",
            31,
            {"physical": 1},
            "line 31 .*puts block 1 at logical 0; its holders have it at logical 1",
        ),
        # a third holder, C, takes a block at another index than A and B have it
        ("shared-prompt", 57, {"physical": 1}, "line 57 .*puts block 1 at logical 0"),
        # a full shared block said to carry half its tokens: the next share starts mid-block
        ("shared-prompt", 32, {"num_tokens": 8}, "line 33 .*has 24 tokens, not the 32"),
        # a fork's last block carries the sample's one prompt token there, not 16
        (
            "parallel-sampling",
            31,
            {"num_tokens": 16},
            "line 31 .*carries 16 tokens of block 2, which holds 2 of 16",
        ),
        ("parallel-sampling", 31, {"num_tokens": 0}, "line 31 .*carries 0 tokens"),
        # one token more than the sample has there: its copy on write then disagrees
        (
            "parallel-sampling",
            31,
            {"num_tokens": 2},
            "line 32 .*block_copied carries 1 tokens; request 'S.1' has 2",
        ),
        ("parallel-sampling", 30, {"num_tokens": 1}, "line 31 .*has 17 tokens, not the 32"),
    ],
)
def test_a_share_the_engine_never_makes_is_refused_in_one_line(lesson, line, fields, message):
    with pytest.raises(TraceError, match=message) as info:
        loads(_edited(lesson, line, **fields))
    assert "\n" not in str(info.value)


def emit_a_block_shared_in_part(bus: E.EventBus, copied: bool) -> None:
    """A's six tokens fill block 0 and half of block 1; B forks A's first five, so it shares
    block 0 whole and one of block 1's two tokens, and copies block 1 only if ``copied``."""
    for req in ("A", "B"):
        bus.emit(E.RequestArrived, req=req, prompt_len=6, max_tokens=2)
    bus.emit(E.Admitted, req="A", num_tokens=6)
    bus.emit(E.BlockAllocated, req="A", logical=0, physical=0)
    bus.emit(E.BlockAllocated, req="A", logical=1, physical=1)
    bus.emit(E.TokensWritten, req="A", positions=tuple(range(6)), slots=tuple(range(6)))
    bus.emit(E.StepEnd, num_running=1, num_waiting=1)
    bus.step = 1
    bus.emit(E.Admitted, req="B", num_tokens=6)
    bus.emit(E.BlockShared, req="B", logical=0, physical=0, ref_count=2, num_tokens=4)
    bus.emit(E.BlockShared, req="B", logical=1, physical=1, ref_count=2, num_tokens=1)
    if copied:
        bus.emit(E.BlockCopied, req="B", logical=1, src=1, dst=2, src_ref_count=1, num_tokens=1)
    bus.emit(E.StepEnd, num_running=2, num_waiting=0)


def _two_requests_one_block_shared_in_part(path: Path, copied: bool) -> Path:
    header = make_header(
        [RunHeader("paged", PAGED, num_slots=16, block_size=4)], model="m", device="cpu"
    )
    with TraceWriter(path, header) as w:
        bus = E.EventBus()
        bus.subscribe(w.sink("paged"))
        emit_a_block_shared_in_part(bus, copied)
    return path


def test_a_block_shared_in_part_is_copied_before_its_step_ends(tmp_path):
    read(_two_requests_one_block_shared_in_part(tmp_path / "ok.jsonl", copied=True))
    with pytest.raises(
        TraceError, match="still sharing block 1, of which block_shared gave it only part"
    ) as info:
        read(_two_requests_one_block_shared_in_part(tmp_path / "bad.jsonl", copied=False))
    assert "\n" not in str(info.value)
