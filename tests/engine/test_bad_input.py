"""Every bad input ends as one clear line and exit code 2 (CLI) or a specific exception (API)."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from paged.engine.cli import main as cli
from paged.engine.core.request import SamplingParams
from paged.engine.errors import InvalidConfigError, InvalidRequestError
from paged.engine.trace import io as trace
from paged.engine.trace.io import LIMITS, TraceError

ROOT = Path(__file__).resolve().parents[2]
LONG_PROMPT = "the quick brown fox jumps over the lazy dog " * 12


def run_cli(*args: str) -> subprocess.CompletedProcess:
    """``python -m paged generate ARGS`` in-process (a child would only pay for importing torch
    again; test_cli_imports.py runs the real entry point): exit code and what it printed."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = cli.main(["generate", *args])
        except SystemExit as e:  # argparse's own errors
            rc = e.code if isinstance(e.code, int) else 2
    return subprocess.CompletedProcess(args, rc, out.getvalue(), err.getvalue())


def assert_one_error_line(stderr: str, *words: str) -> None:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: ") and "Traceback" not in stderr
    for w in words:
        assert w in lines[0]


# Refused before any model is loaded.
@pytest.mark.parametrize(
    "args, words",
    [
        (["", "--max-tokens", "4"], ["empty"]),
        (["hello", "--block-size", "0"], ["block size"]),
        (["hello", "--block-size", "-16"], ["block size"]),
        (["hello", "--model", "/no/such/model-dir"], ["/no/such/model-dir", "does not exist"]),
        (["--prompts-file", "/no/such/prompts.json"], ["prompts file", "does not exist"]),
        (["hello", "--num-blocks", "0"], ["blocks"]),
    ],
)
def test_cli_refuses_bad_input_before_loading_the_model(args, words):
    proc = run_cli(*args)
    assert proc.returncode == 2
    assert_one_error_line(proc.stderr, *words)
    assert proc.stdout == ""


@pytest.fixture
def cli_on_loaded_model(smollm, monkeypatch):
    """``python -m paged generate`` in-process, reusing the session's model."""
    import paged.engine.llm

    monkeypatch.setattr(paged.engine.llm, "load_model", lambda *a, **k: smollm)

    def run(*args: str) -> int:
        return cli.main(["generate", *args])

    return run


@pytest.mark.model
@pytest.mark.parametrize(
    "args, words",
    [
        ([LONG_PROMPT, "--max-model-len", "64"], ["exceeds the maximum model length of 64"]),
        (["hello", "--max-tokens", str(10**9)], ["exceeds max_model_len 8,192"]),
        ([LONG_PROMPT, "--num-blocks", "2", "--block-size", "16"], ["KV slots", "arena"]),
        (["hello", "--kv-budget-mb", "0.01"], ["too small for one block"]),
    ],
)
def test_cli_refuses_what_only_the_model_can_judge(cli_on_loaded_model, capsys, args, words):
    assert cli_on_loaded_model(*args) == 2
    captured = capsys.readouterr()
    assert_one_error_line(captured.err, *words)
    assert captured.out == ""


def test_an_engine_refuses_a_request_id_it_already_has():
    from paged.engine.core.engine_core import EngineConfig, build_core
    from paged.engine.core.request import Request
    from paged.engine.sim.simulate import EOS, DryRunner

    core = build_core(
        EngineConfig("paged", num_blocks=8, block_size=4, max_model_len=32), DryRunner(), EOS
    )

    def req() -> Request:
        return Request("A", [1, 2, 3], SamplingParams(max_tokens=4), forced_output_len=4)

    first = core.add_request(req())
    with pytest.raises(InvalidRequestError, match="already has that id"):
        core.add_request(req())
    core.run_to_completion()  # the first one runs as if the second had never been offered
    assert first.finish_reason is not None and core.allocator.free_slots == 8 * 4


def test_api_refuses_a_nonexistent_model_path():
    from paged.engine.llm import LLM

    with pytest.raises(InvalidConfigError, match="does not exist"):
        LLM("/no/such/model-dir")


def test_api_refuses_non_positive_block_size_before_loading():
    from paged.engine.llm import LLM

    for bs in (0, -4):
        with pytest.raises(InvalidConfigError, match="block size"):
            LLM("/never/loaded", block_size=bs)


