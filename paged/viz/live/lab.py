"""The scenario lab's model: a small what-if scenario, checked field by field, recorded as a
dry run in-process, carried in a link and written as an engine scenario TOML.

Everything here may come from a hostile link or form: ``from_dict`` type-checks each field,
``check`` returns one message per bad field (row and column, so the page can say where), and
only a lab with no message is handed to the engine, which validates it again
(``paged.engine.trace.scenario.load``). No Streamlit, no torch: the dry run (``forward="skip"``) runs the
engine's scheduler and allocators with a stand-in model.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import json
import math
import re
import zlib
from dataclasses import asdict, dataclass, field, replace

from paged.engine.errors import InvalidConfigError
from paged.engine.files import all_text_encodes
from paged.engine.trace import io as T

POLICIES = ("max", "pow2", "oracle")
MAX_REQUESTS = 8
MAX_ID_CHARS = 4
MAX_PROMPT_CHARS = 600
MAX_TOKENS = 512
MAX_ARRIVAL = 200
MAX_SLOTS = 4096  # arena slots: a grid a class can still read
MAX_BLOCK_SIZE = 64
MAX_LINK_CHARS = 6000  # the ?scenario= token
MAX_LINK_BYTES = 32_000  # what that token may inflate to
MAX_FRAME_CELLS = 1 << 21  # steps x slots over both runs: the player draws it in seconds
#: Steps of one run: each frame costs its strips, captions and tables however small the arena
MAX_STEPS = 5000
LINK_VERSION = 1


class LabError(ValueError):
    """A scenario link or file cannot be read; one line saying why."""


class TooLarge(LabError):
    """The scenario runs more steps over its arena than the player draws quickly: ``steps``
    (over both runs, at least), ``slots`` the arena's."""

    def __init__(self, steps: int, slots: int) -> None:
        self.steps, self.slots = steps, slots
        super().__init__(
            f"this scenario is too large to draw: {steps} steps over {slots} slots, more than "
            f"the player draws quickly; use fewer blocks or shorter answers"
        )


@dataclass(frozen=True)
class LabRequest:
    id: str
    prompt: str
    max_tokens: int
    arrival_step: int = 0
    stop_after: int | None = None  # dry run: the stand-in model stops after this many tokens


@dataclass(frozen=True)
class Lab:
    requests: tuple[LabRequest, ...]
    num_blocks: int = 16
    block_size: int = 16
    max_model_len: int = 128
    policy: str = "max"  # which contiguous preallocation stands on the left

    @property
    def num_slots(self) -> int:
        return self.num_blocks * self.block_size


@dataclass(frozen=True)
class FieldError:
    """One bad value: ``row`` (0-based request row, None for the arena), ``field`` the column
    or arena field, ``message`` what is wrong, in words."""

    row: int | None
    field: str
    message: str


REQUEST_FIELDS = ("id", "prompt", "max_tokens", "arrival_step", "stop_after")
ARENA_FIELDS = ("num_blocks", "block_size", "max_model_len", "policy")


def example() -> Lab:
    """The lab's starting point: three requests, one that stops early."""
    return Lab(
        (
            LabRequest("A", "Explain paging in one paragraph:", 40, 0),
            LabRequest("B", "Answer in one word: what colour is the sky?", 30, 1, 4),
            LabRequest("C", "Write a short poem about memory:", 36, 3),
        ),
        num_blocks=12,
        block_size=16,
        max_model_len=96,
        policy="max",
    )


# --- hostile input ---------------------------------------------------------------------------


#: A whole number as text: ASCII digits only (str.isdigit() also takes "²", which int() refuses).
_INT_TEXT = re.compile(r"-?[0-9]{1,10}")
NOT_A_NUMBER = "must be a whole number (up to 10 digits)"


def _int(v: object) -> int | None:
    """An integer as a form or JSON gives it (7, 7.0, "7"), of at most 10 digits, so the form's
    widgets can show it (Streamlit refuses numbers past 2**53 and the table past 2**63); None
    when it is not one."""
    if isinstance(v, bool):
        return None
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    elif isinstance(v, str) and _INT_TEXT.fullmatch(v.strip()):
        v = int(v.strip())
    return v if isinstance(v, int) and abs(v) < 10**10 else None


def _blank(v: object) -> bool:
    return (
        v is None
        or (isinstance(v, float) and math.isnan(v))
        or (isinstance(v, str) and not v.strip())
    )


