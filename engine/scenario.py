"""Scenarios: a small TOML file describing an arena and the requests that arrive at it.

    title = "Six steps"
    [arena]
    num_blocks = 16        # the arena holds num_blocks * block_size token slots
    block_size = 16
    max_model_len = 128
    [[requests]]
    id = "A"
    prompt = "Why is the sky blue?"   # or prompt_len = 40 for a synthetic prompt
    chat = true                       # apply the chat template (default false)
    max_tokens = 48
    ignore_eos = false
    arrival_step = 0
    output_len = 20                   # dry runs only: when the stand-in model stops
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from engine.request import InvalidConfigError

# A fixed passage to cut synthetic prompts from, so they are real text the model can read.
FILLER_TEXT = ("The kernel keeps a table for every process that maps each page of its virtual "
               "address space to a frame of physical memory, so a program sees one contiguous "
               "range while its data lies scattered wherever frames were free. ")


@dataclass(frozen=True)
class ScenarioRequest:
    id: str
    max_tokens: int
    prompt: str | None = None
    prompt_len: int | None = None
    chat: bool = False
    ignore_eos: bool = False
    arrival_step: int = 0
    output_len: int | None = None


@dataclass(frozen=True)
class Scenario:
    title: str
    num_blocks: int
    block_size: int
    max_model_len: int
    requests: tuple[ScenarioRequest, ...]
    raw: dict = field(default_factory=dict, compare=False)


def _request(i: int, d: dict) -> ScenarioRequest:
    if not isinstance(d, dict):
        raise InvalidConfigError(f"scenario request #{i + 1} is not a table")
    known = set(ScenarioRequest.__dataclass_fields__)
    extra = set(d) - known
    if extra:
        raise InvalidConfigError(f"scenario request #{i + 1}: unknown key {sorted(extra)[0]!r}")
    if "max_tokens" not in d:
        raise InvalidConfigError(f"scenario request #{i + 1} lacks max_tokens")
    if ("prompt" in d) == ("prompt_len" in d):
        raise InvalidConfigError(f"scenario request #{i + 1} needs exactly one of prompt, prompt_len")
    try:
        req = ScenarioRequest(**{"id": f"R{i}", **d})
    except TypeError as e:
        raise InvalidConfigError(f"scenario request #{i + 1}: {e}") from None
    if req.max_tokens < 1 or (req.prompt_len is not None and req.prompt_len < 1):
        raise InvalidConfigError(f"scenario request {req.id}: lengths must be positive")
    return req


def load(path: str | Path) -> Scenario:
    """Parse and validate a scenario file. Raises InvalidConfigError with one line for a missing
    file, bad TOML or a bad field."""
    p = Path(path)
    try:
        raw = tomllib.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InvalidConfigError(f"no scenario file at {p}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise InvalidConfigError(f"scenario {p.name} is not valid TOML: {e}") from None
    arena = raw.get("arena", {})
    try:
        num_blocks, block_size = int(arena["num_blocks"]), int(arena.get("block_size", 16))
        max_model_len = int(arena.get("max_model_len", 2048))
    except (KeyError, TypeError, ValueError):
        raise InvalidConfigError(f"scenario {p.name}: [arena] needs an integer num_blocks") from None
    if min(num_blocks, block_size, max_model_len) <= 0:
        raise InvalidConfigError(f"scenario {p.name}: arena sizes must be positive")
    reqs = tuple(_request(i, d) for i, d in enumerate(raw.get("requests", [])))
    if not reqs:
        raise InvalidConfigError(f"scenario {p.name} has no [[requests]]")
    if len({r.id for r in reqs}) != len(reqs):
        raise InvalidConfigError(f"scenario {p.name}: request ids must be unique")
    return Scenario(raw.get("title", p.stem), num_blocks, block_size, max_model_len, reqs, raw)