@pytest.mark.model
def test_api_raises_specific_errors(smollm):
    from paged.engine.llm import LLM

    llm = LLM(smollm, kv_budget_mb=8, max_model_len=64)
    params = SamplingParams(max_tokens=4)
    with pytest.raises(InvalidRequestError, match="empty"):
        llm.generate(["fine", ""], params)
    with pytest.raises(InvalidRequestError, match="empty"):
        llm.generate([[]], params)
    with pytest.raises(InvalidRequestError, match="maximum model length"):
        llm.generate([LONG_PROMPT], params)
    with pytest.raises(InvalidRequestError, match="token ids"):
        llm.generate([[1, 10**7]], params)
    with pytest.raises(InvalidConfigError, match="too small for one block"):
        LLM(smollm, kv_budget_mb=0.01)
    with pytest.raises(InvalidConfigError, match="KV slots"):
        LLM(smollm, num_blocks=2, block_size=16).generate([LONG_PROMPT], params)
    with pytest.raises(InvalidConfigError, match="max_model_len"):
        LLM(smollm, max_model_len=10**6)
    # the refusals left the engine usable
    assert len(llm.generate(["fine"], params)[0].token_ids) >= 1


# --- every case below is one `error:` line and exit 2, in-process, no model loaded ----------


@pytest.fixture
def no_model_load(monkeypatch):
    """Fail loudly if a refusal came only after loading the model."""
    import paged.engine.llm
    import paged.engine.model.loader

    def boom(*a, **k):
        raise AssertionError("the model was loaded before the input was checked")

    monkeypatch.setattr(paged.engine.llm, "load_model", boom)
    monkeypatch.setattr(paged.engine.model.loader, "load_model", boom)


@pytest.fixture
def files(tmp_path):
    """Odd prompts files and scenarios, by name."""
    (tmp_path / "bom.json").write_bytes(b"\xef\xbb\xbf" + b'["hi", ""]')
    (tmp_path / "object.json").write_text('{"prompt": "hi"}')
    (tmp_path / "string.json").write_text('"hello"')
    (tmp_path / "nul.txt").write_bytes(b"hello\x00world\n")
    (tmp_path / "deep.json").write_text("[" * 100_000)
    good = (ROOT / "paged" / "lessons" / "six-steps" / "scenario.toml").read_text()
    (tmp_path / "str_tokens.toml").write_text(good.replace("max_tokens = 84", 'max_tokens = "5"'))
    (tmp_path / "float_blocks.toml").write_text(
        good.replace("num_blocks = 16", "num_blocks = 16.5")
    )
    (tmp_path / "bool_id.toml").write_text(good.replace('id = "A"', "id = true"))
    (tmp_path / "huge.toml").write_text(good.replace("num_blocks = 16", "num_blocks = 100000000"))
    # A's two samples are A.0 and A.1: B named A.1 would share one request's events with it
    (tmp_path / "dup_sample.toml").write_text(
        good.replace('id = "A"', 'id = "A"\nn = 2\ntemperature = 0.7', 1).replace(
            'id = "B"', 'id = "A.1"', 1
        )
    )
    (tmp_path / "a_dir").mkdir()
    os.mkfifo(tmp_path / "fifo")  # no writer ever comes: opening it for reading would wait
    (tmp_path / "deep.toml").write_text("a = " + "[" * 5000 + "]" * 5000 + "\n")
    (tmp_path / "good.toml").write_text(good)
    (tmp_path / "p.txt").write_text("hi\n")
    # files read whole: --prompts-file or --config /dev/zero ended in a MemoryError traceback
    for name, size in (("huge_prompts.txt", (64 << 20) + 1), ("huge_config.json", (1 << 20) + 1)):
        with open(tmp_path / name, "wb") as f:  # sparse: costs no disk
            f.write(b"{}" if name.endswith(".json") else b"hi\n")
            f.truncate(size)
    return tmp_path


#: A good scenario recorded into t.jsonl: the cases below add the flag under test.
RECORD_GOOD = ["record", "--scenario", "{tmp}/good.toml", "--out", "{tmp}/t.jsonl"]