def from_dict(d: object) -> tuple[Lab, list[FieldError]]:
    """A lab from a link's or the table's plain data. Values of the wrong type become field
    errors (and a placeholder value) rather than exceptions, so the page can show the table
    and say which cell is wrong. Raises LabError only for data that is not a lab at all."""
    if not isinstance(d, dict) or not isinstance(d.get("requests"), list):
        raise LabError("this is not a scenario (no list of requests)")
    rows = d["requests"]
    if len(rows) > MAX_REQUESTS:
        raise LabError(f"a lab scenario has at most {MAX_REQUESTS} requests, this has {len(rows)}")
    errors: list[FieldError] = []
    reqs = []
    for n, r in enumerate(rows):
        if not isinstance(r, dict):
            raise LabError(f"request row {n + 1} is not a table")
        vals: dict = {}
        for key in REQUEST_FIELDS:
            v = r.get(key)
            if key in ("id", "prompt"):
                # a lone surrogate (JSON's \ud800) broke the table's Arrow conversion on every rerun
                if isinstance(v, str) and not all_text_encodes(v):
                    errors.append(FieldError(n, key, "is not valid Unicode text"))
                    v = v.encode("utf-8", "replace").decode("utf-8")
                vals[key] = (
                    v.strip()
                    if isinstance(v, str) and key == "id"
                    else (v if isinstance(v, str) else "")
                )
                if not isinstance(v, str) and not _blank(v):
                    errors.append(FieldError(n, key, "must be text"))
            elif key == "stop_after" and _blank(v):
                vals[key] = None
            else:
                iv = _int(v)
                if iv is None:
                    errors.append(FieldError(n, key, NOT_A_NUMBER))
                vals[key] = iv if iv is not None else (0 if key == "arrival_step" else 1)
        reqs.append(LabRequest(**vals))
    arena = {}
    for key in ARENA_FIELDS[:3]:
        iv = _int(d.get(key, getattr(Lab, key)))
        if iv is None:
            errors.append(FieldError(None, key, NOT_A_NUMBER))
        arena[key] = iv if iv is not None else getattr(Lab, key)
    policy = d.get("policy", "max")
    if policy not in POLICIES:
        errors.append(FieldError(None, "policy", f"must be one of {', '.join(POLICIES)}"))
        policy = "max"
    return Lab(tuple(reqs), policy=policy, **arena), errors


def to_dict(lab: Lab) -> dict:
    return {
        "requests": [asdict(r) for r in lab.requests],
        "num_blocks": lab.num_blocks,
        "block_size": lab.block_size,
        "max_model_len": lab.max_model_len,
        "policy": lab.policy,
    }


def prompt_tokens(prompt: str) -> int:
    """How many tokens a dry run gives this prompt (the engine's own stand-in count)."""
    from paged.engine.trace.recorder import build_requests
    from paged.engine.trace.scenario import Scenario, ScenarioRequest

    sc = Scenario("t", 1, 1, 1, (ScenarioRequest("x", 1, prompt=prompt),))
    return build_requests(sc)[0].prompt_len


def check(lab: Lab) -> list[FieldError]:
    """Every bad value in ``lab``, each with its row and field: empty when it may run."""
    out: list[FieldError] = []
    if not lab.requests:
        out.append(FieldError(None, "requests", "add at least one request"))
    if len(lab.requests) > MAX_REQUESTS:
        out.append(FieldError(None, "requests", f"at most {MAX_REQUESTS} requests"))
    if not 1 <= lab.block_size <= MAX_BLOCK_SIZE:
        out.append(FieldError(None, "block_size", f"must be 1 to {MAX_BLOCK_SIZE}"))
    if lab.num_blocks < 1:
        out.append(FieldError(None, "num_blocks", "must be at least 1"))
    elif lab.num_slots > MAX_SLOTS:
        out.append(
            FieldError(
                None,
                "num_blocks",
                f"the arena holds {lab.num_slots} slots; at most {MAX_SLOTS} fit a readable grid",
            )
        )
    if lab.max_model_len < 2:
        out.append(FieldError(None, "max_model_len", "must be at least 2"))
    elif lab.max_model_len > lab.num_slots and lab.num_blocks >= 1:
        out.append(
            FieldError(
                None,
                "max_model_len",
                f"is {lab.max_model_len}, more than the arena's {lab.num_slots} slots",
            )
        )
    seen: set[str] = set()
    for n, r in enumerate(lab.requests):
        out += _check_request(lab, n, r, seen)
    return out


