"""A background subscriber to a KV-event stream (vLLM's or ours), feeding a ``WatchState``.

One thread asks a socket reader process (``paged/viz/watch/relay.py``, its memory capped: libzmq holds a
multipart message whole, however many frames, before any of it is readable) for at most
``batch_limit`` messages per turn (a flood cannot starve the stop flag). zmq drops the
connection on any frame over ``MAX_MESSAGE_BYTES``, unread, and the receive queue is capped at
``rcvhwm`` messages, so a queue of well-formed (three-frame) messages holds at most
``QUEUE_BYTES`` (a full queue makes zmq stop reading the socket: the server's own queue waits, or
drops, and we see a gap); a message of more frames is bounded only by the reader's memory cap,
never in this process. A replay keeps at most ``max_replay_bytes``. A reader process that ends
(at its memory cap, or because zmq will not reconnect after a frame it refused) counts as a
disconnect, and a new one is started (ever later while readers keep ending). When sequence
numbers jump, it asks the replay socket for the missing batches (a DEALER, which reads the whole
reply stream) and marks a gap for whatever the replay could not give, unless the jump is more
than the server could have sent since the last batch: that is a restart. A server that goes away
is reconnected to by the reader, ever less often while connections end young (``relay.py``); a
restarted one (its seq goes back) resets the view. On every (re)connect it asks the replay socket
what it missed (a run that has finished and only holds its sockets open sends nothing live), and
drops the live copies of batches it already replayed. A replay socket that lets one ask go
unanswered (silent, or nothing listening) is said once in ``last_error`` and not asked again
for a while: every ask would cost its whole timeout while live batches wait unread.

No torch, no Streamlit.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Protocol

import zmq

from paged.engine.interop.kv_events import (
    MAX_MESSAGE_BYTES,
    MalformedBatch,
    decode_batch,
    parse_endpoint,
)
from paged.viz import safe
from paged.viz.watch.metrics import MetricsPoller, parse_metrics_url
from paged.viz.watch.relay import (
    MEMORY_BYTES,
    Relay,
    RelayConfig,
    RelayError,
    Replayed,
    framing_error,
)
from paged.viz.watch.state import WatchState

#: What a socket may hold unread: zmq bounds its queue in messages, each up to
#: MAX_MESSAGE_BYTES (a queue of 10,000 let a server that sends faster than the page folds fill
#: 40 GiB of the app's memory).
QUEUE_BYTES = 32 << 20
#: The wait before a new socket reader process, doubling while readers keep ending, up to the
#: most; back to the least after a reader that lived longer than the most.
RESTART_WAIT_S = 1.0
RESTART_WAIT_MAX_S = 30.0
#: What a jump of the sequence number may claim was missed: a server publishes a batch per
#: engine step, far fewer than this many a second, plus a few it may have queued. A jump
#: beyond (a publisher lying, or one that is not the stream we followed) is a restart, never
#: that many missed batches: one such message made "missed" read 1.8e19.
MAX_BATCHES_PER_S = 1_000
MAX_GAP_FLOOR = 1_000
SILENT_RETRY_S = 30.0  # a replay socket that did not answer is asked again after this
SILENT_RETRY_MAX_S = 300.0


@dataclass(frozen=True)
class SubscriberConfig:
    endpoint: str
    replay_endpoint: str | None = None  # default: the endpoint's port + 1; "" for none
    topic: str = ""
    allow_remote: bool = False
    rcvhwm: int = max(2, QUEUE_BYTES // MAX_MESSAGE_BYTES)  # messages
    batch_limit: int = 2_000
    replay_timeout_s: float = 1.0
    max_replay: int = 10_000  # batches
    max_replay_bytes: int = 64 << 20  # what one replay may bring in; the rest is a gap
    reader_memory_bytes: int = MEMORY_BYTES  # the socket reader process's cap, beyond its start
    listen: bool = False  # bind and wait for the server to connect (vLLM's default is to connect)
    metrics_url: str | None = None  # the server's HTTP address: its /metrics polled beside


class Replayer(Protocol):
    """What asks a replay socket: a ``Relay``, or (in its child) ``kv_relay.Sockets``."""

    def replay(self, start: int, upto: int) -> Replayed: ...


class Subscriber:
    """``start`` spawns the thread, ``stop`` ends it (bounded join). Raises EndpointError for a
    bad address before any socket exists."""

    def __init__(self, config: SubscriberConfig, state: WatchState | None = None) -> None:
        ep = parse_endpoint(config.endpoint, config.allow_remote)
        rep = config.replay_endpoint
        self.replay_url: str | None = (
            None
            if rep == ""
            else parse_endpoint(rep, config.allow_remote).url
            if rep
            else ep.with_port(ep.port + 1).url
        )
        self.url = ep.url
        self.metrics: MetricsPoller | None = (
            MetricsPoller(parse_metrics_url(config.metrics_url, config.allow_remote))
            if config.metrics_url
            else None
        )
        self.config = config
        self.state = state if state is not None else WatchState()
        self.connected = False
        self.disconnects = 0
        self._rejoined = False  # reconnected since the last batch: maybe a new server process
        self._catch_up_due = False  # (re)connected: ask the replay socket what we missed
        self.silent_until = 0.0  # the replay socket let an ask go unanswered: none till then
        self._silent_wait = 0.0
        self.relay: Relay | None = None  # the socket reader process now asked
        self._since = time.monotonic()  # started, or last (re)connected: when batches could begin
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Subscriber:
        self._thread = threading.Thread(target=self._run, name="kv-events-sub", daemon=True)
        self._thread.start()
        if self.metrics is not None:
            self.metrics.start()
        return self

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        if self.metrics is not None:
            self.metrics.stop()
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def relay_config(self) -> RelayConfig:
        c = self.config
        return RelayConfig(
            self.url,
            self.replay_url,
            c.topic,
            c.rcvhwm,
            c.replay_timeout_s,
            c.max_replay,
            c.max_replay_bytes,
            c.reader_memory_bytes,
            c.listen,
        )

    def _run(self) -> None:
        wait = 0.0
        while not self._stop.is_set():
            began = time.monotonic()
            try:
                with Relay(self.relay_config()) as relay:
                    self.relay = relay
                    self._follow(relay)
            except Exception as e:  # noqa: BLE001 - a thread that ends leaves "connected" shown
                # RelayError: the reader ended; OSError: none could be started; anything else
                # is a bug, logged, and the view goes on as after a reader that ended
                known = isinstance(e, (RelayError, OSError))
                why = str(e) if known else safe.report(e, "the KV-event subscriber failed")
                if self.connected:  # its sockets went with it
                    self._on_monitor(zmq.EVENT_DISCONNECTED)
                # a server can end every reader it meets (a frame over the limit on each
                # connection): each new one costs a process and a reconnect, so while readers
                # keep ending they are started ever less often
                lived = time.monotonic() - began
                fresh = not wait or lived > RESTART_WAIT_MAX_S
                wait = RESTART_WAIT_S if fresh else min(2 * wait, RESTART_WAIT_MAX_S)
                self.state.malformed(f"{why}; starting a new one in {wait:g} s")
                self._stop.wait(wait)

    def _follow(self, relay: Relay) -> None:
        while not self._stop.is_set():
            events, messages = relay.poll(100, self.config.batch_limit)
            for ev in events:
                self._on_monitor(ev)
            if self._catch_up_due:
                self._catch_up_due = False
                self.catch_up(relay)
            for frames in messages:
                if self._stop.is_set():
                    return
                if isinstance(frames, str):
                    self.state.malformed(frames)
                else:
                    self.on_message(relay, frames)

    def _on_monitor(self, ev: int) -> None:
        if ev == zmq.EVENT_CONNECTED:
            self._since = time.monotonic()
            self._rejoined = self.disconnects > 0
            self.connected = True
            self._catch_up_due = True
            self.silent_until, self._silent_wait = 0.0, 0.0  # maybe a server that answers
        elif ev == zmq.EVENT_DISCONNECTED:
            self.connected = False
            self.disconnects += 1

    def on_message(self, link: Replayer | None, frames: list[bytes]) -> None:
        """Validate the framing, follow the sequence numbers, fold the batch."""
        st = self.state
        bad = framing_error(frames)
        if bad is not None:
            st.malformed(bad)
            return
        seq = int.from_bytes(frames[1], "big")
        if st.last_seq is not None and seq <= st.last_seq and st.holds(seq, frames[2]):
            return  # a live copy of a batch already folded from the replay socket
        try:
            batch = decode_batch(frames[2])
        except MalformedBatch as e:
            st.malformed(f"seq {seq}: {e}")
            return
        kind = st.classify(seq)
        if self._rejoined:
            self._rejoined = False
            if kind != "restart" and self._new_process(link):
                kind = "restart"
        first = 0 if kind == "restart" or st.last_seq is None else st.last_seq + 1
        plausible = seq - first <= self.plausible_gap()
        if kind == "gap" and not plausible:
            kind = "restart"  # more than could have been sent: not the stream we followed
        if kind == "restart":
            st.restart()
        if seq > first and plausible:  # a gap, or joined late: ask for what came before
            self._fill_gap(link, first, seq)
        st.apply(seq, batch, frames[2])

    def plausible_gap(self) -> int:
        """The most batches a server could have sent since the last one folded (or since we
        connected): ``MAX_BATCHES_PER_S`` a second, plus ``MAX_GAP_FLOOR``."""
        last = self.state.last_message_at
        since = self._since if last is None else max(last, self._since)
        return MAX_GAP_FLOOR + int(MAX_BATCHES_PER_S * max(0.0, time.monotonic() - since))

    def catch_up(self, link: Replayer | None) -> None:
        """Just (re)connected: fold what the server published while we were not listening. If
        its replay socket still holds the last batch we folded, byte for byte, it is the same
        process and the batches after that one are replayed; any other answer means a new
        process: the view restarts from that process's batch 0. No answer (no replay socket,
        or not yet bound) changes nothing: the next live batch decides, as before."""
        st = self.state
        if link is None or self.replay_url is None:
            return
        most = self.config.max_replay
        if st.last_seq is None or not st.ring:
            got, answered = self._replay(link, 0, most)
        else:
            last = st.ring[-1]
            got, answered = self._replay(link, last[0], last[0] + most)
            if answered and got[:1] == [last]:
                got = got[1:]
            elif answered:
                st.restart()
                got, answered = self._replay(link, 0, most)
        if not answered:
            return
        self._rejoined = False
        for seq, payload in got:
            st.feed(seq, payload, replayed=True)

    def _new_process(self, link: Replayer | None) -> bool:
        """After a reconnect a seq above the last one is ambiguous (the old process going on, or
        a new one that has sent more batches than the old one did). Ask the replay socket for the last batch we
        folded: the same bytes mean the same process. No replay socket: assume the same."""
        st = self.state
        if link is None or self.replay_url is None or st.last_seq is None or not st.ring:
            return False
        last, payload = st.ring[-1]
        got, answered = self._replay(link, last, last + 1)
        return answered and got != [(last, payload)]

    def _replay(self, link: Replayer, start: int, upto: int) -> Replayed:
        """``link.replay``, unless the replay socket has already let one ask go unanswered:
        each ask costs the whole timeout while the live stream waits unread, so after one
        silence the view marks gaps without asking, says so once, and asks again only after
        ``SILENT_RETRY_S`` (doubling while it stays silent) or a reconnect."""
        now = time.monotonic()
        if self.silent_until > now:
            return [], False
        got, answered = link.replay(start, upto)
        if answered:
            self.silent_until, self._silent_wait = 0.0, 0.0
            return got, answered
        self._silent_wait = min(2 * self._silent_wait, SILENT_RETRY_MAX_S) or SILENT_RETRY_S
        self.silent_until = time.monotonic() + self._silent_wait
        self.state.note(
            f"the replay socket {self.replay_url} did not answer within "
            f"{self.config.replay_timeout_s:g} s: missed batches are counted as gaps, "
            f"not replayed (asking again in {self._silent_wait:g} s)"
        )
        return [], False

    def _fill_gap(self, link: Replayer | None, start: int, upto: int) -> None:
        got = 0
        if (
            link is not None
            and self.replay_url is not None
            and upto - start <= self.config.max_replay
        ):
            for seq, payload in self._replay(link, start, upto)[0]:
                if self.state.feed(seq, payload, replayed=True):
                    got += 1
        missed = (upto - start) - got
        if missed > 0:
            self.state.mark_gap(missed)
