"""The KV-event sockets, in a child process whose memory is capped: a stranger's server can fill
that process, never the app.

libzmq bounds what a socket holds per frame (MAXMSGSIZE) and per message (RCVHWM), but never a
message's frame count, and it hands over a multipart message only once it holds all of it
(libzmq 4.3.5, measured: one message of 1,024 frames of 1 MiB held 1 GiB in the receiver before
its first frame was readable; 8 million empty frames, 16 MB on the wire, held 567 MiB). No
reading pattern can bound that, so the sockets live here, under an address-space cap
(RLIMIT_AS). At the cap, libzmq drops the connection when it cannot allocate a frame (the app
sees a disconnect). When its queue cannot grow it aborts (the app's ``Relay`` sees the process
end and starts a new one). The app receives only messages with valid framing, and each answer
is bounded in bytes.

A connection libzmq drops for a frame it refuses (over MAXMSGSIZE) or cannot allocate is never
retried (a protocol error ends its session; a server that merely went away is retried within a
millisecond). The process then ends, with ``ABANDONED``, and the app starts a new one.

The pipe protocol: one request, then one answer, each as a 4-byte big-endian length and a
msgpack body. ``["poll", timeout_ms, max_messages]`` is answered by ``[monitor events,
messages]`` (each message is its three frames, or a line saying why its framing is wrong).
``["replay", start, upto]`` is answered by ``[[[seq, payload], ...], answered]``.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from typing import IO, BinaryIO, TypeVar

import msgspec
import zmq
from zmq.utils.monitor import recv_monitor_message

from paged import IMPORT_ROOT
from paged.engine.interop.kv_events import END_SEQ, MAX_MESSAGE_BYTES, seq_bytes
from paged.viz.watch.pipe import Gone, Silent, read_exact

POLL_BYTES = 16 << 20  # what one poll answer carries (plus its last message)
MEMORY_BYTES = 512 << 20  # the child's address space beyond what it maps once its sockets exist
#: How long one poll reads on: a message of a million empty frames takes about a second to
#: read, and the app waits for an answer only so long (``Relay._ask``).
POLL_SECONDS = 0.5
OVERHEAD = 64  # msgpack bytes around one message or replayed batch, at most
SEQ_END = (1 << 64) - 1  # END_SEQ as an int: the most a seq, or msgpack's int, can be
ABANDONED = 3  # the child's exit status when zmq has given up on its connection
AT_CAP = 4  # ... when Python could not allocate under the memory cap
RETRY_WITHIN_S = 1.0  # how soon zmq schedules a reconnect after a disconnect it will retry
CANNOT_LISTEN = 5  # ... when the SUB socket could not bind its address (listen mode)
#: The wait before connecting again to a server that dropped the connection, doubling while
#: connections keep ending young, up to the most; the least again after one that lived longer
#: than the most. libzmq's own retry waits a fixed 0.1 s after a connection it had: an open port
#: that hangs up (no KV-event server) was greeted ten times a second. A refused connection is
#: retried by libzmq from RECONNECT_MIN_S, doubling up to RECONNECT_MAX_S.
RECONNECT_MIN_S = 1.0
RECONNECT_MAX_S = 30.0

Messages = list[list[bytes] | str]
Replayed = tuple[list[tuple[int, bytes]], bool]
T = TypeVar("T")


@dataclass(frozen=True)
class RelayConfig:
    url: str
    replay_url: str | None
    topic: str
    rcvhwm: int  # messages
    replay_timeout_s: float
    max_replay: int  # batches
    max_replay_bytes: int
    memory_bytes: int = MEMORY_BYTES
    #: bind the SUB socket and let the server connect: vLLM's publisher connects, not binds,
    #: unless its endpoint holds ``*`` or ``::``
    listen: bool = False

    @property
    def answer_bytes(self) -> int:
        """The most bytes one answer can take on the pipe."""
        poll = POLL_BYTES + 3 * MAX_MESSAGE_BYTES + OVERHEAD
        return max(poll, self.max_replay_bytes + OVERHEAD * (self.max_replay + 1)) + 4096


def framing_error(frames: list[bytes]) -> str | None:
    if len(frames) != 3 or len(frames[1]) != 8:
        return f"expected [topic, 8-byte seq, payload], got {len(frames)} frames"
    return None


class RelayError(RuntimeError):
    """The socket reader process ended, or did not answer in time."""


# --- the child's side ---------------------------------------------------------------------------


class Sockets:
    """The live SUB (with a monitor saying when it connects, or when a server connects to it in
    listen mode) and, per replay, a fresh DEALER. Raises zmq.ZMQError when it cannot listen."""

    def __init__(self, config: RelayConfig) -> None:
        self.config = config
        self.ctx: zmq.Context = zmq.Context()
        self.sub = self._socket(zmq.SUB, config.url)
        self.sub.setsockopt(zmq.RECONNECT_IVL, int(RECONNECT_MIN_S * 1000))
        self.sub.setsockopt(zmq.RECONNECT_IVL_MAX, int(RECONNECT_MAX_S * 1000))
        self.sub.setsockopt(zmq.SUBSCRIBE, config.topic.encode("utf-8"))
        joined = zmq.EVENT_ACCEPTED if config.listen else zmq.EVENT_CONNECTED
        self.monitor = self.sub.get_monitor_socket(
            joined | zmq.EVENT_DISCONNECTED | zmq.EVENT_CONNECT_RETRIED
        )
        self.dropped_at: float | None = None  # disconnected, and no reconnect scheduled yet
        self.connected_at: float | None = None
        self.reconnect_at: float | None = None  # when to connect again (our wait, not zmq's)
        self.wait = RECONNECT_MIN_S
        try:
            if config.listen:
                self.sub.bind(config.url)
            else:
                self.sub.connect(config.url)
        except zmq.ZMQError:
            self.ctx.destroy(linger=0)
            raise
        self.poller = zmq.Poller()
        self.poller.register(self.sub, zmq.POLLIN)
        self.poller.register(self.monitor, zmq.POLLIN)

    def _socket(self, kind: int, url: str) -> zmq.Socket:
        sock = self.ctx.socket(kind)
        sock.setsockopt(zmq.LINGER, 0)
        if "[" in url:  # zmq reaches an IPv6 address only when told it may
            sock.setsockopt(zmq.IPV6, 1)
        sock.setsockopt(zmq.RCVHWM, self.config.rcvhwm)
        sock.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)
        return sock

    def poll(self, timeout_ms: int, max_messages: int) -> tuple[list[int], Messages]:
        """Monitor events, or else up to ``max_messages`` messages (about ``POLL_BYTES``, or
        what ``POLL_SECONDS`` of reading brings): the app asks its replay socket what it
        missed on a connect before it reads on."""
        if self.reconnect_at is not None and time.monotonic() >= self.reconnect_at:
            self.reconnect_at = None
            self.sub.connect(self.config.url)
        self.poller.poll(timeout_ms)
        events = []
        while self.monitor.poll(0):
            ev = recv_monitor_message(self.monitor)["event"]
            now = time.monotonic()
            if ev == zmq.EVENT_ACCEPTED:  # listening: a server came to us, as a connect would
                ev = zmq.EVENT_CONNECTED
            if ev == zmq.EVENT_CONNECTED:
                self.connected_at = now
            if (
                ev == zmq.EVENT_CONNECT_RETRIED
                and self.dropped_at is not None
                and not self.config.listen
            ):
                self._back_off(now)  # zmq would greet the port again within 0.2 s
            self.dropped_at = now if ev == zmq.EVENT_DISCONNECTED else None
            if ev != zmq.EVENT_CONNECT_RETRIED:
                events.append(ev)
        messages: Messages = []
        size = 0
        until = time.monotonic() + POLL_SECONDS
        while not events and len(messages) < max_messages and size < POLL_BYTES:
            # never a blocking read: a message polled as ready is gone again when the
            # connection that brought it is dropped (a restarted server, our own back-off)
            # before it is read, and a blocking read then waited for the next message, which
            # the reconnect this loop makes could never bring
            try:
                frames = self.sub.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            bad = framing_error(frames)
            messages.append(frames if bad is None else bad)
            size += OVERHEAD + (len(bad) if bad else sum(map(len, frames)))
            if time.monotonic() > until:
                break
        return events, messages

    def _back_off(self, now: float) -> None:
        """Take the reconnect after a dropped connection from zmq: cancel its own, due within
        0.2 s, and connect again after ``wait``, which doubles while connections end young."""
        lived = now - (self.connected_at if self.connected_at is not None else now)
        if lived > RECONNECT_MAX_S:
            self.wait = RECONNECT_MIN_S
        with contextlib.suppress(zmq.ZMQError):  # already gone: nothing to cancel
            self.sub.disconnect(self.config.url)
        self.reconnect_at = now + self.wait
        self.wait = min(2 * self.wait, RECONNECT_MAX_S)

    @property
    def abandoned(self) -> bool:
        """zmq dropped the connection and will not reconnect. A listening socket never
        reconnects: the server does, and the socket stays bound for it."""
        since = self.dropped_at
        return (
            not self.config.listen
            and since is not None
            and time.monotonic() - since > RETRY_WITHIN_S
        )

    def replay(self, start: int, upto: int) -> Replayed:
        """Batches ``start <= seq < upto`` from the replay socket, in order, whatever arrives
        within the timeout (a fresh DEALER each time: no stale replies can leak across), up
        to ``max_replay_bytes``; and whether the socket answered at all."""
        assert self.config.replay_url is not None
        out: list[tuple[int, bytes]] = []
        answered = False
        dealer = self._socket(zmq.DEALER, self.config.replay_url)
        try:
            dealer.connect(self.config.replay_url)
            dealer.send_multipart((b"", seq_bytes(start)), zmq.NOBLOCK)
            deadline = time.monotonic() + self.config.replay_timeout_s
            expect, room = start, self.config.max_replay_bytes
            for _ in range(self.config.max_replay + 1):
                left = deadline - time.monotonic()
                if left <= 0 or not dealer.poll(int(left * 1000)):
                    break
                # [b"", topic, seq, payload] (vLLM 0.32, and us), or [b"", seq, payload] (older)
                try:  # ready, and yet gone with a dropped connection: never wait for it
                    body = dealer.recv_multipart(zmq.NOBLOCK)[1:]
                except zmq.Again:
                    continue
                answered = True
                if len(body) == 3:
                    body = body[1:]
                if len(body) != 2 or len(body[0]) != 8 or body[0] == END_SEQ:
                    break
                seq = int.from_bytes(body[0], "big")
                if seq >= upto:
                    break
                if seq == expect:
                    room -= len(body[1])
                    if room < 0:  # a server replaying more than we keep: the rest is a gap
                        break
                    out.append((seq, body[1]))
                    expect += 1
        except zmq.ZMQError:
            pass  # no replay socket reachable: the gap is marked
        finally:
            dealer.close(linger=0)
        return out, answered


def cap_memory(budget: int) -> None:
    """Cap this process's address space at what it maps now (the interpreter, libzmq's threads)
    plus ``budget``."""
    with open("/proc/self/status") as f:
        mapped = next(int(line.split()[1]) << 10 for line in f if line.startswith("VmSize:"))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # an abort at the cap writes no core file
    resource.setrlimit(resource.RLIMIT_AS, (mapped + budget, mapped + budget))


_REQUEST = msgspec.msgpack.Decoder(tuple[str, int, int])


def _send(out: BinaryIO, answer: object) -> None:
    body = msgspec.msgpack.encode(answer)
    out.write(len(body).to_bytes(4, "big"))
    out.write(body)
    out.flush()


def main() -> None:
    """The child: serve requests from stdin until it closes. An app gone away mid-answer (its
    end of the pipe closed) or an allocation refused at the memory cap ends it with a status, not
    a traceback in the server's log: both are expected, and the app starts a new reader."""
    # Ctrl-C in a terminal reaches the whole process group: the parent decides when this
    # process ends (it closes the pipe), so a traceback here would only be noise
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    config = RelayConfig(**json.loads(sys.argv[1]))
    try:
        sockets = Sockets(config)
    except zmq.ZMQError:
        sys.exit(CANNOT_LISTEN)  # the app says so, in one line (Relay._ended)
    cap_memory(sockets.config.memory_bytes)
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    status = 0
    try:
        while len(head := inp.read(4)) == 4 and (size := int.from_bytes(head, "big")) < 4096:
            kind, a, b = _REQUEST.decode(inp.read(size))
            if kind != "poll":
                _send(out, sockets.replay(a, b))
                continue
            _send(out, sockets.poll(a, b))
            if sockets.abandoned:  # judged right after the monitor was read
                status = ABANDONED
                break
    except BrokenPipeError:
        # nobody reads the rest: what is still buffered must not fail again at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), out.fileno())
    except MemoryError:
        status = AT_CAP
    finally:
        sockets.ctx.destroy(linger=0)
    sys.exit(status)


