"""A recording replayed in a child process that ends when its tab lets it go.

A replay folds tens of MiB of small objects (a 7.9 MB recording: about 60 MiB per tab). Folded
in the app server, they went back to the allocator when the tab closed but not all to the
system: four tabs took a server from 162 to 391 MiB and 20 s after they closed it still held
339 MiB, 277 MiB even with free pages handed back (Python's small-object arenas, kept by the
few objects that outlive a fold, are returned only when wholly empty). Here each replay is read
and folded in its own process, which answers the page's snapshots; when the replay is let go
the process ends and all of it goes back (224 MiB 5 s after the four tabs closed; the rest is
Streamlit's own). The server keeps only a pipe.

The child is asked with the recording's length and bytes on its stdin and answers ``Loaded``;
then each request (a step) is answered with the ``Snapshot`` of the fold up to it. Answers are
read within a deadline and up to ``MAX_ANSWER`` bytes; its address space is capped.

No Streamlit, no torch, no zmq in the child.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import subprocess
import sys
import time
from typing import BinaryIO

import msgspec

from paged import IMPORT_ROOT
from paged.viz.watch.pipe import Gone, Silent, read_exact
from paged.viz.watch.state import (
    MAX_RECORDING_BYTES,
    RecordingError,
    Replay,
    Snapshot,
    read_recording,
)

#: What the child holds before any recording (the interpreter, msgspec, the fold's code),
#: accounted beside what the recording holds (measured: about 20 MiB)
CHILD_BYTES = 24 << 20
MEMORY_BYTES = 1 << 30  # the child's address space beyond what it maps at start
MAX_ANSWER = 64 << 20
LOAD_S = 120.0  # reading and folding an 8 MB recording on a shared, busy machine
STEP_S = 30.0


class ReplayError(ValueError):
    """The recording is refused, or the child could not answer (one line). ``reason`` is
    ``not_text``, ``no_batches``, ``refused`` (the message says why) or ``ended``."""

    def __init__(self, reason: str, message: str = "") -> None:
        super().__init__(message or reason)
        self.reason = reason


class Loaded(msgspec.Struct):
    batches: int = 0
    size: int = 0
    refused: str = ""  # a ReplayError kind, when the recording was not taken
    why: str = ""


_LOADED = msgspec.msgpack.Decoder(Loaded)
_SNAPSHOT = msgspec.msgpack.Decoder(Snapshot)


class ReplayProcess:
    """``batches`` in the recording, ``size`` bytes held (the child's own included),
    ``snapshot(upto)`` the fold's view after the first ``upto`` batches, ``close`` ends it.
    Raises ReplayError."""

    def __init__(self, data: bytes) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "paged.viz.watch.replay_child"],
            cwd=IMPORT_ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        try:
            self._send(len(data).to_bytes(8, "big") + data)
            loaded = self._answer(_LOADED, LOAD_S)
        except ReplayError:
            self.close()
            raise
        if loaded.refused:
            self.close()
            raise ReplayError(loaded.refused, loaded.why)
        self.batches, self.size = loaded.batches, loaded.size + CHILD_BYTES

    def snapshot(self, upto: int) -> Snapshot:
        body = msgspec.msgpack.encode(upto)
        self._send(len(body).to_bytes(4, "big") + body)
        return self._answer(_SNAPSHOT, STEP_S)

    def close(self) -> None:
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):  # a child already gone: a broken pipe
                    pipe.close()
        try:
            self.proc.wait(1.0)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def _send(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(data)
            self.proc.stdin.flush()
        except (OSError, ValueError):
            raise ReplayError("ended", self._ended()) from None

    def _answer(self, decoder: msgspec.msgpack.Decoder, wait_s: float):
        deadline = time.monotonic() + wait_s
        size = int.from_bytes(self._read(4, deadline), "big")
        if size > MAX_ANSWER:
            self.close()
            raise ReplayError("ended", f"the replay process answered {size} bytes")
        try:
            return decoder.decode(self._read(size, deadline))
        except (msgspec.DecodeError, msgspec.ValidationError):
            self.close()
            raise ReplayError("ended", "the replay process answered garbage") from None

    def _read(self, n: int, deadline: float) -> bytearray:
        assert self.proc.stdout is not None
        try:
            return read_exact(self.proc.stdout.fileno(), n, deadline)
        except Silent:
            self.close()
            raise ReplayError("ended", "the replay process did not answer in time") from None
        except Gone:
            raise ReplayError("ended", self._ended()) from None

    def _ended(self) -> str:
        try:
            code = self.proc.wait(1.0)
        except subprocess.TimeoutExpired:
            code = None
        if code == AT_CAP:
            return f"the recording needs more than the replay's {MEMORY_BYTES >> 20} MiB"
        return f"the replay process ended (exit status {code})"


# --- the child ---------------------------------------------------------------------------------

AT_CAP = 3


def _load(inp: BinaryIO) -> tuple[Replay | None, Loaded]:
    size = int.from_bytes(inp.read(8), "big")
    if size > MAX_RECORDING_BYTES:
        why = f"recording is larger than {MAX_RECORDING_BYTES >> 20} MiB"
        return None, Loaded(refused="refused", why=why)
    try:
        messages = read_recording(inp.read(size).decode("utf-8", errors="strict"))
    except UnicodeDecodeError:
        return None, Loaded(refused="not_text")
    except RecordingError as e:
        return None, Loaded(refused="refused", why=str(e))
    if not messages:
        return None, Loaded(refused="no_batches")
    replay = Replay(messages)
    return replay, Loaded(batches=len(messages), size=replay.held_bytes())


def _reply(out: BinaryIO, answer: object) -> None:
    body = msgspec.msgpack.encode(answer)
    out.write(len(body).to_bytes(4, "big") + body)
    out.flush()


def main() -> None:
    """Serve one recording until the app closes the pipe. Running out of the memory cap ends
    the child with ``AT_CAP`` (the page says so in one line), never a traceback."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the app decides when this process ends
    with open("/proc/self/status") as f:
        mapped = next(int(line.split()[1]) << 10 for line in f if line.startswith("VmSize:"))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_AS, (mapped + MEMORY_BYTES, mapped + MEMORY_BYTES))
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    try:
        replay, loaded = _load(inp)
        _reply(out, loaded)
        while replay is not None and len(head := inp.read(4)) == 4:
            size = int.from_bytes(head, "big")
            if size > 16:
                break
            upto = msgspec.msgpack.decode(inp.read(size), type=int)
            _reply(out, replay.at(upto).snapshot())
    except (BrokenPipeError, msgspec.DecodeError, msgspec.ValidationError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), out.fileno())
    except MemoryError:
        sys.exit(AT_CAP)


if __name__ == "__main__":
    main()