CLI_CASES = [
    (["generate", "hi", "--kv-budget-mb", "nan"], ["KV budget"]),
    (["generate", "hi", "--kv-budget-mb", "inf"], ["KV budget"]),
    (["generate", "hi", "--kv-budget-mb", "1e12"], ["KV budget"]),
    (["generate", "hi", "--num-blocks", str(10**15)], ["KV slots"]),
    (["generate", "hi", "--temperature", "1e-45"], ["temperature"]),
    (["generate", "hi", "--temperature", "nan"], ["temperature"]),
    (["generate", "hi", "--temperature", "-1"], ["temperature"]),
    (["generate", "hi", "--top-p", "nan"], ["top_p"]),
    (["generate", "hi", "--seed", str(2**64)], ["seed"]),
    (["generate", "hi", "--max-model-len", "0"], ["max_model_len"]),
    (["generate", "hi", "--max-num-seqs", "0"], ["max_num_seqs"]),
    (["generate", "hi", "--max-tokens", "0"], ["max_tokens"]),
    (["generate", "caf\udce9"], ["UTF-8"]),  # a non-UTF-8 byte in argv
    (["generate", "lone \ud800 surrogate"], ["UTF-8"]),
    (["generate", "hi", "--trace", "{tmp}/missing/run.jsonl"], ["does not exist"]),
    (["generate", "hi", "--trace", "{tmp}/a_dir"], ["directory"]),
    (["generate", "--prompts-file", "{tmp}/bom.json"], ["prompt 1 is empty"]),  # BOM skipped
    (["generate", "--prompts-file", "{tmp}/object.json"], ["list of strings"]),
    (["generate", "--prompts-file", "{tmp}/string.json"], ["JSON string"]),
    (["generate", "--prompts-file", "{tmp}/nul.txt"], ["NUL"]),
    (["generate", "--prompts-file", "{tmp}/deep.json"], ["not valid JSON"]),
    (["generate", "--prompts-file", "{tmp}/a_dir"], ["cannot be read"]),
    (["generate", "--prompts-file", "{tmp}/huge_prompts.txt"], ["larger than 64 MiB"]),
    (["generate", "--prompts-file", "{tmp}/fifo"], ["not a regular file"]),
    (["generate", "--prompts-file", "/dev/zero"], ["not a regular file"]),
    (["generate", "hi", "--max-tokens", "100", "--max-model-len", "50"], ["exceeds max_model_len"]),
    (["record", "--scenario", "{tmp}/fifo", "--out", "{tmp}/t.jsonl"], ["not a regular file"]),
    (["record", "--scenario", "{tmp}/deep.toml", "--out", "{tmp}/t.jsonl"], ["nests deeper"]),
    (["capacity", "--config", "{tmp}/fifo"], ["not a regular file"]),
    (["capacity", "--config", "{tmp}/huge_config.json"], ["larger than 1 MiB"]),
    (["record", "--scenario", "{tmp}/str_tokens.toml", "--out", "{tmp}/t.jsonl"], ["max_tokens"]),
    (["record", "--scenario", "{tmp}/float_blocks.toml", "--out", "{tmp}/t.jsonl"], ["num_blocks"]),
    (["record", "--scenario", "{tmp}/bool_id.toml", "--out", "{tmp}/t.jsonl"], ["id"]),
    (["record", "--scenario", "{tmp}/huge.toml", "--out", "{tmp}/t.jsonl"], ["slots"]),
    (
        ["record", "--scenario", "{tmp}/dup_sample.toml", "--out", "{tmp}/t.jsonl"],
        ["'A.1' is used twice"],
    ),
    (["record", "--scenario", "{tmp}/a_dir", "--out", "{tmp}/t.jsonl"], ["scenario"]),
    (
        [
            "record",
            "--scenario",
            str(ROOT / "paged/lessons/six-steps/scenario.toml"),
            "--out",
            "{tmp}/missing/t.jsonl",
        ],
        ["does not exist"],
    ),
    (
        [
            "record",
            "--scenario",
            str(ROOT / "paged/lessons/six-steps/scenario.toml"),
            "--out",
            "{tmp}/a_dir",
        ],
        ["directory"],
    ),
    # a command's own input is never its output (the scenario or the prompts were lost)
    (["record", "--scenario", "{tmp}/good.toml", "--out", "{tmp}/good.toml"], ["input"]),
    (["generate", "--prompts-file", "{tmp}/p.txt", "--trace", "{tmp}/p.txt"], ["input"]),
    ([*RECORD_GOOD, "--allocators", "max,max"], ["max twice"]),
    # a contiguous run is private to its request: the flag would have been ignored silently
    (["generate", "hi", "--enable-prefix-caching", "--allocator", "max"], ["paged allocator"]),
    # one bound on the block size everywhere: the calculator printed "0 requests" for 10**8,
    # the simulator blamed an arena of 0 blocks
    (["capacity", "--block-size", str(10**8)], ["block size", "65,536"]),
    (["simulate", "--block-size", str(10**8)], ["block size", "65,536"]),
    (["simulate", "--block-size", "65536", "--max-model-len", "8"], ["--block-size", "slots"]),
    (["generate", "hi", "--block-size", "65537"], ["block size", "65,536"]),
    # flags that qualify another one did nothing without it
    (["generate", "hi", "--kv-events-hold", "5"], ["only with --kv-events"]),
    (["generate", "hi", "--kv-events-allow-remote"], ["only with --kv-events"]),
    (["generate", "hi", "--swap-space-mb", "64"], ["swap preemption"]),
    ([*RECORD_GOOD, "--kv-events-hold", "5"], ["only with --kv-events"]),
    ([*RECORD_GOOD, "--allocators", "max", "--enable-prefix-caching"], ["paged runs"]),
    (["capacity", "--budget-gb", "nan"], ["--budget-gb"]),
    (["capacity", "--budget-gb", "inf"], ["--budget-gb"]),
    (["capacity", "--budget-gb", "-1"], ["--budget-gb"]),
    (["capacity", "--budget-gb", "1e300"], ["--budget-gb", "8 PiB"]),  # not an OverflowError
    (["capacity", "--max-len", "1" + "0" * 300], ["max_len", "at most"]),
]


