"""Full validation of a trace, line by line, before anything folds or draws it.

A trace is hostile input (an upload, a live pipe). ``TraceChecker`` takes its lines in order:
each is bounded and parsed with exact types (``paged.engine.trace.schema``), the first as the header
(``paged.engine.trace.header``), and every event is replayed by its run's ``RunChecker``
(``paged.engine.trace.replay``) against a model of its allocator, so a trace that passes folds without
error and every frame's numbers are possible ones. Any failure is one ``TraceError`` line naming
the line number. Pure Python, no torch.
"""

from __future__ import annotations

from paged.engine.core import events as E
from paged.engine.trace.header import (
    CONTIGUOUS_ALLOCATORS,
    FORMAT,
    MAX_BLOCK_BYTES,
    PAGED,
    SCHEMA_VERSION,
    RunHeader,
    check_header,
)
from paged.engine.trace.replay import FINISH_REASONS, RunChecker
from paged.engine.trace.schema import (
    LIMITS,
    Budget,
    Limits,
    TraceError,
    TraceTooLarge,
    all_text_encodes,
    build_event,
    check_nesting,
    parse_json_line,
)

#: The checker, and the schema's and the replay's names its importers read from here.
__all__ = [
    "CONTIGUOUS_ALLOCATORS",
    "FINISH_REASONS",
    "FORMAT",
    "LIMITS",
    "MAX_BLOCK_BYTES",
    "PAGED",
    "SCHEMA_VERSION",
    "Budget",
    "Limits",
    "RunChecker",
    "RunHeader",
    "TraceChecker",
    "TraceError",
    "TraceTooLarge",
    "all_text_encodes",
    "build_event",
    "check_header",
    "check_nesting",
    "parse_json_line",
]


class TraceChecker:
    """Feed it a trace's lines in order (``line``), then ``finish``; it keeps the header and
    each run's events. Raises TraceError naming the line for anything wrong."""

    def __init__(self, limits: Limits = LIMITS) -> None:
        self.limits = limits
        self.budget = Budget(limits)
        self.header: dict | None = None
        self.runs: dict[str, list[E.Event]] = {}
        self.checkers: dict[str, RunChecker] = {}
        self.ended = False
        self.chars = 0

    def line(self, lineno: int, line: str) -> None:
        self.chars += len(line)
        if self.chars > self.limits.max_trace_chars:
            raise TraceTooLarge(f"trace is larger than {self.limits.max_trace_chars:,} characters")
        if len(line) <= self.limits.max_line_chars + 1 and not line.strip():
            return
        where = "header" if self.header is None else f"line {lineno}"
        obj = parse_json_line(line, where, self.limits)
        if self.header is None:
            self.header, specs = check_header(obj, self.limits)
            self.runs = {s.name: [] for s in specs}
            self.checkers = {s.name: RunChecker(s, self.budget) for s in specs}
            return
        if self.ended:
            raise TraceError(f"trace is corrupt: line {lineno} follows the end line")
        if isinstance(obj, dict) and obj.get("end") is True:
            self._end(obj)
            return
        run = obj.get("run") if isinstance(obj, dict) else None
        if not isinstance(run, str) or run not in self.runs:
            raise TraceError(f"trace is corrupt: line {lineno} names unknown run {run!r:.40}")
        try:
            ev = build_event(obj, self.limits)  # type: ignore[arg-type]
            self.budget.event()
            self.checkers[run].feed(ev)
        except TraceTooLarge as e:  # whole and valid, maybe: past the budget, not corrupt
            raise TraceTooLarge(f"{e} (at line {lineno})") from None
        except TraceError as e:
            raise TraceError(f"trace is corrupt: line {lineno} (run {run!r:.40}): {e}") from None
        self.runs[run].append(ev)

    def _end(self, obj: dict) -> None:
        self.ended = True
        n = sum(len(v) for v in self.runs.values())
        got = obj.get("num_events")
        if type(got) is not int or got != n:
            raise TraceError(
                f"trace is corrupt: end line counts {got!r:.40} events, the file holds {n}"
            )

    def finish(self, require_end: bool = True) -> tuple[dict, dict[str, list[E.Event]]]:
        if self.header is None:
            raise TraceError("trace is empty")
        if require_end and not self.ended:
            raise TraceError("trace is truncated: it has no end line")
        return self.header, self.runs
