"""One run-header type: what the engine writes is what the checker parses and the viewer reads."""

import json
from pathlib import Path

import pytest

from paged.engine.core.engine_core import EngineConfig
from paged.engine.trace.check import TraceChecker
from paged.engine.trace.header import CONTIGUOUS, PAGED, RunHeader
from paged.engine.trace.io import Trace, read
from paged.engine.trace.schema import TraceError

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted(ROOT.glob("paged/lessons/*/trace.jsonl")) + sorted(
    ROOT.glob("paged/lessons/*/traces/*.jsonl")
)


@pytest.mark.parametrize("path", SHIPPED, ids=[p.parent.name + "/" + p.name for p in SHIPPED])
def test_a_shipped_run_header_reads_back_to_the_bytes_it_was_written_as(path):
    header = json.loads(path.read_text().split("\n", 1)[0])
    for i, run in enumerate(header["runs"]):
        assert json.dumps(RunHeader.from_header(run, i).to_dict()) == json.dumps(run)


def test_the_engine_header_says_what_the_engine_was_built_with():
    swap = EngineConfig("paged", 12, 4, 64, preemption_mode="swap", num_cpu_blocks=6)
    run = RunHeader.from_engine("s", swap, 4, kv_cache_dtype="bfloat16", block_bytes=512)
    assert run.to_dict() == {
        "name": "s",
        "allocator": "paged",
        "config": {
            "num_blocks": 12,
            "block_size": 4,
            "num_slots": 48,
            "max_model_len": 64,
            "view_block_size": 4,
            "preemption_mode": "swap",
            "num_cpu_blocks": 6,
            "kv_cache_dtype": "bfloat16",
            "block_bytes": 512,
        },
    }
    assert RunHeader.from_header(run.to_dict()) == run and run.arena_bytes == 12 * 512
    pow2 = RunHeader.from_engine("left", EngineConfig("pow2", 12, 4, 64, num_cpu_blocks=6), 1)
    assert (pow2.allocator, pow2.policy, pow2.num_cpu_blocks) == (CONTIGUOUS, "pow2", 0)
    assert (
        pow2.to_dict()["allocator"] == "pow2" and "num_cpu_blocks" not in pow2.to_dict()["config"]
    )


@pytest.mark.parametrize(
    "run, policy",
    [
        (
            {
                "name": "left",
                "allocator": "contiguous",
                "config": {"num_slots": 32, "policy": "best"},
            },
            "best",
        ),
        ({"name": "max", "allocator": "contiguous", "config": {"num_slots": 32}}, "max"),
        ({"name": "left", "allocator": "oracle", "config": {"num_slots": 32}}, "oracle"),
    ],
)
def test_a_hand_made_contiguous_run_keeps_its_policy_through_a_round_trip(run, policy):
    parsed = RunHeader.from_header(run)
    assert (parsed.allocator, parsed.policy, parsed.block_size) == (CONTIGUOUS, policy, 16)
    assert RunHeader.from_header(parsed.to_dict()) == parsed


def test_the_viewer_reads_the_run_the_checker_validated():
    path = ROOT / "paged" / "lessons" / "recompute-or-swap" / "trace.jsonl"
    checker = TraceChecker()
    for i, line in enumerate(path.read_text().split("\n"), start=1):
        checker.line(i, line)
    trace = read(path)
    for name in trace.run_names:
        assert trace.run_header(name) == checker.checkers[name].spec
    assert trace.run_header("swap").num_cpu_blocks == 8 and trace.run_header("swap").paged
    with pytest.raises(KeyError):
        trace.run_header("nope")


def test_a_run_that_is_not_an_object_is_one_trace_error():
    with pytest.raises(TraceError, match=r"^trace header: run #3 is not an object$"):
        RunHeader.from_header(["paged"], 2)
    assert RunHeader(PAGED, PAGED, 16, 4).num_blocks == 4


def test_a_traces_own_fields_read_typed_and_empty_where_a_hand_made_header_is_odd():
    shipped = read(SHIPPED[0]).info
    assert shipped.model and shipped.created and shipped.forward in ("model", "skip")
    assert shipped.requests_named > 0
    header = {
        "model": "m",
        "device": 3,  # never checked: not text, so not said
        "forward": "",
        "scenario": {"requests": [{"n": 3}, {"n": 0}, {}, "x", {"n": "2"}]},
        "runs": [],
    }
    info = Trace(header).info
    assert (info.model, info.device, info.created, info.forward) == ("m", "", "", "")
    assert info.requests_named == 3 + 1 + 1 + 1  # samples counted; a bad n is one request
    assert info.origin() == (("model", "m"),)
    assert Trace({"scenario": []}).info.scenario == {}
    assert Trace({"scenario": []}).info.requests_named == 0