@pytest.mark.parametrize("argv, words", CLI_CASES, ids=[" ".join(a)[:60] for a, _ in CLI_CASES])
def test_cli_bad_input_is_one_error_line_before_the_model_loads(
    argv, words, files, capsys, no_model_load
):
    argv = [a.replace("{tmp}", str(files)) for a in argv]
    assert cli.main(argv) == 2
    captured = capsys.readouterr()
    assert_one_error_line(captured.err, *words)
    assert captured.out == ""
    assert not (files / "t.jsonl").exists()


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"max_tokens": 2.5}, "max_tokens"),
        ({"max_tokens": True}, "max_tokens"),
        ({"max_tokens": "5"}, "max_tokens"),
        ({"temperature": 1e-45}, "temperature"),
        ({"temperature": float("nan")}, "temperature"),
        ({"temperature": float("inf")}, "temperature"),
        ({"top_p": float("nan")}, "top_p"),
        ({"seed": 2**64}, "seed"),
        ({"seed": -1}, "seed"),
        ({"seed": 1.5}, "seed"),
        ({"ignore_eos": "yes"}, "ignore_eos"),
    ],
)
def test_sampling_params_refuse_wrong_types_and_ranges(kwargs, words):
    with pytest.raises(InvalidRequestError, match=words):
        SamplingParams(**kwargs)


def test_sampling_params_accept_their_edges():
    SamplingParams(temperature=0.01, top_p=1e-6, seed=2**64 - 1, max_tokens=1)
    SamplingParams(temperature=0, seed=0)


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"max_num_seqs": 0}, "max_num_seqs"),
        ({"max_num_seqs": -3}, "max_num_seqs"),
        ({"max_model_len": 0}, "max_model_len"),
        ({"kv_budget_mb": float("nan")}, "KV budget"),
        ({"kv_budget_mb": float("inf")}, "KV budget"),
        ({"kv_budget_mb": 1e12}, "KV budget"),
        ({"num_blocks": 10**15}, "KV slots"),
        ({"num_blocks": 2.0}, "blocks"),
        ({"block_size": True}, "block size"),
        ({"max_num_batched_tokens": 0}, "batched"),
        ({"allocator": "buddy"}, "allocator"),
        # refused before the model cache's loader, which would delete the cache for it
        ({"dtype": 5}, "dtype"),
        ({"dtype": "int8"}, "dtype"),
        ({"device": None}, "device"),
        ({"trace": 5}, "trace"),
        ({"kv_events": "tcp://127.0.0.1:5555", "kv_events_allow_remote": "no"}, "allow_remote"),
        ({"allocator": "oracle", "enable_prefix_caching": True}, "paged allocator"),
        ({"enable_prefix_caching": "no"}, "enable_prefix_caching"),
        ({"kv_events_allow_remote": True}, "only with --kv-events"),
    ],
)
def test_llm_refuses_bad_settings_before_loading(kwargs, words, no_model_load):
    from paged.engine.llm import LLM

    with pytest.raises(InvalidConfigError, match=words):
        LLM("/never/loaded", **kwargs)


