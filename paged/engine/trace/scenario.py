"""Scenarios: a small TOML file describing an arena and the requests that arrive at it.

title = "Six steps"
[arena]                # every size a positive integer; at most 65,536 slots (a trace's limit)
num_blocks = 16        # the arena holds num_blocks * block_size token slots
block_size = 16
max_model_len = 128
enable_prefix_caching = false   # paging reuses cached prompt-prefix blocks (default false)
dtype = "bfloat16"     # the model's element type when recorded (default: the device's)
[[runs]]               # optional: runs named by what differs (paged/engine/trace/scenario_runs.py)
label = "swap"
preemption_mode = "swap"
[[requests]]
id = "A"                          # a string, or an integer (read as its string)
prompt = "Why is the sky blue?"   # or prompt_len = 40 for a synthetic prompt
chat = true                       # apply the chat template (default false)
max_tokens = 48
ignore_eos = false
arrival_step = 0
output_len = 20                   # dry runs only: when the stand-in model stops
n = 3                             # parallel samples (ids A.0, A.1, A.2; default 1)
temperature = 0.8                 # default 0: greedy
seed = 7                          # sample i is seeded seed + i
[attention]            # optional: record how these requests' decode tokens read their K/V
requests = ["A"]
layer = 0              # the tile walk's layer and KV head
kv_head = 0
"""

from __future__ import annotations

import json
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from paged.engine.core.request import SamplingParams, check_prompt
from paged.engine.errors import InvalidConfigError, InvalidRequestError
from paged.engine.files import read_bounded
from paged.engine.trace.scenario_runs import ScenarioRun, parse_runs
from paged.engine.trace.schema import LIMITS

# A fixed passage to cut synthetic prompts from, so they are real text the model can read.
FILLER_TEXT = (
    "The kernel keeps a table for every process that maps each page of its virtual "
    "address space to a frame of physical memory, so a program sees one contiguous "
    "range while its data lies scattered wherever frames were free. "
)


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
    n: int = 1
    temperature: float = 0.0
    seed: int | None = None

    @property
    def sample_ids(self) -> tuple[str, ...]:
        """The engine's request ids for it: ``id``, or ``id.0`` .. ``id.(n-1)`` when n > 1."""
        return (self.id,) if self.n == 1 else tuple(f"{self.id}.{k}" for k in range(self.n))


@dataclass(frozen=True)
class Scenario:
    title: str
    num_blocks: int
    block_size: int
    max_model_len: int
    requests: tuple[ScenarioRequest, ...]
    raw: dict = field(default_factory=dict, compare=False)
    enable_prefix_caching: bool = False
    runs: tuple[ScenarioRun, ...] = ()  # [[runs]]; () means "one run per --allocators name"
    dtype: str | None = None  # the model's element type; None: the device's default
    attention: AttentionSpec | None = None  # [attention]: record how chosen requests read K/V


@dataclass(frozen=True)
class AttentionSpec:
    """``[attention]``: record an ``attention_read`` event for every decode step of the
    ``requests`` named (paged runs of the real model only), with the tile walk of layer
    ``layer`` and KV head ``kv_head``. Off when the scenario has no such table."""

    requests: tuple[str, ...]
    layer: int = 0
    kv_head: int = 0
    split: int | None = None  # tiles per split-K split of the C kernel; None: its default


#: The deepest layer and the highest KV head a scenario may name (the model refuses past its own)
MAX_ATTENTION_INDEX = 1024


def _attention(raw: object, name: str, ids: set[str]) -> AttentionSpec | None:
    if raw is None:
        return None
    where = f"scenario {name}: [attention]"
    if not isinstance(raw, dict):
        raise InvalidConfigError(f"{where} must be a table")
    extra = set(raw) - {"requests", "layer", "kv_head", "split"}
    if extra:
        raise InvalidConfigError(f"{where}: unknown key {sorted(extra)[0]!r}")
    reqs = raw.get("requests")
    if not isinstance(reqs, list) or not reqs or not all(r in ids for r in reqs):
        raise InvalidConfigError(f"{where}: requests must list ids of the scenario's requests")
    for key in ("layer", "kv_head"):
        v = raw.get(key, 0)
        if type(v) is not int or not 0 <= v < MAX_ATTENTION_INDEX:
            raise InvalidConfigError(
                f"{where}: {key} must be an integer in [0, {MAX_ATTENTION_INDEX}), got {v!r:.40}"
            )
    split = raw.get("split")
    if split is not None and (type(split) is not int or not 0 < split <= MAX_ATTENTION_INDEX):
        raise InvalidConfigError(
            f"{where}: split must be a number of tiles in [1, {MAX_ATTENTION_INDEX}], "
            f"got {split!r:.40}"
        )
    return AttentionSpec(tuple(reqs), raw.get("layer", 0), raw.get("kv_head", 0), split)