def _check_request(lab: Lab, n: int, r: LabRequest, seen: set[str]) -> list[FieldError]:
    out: list[FieldError] = []
    if not 1 <= len(r.id) <= MAX_ID_CHARS or not r.id.isprintable() or r.id != r.id.strip():
        out.append(FieldError(n, "id", f"1 to {MAX_ID_CHARS} visible characters"))
    elif r.id in seen:
        out.append(FieldError(n, "id", f"{r.id!r} is used twice"))
    seen.add(r.id)
    tokens = 0
    if not r.prompt.strip():
        out.append(FieldError(n, "prompt", "must not be empty"))
    elif len(r.prompt) > MAX_PROMPT_CHARS or not r.prompt.isprintable():
        out.append(
            FieldError(n, "prompt", f"printable text of at most {MAX_PROMPT_CHARS} characters")
        )
    else:
        tokens = prompt_tokens(r.prompt)
        if lab.num_blocks >= 1 and tokens > lab.num_slots:
            out.append(
                FieldError(
                    n,
                    "prompt",
                    f"is {tokens} tokens: more than the whole arena ({lab.num_slots} slots)",
                )
            )
        elif tokens >= lab.max_model_len >= 2:
            out.append(
                FieldError(
                    n,
                    "prompt",
                    f"is {tokens} tokens: max_model_len "
                    f"{lab.max_model_len} leaves no room to answer",
                )
            )
    if not 1 <= r.max_tokens <= MAX_TOKENS:
        out.append(FieldError(n, "max_tokens", f"must be 1 to {MAX_TOKENS}"))
    if not 0 <= r.arrival_step <= MAX_ARRIVAL:
        out.append(FieldError(n, "arrival_step", f"must be 0 to {MAX_ARRIVAL}"))
    if r.stop_after is not None and not 1 <= r.stop_after < r.max_tokens:
        # an early stop is earlier than max_tokens: "a short request finishes" stays true
        out.append(FieldError(n, "stop_after", "empty, or 1 to max_tokens − 1"))
    return out


# --- the link and the file -------------------------------------------------------------------


def encode(lab: Lab) -> str:
    """The lab as a URL-safe token (JSON, deflated, base64 without padding)."""
    body = json.dumps(
        {"v": LINK_VERSION, **to_dict(lab)}, separators=(",", ":"), ensure_ascii=False
    ).encode("utf-8")
    return base64.urlsafe_b64encode(zlib.compress(body, 9)).decode("ascii").rstrip("=")


def decode(token: str) -> tuple[Lab, list[FieldError]]:
    """A lab from a link's token, bounded at every stage (token length, inflated size, JSON,
    fields). Raises LabError (one line) for a token that is not a lab."""
    if not isinstance(token, str) or not token or len(token) > MAX_LINK_CHARS:
        raise LabError(f"the scenario link is empty or longer than {MAX_LINK_CHARS} characters")
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        z = zlib.decompressobj()
        body = z.decompress(raw, MAX_LINK_BYTES)
        if z.unconsumed_tail or not z.eof:
            raise LabError("the scenario link is damaged or too large")
        d = json.loads(body.decode("utf-8"))
    except LabError:
        raise
    except (binascii.Error, ValueError, zlib.error, UnicodeDecodeError, RecursionError):
        # RecursionError: JSON nested thousands deep (a few bytes once deflated)
        raise LabError("the scenario link is damaged (not a scenario)") from None
    if not isinstance(d, dict) or d.get("v") != LINK_VERSION:
        raise LabError("the scenario link is not from this version of the lab")
    return from_dict(d)


def scenario_doc(lab: Lab, title: str = "Scenario lab") -> dict:
    """The lab as an engine scenario document, shaped as a scenario file's TOML: what
    ``to_toml`` writes and ``engine_scenario`` validates. Requests without an early stop ignore
    EOS, so the real model runs them to max_tokens as the dry run does."""
    requests = []
    for r in lab.requests:
        req: dict[str, object] = {
            "id": r.id,
            "prompt": r.prompt,
            "max_tokens": r.max_tokens,
            "arrival_step": r.arrival_step,
        }
        if r.stop_after is None:
            req["ignore_eos"] = True
        else:
            req["output_len"] = r.stop_after
        requests.append(req)
    return {
        "title": title,
        "arena": {
            "num_blocks": lab.num_blocks,
            "block_size": lab.block_size,
            "max_model_len": lab.max_model_len,
        },
        # the runs the lab drew, so `record --scenario` records the same comparison
        "runs": [{"label": p, "allocator": p} for p in (lab.policy, "paged")],
        "requests": requests,
    }


def _toml_value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)  # a JSON string is a TOML basic string
    return str(v)


def to_toml(lab: Lab, title: str = "Scenario lab") -> str:
    """An engine scenario file (``python -m paged record --scenario FILE``) of
    ``scenario_doc``."""
    doc = scenario_doc(lab, title)
    lines = [
        f"# Written by the scenario lab: {lab.policy} on the left, paging on the right",
        f"title = {_toml_value(doc['title'])}",
        "",
        "[arena]",
        *(f"{k} = {_toml_value(v)}" for k, v in doc["arena"].items()),
    ]
    for table in ("runs", "requests"):
        for row in doc[table]:
            lines += ["", f"[[{table}]]"]
            lines += [f"{k} = {_toml_value(v)}" for k, v in row.items()]
            if "output_len" in row:
                lines[-1] += "   # dry runs stop here; the model may not"
    return "\n".join(lines) + "\n"


