import signal
import sys

from engine.threads import configure_openmp

configure_openmp()  # before the CLI imports torch

from engine.cli.main import Terminated, main  # noqa: E402


def _terminate(signum: int, frame) -> None:
    # SIGTERM (kill, a process manager) and SIGHUP (a closed terminal) end a command as Ctrl-C
    # does: a recording keeps the old trace and writes its own events to <name>.partial. By
    # default Python dies on them at once, leaving a hidden temporary file and no .partial.
    raise Terminated(signum)


for _sig in (signal.SIGTERM, signal.SIGHUP):
    signal.signal(_sig, _terminate)
sys.exit(main())
