"""Every bad input ends as one clear line and exit code 2 (CLI) or a specific exception (API)."""
from __future__ import annotations

import contextlib
import io
import subprocess
from pathlib import Path

import pytest

from engine import cli
from engine.request import InvalidConfigError, InvalidRequestError, SamplingParams

ROOT = Path(__file__).resolve().parent.parent
LONG_PROMPT = "the quick brown fox jumps over the lazy dog " * 12


def run_cli(*args: str) -> subprocess.CompletedProcess:
    """``python -m engine generate ARGS`` in-process (a child would only pay for importing torch
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
@pytest.mark.parametrize("args, words", [
    (["", "--max-tokens", "4"], ["empty"]),
    (["hello", "--block-size", "0"], ["block size"]),
    (["hello", "--block-size", "-16"], ["block size"]),
    (["hello", "--model", "/no/such/model-dir"], ["/no/such/model-dir", "does not exist"]),
    (["--prompts-file", "/no/such/prompts.json"], ["prompts file", "does not exist"]),
    (["hello", "--num-blocks", "0"], ["blocks"]),
])
def test_cli_refuses_bad_input_before_loading_the_model(args, words):
    proc = run_cli(*args)
    assert proc.returncode == 2
    assert_one_error_line(proc.stderr, *words)
    assert proc.stdout == ""


@pytest.fixture
def cli_on_loaded_model(smollm, monkeypatch):
    """``python -m engine generate`` in-process, reusing the session's model."""
    import engine.llm
    monkeypatch.setattr(engine.llm, "load_model", lambda *a, **k: smollm)

    def run(*args: str) -> int:
        return cli.main(["generate", *args])
    return run


@pytest.mark.model
@pytest.mark.parametrize("args, words", [
    ([LONG_PROMPT, "--max-model-len", "64"], ["exceeds the maximum model length of 64"]),
    ([LONG_PROMPT, "--num-blocks", "2", "--block-size", "16"], ["KV slots", "arena"]),
    (["hello", "--kv-budget-mb", "0.01"], ["too small for one block"]),
])
def test_cli_refuses_what_only_the_model_can_judge(cli_on_loaded_model, capsys, args, words):
    assert cli_on_loaded_model(*args) == 2
    captured = capsys.readouterr()
    assert_one_error_line(captured.err, *words)
    assert captured.out == ""


def test_api_refuses_a_nonexistent_model_path():
    from engine.llm import LLM
    with pytest.raises(InvalidConfigError, match="does not exist"):
        LLM("/no/such/model-dir")


def test_api_refuses_non_positive_block_size_before_loading():
    from engine.llm import LLM
    for bs in (0, -4):
        with pytest.raises(InvalidConfigError, match="block size"):
            LLM("/never/loaded", block_size=bs)


@pytest.mark.model
def test_api_raises_specific_errors(smollm):
    from engine.llm import LLM
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
