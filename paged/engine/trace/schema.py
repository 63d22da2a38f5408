"""What a trace line may be, before any run is replayed: its size, its JSON and its fields.

A trace is hostile input (an upload, a live pipe), so every line is bounded and typed here:

- size: ``Limits`` bounds the text, each line, JSON nesting, runs, requests, events, and the work
  the viewer's fold will do (frames x arena slots, slots walked by allocation events), which
  ``Budget`` counts as the runs are replayed;
- schema: each event's fields with exact JSON types (an int is an int, not a bool or a float;
  NaN and Infinity are refused). The header's runs are ``paged.engine.trace.header``'s.

Every refusal is one ``TraceError`` line. Pure Python, no torch.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from dataclasses import dataclass
from typing import Any

from paged.engine.core import events as E
from paged.engine.files import all_text_encodes


class TraceError(ValueError):
    """A trace file cannot be used; the message is one line saying why."""


class TraceTooLarge(TraceError):
    """A trace past the reader's budget: possibly whole and valid, never called corrupt."""


@dataclass(frozen=True)
class Limits:
    """What one trace may cost the viewer. The fold keeps one frame per step per run, and each
    frame stores a category, an owner and (when it changed) an index per arena slot, so the
    costly traces are small ones with a large arena that changes every step. The defaults hold
    every trace the engine records for the lessons with room to spare (the largest uses 127k
    frame cells and 2.2k events) and bound the worst accepted trace, a 22 KiB file whose
    65,536-slot arena changes wholly at each of 30 steps, to about 150 MiB and 1.5 s of folding
    (measured on the dev box). Pass larger ``Limits`` to ``read`` for a big local trace."""

    max_slots: int = 1 << 16  # arena slots per run
    max_runs: int = 8
    max_requests: int = 4096  # per run
    max_events: int = 200_000  # whole trace
    max_line_chars: int = 1 << 20
    max_trace_chars: int = 64 << 20  # the app refuses uploads over MAX_UPLOAD_MB (8) first
    max_depth: int = 32  # JSON nesting of one line
    max_frame_cells: int = 1 << 22  # sum over runs of frames x arena slots
    max_slot_touches: int = 1 << 22  # slots the fold walks for allocation, release, writes
    max_int: int = 2**31 - 1  # any integer field
    max_name_chars: int = 256  # run names, request ids, header strings


LIMITS = Limits()

_FIELD_TYPES = {  # the event dataclasses' annotations (strings: events.py defers them)
    kind: tuple(
        (f.name, str(f.type), f.default is not dataclasses.MISSING) for f in dataclasses.fields(cls)
    )
    for kind, cls in E.EVENT_TYPES.items()
}
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_BRACKET = re.compile(r"[\[\]{}]")


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not a number a trace may hold")


# one decoder for every line: json.loads builds a new one per call when given parse_constant
_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)


def check_nesting(line: str, max_depth: int) -> bool:
    """True when no bracket in ``line`` nests deeper than ``max_depth`` (strings ignored). Cheap:
    a line with few brackets cannot nest deep, so only bracket-heavy lines are scanned."""
    if line.count("[") + line.count("{") <= max_depth:
        return True
    depth = 0
    for m in _BRACKET.finditer(_STRING.sub("", line)):
        depth += 1 if m.group() in "[{" else -1
        if depth > max_depth:
            return False
    return True


def parse_json_line(line: str, where: str, limits: Limits = LIMITS) -> object:
    """One line as JSON, refusing what is too long, too deep, or not strict JSON."""
    if len(line) > limits.max_line_chars + 1:
        raise TraceError(
            f"trace is corrupt: {where} is longer than {limits.max_line_chars:,} characters"
        )
    if not check_nesting(line, limits.max_depth):
        raise TraceError(f"trace is corrupt: {where} nests deeper than {limits.max_depth} levels")
    try:
        obj = _DECODER.decode(line)
    except (ValueError, RecursionError):  # JSONDecodeError, NaN, ints of 4,300+ digits
        raise TraceError(f"trace is corrupt or truncated: {where} is not valid JSON") from None
    # a \ud800 escape with no partner decodes to a string nothing can encode or draw: every
    # page that showed it failed (rare, so only a line that has such an escape is walked)
    if _SURROGATE_ESCAPE.search(line) and not all_text_encodes(obj):
        raise TraceError(f"trace is corrupt: {where} holds a lone surrogate (\\ud800-\\udfff)")
    return obj


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def short_text(v: object, limits: Limits) -> bool:
    """Whether ``v`` is a string a trace may name things with: 1 to ``max_name_chars`` long."""
    return isinstance(v, str) and 0 < len(v) <= limits.max_name_chars