def test_llm_refuses_an_unwritable_trace_before_loading(tmp_path, no_model_load):
    from paged.engine.llm import LLM

    for bad in (tmp_path / "missing" / "t.jsonl", tmp_path, ""):
        with pytest.raises(InvalidConfigError, match="trace"):
            LLM("/never/loaded", trace=bad)


@pytest.mark.model
def test_a_bare_string_is_one_prompt_and_odd_prompts_are_refused(smollm):
    from paged.engine.llm import LLM

    llm = LLM(smollm, kv_budget_mb=8, max_model_len=64)
    params = SamplingParams(max_tokens=3, ignore_eos=True)
    [one] = llm.generate("hello", params)
    assert one.prompt == "hello" and one.prompt_token_ids == smollm.tokenizer.encode("hello")
    assert one.token_ids == llm.generate(["hello"], params)[0].token_ids
    for bad in ([5], [b"hi"], [None], [[1, True]], ["\ud800"]):
        with pytest.raises(InvalidRequestError):
            llm.generate(bad, params)
    with pytest.raises(InvalidRequestError, match="SamplingParams"):
        llm.generate(["hi"], {"max_tokens": 3})
    # not a list of prompts: neither a raw TypeError (None, a generator) nor prompts taken from a
    # dict's keys or a set's members (in no set order)
    for bad in (None, {"hi": "there"}, {"hi"}, (p for p in ["hi"]), b"hi", 5):
        with pytest.raises(InvalidRequestError, match="prompts must be"):
            llm.generate(bad, params)  # type: ignore[arg-type]
    with pytest.raises(InvalidRequestError, match="0 sampling params for 1 prompts"):
        llm.generate(["hi"], [])  # not "the defaults"


@pytest.mark.model
def test_a_failed_run_writes_no_end_line_and_leaves_the_llm_as_fresh(smollm, tmp_path, monkeypatch):
    from paged.engine.llm import LLM
    from paged.engine.trace import io as trace

    prompts = ["Once upon a time", "The weather today"]
    # four steps a run: the third fails mid-run, with seeded generators already drawn from
    params = SamplingParams(max_tokens=4, temperature=0.8, seed=1234, ignore_eos=True)
    path = tmp_path / "crashed.jsonl"
    path.write_text("the previous trace\n")
    llm = LLM(smollm, num_blocks=16, block_size=8, max_model_len=64, trace=path)
    execute, calls = llm.runner.execute, []

    def failing(batch):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("device lost")
        return execute(batch)

    monkeypatch.setattr(llm.runner, "execute", failing)
    with pytest.raises(RuntimeError, match="device lost"):
        llm.generate(prompts, params)
    # the file it was to replace is as it was; what the run wrote is beside it, truncated
    assert path.read_text() == "the previous trace\n"
    partial = path.with_name(path.name + ".partial")
    with pytest.raises(trace.TraceError, match="truncated"):
        trace.read(partial)
    assert trace.parse_lines(partial.read_text().splitlines(), require_end=False).runs["paged"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name, partial.name]
    assert not llm.runner.sampler._generators  # nothing left to skew the next call
    monkeypatch.setattr(llm.runner, "execute", execute)
    again = [o.token_ids for o in llm.generate(prompts, params)]
    fresh = LLM(smollm, num_blocks=16, block_size=8, max_model_len=64)
    assert again == [o.token_ids for o in fresh.generate(prompts, params)]
    assert trace.read(path).run_names == ["paged"]  # the good run's trace is complete


