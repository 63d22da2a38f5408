"""``python -m paged <command>``: each command lives in its own ``paged/engine/cli/<name>.py`` module
exposing ``add_parser(subparsers)`` and ``run(args) -> int``.

Bad input of any kind ends as one line on stderr and exit code 2, never a traceback."""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from paged.engine.errors import EngineInputError

COMMANDS = ("generate", "record", "simulate", "capacity")


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised by ``python -m paged``'s handler: unwinds as Ctrl-C does, so
    what a command was writing is ended cleanly (``signum``: the signal)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse's own usage errors: also one line, exit 2
        print(f"error: {message}", file=sys.stderr)
        raise SystemExit(2)


def first_paragraph(doc: str | None) -> str:
    """A module docstring's first paragraph on one line (its first line stopped mid-sentence)."""
    return " ".join((doc or "").split("\n\n")[0].split()).replace("``", "")


PROG = "python -m paged"


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    parser = _Parser(prog=prog, description=first_paragraph(__doc__))
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name in COMMANDS:
        importlib.import_module(f"paged.engine.cli.{name}").add_parser(sub)
    return parser


def _terminate(signum: int, frame) -> None:
    # SIGTERM (kill, a process manager) and SIGHUP (a closed terminal) end a command as Ctrl-C
    # does: a recording keeps the old trace and writes its own events to <name>.partial. By
    # default Python dies on them at once, leaving a hidden temporary file and no .partial.
    raise Terminated(signum)


#: What asks a command to end besides Ctrl-C: ``kill PID`` (a process manager), a closed terminal.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


@contextmanager
def stop_signals_unwind() -> Iterator[None]:
    """Meanwhile SIGTERM and SIGHUP raise :class:`Terminated` (a KeyboardInterrupt) where the
    main thread is, so ``finally`` blocks run; the handlers before are put back after."""
    saved = {sig: signal.signal(sig, _terminate) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def run_command(argv: list[str] | None = None, prog: str = PROG) -> int:
    """A whole command as a process runs it (``python -m paged``, ``paged simulate``): OpenMP
    settled before any command module imports torch, SIGTERM and SIGHUP unwinding as Ctrl-C."""
    from paged.engine.threads import configure_openmp

    configure_openmp()
    with stop_signals_unwind():
        return main(argv, prog)


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    args = build_parser(prog).parse_args(argv)
    try:
        return args.run(args)
    except EngineInputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except Terminated as e:
        print(f"terminated (signal {e.signum})", file=sys.stderr)
        return 128 + e.signum
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `... | head`: the reader has what it wanted
        # Python's own flush of stdout at exit would raise again: point it at nothing
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as e:  # a disk full or gone under a file: one line, not a traceback
        where = f" ({e.filename})" if e.filename else ""
        print(f"error: reading or writing failed{where}: {e.strerror or e}", file=sys.stderr)
        return 2