#: The most a scenario file may hold: the trace header carries the scenario as written, and a
#: trace line holds at most ``LIMITS.max_line_chars`` (1 MiB); reading is bounded by it too, so
#: ``--scenario /dev/zero`` is one line, not a MemoryError.
MAX_SCENARIO_BYTES = LIMITS.max_line_chars
#: The latest arrival: every step before it is an idle step the trace records (one ``step_end``
#: per run), so a later one only writes a trace no reader takes (``LIMITS.max_events``); an
#: ``arrival_step`` of 2**31 - 1 would run for hours and write until the disk is full.
MAX_ARRIVAL_STEP = LIMITS.max_events

#: What ``[arena] dtype`` may name (engine.model.loader.DTYPES spells them; no torch here).
MODEL_DTYPES = ("float32", "bfloat16", "float16")

#: Each request key's type and range. ``id`` may be written as an integer; it becomes a string
#: here, at the edge, so the engine and the trace only ever see string ids.
_INT_KEYS = {
    "max_tokens": 1,
    "prompt_len": 1,
    "arrival_step": 0,
    "output_len": 1,
    "n": 1,
    "seed": 0,
}
_BOOL_KEYS = ("chat", "ignore_eos")


def _request(i: int, d: dict) -> ScenarioRequest:
    where = f"scenario request #{i + 1}"
    if not isinstance(d, dict):
        raise InvalidConfigError(f"{where} is not a table")
    known = set(ScenarioRequest.__dataclass_fields__)
    extra = set(d) - known
    if extra:
        raise InvalidConfigError(f"{where}: unknown key {sorted(extra)[0]!r}")
    if "max_tokens" not in d:
        raise InvalidConfigError(f"{where} lacks max_tokens")
    if ("prompt" in d) == ("prompt_len" in d):
        raise InvalidConfigError(f"{where} needs exactly one of prompt, prompt_len")
    d = dict(d)
    rid = d.get("id", f"R{i}")
    if type(rid) is int:
        rid = str(rid)
    if not isinstance(rid, str) or not 0 < len(rid) <= LIMITS.max_name_chars:
        raise InvalidConfigError(f"{where}: id must be a short string or an integer")
    d["id"] = rid
    for key, low in _INT_KEYS.items():
        if key in d and (type(d[key]) is not int or not low <= d[key] <= LIMITS.max_int):
            raise InvalidConfigError(
                f"{where} ({rid}): {key} must be an integer of at least {low}, got {d[key]!r}"
            )
    for key in _BOOL_KEYS:
        if key in d and type(d[key]) is not bool:
            raise InvalidConfigError(f"{where} ({rid}): {key} must be true or false")
    if "temperature" in d:
        t = d["temperature"]
        if type(t) not in (int, float) or not 0 <= t <= 100:
            raise InvalidConfigError(f"{where} ({rid}): temperature must be a number in [0, 100]")
        d["temperature"] = float(t)
    if d.get("arrival_step", 0) > MAX_ARRIVAL_STEP:
        raise InvalidConfigError(
            f"{where} ({rid}): arrival_step must be at most {MAX_ARRIVAL_STEP:,} (each step "
            f"before it is recorded), got {d['arrival_step']:,}"
        )
    try:  # the engine's own checks of n, seed and temperature
        SamplingParams(
            max_tokens=d["max_tokens"],
            temperature=d.get("temperature", 0.0),
            seed=d.get("seed"),
            n=d.get("n", 1),
        )
    except InvalidRequestError as e:
        raise InvalidConfigError(f"{where} ({rid}): {e}") from None
    if "prompt" in d:
        try:
            check_prompt(i, d["prompt"])
        except InvalidRequestError as e:
            raise InvalidConfigError(f"{where} ({rid}): {e}") from None
    return ScenarioRequest(**d)


def _arena_int(raw: dict, key: str, default: int | None, name: str) -> int:
    v = raw.get(key, default)
    if type(v) is not int or v <= 0:
        raise InvalidConfigError(
            f"scenario {name}: [arena] {key} must be a positive integer, got {v!r}"
        )
    return v


