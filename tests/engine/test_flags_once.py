"""Every flag is declared once: a flag two commands share is the same flag (one default, one
type, one help), each settings flag carries its dataclass field's default, and ``LLM()`` takes
exactly the settings' fields."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from paged.engine.cli.main import build_parser, main
from paged.engine.engine_args import EngineArgs
from paged.engine.run_args import KVEventArgs, ModelArgs

#: Flags of one spelling that mean different things in different commands, and why.
NAMESAKES = {
    "--dtype": "capacity's is the KV element type of a model it never loads",
    "--seed": "simulate's seeds the synthetic workload, generate's the sampler",
    "--json": "each command prints its own JSON",
}
SETTINGS = (EngineArgs, ModelArgs, KVEventArgs)


def _commands() -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _flags(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {s: a for a in parser._actions for s in a.option_strings if s.startswith("--")}


SETTING_NAMES = {f.name for cls in SETTINGS for f in dataclasses.fields(cls)}


def _declaration(a: argparse.Action) -> tuple:
    # a setting's default is its field's (the next test); a command may leave it unset (None)
    # where its own source stands in: a scenario, or the paper's model for a dry run
    default = "field" if a.dest in SETTING_NAMES else a.default
    return (type(a).__name__, a.dest, default, a.type, a.choices, a.help, a.metavar)


def test_a_flag_two_commands_share_is_declared_alike():
    by_flag: dict[str, dict[str, tuple]] = {}
    for name, parser in _commands().items():
        for flag, action in _flags(parser).items():
            if flag != "--help":
                by_flag.setdefault(flag, {})[name] = _declaration(action)
    shared = {f: d for f, d in by_flag.items() if len(d) > 1 and f not in NAMESAKES}
    assert "--model" in shared and "--kv-events" in shared  # generate and record both run one
    for flag, decls in shared.items():
        assert len(set(decls.values())) == 1, f"{flag} is declared differently: {decls}"


def test_every_settings_flag_has_its_fields_default():
    defaults = {f.name: f.default for cls in SETTINGS for f in dataclasses.fields(cls) if f.init}
    for name, parser in _commands().items():
        for action in _flags(parser).values():
            if action.dest in defaults and action.default is not None:
                assert action.default == defaults[action.dest], (name, action.dest)


def test_llm_takes_exactly_the_settings_fields():
    from paged.engine.llm import _SETTINGS

    fields = {f.name for cls in SETTINGS for f in dataclasses.fields(cls)}
    assert set().union(*_SETTINGS.values()) == fields - {"model", "kv_events_hold"}


def test_llm_refuses_a_name_no_setting_has():
    from paged.engine.llm import LLM

    with pytest.raises(TypeError, match="num_block"):
        LLM("/never/loaded", num_block=4)


def test_simulate_refuses_a_context_with_no_room_for_a_prompt_and_a_token(capsys):
    assert main(["simulate", "--max-model-len", "1", "--requests", "4"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--max-model-len must be at least 2" in err


def test_simulate_without_a_context_uses_the_papers_model(capsys):
    assert main(["simulate", "--requests", "20", "--policies", "paged", "--json"]) == 0
    out = capsys.readouterr().out
    assert '"max_model_len": 2048' in out
