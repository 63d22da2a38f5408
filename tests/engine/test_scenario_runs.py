"""Runs named by what differs: a scenario's ``[[runs]]`` put two paged runs side by side (one
preempting by recompute, one by swap), plain ``--allocators`` recordings stay as they were, and
a header's arena bytes are checked when runs of different element types differ in blocks."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from paged.engine.errors import InvalidConfigError
from paged.engine.trace import io as T
from paged.engine.trace.header import check_header
from paged.engine.trace.recorder import record
from paged.engine.trace.scenario import load

ROOT = Path(__file__).resolve().parents[2]
SIX_STEPS = ROOT / "paged" / "lessons" / "six-steps" / "scenario.toml"
SWAP_LESSON = ROOT / "paged" / "lessons" / "recompute-or-swap" / "scenario.toml"
FP8_LESSON = ROOT / "paged" / "lessons" / "fp8-twice" / "scenario.toml"


def _with_runs(tmp_path: Path, runs: str, base: Path = SIX_STEPS) -> Path:
    text = base.read_text(encoding="utf-8")
    if "[[runs]]" in text:  # keep the requests, replace the runs
        keep = [b for b in text.split("\n\n") if "[[runs]]" not in b]
        text = "\n\n".join(keep)
    path = tmp_path / "scenario.toml"
    # a bare key belongs before the first table; [[runs]] tables may follow the requests
    text = runs + text if not runs.startswith("[") else text + "\n" + runs
    path.write_text(text, encoding="utf-8")
    return path


def _dry(sc, allocators=None) -> T.Trace:
    buf = io.StringIO()
    record(sc, allocators, buf, forward="skip")
    return T.loads(buf.getvalue())


def test_runs_named_after_their_allocator_record_as_allocators_do(tmp_path):
    runs = '[[runs]]\nlabel = "max"\nallocator = "max"\n\n[[runs]]\nlabel = "paged"\n'
    labelled = _dry(load(_with_runs(tmp_path, runs)))
    plain = _dry(load(SIX_STEPS), ["max", "paged"])
    assert labelled.header["runs"] == plain.header["runs"]
    for name in ("max", "paged"):
        assert [e.to_dict() for e in labelled.runs[name]] == [e.to_dict() for e in plain.runs[name]]


def test_two_paged_runs_sit_side_by_side_named_by_their_preemption_mode():
    sc = load(SWAP_LESSON)
    tr = _dry(sc)
    assert tr.run_names == [r.label for r in sc.runs] == ["recompute", "swap"]
    kinds = {n: {e.kind for e in evs} for n, evs in tr.runs.items()}
    assert "swapped_out" in kinds["swap"] and "swapped_in" in kinds["swap"]
    assert "swapped_out" not in kinds["recompute"] and "preempted" in kinds["recompute"]
    cfg = {r["name"]: r["config"] for r in tr.header["runs"]}
    assert cfg["swap"]["preemption_mode"] == "swap"
    assert cfg["swap"]["num_cpu_blocks"] == sc.runs[1].cpu_blocks
    assert "preemption_mode" not in cfg["recompute"]


def test_explicit_allocators_override_the_scenarios_runs():
    tr = _dry(load(SWAP_LESSON), ["max", "paged"])
    assert tr.run_names == ["max", "paged"]


def test_the_cli_records_the_scenarios_runs_by_default(tmp_path):
    out = tmp_path / "t.jsonl"
    cmd = [sys.executable, "-m", "paged", "record", "--scenario", str(SWAP_LESSON)]
    res = subprocess.run(
        [*cmd, "--out", str(out), "--forward", "skip"], capture_output=True, text=True, cwd=ROOT
    )
    assert res.returncode == 0, res.stderr
    assert T.read(out).run_names == ["recompute", "swap"]
    bad = subprocess.run(
        [*cmd, "--out", str(out), "--forward", "skip", "--allocators", ","],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "error:" in bad.stderr


@pytest.mark.parametrize(
    "runs, words",
    [
        ('[[runs]]\nlabel = "a"\ncolour = "red"\n', "unknown key"),
        ('[[runs]]\nlabel = "a"\n\n[[runs]]\nlabel = "a"\n', "unique"),
        ('[[runs]]\nlabel = "a"\nallocator = "max"\npreemption_mode = "swap"\n', "paged"),
        ('[[runs]]\nlabel = "a"\ncpu_blocks = 4\n', "cpu_blocks needs"),
        ('[[runs]]\nlabel = "a"\nkv_cache_dtype = "int4"\n', "kv_cache_dtype"),
        ('[[runs]]\nlabel = "<b>x</b>"\n', "label"),
        ('[[runs]]\nlabel = ""\n', "label"),
        ('[[runs]]\nlabel = "a"\nnum_blocks = 0\n', "num_blocks"),
        ('[[runs]]\nlabel = "a"\nnum_blocks = 99999999\n', "num_blocks"),
        ('[[runs]]\nlabel = "a"\ncpu_blocks = true\npreemption_mode = "swap"\n', "cpu_blocks"),
        ('[[runs]]\nlabel = "a"\nallocator = 3\n', "must be a string"),
        ("runs = 3\n", r"\[\[runs\]\] tables"),
        ("".join(f'[[runs]]\nlabel = "r{i}"\n\n' for i in range(5)), "1 to 4"),
        ('[[runs]]\nlabel = "a"\npreemption_mode = "pray"\n', "preemption mode"),
    ],
)
def test_bad_runs_are_one_line_before_any_model_loads(tmp_path, runs, words):
    with pytest.raises(InvalidConfigError, match=words) as info:
        load(_with_runs(tmp_path, runs))
    assert "\n" not in str(info.value)


def test_a_dry_run_weighs_its_blocks_as_the_real_model_does():
    """The FP8 lesson's arenas differ in blocks, not bytes: a dry run of it validates, and its
    blocks weigh what the recorded (real-model) arenas' blocks weighed."""
    sc = load(FP8_LESSON)
    dry = _dry(sc)
    real = T.read(FP8_LESSON.parent / "trace.jsonl")
    for name in ("bf16", "fp8"):
        d, r = dry.run_header(name), real.run_header(name)
        assert (d.block_bytes, d.kv_cache_dtype, d.num_blocks) == (
            r.block_bytes,
            r.kv_cache_dtype,
            r.num_blocks,
        )