def load(path: str | Path) -> Scenario:
    """Parse and validate a scenario file. Raises InvalidConfigError with one line for a missing
    file, bad TOML or a bad field."""
    p = Path(path)
    try:
        data = read_bounded(p, MAX_SCENARIO_BYTES)
        if data is None:
            raise InvalidConfigError(
                f"scenario {p.name} is larger than {MAX_SCENARIO_BYTES >> 20} MiB "
                "(what a trace header can carry)"
            )
        raw = tomllib.loads(data.decode("utf-8"))
    except InvalidConfigError:
        raise
    except FileNotFoundError:
        raise InvalidConfigError(f"no scenario file at {p}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise InvalidConfigError(f"scenario {p.name} is not valid TOML: {e}") from None
    except ValueError:  # an integer longer than Python converts (4,300 digits) and the like
        raise InvalidConfigError(
            f"scenario {p.name} holds a number too long to read "
            f"(over {sys.get_int_max_str_digits():,} digits)"
        ) from None
    except RecursionError:
        raise InvalidConfigError(f"scenario {p.name} nests deeper than a scenario can") from None
    except OSError as e:  # a folder, no permission
        raise InvalidConfigError(f"cannot read scenario {p}: {e.strerror or e}") from None
    return parse(raw, p.name, p.stem)


def parse(raw: dict, name: str, title: str = "scenario") -> Scenario:
    """Validate a scenario document (a parsed TOML file, or one a program built in the same
    shape) named ``name`` in messages; ``title`` when it has none. Raises InvalidConfigError
    with one line for a bad field."""
    try:
        json.dumps(raw)  # the trace header carries the scenario as written
    except (TypeError, ValueError):
        raise InvalidConfigError(
            f"scenario {name} holds a value a trace cannot store (a TOML date or time?)"
        ) from None
    if not isinstance(raw, dict):
        raise InvalidConfigError(f"scenario {name} must be a table")
    arena = raw.get("arena", {})
    if not isinstance(arena, dict):
        raise InvalidConfigError(f"scenario {name}: [arena] must be a table")
    num_blocks = _arena_int(arena, "num_blocks", None, name)
    block_size = _arena_int(arena, "block_size", 16, name)
    max_model_len = _arena_int(arena, "max_model_len", 2048, name)
    if num_blocks * block_size > LIMITS.max_slots:
        raise InvalidConfigError(
            f"scenario {name}: an arena of {num_blocks * block_size:,} "
            f"slots is more than a trace may hold ({LIMITS.max_slots:,})"
        )
    if not isinstance(raw.get("requests", []), list):
        raise InvalidConfigError(f"scenario {name}: requests must be [[requests]] tables")
    if len(raw.get("requests", [])) > LIMITS.max_requests:
        raise InvalidConfigError(f"scenario {name}: more than {LIMITS.max_requests} requests")
    reqs = tuple(_request(i, d) for i, d in enumerate(raw.get("requests", [])))
    if not reqs:
        raise InvalidConfigError(f"scenario {name} has no [[requests]]")
    for r in reqs:  # the engine refuses it too, but only after building the prompt's token list
        if r.prompt_len is not None and r.prompt_len > max_model_len:
            raise InvalidConfigError(
                f"scenario {name}: request {r.id}: prompt_len {r.prompt_len:,} exceeds "
                f"max_model_len {max_model_len:,}"
            )
    seen: set[str] = set()
    for rid in (i for r in reqs for i in r.sample_ids):
        if rid in seen:
            raise InvalidConfigError(
                f"scenario {name}: request ids must be unique, and {rid!r} is used twice"
                " (a request with n samples also takes the ids id.0 .. id.(n-1))"
            )
        seen.add(rid)
    if len(seen) > LIMITS.max_requests:  # what a run of the trace may hold, samples each one
        raise InvalidConfigError(
            f"scenario {name}: {len(seen):,} requests counting each of n samples, more than "
            f"a trace may hold ({LIMITS.max_requests:,})"
        )
    caching = arena.get("enable_prefix_caching", False)
    if type(caching) is not bool:
        raise InvalidConfigError(
            f"scenario {name}: [arena] enable_prefix_caching must be true or false"
        )
    dtype = arena.get("dtype")
    if dtype is not None and dtype not in MODEL_DTYPES:
        raise InvalidConfigError(
            f"scenario {name}: [arena] dtype must be one of {', '.join(MODEL_DTYPES)}"
        )
    runs = parse_runs(raw.get("runs"), name, LIMITS.max_slots // block_size)
    attention = _attention(raw.get("attention"), name, seen)
    return Scenario(
        raw.get("title", title),
        num_blocks,
        block_size,
        max_model_len,
        reqs,
        raw,
        caching,
        runs,
        dtype,
        attention,
    )
