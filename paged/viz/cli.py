"""``paged``: the installed project's one command. ``paged app`` opens the app, ``paged site``
writes the course as a folder of offline pages, ``paged export`` is ``python -m paged export``, and
the engine's commands (``paged simulate ...``) are ``python -m paged``'s.

Each subcommand keeps its own options and ``--help``; this module only picks one and hands it the
rest of the line. Bad input ends as one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import importlib.util
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from paged.engine.cli.main import STOP_SIGNALS, Terminated, stop_signals_unwind

PROG = "paged"
DISTRIBUTION = "paged-seen"

#: .streamlit/config.toml as flags: an installed app runs from any folder, where Streamlit
#: would not find that file. tests/viz/test_package.py keeps the two equal.
APP_SETTINGS = {
    "theme.base": "light",
    "theme.primaryColor": "#2F62C8",
    "server.maxUploadSize": "8",
    "server.runOnSave": "false",
    "browser.gatherUsageStats": "false",
    "client.toolbarMode": "minimal",
}


@dataclass(frozen=True)
class Command:
    """One subcommand: what ``paged --help`` says of it, and what runs it with the rest of the
    command line (``prog`` is the name its own usage lines show)."""

    summary: str
    run: Callable[[list[str], str], int]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse's own usage errors: one line, exit 2
        print(f"error: {message}", file=sys.stderr)
        raise SystemExit(2)


def version() -> str:
    """The installed distribution's version; a checkout that was never installed says so."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "checkout (not installed)"


def _app(argv: list[str], prog: str) -> int:
    p = _Parser(prog=prog, description="Open the Streamlit app (as `make run` does).")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (loopback)")
    p.add_argument("--port", type=int, default=8501, help="port (8501)")
    args = p.parse_args(argv)
    if not 0 < args.port < 65536:
        p.error(f"--port {args.port} is not a port (1 to 65535)")
    return run_child(app_command(args.host, args.port))


def run_child(command: list[str], grace: float = 10.0) -> int:
    """Run ``command`` and return its exit status (128 + N where signal N ended it). SIGTERM or
    SIGHUP sent to this process is passed on to the child, and Ctrl-C reaches it anyway (one
    process group): a server left behind would keep its port. A child that has not exited
    ``grace`` seconds after the signal is killed."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, *STOP_SIGNALS)}  # _reap ignores them
    child = None
    try:
        with stop_signals_unwind():
            child = subprocess.Popen(command)
            code = child.wait()
        return 128 - code if code < 0 else code
    except Terminated as e:
        return _reap(child, e.signum, grace)
    except KeyboardInterrupt:
        return _reap(child, signal.SIGINT, grace)
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)


def _reap(child: subprocess.Popen | None, signum: int, grace: float) -> int:
    """Pass ``signum`` on, wait ``grace`` seconds, then kill; deaf to further signals meanwhile,
    so the wait is bounded and ends with the child. Ctrl-C is passed on only to a child still
    running a second later: a terminal sends it to the child as well, ``kill -INT`` does not."""
    for s in (signal.SIGINT, *STOP_SIGNALS):
        signal.signal(s, signal.SIG_IGN)
    if child is not None and not _ended(child, 1.0 if signum == signal.SIGINT else 0.0):
        child.send_signal(signum)
        if not _ended(child, grace):
            child.kill()
            child.wait()
    return 128 + signum


def _ended(child: subprocess.Popen, seconds: float) -> bool:
    try:
        child.wait(seconds)
    except subprocess.TimeoutExpired:
        return False
    return True


def app_command(host: str, port: int) -> list[str]:
    """The ``streamlit run`` line for the packaged app script on ``host:port``."""
    script = Path(__file__).resolve().parent / "app" / "script.py"
    flags = {**APP_SETTINGS, "server.address": host, "server.port": str(port)}
    return [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(script),
        "--server.headless",
        "true",
        *(f"--{k}={v}" for k, v in flags.items()),
    ]


def _export(argv: list[str], prog: str) -> int:
    from paged.viz.export.site import export_main

    return export_main(argv, prog)


def _site(argv: list[str], prog: str) -> int:
    from paged.viz.export.site import main

    return main(argv, prog=prog)


def _engine(name: str) -> Callable[[list[str], str], int]:
    def run(argv: list[str], prog: str) -> int:
        from paged.engine.cli.main import run_command

        return run_command([name, *argv], prog=PROG)

    return run


def _module(module: str) -> Callable[[list[str], str], int]:
    """A ``python -m module`` command run in this process, with ``prog`` as its argv[0]."""

    def run(argv: list[str], prog: str) -> int:
        import runpy

        saved = sys.argv
        sys.argv = [prog, *argv]
        try:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        except SystemExit as e:
            return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        finally:
            sys.argv = saved
        return 0

    return run


def commands() -> dict[str, Command]:
    """Every subcommand, ``watch`` only where this install has ``python -m paged watch``."""
    out = {
        "app": Command("open the app in a browser (loopback by default)", _app),
        "site": Command("write the course as a folder of offline pages", _site),
        "export": Command("lecture figures, one-file pages, GIF/MP4 of one lesson", _export),
        "generate": Command("generate text with the real model", _engine("generate")),
        "record": Command("record a scenario's trace", _engine("record")),
        "simulate": Command("simulate synthetic workloads (no forward pass)", _engine("simulate")),
        "capacity": Command("KV capacity arithmetic", _engine("capacity")),
    }
    if _has_module("paged.viz.watch.__main__"):
        out["watch"] = Command("follow a server's KV-event stream", _module("paged.viz.watch"))
    return out


def _has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ImportError:
        return False


def parser(table: dict[str, Command]) -> argparse.ArgumentParser:
    listing = "\n".join(f"  {name:<10}{c.summary}" for name, c in table.items())
    p = _Parser(
        prog=PROG,
        description="PagedAttention, seen: the engine, the app and the course pack.",
        epilog=f"commands:\n{listing}\n\n`{PROG} COMMAND --help` gives a command's options.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"{PROG} {version()}")
    p.add_argument("command", choices=list(table), metavar="COMMAND", help="one of the below")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    table = commands()
    if argv and argv[0] in table:
        name, rest = argv[0], argv[1:]
        return table[name].run(rest, f"{PROG} {name}")
    parser(table).parse_args(argv[:1])  # --help, --version, or one line naming the mistake
    return 2
