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
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from paged.engine.core.events import Event, JsonlSink
from paged.engine.trace.check import TraceChecker
from paged.engine.trace.header import FORMAT, SCHEMA_VERSION, RunHeader, TraceHeader
from paged.engine.trace.header import check_header as _check_header
from paged.engine.trace.schema import LIMITS, Limits, TraceError, TraceTooLarge

__all__ = [
    "FORMAT",
    "LIMITS",
    "SCHEMA_VERSION",
    "Limits",
    "RunHeader",
    "Trace",
    "TraceError",
    "TraceWriter",
    "check_header",
    "loads",
    "make_header",
    "parse_lines",
    "read",
]


@dataclass
class Trace:
    header: dict
    runs: dict[str, list[Event]] = field(default_factory=dict)

    def run_header(self, name: str) -> RunHeader:
        """Run ``name`` as the header declares it. A trace that was read has passed the check,
        so this raises only KeyError, for a name it has no run of."""
        runs = self.header["runs"]
        for i, r in enumerate(runs):
            if r["name"] == name:
                return RunHeader.from_header(r, i)
        raise KeyError(name)

    @property
    def run_names(self) -> list[str]:
        return [r["name"] for r in self.header["runs"]]

    @property
    def info(self) -> TraceHeader:
        """The header's own fields (model, device, created, forward, scenario), typed."""
        return TraceHeader.from_header(self.header)


def make_header(
    runs: Sequence[RunHeader], *, model: str, device: str, scenario: dict | None = None, **extra
) -> dict:
    """Build a header line's object from its runs. Raises ValueError for two runs of one name."""
    names = [r.name for r in runs]
    if len(set(names)) != len(names):
        raise ValueError(f"run names must be unique, got {names}")
    return {
        "format": FORMAT,
        "schema_version": SCHEMA_VERSION,
        "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "model": model,
        "device": device,
        "scenario": scenario or {},
        "runs": [r.to_dict() for r in runs],
        **extra,
    }


class TraceWriter:
    """Writes a trace to a path or an open stream. ``sink(run)`` gives an EventBus subscriber that
    tags events with that run; ``close()`` writes the end line (a trace without it reads as
    truncated), ``abort()`` ends a failed run without one.

    A path that is a regular file (or nothing yet) is written beside it and renamed over it only
    by ``close()``: a run that fails or is interrupted leaves the previous trace as it was (a
    Ctrl-C while a lesson is re-recorded in place must not cost its trace) and its own events in
    ``<name>.partial``, which reads as truncated. Other paths (/dev/stdout, a pipe) are written
    directly."""

    def __init__(
        self, target: str | os.PathLike | IO[str], header: dict, flush: bool = False
    ) -> None:
        """Raises OSError when ``target`` cannot be opened for writing."""
        self._own = isinstance(target, (str, os.PathLike))
        self._target: Path | None = None
        if isinstance(target, (str, os.PathLike)):
            path = Path(target)
            if not path.exists() or path.is_file():
                self._target, target = path, path.with_name(f".{path.name}.{os.getpid()}.tmp")
            self.stream: IO[str] = open(target, "w", encoding="utf-8")  # noqa: SIM115 - close()
        else:
            self.stream = target
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
            if self._target is not None:
                os.replace(self.stream.name, self._target)

    def abort(self) -> None:
        """End a run that failed: what was written stays, with no end line, so it reads as
        truncated rather than complete (in ``<name>.partial`` for a file, see the class)."""
        if self._own:
            self.stream.close()
            if self._target is not None:
                os.replace(self.stream.name, self._target.with_name(self._target.name + ".partial"))
        else:
            self.stream.flush()

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, exc_type, *exc) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def check_header(obj: object) -> dict:
    """Validate a parsed header line; raise TraceError saying what is wrong."""
    return _check_header(obj)[0]


def parse_lines(
    lines: Iterable[str], *, require_end: bool = True, limits: Limits = LIMITS
) -> Trace:
    """Parse and fully validate trace lines (header first; see ``paged.engine.trace.check``). With
    ``require_end`` a missing end line is an error. Raises TraceError, one line, and nothing
    else."""
    checker = TraceChecker(limits)
    try:
        for lineno, line in enumerate(lines, start=1):
            checker.line(lineno, line)
        header, runs = checker.finish(require_end)
    except (RecursionError, MemoryError):
        raise TraceError("trace is too large or too deeply nested to read") from None
    return Trace(header, runs)


def _bounded_lines(f: IO[str], limits: Limits) -> Iterator[str]:
    # readline with a size: a file without newlines (/dev/zero) is never read whole
    while line := f.readline(limits.max_line_chars + 2):  # one more than a line may hold
        yield line


def read(path: str | Path, limits: Limits = LIMITS) -> Trace:
    """Read and validate a whole trace file. Raises TraceError (one clear line) for a missing,
    empty, corrupt, truncated, oversized, foreign or wrong-version file."""
    p = Path(path)
    try:
        with p.open(encoding="utf-8", newline="\n") as f:  # lines end at \n only, as in loads
            return parse_lines(_bounded_lines(f, limits), limits=limits)
    except TraceError:
        raise
    except FileNotFoundError:
        raise TraceError(f"no trace file at {p}") from None
    except UnicodeDecodeError:
        raise TraceError(f"{p.name} is not a text trace (it is binary)") from None
    except IsADirectoryError:
        raise TraceError(f"{p} is a directory, not a trace file") from None
    except OSError as e:
        raise TraceError(f"cannot read {p.name}: {e.strerror or type(e).__name__}") from None
    except ValueError:  # a path with a NUL in it
        raise TraceError(f"{str(p)[:200]!r} is not a usable path") from None


def too_large_to_open(path: str | Path) -> str | None:
    """Why the app will not open the trace just written at ``path`` (a valid one past its
    drawing budget, ``LIMITS``), or None when it will. Read the way the app reads it; the
    reader stops at the first line past the budget, so a huge file costs little."""
    try:
        read(path)
    except TraceTooLarge as e:
        return str(e)
    return None


def loads(text: str, *, require_end: bool = True, limits: Limits = LIMITS) -> Trace:
    """Parse and validate a trace held in memory (an upload). Lines end at a line feed only: a
    prompt in the header may hold U+2028 or other characters ``str.splitlines`` would cut at."""
    if len(text) > limits.max_trace_chars:
        raise TraceTooLarge(f"trace is larger than {limits.max_trace_chars:,} characters")
    return parse_lines(text.split("\n"), require_end=require_end, limits=limits)