def test_an_arena_larger_than_the_device_is_refused_before_allocating():
    from paged.engine.model.arena import check_fits, device_memory

    total = device_memory("cpu")
    assert total and total > 0
    check_fits(total // 2, "cpu")
    with pytest.raises(InvalidConfigError, match="does not fit"):
        check_fits(total + 1, "cpu")


@pytest.mark.model
def test_llm_refuses_a_budget_the_machine_cannot_hold(smollm, monkeypatch):
    import paged.engine.model.arena
    from paged.engine.llm import LLM

    monkeypatch.setattr(paged.engine.model.arena, "device_memory", lambda device: 64 << 20)
    with pytest.raises(InvalidConfigError, match="does not fit"):
        LLM(smollm, kv_budget_mb=512)
    assert LLM(smollm, kv_budget_mb=8).arena.num_blocks > 0


SIX = str(ROOT / "paged" / "lessons" / "six-steps" / "scenario.toml")


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_full_disk_under_the_output_is_one_line():
    run = subprocess.run(
        [sys.executable, "-m", "paged", "record", "--scenario", SIX, "--out", "/dev/full"]
        + ["--forward", "skip"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert run.returncode == 2
    assert_one_error_line(run.stderr, "writing failed", "No space left")


def test_a_reader_that_stops_early_ends_the_command_quietly():
    # `record --out - | head -1`: the closed pipe is no BrokenPipeError traceback
    cmd = [sys.executable, "-m", "paged", "record", "--scenario", SIX, "--out", "-"]
    proc = subprocess.Popen(
        [*cmd, "--forward", "skip"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT
    )
    assert proc.stdout is not None and proc.stdout.readline().startswith(b'{"format"')
    proc.stdout.close()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0 and b"Traceback" not in err, err


def test_help_descriptions_are_whole_sentences():
    # not a docstring's first line cut mid-sentence ("...lives in its own")
    parser = cli.build_parser()
    subs = next(a for a in parser._actions if a.dest == "command").choices
    for p in (parser, subs["capacity"]):
        assert p.description and p.description.rstrip().endswith("."), p.description


def test_triton_on_a_cpu_without_its_interpreter_is_refused_before_loading(
    no_model_load, monkeypatch
):
    from paged.engine.llm import LLM

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(InvalidConfigError, match="TRITON_INTERPRET=1"):
        LLM("/never/loaded", device="cpu", attention="triton")


def test_record_says_when_the_app_will_not_open_what_it_wrote(tmp_path, capsys):
    """A valid recording past the app's drawing budget (a 65,536-slot arena for 100 steps) is
    kept, with one line saying the app will not open it (rather than a refusal on upload), and
    its progress is at most one line a second, not one per step."""
    sc = tmp_path / "big.toml"
    sc.write_text(
        "[arena]\nnum_blocks = 4096\nblock_size = 16\nmax_model_len = 256\n"
        '[[requests]]\nid = "A"\nprompt_len = 10\nmax_tokens = 100\nignore_eos = true\n',
        encoding="utf-8",
    )
    out = tmp_path / "big.jsonl"
    argv = ["record", "--scenario", str(sc), "--out", str(out), "--forward", "skip"]
    assert cli.main(argv) == 0
    err = capsys.readouterr().err.splitlines()
    warned = [line for line in err if line.startswith("warning:")]
    assert warned == [f"warning: the app will not open {out}: " + warned[0].split(": ", 2)[2]]
    assert "too large to draw" in warned[0]
    with pytest.raises(TraceError, match="too large to draw"):
        trace.read(out)
    assert trace.read(out, limits=replace(LIMITS, max_frame_cells=1 << 30)).run_names
    assert sum(line.startswith("step ") for line in err) < 10  # 100 steps, well under a second


def test_record_is_quiet_about_a_trace_the_app_opens(files, capsys):
    argv = [a.replace("{tmp}", str(files)) for a in RECORD_GOOD] + ["--forward", "skip"]
    assert cli.main(argv) == 0
    assert "warning" not in capsys.readouterr().err


def test_a_plain_prompts_file_splits_at_line_ends_only(tmp_path):
    """One prompt per line, where a line ends at \\n or \\r\\n: a prompt holding U+2028, U+0085,
    a form feed or a lone \\r (text pasted from a web page or a PDF) stays one prompt."""
    from paged.engine.cli.generate import read_prompts_file

    odd = [
        "para\u2028graph",
        "next\x85line",
        "page\x0cbreak",
        "carriage\rreturn",
        "vertical\x0btab",
    ]
    path = tmp_path / "odd.txt"
    path.write_bytes(("\r\n".join(odd[:2]) + "\n\n" + "\n".join(odd[2:]) + "\n").encode())
    assert read_prompts_file(str(path)) == odd


@pytest.mark.model
def test_a_scenario_longer_than_the_models_context_is_one_line(smollm, tmp_path):
    """The rotary table ends at the model's context: a longer ``max_model_len`` is refused
    before a step runs, not met as an IndexError deep in the forward."""
    from paged.engine.trace import scenario as scenario_mod
    from paged.engine.trace.recorder import record

    path = tmp_path / "long.toml"
    path.write_text(
        "[arena]\nnum_blocks = 4096\nblock_size = 16\nmax_model_len = 65536\n"
        '[[requests]]\nid = "A"\nprompt_len = 9000\nmax_tokens = 2\n'
    )
    with pytest.raises(InvalidConfigError, match="exceeds .*context of 8,192 tokens"):
        record(scenario_mod.load(path), ["paged"], str(tmp_path / "t.jsonl"), model=smollm)
