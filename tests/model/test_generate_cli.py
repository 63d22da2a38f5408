"""``python -m paged generate`` end to end: prompts in, JSON lines out, same tokens as the API.

The CLI runs in-process (``cli.main``) on the session's model: a child process would only load
the same model again. test_bad_input.py runs the real ``python -m paged`` entry point."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

import pytest
import torch

from paged.engine.cli import generate as cmd_generate
from paged.engine.cli import main as cli
from paged.engine.core.request import SamplingParams
from paged.engine.llm import LLM

PROMPTS = ["The capital of France is", "def add(a, b):", "Roses are red,"]


@pytest.fixture
def on_session_model(smollm, monkeypatch):
    import paged.engine.llm

    monkeypatch.setattr(paged.engine.llm, "load_model", lambda *a, **k: smollm)


def summary_steps(said: list[str]) -> int:
    """The last step a progress line names (one line per step, numbered from 1)."""
    return int(said[-1].split()[2].rstrip(":"))


def json_lines(stdout: str) -> tuple[list[dict], dict]:
    rows = [json.loads(line) for line in stdout.splitlines() if line.strip()]
    assert "summary" in rows[-1]
    return rows[:-1], rows[-1]["summary"]


@pytest.mark.model
def test_json_output_from_a_prompts_file_matches_the_api(
    smollm, on_session_model, capsys, tmp_path, monkeypatch
):
    monkeypatch.setattr(cmd_generate, "PROGRESS_EVERY_S", 0.0)  # a line per step
    f = tmp_path / "prompts.json"
    f.write_text(json.dumps(PROMPTS))
    assert (
        cli.main(
            [
                "generate",
                "--prompts-file",
                str(f),
                "--max-tokens",
                "8",
                "--ignore-eos",
                "--json",
                "--device",
                "cpu",
                "--num-blocks",
                "4",
                "--block-size",
                "8",
            ]
        )
        == 0
    )
    captured = capsys.readouterr()
    rows, summary = json_lines(captured.out)
    assert [r["prompt"] for r in rows] == PROMPTS
    said = [ln for ln in captured.err.splitlines() if ln.startswith("generating: step ")]
    # progress while it runs, on stderr (stdout stays the JSON lines), ending with everything done
    assert len(said) == summary_steps(said) and said[-1].endswith(
        f"{len(PROMPTS)}/{len(PROMPTS)} requests finished, {8 * len(PROMPTS)} tokens"
    )
    lines: list[str] = []
    expected = LLM(smollm, kv_budget_mb=8).generate(
        PROMPTS, SamplingParams(max_tokens=8, ignore_eos=True), progress=lines.append
    )
    made = [int(ln.rsplit(", ", 1)[1].split()[0]) for ln in lines]
    assert made == sorted(made) and made[-1] == 8 * len(PROMPTS)
    for row, out in zip(rows, expected, strict=True):
        assert {"prompt", "prompt_token_ids", "token_ids", "text"} <= row.keys()
        assert row["prompt_token_ids"] == smollm.tokenizer.encode(row["prompt"])
        assert row["token_ids"] == out.token_ids
        assert row["text"] == out.text
    assert summary["num_generated_tokens"] == 8 * len(PROMPTS)
    # 4 blocks of 8 slots cannot hold three 13-15 slot requests at once
    assert summary["num_preemptions"] > 0


@pytest.mark.model
def test_prompts_file_with_one_prompt_per_line_and_plain_output(on_session_model, capsys, tmp_path):
    f = tmp_path / "prompts.txt"
    f.write_text("\n".join(PROMPTS[:2]) + "\n\n")
    assert (
        cli.main(["generate", PROMPTS[2], "--prompts-file", str(f), "--max-tokens", "2", "--json"])
        == 0
    )
    rows, summary = json_lines(capsys.readouterr().out)
    # positional prompts first, then the file's lines in order; blank lines are not prompts
    assert [r["prompt"] for r in rows] == [PROMPTS[2], *PROMPTS[:2]]
    assert summary["num_requests"] == 3
    assert cli.main(["generate", PROMPTS[0], "--max-tokens", "2"]) == 0
    captured = capsys.readouterr()
    assert captured.out.strip() and "2 tokens for 1 prompt in" in captured.err
    assert cli.main(["generate", PROMPTS[0], "--max-tokens", "2", "--n", "3", "--seed", "1"]) == 0
    assert "6 tokens for 1 prompt (3 samples each) in" in capsys.readouterr().err  # not "3 prompts"


@pytest.mark.model
def test_a_local_llama_directory_runs_and_matches_hf_greedy(tiny_llama_dir, capsys):
    from transformers import AutoModelForCausalLM

    assert (
        cli.main(
            [
                "generate",
                "1 2 3",
                "--model",
                str(tiny_llama_dir),
                "--max-tokens",
                "6",
                "--ignore-eos",
                "--json",
                "--device",
                "cpu",
            ]
        )
        == 0
    )
    rows, _ = json_lines(capsys.readouterr().out)
    hf = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32).eval()
    ids = list(rows[0]["prompt_token_ids"])
    with torch.inference_mode():
        for _ in range(6):
            ids.append(int(hf(torch.tensor([ids])).logits[0, -1].argmax()))
    assert rows[0]["token_ids"] == ids[len(rows[0]["prompt_token_ids"]) :]


@pytest.mark.model
def test_generation_stops_at_any_of_the_models_eos_ids(tiny_llama_dir, tmp_path):
    """Only the first of several EOS ids stopped a sequence, and generation_config.json was not
    read: a Llama 3 Instruct model ran past its end-of-turn token to max_tokens."""
    import shutil

    from paged.engine.llm import LLM

    params = SamplingParams(max_tokens=6)
    free = LLM(tiny_llama_dir, device="cpu", num_blocks=64, block_size=4).generate("1 2 3", params)
    third = free[0].token_ids[2]
    assert free[0].finish_reason == "length" and third not in free[0].token_ids[:2]
    for where in ("config.json", "generation_config.json"):
        model = tmp_path / where.split(".")[0]
        shutil.copytree(tiny_llama_dir, model)
        cfg = json.loads((model / where).read_text()) if (model / where).exists() else {}
        eos = cfg.get("eos_token_id")
        cfg["eos_token_id"] = [*(eos if isinstance(eos, list) else [eos] if eos else []), third]
        (model / where).write_text(json.dumps(cfg))
        [out] = LLM(model, device="cpu", num_blocks=64, block_size=4).generate("1 2 3", params)
        assert out.token_ids == free[0].token_ids[:3] and out.finish_reason == "eos", where


@pytest.mark.model
def test_trace_flag_writes_a_complete_trace_of_the_run(on_session_model, capsys, tmp_path):
    from paged.engine.core import events as E
    from paged.engine.trace import io as trace

    path = tmp_path / "run.jsonl"
    assert (
        cli.main(
            [
                "generate",
                *PROMPTS[:2],
                "--max-tokens",
                "3",
                "--ignore-eos",
                "--trace",
                str(path),
                "--block-size",
                "4",
                "--chat",
            ]
        )
        == 0
    )
    t = trace.read(path)
    assert t.run_names == ["paged"] and t.run_header("paged").block_size == 4
    finished = [ev for ev in t.runs["paged"] if isinstance(ev, E.Finished)]
    assert sorted(ev.req for ev in finished) == ["0", "1"]
    assert all(ev.num_generated == 3 for ev in finished)
    capsys.readouterr()


@pytest.mark.model
def test_outputs_are_printed_before_the_kv_event_hold_which_ctrl_c_ends(
    on_session_model, capsys, monkeypatch
):
    """The completions come before the hold, so a Ctrl-C during it loses none of them."""
    from tests.engine.test_kv_events import free_ports

    seen_before_hold: list[tuple[str, str]] = []

    def interrupted_sleep(seconds: float) -> None:
        seen_before_hold.append(capsys.readouterr())
        raise KeyboardInterrupt

    clock = SimpleNamespace(perf_counter=time.perf_counter, monotonic=time.monotonic)
    monkeypatch.setattr(
        cmd_generate, "time", SimpleNamespace(**vars(clock), sleep=interrupted_sleep)
    )
    port, _ = free_ports()
    argv = ["generate", PROMPTS[0], "--max-tokens", "2", "--json"]
    argv += ["--kv-events", f"tcp://127.0.0.1:{port}", "--kv-events-hold", "600"]
    assert cli.main(argv) == 0
    [(before, said)] = seen_before_hold
    rows, summary = json_lines(before)
    assert [r["prompt"] for r in rows] == [PROMPTS[0]] and summary["num_generated_tokens"] == 2
    assert said.endswith("holding the KV-event sockets open for 600 s (Ctrl-C ends the wait)\n")
    assert capsys.readouterr().err == "hold ended early\n"
