"""A trace read as it streams in: each line parsed and checked once, when it has arrived whole.

``TraceStream.feed(text)`` takes whatever the pipe gave (a torn last line waits for the rest);
``trace(finished)`` is what has arrived so far, exactly as ``paged.engine.trace.io.parse_lines`` reads
the same whole lines (``require_end=finished``), at the cost of the new lines only: the checker
(``paged.engine.trace.check.TraceChecker``) replays each run as its lines come, so nothing is read
twice. A stream that turns corrupt stays so: every later call raises the same one-line error.
Pure Python, no torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from paged.engine.core import events as E
from paged.engine.trace.check import LIMITS, Limits, TraceChecker, TraceError
from paged.engine.trace.io import Trace


@dataclass
class TraceStream:
    """Lines in, checked events out, one line at a time. ``events(run)`` only ever grows."""

    limits: Limits = LIMITS
    _checker: TraceChecker = field(init=False)
    _lineno: int = 0
    _torn: str = ""  # the start of a line whose newline has not arrived
    _error: TraceError | None = None

    def __post_init__(self) -> None:
        self._checker = TraceChecker(self.limits)

    @property
    def lines(self) -> int:
        """Whole lines read so far."""
        return self._lineno

    def feed(self, text: str) -> None:
        """Read ``text``, the stream's next characters. Lines end at a line feed only, as the
        engine writes them. Raises TraceError (one line, and again on every later call) when a
        line is corrupt, foreign or past the trace's budget."""
        self._raise_if_failed()
        *whole, self._torn = (self._torn + text).split("\n")
        self.feed_lines([line + "\n" for line in whole])

    def feed_lines(self, lines: list[str]) -> None:
        """Read whole lines (each ending in its line feed, as ``LiveRun`` collects them).
        Raises TraceError as ``feed`` does."""
        self._raise_if_failed()
        try:
            for line in lines:
                self._lineno += 1
                self._checker.line(self._lineno, line)
        except TraceError as e:
            self._error = e
        except (RecursionError, MemoryError):  # as parse_lines says it
            self._error = TraceError("trace is too large or too deeply nested to read")
        self._raise_if_failed()

    def trace(self, finished: bool = False) -> Trace | None:
        """What has arrived so far (None before the first line). ``finished``: the stream is
        complete, so it must carry its end line. The event lists are the stream's own and grow
        with it: copy what must not. Raises TraceError."""
        self._raise_if_failed()
        if not self._lineno:
            return None
        header, runs = self._checker.finish(require_end=finished)
        return Trace(header, runs)

    def events(self, run: str) -> list[E.Event]:
        return self._checker.runs[run]

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise self._error