# --- the app's side -----------------------------------------------------------------------------

_POLLED = msgspec.msgpack.Decoder(tuple[list[int], list[list[bytes] | str]])
_REPLAYED = msgspec.msgpack.Decoder(tuple[list[tuple[int, bytes]], bool])


class Relay:
    """Starts the child and asks it; each answer is read up to ``config.answer_bytes`` and a
    deadline. Raises RelayError when the child has ended or does not answer; ``close`` ends it."""

    def __init__(self, config: RelayConfig) -> None:
        self.config = config
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "paged.viz.watch.relay", json.dumps(asdict(config))],
            cwd=IMPORT_ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        to, back = self.proc.stdin, self.proc.stdout
        assert to is not None and back is not None
        self._to: IO[bytes] = to
        self._back: IO[bytes] = back

    def __enter__(self) -> Relay:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def poll(self, timeout_ms: int, max_messages: int) -> tuple[list[int], Messages]:
        return self._ask(_POLLED, ["poll", timeout_ms, max_messages], timeout_ms / 1000)

    def replay(self, start: int, upto: int) -> Replayed:
        # a seq is 8 bytes and so is msgpack's widest int: ``last + max_replay`` past the top
        # raised OverflowError here, ending the subscriber. 2**64 - 1 is END_SEQ, never a batch.
        start, upto = (min(max(0, n), SEQ_END) for n in (start, upto))
        return self._ask(_REPLAYED, ["replay", start, upto], self.config.replay_timeout_s)

    def close(self) -> None:
        with contextlib.suppress(OSError):  # a child already gone: its pipe is broken
            self._to.close()  # the child reads the end of its input and stops
        try:
            self.proc.wait(1.0)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._back.close()

    def _ask(self, answer: msgspec.msgpack.Decoder[T], request: list, wait_s: float) -> T:
        body = msgspec.msgpack.encode(request)
        try:
            self._to.write(len(body).to_bytes(4, "big") + body)
            self._to.flush()
        except OSError:
            raise RelayError(self._ended()) from None
        deadline = time.monotonic() + wait_s + 10  # the child's own work, on a busy machine
        size = int.from_bytes(self._read(4, deadline), "big")
        if size > self.config.answer_bytes:
            self.close()
            raise RelayError(f"the socket reader answered {size} bytes")
        try:
            return answer.decode(self._read(size, deadline))
        except msgspec.DecodeError as e:
            self.close()
            raise RelayError(f"the socket reader answered garbage: {e}") from None

    def _read(self, n: int, deadline: float) -> bytearray:
        try:
            return read_exact(self._back.fileno(), n, deadline)
        except Silent:
            self.close()
            raise RelayError("the socket reader did not answer in time") from None
        except Gone:
            raise RelayError(self._ended()) from None

    def _ended(self) -> str:
        try:
            code = self.proc.wait(1.0)
        except subprocess.TimeoutExpired:
            code = None
        if code == ABANDONED:
            return (
                f"the server sent a frame over {MAX_MESSAGE_BYTES >> 20} MiB or a message over "
                "the reader's memory cap, and zmq dropped the connection for good"
            )
        if code == AT_CAP:
            return "the server sent more than the socket reader's memory cap holds"
        if code == CANNOT_LISTEN:
            return (
                f"cannot listen on {self.config.url} (the port is taken, or the address is not "
                "this machine's)"
            )
        return f"the socket reader process ended (exit status {code})"


if __name__ == "__main__":
    main()
