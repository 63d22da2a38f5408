"""One settings path: a flag is declared by EngineArgs, checked once, and reaches the EngineConfig
the core is built from; a bad value is refused once, in one line, before any model loads."""

from __future__ import annotations

import argparse
from types import SimpleNamespace

import pytest
import torch

from paged.engine.cli.main import main
from paged.engine.core.engine_core import EngineConfig
from paged.engine.engine_args import MIB, EngineArgs
from paged.engine.errors import InvalidConfigError
from paged.engine.model.arena import bytes_per_block
from paged.engine.model.loader import LoadedModel
from paged.engine.model.weights import ModelConfig

CFG = ModelConfig(
    num_layers=2,
    hidden_size=32,
    num_heads=4,
    num_kv_heads=2,
    head_dim=8,
    vocab_size=100,
    rms_norm_eps=1e-5,
    max_position_embeddings=128,
    eos_token_id=2,
)
#: a model's shape without weights: enough for the settings, never run
WEIGHTLESS = SimpleNamespace(config=CFG)
FAKE_MODEL = LoadedModel("fake", WEIGHTLESS, None, torch.device("cpu"), torch.float32)


class RunnerReached(Exception):
    """Raised in place of building the runner: the config it was given is what the test reads."""


@pytest.fixture
def engine_path(monkeypatch):
    """Every EngineArgs check counted (``checks``) and the EngineConfig the model side would be
    built from captured (``configs``); the model is a shape without weights, never loaded."""
    import paged.engine.llm

    seen = SimpleNamespace(checks=0, configs=[])
    check = EngineArgs.__post_init__

    def counted(self):
        seen.checks += 1
        check(self)

    def runner(model, config, attention):
        seen.configs.append(config)
        raise RunnerReached

    monkeypatch.setattr(EngineArgs, "__post_init__", counted)
    monkeypatch.setattr(paged.engine.llm, "load_model", lambda *a, **k: FAKE_MODEL)
    monkeypatch.setattr(paged.engine.llm, "build_runner", runner)
    return seen


def test_generate_flags_reach_the_engine_config_after_one_check(engine_path):
    with pytest.raises(RunnerReached):
        main(
            ["generate", "hi", "--block-size", "8", "--num-blocks", "12", "--max-model-len", "32"]
            + ["--max-tokens", "16"]
            + ["--max-num-seqs", "3", "--preemption-mode", "swap", "--enable-prefix-caching"]
            + ["--kv-cache-dtype", "fp8_e4m3"]
        )
    assert engine_path.configs == [
        EngineConfig(
            "paged",
            num_blocks=12,
            block_size=8,
            max_model_len=32,
            max_num_seqs=3,
            preemption_mode="swap",
            num_cpu_blocks=12,  # as large as the arena
            enable_prefix_caching=True,
            kv_cache_dtype="fp8_e4m3",
        )
    ]
    assert engine_path.checks == 1


def test_sizes_in_mib_become_blocks_by_the_models_bytes_per_block(engine_path):
    with pytest.raises(RunnerReached):
        main(
            ["generate", "hi", "--block-size", "4", "--kv-budget-mb", "1"]
            + ["--preemption-mode", "swap", "--swap-space-mb", "0.5"]
        )
    [config] = engine_path.configs
    per_block = bytes_per_block(CFG, 4, torch.float32)
    assert config.num_blocks == MIB // per_block
    assert config.num_cpu_blocks == MIB // 2 // per_block
    assert config.max_model_len == CFG.max_position_embeddings


def test_the_api_takes_the_same_path(engine_path):
    from paged.engine.llm import LLM

    with pytest.raises(RunnerReached):
        LLM(FAKE_MODEL, block_size=32, num_blocks=5, allocator="max")
    assert engine_path.configs == [EngineConfig("max", 5, 32, CFG.max_position_embeddings)]
    assert engine_path.checks == 1


@pytest.mark.parametrize(
    "flags, line",
    [
        (["--block-size", "0"], "block size must be a whole number from 1 to 65,536, got 0"),
        (
            ["--num-blocks", "5", "--swap-space-mb", "3"],
            "swap space applies only to swap preemption (preemption_mode swap)",
        ),
        (
            ["--allocator", "max", "--enable-prefix-caching"],
            "prefix caching needs the paged allocator; a 'max' run is private to its request "
            "and shares nothing",
        ),
    ],
)
def test_a_bad_setting_is_refused_once_in_one_line_before_loading(
    engine_path, monkeypatch, capsys, flags, line
):
    import paged.engine.llm

    def never(*a, **k):
        raise AssertionError("the model was loaded before the settings were checked")

    monkeypatch.setattr(paged.engine.llm, "load_model", never)
    assert main(["generate", "hi", *flags]) == 2
    assert capsys.readouterr().err == f"error: {line}\n"
    assert engine_path.checks == 1


def test_the_flags_defaults_are_the_settings_defaults():
    parser = EngineArgs.add_cli_args(argparse.ArgumentParser())
    assert EngineArgs.from_cli_args(parser.parse_args([])) == EngineArgs()


def test_a_command_may_take_some_of_the_flags():
    parser = EngineArgs.add_cli_args(argparse.ArgumentParser(), only=("block_size",))
    assert parser.parse_args(["--block-size", "8"]).block_size == 8
    with pytest.raises(SystemExit):
        parser.parse_args(["--num-blocks", "8"])


def test_a_dry_run_gives_its_sizes_in_blocks_and_tokens():
    config = EngineArgs(num_blocks=4, block_size=2, max_model_len=8).create_engine_config()
    assert (config.num_blocks, config.block_size, config.max_model_len) == (4, 2, 8)
    with pytest.raises(InvalidConfigError, match="max_model_len must be given"):
        EngineArgs(num_blocks=4).create_engine_config()
    with pytest.raises(InvalidConfigError, match="bytes per block"):
        EngineArgs(max_model_len=8).create_engine_config()
    with pytest.raises(InvalidConfigError, match=r"max_model_len must be in \[1, 64\], got 100"):
        EngineArgs(num_blocks=4, max_model_len=100).create_engine_config(context_len=64)