def int_in(v: object, lo: int, hi: int) -> bool:
    """Whether ``v`` is a JSON integer (not a bool, not a float) in ``[lo, hi]``."""
    return type(v) is int and lo <= v <= hi


# --- events ----------------------------------------------------------------------------------


def build_event(obj: dict, limits: Limits = LIMITS) -> E.Event:
    """An event from its JSON object, every field of the exact type; raises TraceError."""
    tag = obj.get("kind")
    cls = E.EVENT_TYPES.get(tag) if isinstance(tag, str) else None
    if cls is None:
        raise TraceError(f"unknown event kind {tag!r:.40}")
    kwargs: dict[str, Any] = {}
    for name, typ, optional in _FIELD_TYPES[cls.kind]:
        if name not in obj:
            if optional:  # a field added since: its default is what older traces meant
                continue
            raise TraceError(f"{cls.kind} event lacks field {name!r}")
        v = obj[name]
        if typ == "int":
            ok = int_in(v, 0, limits.max_int)
        elif typ == "str":
            ok = short_text(v, limits)
        elif "float" in typ:
            ok, v = _floats(v, typ.count("tuple"), limits)
        elif typ.startswith("tuple[tuple"):  # a block map: [[a, b], ...]
            ok = isinstance(v, list) and all(
                isinstance(x, list) and len(x) == 2 and all(int_in(y, 0, limits.max_int) for y in x)
                for x in v
            )
            v = tuple(tuple(x) for x in v) if ok else v
        else:  # tuple[int, ...]
            ok = isinstance(v, list) and all(int_in(x, 0, limits.max_int) for x in v)
            v = tuple(v) if ok else v
        if not ok:
            want = {
                "int": f"an integer in [0, {limits.max_int}]",
                "str": f"a string of 1 to {limits.max_name_chars} characters",
                "float": "a finite number",
                "tuple[float, ...]": f"a list of at most {MAX_FLOATS} finite numbers",
                "tuple[tuple[float, ...], ...]": "a list of such lists of finite numbers",
            }.get(typ, "a list of such integers (or of [int, int] pairs)")
            raise TraceError(f"{cls.kind} field {name!r} must be {want}, got {obj[name]!r:.40}")
        kwargs[name] = v
    return cls(**kwargs)


#: The longest list of numbers an event may carry (an attention read's masses, one per block
#: of a request, or one row of its tile walk): a request has at most max_model_len / block_size
#: blocks, and the viewer draws each.
MAX_FLOATS = 4096


def _number(v: object) -> bool:
    # json reads 1e400 as inf: finite is checked here, not by the decoder
    return type(v) in (int, float) and math.isfinite(v)  # type: ignore[arg-type]


def _floats(v: object, depth: int, limits: Limits) -> tuple[bool, object]:
    """``v`` as a float (depth 0), a tuple of floats (1) or a tuple of such tuples (2), every
    number finite and every list at most ``MAX_FLOATS`` long; (False, v) when it is not."""
    if depth == 0:
        return (True, float(v)) if _number(v) else (False, v)  # type: ignore[arg-type]
    if not isinstance(v, list) or len(v) > MAX_FLOATS:
        return False, v
    rows = [_floats(x, depth - 1, limits) for x in v]
    if not all(ok for ok, _ in rows):
        return False, v
    return True, tuple(x for _, x in rows)


@dataclass
class Budget:
    """Work the viewer will do for the whole trace, counted as the runs are replayed."""

    limits: Limits
    events: int = 0
    cells: int = 0
    touches: int = 0

    def event(self) -> None:
        self.events += 1
        if self.events > self.limits.max_events:
            raise TraceTooLarge(f"trace holds more than {self.limits.max_events:,} events")

    def frame(self, num_slots: int) -> None:
        self.cells += num_slots
        if self.cells > self.limits.max_frame_cells:
            raise TraceTooLarge(
                f"trace is too large to draw: frames x arena slots exceed "
                f"{self.limits.max_frame_cells:,}"
            )

    def touch(self, n: int) -> None:
        self.touches += n
        if self.touches > self.limits.max_slot_touches:
            raise TraceTooLarge(
                f"trace is too large to draw: its events walk more than "
                f"{self.limits.max_slot_touches:,} slots"
            )