def test_runs_of_unequal_bytes_are_refused_before_the_first_step(tmp_path):
    runs = '[[runs]]\nlabel = "a"\n\n[[runs]]\nlabel = "b"\nnum_blocks = 32\n'
    with pytest.raises(InvalidConfigError, match="equal memory") as info:
        _dry(load(_with_runs(tmp_path, runs)))
    assert "\n" not in str(info.value)


def test_a_bad_model_dtype_is_one_line(tmp_path):
    path = tmp_path / "s.toml"
    text = SIX_STEPS.read_text(encoding="utf-8").replace("[arena]", '[arena]\ndtype = "int3"', 1)
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InvalidConfigError, match="dtype must be one of"):
        load(path)


# --- the header: arenas of different element types compare equal bytes ----------------------


def _header(*runs: tuple[int, int | None, object]) -> dict:
    out = []
    for i, (blocks, block_bytes, dtype) in enumerate(runs):
        cfg: dict = {"num_blocks": blocks, "block_size": 16, "num_slots": blocks * 16}
        if block_bytes is not None:
            cfg["block_bytes"] = block_bytes
        if dtype is not None:
            cfg["kv_cache_dtype"] = dtype
        out.append({"name": f"r{i}", "allocator": "paged", "config": cfg})
    # written by hand: a hostile config is no RunHeader the engine would write
    return {"format": T.FORMAT, "schema_version": T.SCHEMA_VERSION, "runs": out}


def test_fp8_and_bf16_arenas_of_equal_bytes_are_one_comparison():
    _, specs = check_header(_header((12, 2000, "bfloat16"), (24, 1000, "float8_e4m3fn")))
    assert {s.arena_bytes for s in specs} == {24000}


@pytest.mark.parametrize(
    "runs, words",
    [
        (((12, 2000, "bfloat16"), (24, 1100, "float8_e4m3fn")), "same num_slots"),
        (((12, None, None), (24, None, None)), "same num_slots"),
        (((12, 2000, None), (24, None, None)), "same num_slots"),
        (((12, -5, None), (12, 2, None)), "block_bytes"),
        (((12, 1 << 41, None), (12, 2, None)), "block_bytes"),
        (((12, "2000", None), (12, 2, None)), "block_bytes"),
        (((12, 2000, 7), (12, 2000, None)), "kv_cache_dtype"),
        (((12, 2000, "x" * 10_000), (12, 2000, None)), "kv_cache_dtype"),
    ],
)
def test_hostile_arena_bytes_are_one_trace_error(runs, words):
    header = _header(*runs)
    line = json.dumps(header) + "\n" + json.dumps({"end": True, "num_events": 0}) + "\n"
    with pytest.raises(T.TraceError, match=words) as info:
        T.loads(line)
    assert "\n" not in str(info.value)
