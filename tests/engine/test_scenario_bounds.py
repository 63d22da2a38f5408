"""A scenario file is data from a stranger: a few bytes of it must not cost gigabytes or hours.
Each case is refused by ``paged.engine.trace.scenario.load`` in one line, before anything is built or run."""

from __future__ import annotations

import pytest

from paged.engine.cli import main as cli
from paged.engine.errors import InvalidConfigError
from paged.engine.trace.scenario import load
from paged.engine.trace.schema import LIMITS

MAX_ARRIVAL_STEP = LIMITS.max_events  # what a trace holds: one step_end per step at least
MAX_SCENARIO_BYTES = LIMITS.max_line_chars  # what its header line holds

HEAD = '[arena]\nnum_blocks = 8\nblock_size = 16\nmax_model_len = 64\n[[requests]]\nid = "A"\n'


def write(tmp_path, body: str):
    path = tmp_path / "s.toml"
    path.write_text(HEAD + body, encoding="utf-8")
    return path


def test_a_prompt_len_past_max_model_len_is_refused_before_its_tokens_are_built(tmp_path):
    # the dry run built [FILLER] * prompt_len first: 2**31 - 1 asked for 16 GiB (per sample)
    path = write(tmp_path, "prompt_len = 2147483647\nmax_tokens = 4\n")
    with pytest.raises(InvalidConfigError, match="prompt_len 2,147,483,647 exceeds max_model_len"):
        load(path)


def test_a_prompt_len_within_max_model_len_still_loads(tmp_path):
    assert load(write(tmp_path, "prompt_len = 64\nmax_tokens = 4\n")).requests[0].prompt_len == 64


@pytest.mark.parametrize("step, ok", [(MAX_ARRIVAL_STEP, True), (2**31 - 1, False)])
def test_an_arrival_no_trace_could_hold_is_refused(tmp_path, step, ok):
    # every step before an arrival is recorded: 2**31 - 1 ran for hours, filling the disk
    path = write(tmp_path, f"prompt = 'hi'\nmax_tokens = 4\narrival_step = {step}\n")
    if ok:
        assert load(path).requests[0].arrival_step == step
    else:
        with pytest.raises(InvalidConfigError, match="arrival_step must be at most 200,000"):
            load(path)


def test_an_endless_scenario_file_is_one_line(tmp_path, capsys):
    # a file past the bound stops being read there; a device is never read at all
    big = tmp_path / "big.toml"
    big.write_text(HEAD + "prompt = 'hi'\nmax_tokens = 4\n" + "#" * MAX_SCENARIO_BYTES + "\n")
    for path, why in ((big, "larger than 1 MiB"), ("/dev/zero", "not a regular file")):
        out = str(tmp_path / "t.jsonl")
        rc = cli.main(["record", "--scenario", str(path), "--out", out, "--forward", "skip"])
        err = capsys.readouterr().err
        assert rc == 2 and err.startswith("error: ") and err.count("\n") == 1, err
        assert why in err
    assert not (tmp_path / "t.jsonl").exists()


@pytest.mark.parametrize("where", ["prompt_len = {n}\n", "max_tokens = 4\nseed = {n}\n"])
def test_an_integer_longer_than_python_reads_is_one_line(tmp_path, capsys, where):
    path = write(tmp_path, "prompt = 'hi'\n" + where.format(n="9" * 4_400))
    out = str(tmp_path / "t.jsonl")
    rc = cli.main(["record", "--scenario", str(path), "--out", out, "--forward", "skip"])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    assert "too long to read" in err
    assert not (tmp_path / "t.jsonl").exists()