def engine_scenario(lab: Lab):
    """The lab as the engine's ``Scenario``, through the engine's own validation of a
    scenario document. Raises InvalidConfigError (one line)."""
    from paged.engine.trace import scenario

    return scenario.parse(scenario_doc(lab), "lab")


@dataclass
class Recording:
    """A recorded trace: ``trace_text``, the file a user downloads. ``dry``: a dry run, which
    the lab's scenario alone reproduces exactly (the stand-in model is deterministic), so a
    link can name one of its frames; a run on the real model is not redone from a link.
    ``built``: a dry run's trace as the engine made it, until it is folded."""

    trace_text: str
    steps: dict[str, int] = field(default_factory=dict)
    dry: bool = True
    built: T.Trace | None = None

    def trace(self) -> T.Trace:
        """The trace to fold: a dry run's as the engine built it (its own text is never read
        back), any other read and checked from its text. Raises TraceError."""
        return self.built if self.built is not None else T.loads(self.trace_text)


def least_steps(lab: Lab) -> int:
    """A lower bound on the steps of both runs together, from the table alone (no recording):
    each run lasts until its last request has answered, and no run holds more than the arena,
    while a request holds its prompt and every token it has written (under ``max``, its whole
    reservation) for as many steps as it writes tokens."""
    slots = max(1, lab.num_slots)
    last, grown, reserved = 0, 0, 0
    for r in lab.requests:
        p = prompt_tokens(r.prompt)
        out = max(1, min(r.stop_after or r.max_tokens, lab.max_model_len - p))
        last = max(last, r.arrival_step + out - 1)
        grown += out * p + out * (out - 1) // 2
        reserved += out * min(lab.max_model_len, p + r.max_tokens)
    left = reserved if lab.policy == "max" else grown
    return max(last, left // slots) + max(last, grown // slots)


def check_size(lab: Lab) -> None:
    """Raise TooLarge when ``lab`` surely runs past the drawing budget: before anything runs."""
    steps = least_steps(lab)
    if steps * lab.num_slots > MAX_FRAME_CELLS or steps > 2 * MAX_STEPS:
        raise TooLarge(steps, lab.num_slots)


def record_dry(lab: Lab) -> Recording:
    """Run ``lab`` through the engine (dry run: scheduler and allocators, stand-in model),
    left policy and paging in lockstep; the trace built, and as JSONL text. Raises LabError when the lab
    has bad fields or the engine refuses it, TooLarge when it runs past the drawing budget
    (refused from the table when it surely does, else stopped at the step that passes it)."""
    bad = check(lab)
    if bad:
        raise LabError(f"{len(bad)} bad value(s), first: {describe(bad[0])}")
    check_size(lab)
    from paged.engine.trace.recorder import record

    # the recorder reports once per lockstep step: a step past either budget ends the run
    most = min(MAX_STEPS, MAX_FRAME_CELLS // lab.num_slots)
    taken = 0

    def step(_line: str) -> None:
        nonlocal taken
        taken += 1
        if taken > most:
            raise TooLarge(taken, lab.num_slots)

    try:
        sc = engine_scenario(lab)
        buf = io.StringIO()
        names = [lab.policy, "paged"]
        events: dict[str, list] = {n: [] for n in names}
        sinks = {n: [got.append] for n, got in events.items()}
        done = record(sc, names, buf, forward="skip", progress=step, sinks=sinks)
    except InvalidConfigError as e:
        raise LabError(str(e)) from None
    steps = {n: r.core.step_count for n, r in done.runs.items()}
    if sum(steps.values()) * lab.num_slots > MAX_FRAME_CELLS:
        raise TooLarge(sum(steps.values()), lab.num_slots)
    return Recording(buf.getvalue(), steps, built=T.Trace(done.header, events))


def describe(e: FieldError) -> str:
    where = f"request {e.row + 1} · {e.field}" if e.row is not None else e.field
    return f"{where}: {e.message}"


def lesson_for(
    lab: Lab, rec: Recording, side_titles: dict[str, dict[str, str]], title: dict[str, str]
):
    """The six-step lesson's steps and narration over the lab's trace: its own left policy
    and titles. A step whose event this scenario never produces is greyed by the player."""
    from paged.viz.fold.lesson import build
    from paged.viz.fold.lesson_folder import load_spec

    spec = load_spec("six-steps")
    spec = replace(
        spec,
        name="lab",
        title=title,
        runs={"left": lab.policy, "right": "paged"},
        side_titles=side_titles,
    )
    lesson = build(spec, rec.trace(), source="lab")
    digest = hashlib.sha256(rec.trace_text.encode("utf-8")).hexdigest()[:24]
    return replace(lesson, key=f"lab:{lab.policy}:{digest}")
