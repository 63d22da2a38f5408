"""JSONL traces: a header line, then events tagged with the run they belong to, then an end line.

A trace may hold several runs of one scenario (say ``paged`` and ``max``) so the viewer can put
them side by side. Layout::

    {"format": "paged-kv-trace", "schema_version": 1, "created": ..., "model": ..., "device": ...,
     "scenario": {...}, "runs": [{"name": "paged", "allocator": "paged", "config": {...}}, ...]}
    {"kind": "request_arrived", "step": 0, "seq": 0, "run": "paged", ...}
    ...
    {"end": true, "num_events": N}

The end line is what tells a complete trace from a truncated one. Pure Python, no torch.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from engine.events import Event, EventError, JsonlSink, from_dict

FORMAT = "paged-kv-trace"
SCHEMA_VERSION = 1


class TraceError(ValueError):
    """A trace file cannot be used; the message is one line saying why."""


@dataclass
class Trace:
    header: dict
    runs: dict[str, list[Event]] = field(default_factory=dict)

    def run_config(self, name: str) -> dict:
        for r in self.header["runs"]:
            if r["name"] == name:
                return r
        raise KeyError(name)

    @property
    def run_names(self) -> list[str]:
        return [r["name"] for r in self.header["runs"]]


def make_header(runs: list[dict], *, model: str, device: str, scenario: dict | None = None,
                **extra) -> dict:
    """Build a header. Each run is ``{"name", "allocator", "config": {num_slots, block_size, ...}}``."""
    names = [r["name"] for r in runs]
    if len(set(names)) != len(names):
        raise ValueError(f"run names must be unique, got {names}")
    return {"format": FORMAT, "schema_version": SCHEMA_VERSION,
            "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
            "model": model, "device": device, "scenario": scenario or {}, "runs": runs, **extra}


class TraceWriter:
    """Writes a trace to a path or an open stream. ``sink(run)`` gives an EventBus subscriber that
    tags events with that run; ``close()`` writes the end line (a trace without it reads as
    truncated)."""

    def __init__(self, target: str | os.PathLike | IO[str], header: dict, flush: bool = False) -> None:
        self._own = isinstance(target, (str, os.PathLike))
        self.stream: IO[str] = (open(target, "w", encoding="utf-8")  # noqa: SIM115 - closed in close()
                                if isinstance(target, (str, os.PathLike)) else target)
        self.flush = flush
        self.num_events = 0
        self._write(header)

    def _write(self, obj: dict) -> None:
        self.stream.write(json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n")
        if self.flush:
            self.stream.flush()

    def sink(self, run: str):
        inner = JsonlSink(self.stream, run=run, flush=self.flush)

        def write(ev: Event) -> None:
            self.num_events += 1
            inner(ev)
        return write

    def close(self) -> None:
        self._write({"end": True, "num_events": self.num_events})
        if self._own:
            self.stream.close()

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def check_header(obj: object) -> dict:
    """Validate a parsed header line; raise TraceError saying what is wrong."""
    if not isinstance(obj, dict) or obj.get("format") != FORMAT:
        raise TraceError("not a paged-KV trace (its first line is not a trace header)")
    v = obj.get("schema_version")
    if v != SCHEMA_VERSION:
        raise TraceError(f"trace schema version {v!r} is not supported (this viewer reads version "
                         f"{SCHEMA_VERSION})")
    runs = obj.get("runs")
    if not isinstance(runs, list) or not runs or not all(
            isinstance(r, dict) and "name" in r and isinstance(r.get("config"), dict) for r in runs):
        raise TraceError("trace header lists no valid runs")
    return obj


def parse_lines(lines: Iterable[str], *, require_end: bool = True) -> Trace:
    """Parse trace lines (header first). With ``require_end`` a missing end line is an error."""
    it = iter(lines)
    trace: Trace | None = None
    ended = False
    for lineno, line in enumerate(it, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            where = "header" if trace is None else f"line {lineno}"
            raise TraceError(f"trace is corrupt or truncated: {where} is not valid JSON") from None
        if trace is None:
            trace = Trace(check_header(obj), {r["name"]: [] for r in obj["runs"]})
            continue
        if ended:
            raise TraceError(f"trace is corrupt: line {lineno} follows the end line")
        if isinstance(obj, dict) and obj.get("end") is True:
            ended = True
            n = sum(len(v) for v in trace.runs.values())
            if obj.get("num_events") != n:
                raise TraceError(f"trace is corrupt: end line counts {obj.get('num_events')} "
                                 f"events, the file holds {n}")
            continue
        run = obj.get("run") if isinstance(obj, dict) else None
        if run not in trace.runs:
            raise TraceError(f"trace is corrupt: line {lineno} names unknown run {run!r}")
        try:
            trace.runs[run].append(from_dict(obj))
        except EventError as e:
            raise TraceError(f"trace is corrupt: line {lineno}: {e}") from None
    if trace is None:
        raise TraceError("trace is empty")
    if require_end and not ended:
        raise TraceError("trace is truncated: it has no end line")
    return trace


def read(path: str | Path) -> Trace:
    """Read and validate a whole trace file. Raises TraceError (one clear line) for a missing,
    empty, corrupt, truncated, foreign or wrong-version file."""
    p = Path(path)
    try:
        with p.open(encoding="utf-8") as f:
            return parse_lines(f)
    except FileNotFoundError:
        raise TraceError(f"no trace file at {p}") from None
    except UnicodeDecodeError:
        raise TraceError(f"{p.name} is not a text trace (it is binary)") from None
    except IsADirectoryError:
        raise TraceError(f"{p} is a directory, not a trace file") from None


def loads(text: str, *, require_end: bool = True) -> Trace:
    """Parse a trace held in memory (an upload)."""
    return parse_lines(text.splitlines(), require_end=require_end)

