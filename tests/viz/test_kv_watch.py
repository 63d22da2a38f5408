"""The watch page's state, without Streamlit: the prefix tree a stream builds, a publisher killed
and restarted, malformed messages, a flood. Loopback sockets only; every wait is bounded."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import tracemalloc
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import msgspec
import pytest
import zmq

from paged.engine.interop import kv_events as K
from paged.viz.watch.relay import Relay, Sockets
from paged.viz.watch.state import RecordingError, Replay, WatchState, fold, read_recording
from paged.viz.watch.subscriber import Subscriber, SubscriberConfig
from tests.engine.test_kv_events import free_ports

BS = 4
SYSTEM = list(range(100, 108))  # a shared system prompt: two full blocks


def request_blocks(prompt: list[int], tag: int) -> K.BlockStored:
    """One request's full blocks as vLLM stores them: hashes chained from the prompt's start.
    Hashes are derived from the token prefix, so equal prefixes give equal hashes."""
    n = len(prompt) // BS
    hashes = [hash(tuple(prompt[: (i + 1) * BS])) % (1 << 63) for i in range(n)]
    return K.BlockStored(hashes, None, prompt[: n * BS], BS, None, "GPU")


def payload(events: list, ts: float = 1000.0) -> bytes:
    return msgspec.msgpack.encode(K.EventBatch(ts, events))


def shared_prompt_stream() -> tuple[list[tuple[int, bytes]], list[list[int]]]:
    prompts = [SYSTEM + [i, i + 1, i + 2, i + 3] + ([7] * BS if i == 2 else []) for i in (0, 1, 2)]
    lonely = [9] * (3 * BS)
    msgs = [(s, payload([request_blocks(p, s)])) for s, p in enumerate(prompts + [lonely])]
    return msgs, prompts


def test_hashes_alike_in_their_shown_digits_are_still_distinct_tree_nodes():
    # a publisher's hashes may share the 16 hex digits a node is named by (bytes by their first
    # 8, ints modulo 2**64): plotly draws nothing at all for an icicle with a repeated id
    alike = [b"\x01" * 8 + bytes([i]) for i in range(3)] + [-1, (1 << 64) - 1]
    batch = K.BlockStored(alike[:3], None, list(range(3 * BS)), BS, None, "GPU")
    ints = K.BlockStored(alike[3:], None, list(range(2 * BS)), BS, None, "GPU")
    snap = fold([(0, payload([batch])), (1, payload([ints]))]).snapshot()
    ids = [n[0] for n in snap.nodes]
    assert len(ids) == len(set(ids)) == snap.num_blocks == 5
    assert all(p == "" or p in ids for _, p, _ in snap.nodes)


def test_prefix_tree_of_a_shared_system_prompt():
    msgs, prompts = shared_prompt_stream()
    state = fold(msgs)
    snap = state.snapshot()
    # the system prompt's 2 blocks once, then 1 + 1 + 2 request blocks; plus the lonely chain
    assert snap.num_blocks == 2 + 1 + 1 + 2 + 3
    big, lonely = snap.chains
    assert (big.num_blocks, big.depth, big.leaves, big.shared) == (6, 4, 3, 2)
    assert big.hit_tokens == len(prompts[2])
    assert big.preview == tuple(SYSTEM[:BS])
    assert (lonely.num_blocks, lonely.depth, lonely.leaves, lonely.shared) == (3, 3, 1, 0)
    # the tree nodes name parents that exist, one node per held block, labelled by its tokens
    ids = {n[0] for n in snap.nodes}
    assert len(ids) == len(snap.nodes) == snap.num_blocks
    assert all(p == "" or p in ids for _, p, _ in snap.nodes)
    assert sum(p == "" for _, p, _ in snap.nodes) == 2
    assert " ".join(map(str, SYSTEM[:BS])) in {n[2] for n in snap.nodes}
    # evicting request 2's leaf shortens the longest hit-ready prefix; clearing empties all
    leaf = request_blocks(prompts[2], 2).block_hashes[-1]
    state.feed(4, payload([K.BlockRemoved([leaf], "GPU")]))
    assert state.snapshot().chains[0].hit_tokens == len(prompts[2]) - BS
    state.feed(5, payload([K.AllBlocksCleared()]))
    assert state.snapshot().num_blocks == 0
    assert state.counters["removed"] == 1 and state.counters["cleared"] == 1


def test_recording_round_trips_and_steps():
    msgs, _ = shared_prompt_stream()
    state = fold(msgs)
    text = "\n".join(state.recording())
    back = read_recording(text)
    assert [s for s, _ in back] == [s for s, _ in msgs]
    assert fold(back).snapshot().chains == state.snapshot().chains
    assert fold(back, upto=1).snapshot().num_blocks == 3  # stepping: the first request only
    for bad in [
        "",
        "{}",
        '{"format": "x", "version": 1}',
        text.split("\n")[0] + '\n{"seq": 1, "batch": [1.0, [["Nope"]]]}',
        text.split("\n")[0] + "\nnot json",
    ]:
        with pytest.raises(RecordingError):
            read_recording(bad)


def test_a_recording_fits_the_upload_limit_so_it_opens_again():
    """A ring of 16 MiB of batches downloaded as up to 29 MB of JSON, which the page's own 8 MB
    upload limit then refused: the download keeps the newest batches that fit."""
    from pathlib import Path

    from paged.viz import safe

    config = (Path(__file__).resolve().parents[2] / ".streamlit" / "config.toml").read_text()
    assert f"maxUploadSize = {safe.MAX_UPLOAD_MB}\n" in config  # one limit, said twice
    tokens = list(range(64))
    state = WatchState(ring_bytes=4 << 20)
    for b in range(400):
        stored = [K.BlockStored([b * 100 + i], None, tokens, 64, None, "GPU") for i in range(100)]
        state.feed(b, payload(stored, ts=float(b)))
    whole = "\n".join(state.recording()) + "\n"
    cap = len(whole.encode()) // 3
    fitted = "\n".join(state.recording(cap)) + "\n"
    assert len(fitted.encode()) <= cap < len(whole.encode())
    seqs = [s for s, _ in read_recording(fitted)]
    assert seqs and seqs == list(range(400 - len(seqs), 400))  # the newest, in order
    assert len(seqs) > 0.9 * len(state.ring) / 3  # and as many as fit


@pytest.mark.parametrize("medium", ["G\u2028P", "G\u2029P", "G\x85P"])
def test_a_recording_with_line_separators_in_its_strings_opens_again(medium):
    # JSON leaves U+2028 / U+0085 unescaped and str.splitlines cuts the line there: reading the
    # page's own download of such a stream must not split it ("Input data was truncated")
    stored = K.BlockStored([1, 2], None, list(range(2 * BS)), BS, None, medium)
    state = fold([(0, payload([stored])), (1, payload([K.BlockRemoved([2], medium)]))])
    back = read_recording("\r\n".join(state.recording()) + "\r\n")
    assert [s for s, _ in back] == [0, 1]
    assert fold(back).snapshot().num_blocks == 1


@pytest.mark.parametrize("ts", [float("nan"), float("inf"), float("-inf")])
def test_a_batch_with_a_timestamp_json_cannot_hold_is_malformed(ts):
    # folded, it would be written to the recording as null, and the download would not open again
    state = WatchState()
    assert not state.feed(0, payload([K.AllBlocksCleared()], ts=ts))
    assert state.counters["malformed"] == 1 and "finite" in state.last_error
    assert state.last_seq is None and state.recording()[1:] == []
    state.feed(1, payload([K.AllBlocksCleared()]))
    assert [s for s, _ in read_recording("\n".join(state.recording()))] == [1]


def test_malformed_messages_are_counted_and_change_nothing():
    msgs, _ = shared_prompt_stream()
    state = fold(msgs)
    sub = Subscriber(SubscriberConfig("tcp://127.0.0.1:5557", replay_endpoint=""), state)
    before = state.snapshot()
    garbage = [
        [b"x"],
        [b"", b"\x00" * 3, b"\x90"],
        [b"", K.seq_bytes(99), b"\xc1"],
        [b"", K.seq_bytes(0), msgspec.msgpack.encode({"ts": 1.0})],
        [b"", K.seq_bytes(7), payload([K.BlockStored([1], None, [0] * 99, BS, None, None)])],
    ]
    for i in range(1000):
        sub.on_message(None, garbage[i % len(garbage)])
    after = state.snapshot()
    assert after.counters["malformed"] == 1000
    assert (after.num_blocks, after.chains, after.last_seq) == (
        before.num_blocks,
        before.chains,
        before.last_seq,
    )
    assert "\n" not in after.last_error and after.last_error


def test_flood_keeps_memory_bounded():
    """100k events in 1,000 batches: the blocks tracked, the ring and the rate history stay
    within their bounds, and the state's allocations peak far below what streamed through."""
    state = WatchState(max_blocks=5_000, ring_bytes=1 << 20)
    sub = Subscriber(SubscriberConfig("tcp://127.0.0.1:5557", replay_endpoint=""), state)
    tokens = list(range(64))
    batches = [
        payload(
            [K.BlockStored([b * 100 + i], None, tokens, 64, None, "GPU") for i in range(100)],
            ts=float(b),
        )
        for b in range(1000)
    ]
    streamed = sum(len(p) for p in batches)
    tracemalloc.start()
    try:
        for seq, p in enumerate(batches):
            sub.on_message(None, [b"", K.seq_bytes(seq), p])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert state.counters["events"] == 100_000
    assert len(state.blocks) == 5_000 and state.counters["untracked"] == 95_000
    assert sum(len(p) for _, p in state.ring) <= 1 << 20 < streamed
    assert len(state.rates) <= state.max_rate_seconds
    assert peak < streamed / 4, (peak, streamed)


def wait_until(cond, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.02)
    raise AssertionError("condition not met within the timeout")


def publish_until(pub: K.KVEventPublisher, events: list, cond, timeout: float = 10.0) -> None:
    """PUB drops what it sends before the subscriber has (re)joined: publish until it shows."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        pub.publish(events)
        for _ in range(10):
            if cond():
                return
            time.sleep(0.02)
    raise AssertionError("subscriber never saw the batch")


def test_subscriber_follows_a_publisher_killed_and_restarted():
    port, _ = free_ports()
    url = f"tcp://127.0.0.1:{port}"
    state = WatchState()
    sub = Subscriber(SubscriberConfig(url), state).start()
    try:
        a = request_blocks(SYSTEM, 0)
        pub = K.KVEventPublisher(url)
        try:
            publish_until(pub, [a], lambda: state.snapshot().num_blocks == 2)
            wait_until(lambda: sub.connected)
        finally:
            pub.close()
        wait_until(lambda: not sub.connected)
        assert state.snapshot().num_blocks == 2  # the view keeps what it had
        b = request_blocks([5] * (3 * BS), 1)
        pub = K.KVEventPublisher(url)  # a new process: seq starts again at 0
        try:
            publish_until(pub, [b], lambda: state.snapshot().num_blocks == 3)
            wait_until(lambda: sub.connected)
            snap = state.snapshot()
            assert snap.chains[0].preview == (5,) * BS and len(snap.chains) == 1
            assert state.counters["restarts"] == 1
            assert sub.disconnects >= 1
        finally:
            pub.close()
    finally:
        sub.stop()
    assert not sub.alive


def test_subscriber_replays_a_gap_from_the_server():
    """The subscriber is handed batch 0 and batch 5 only: it asks the replay socket for 1..4."""
    port, _ = free_ports()
    url = f"tcp://127.0.0.1:{port}"
    ctx = zmq.Context()
    pub = K.KVEventPublisher(url)
    try:
        raw = ctx.socket(zmq.SUB)
        raw.setsockopt(zmq.LINGER, 0)
        raw.setsockopt(zmq.SUBSCRIBE, b"")
        raw.connect(url)
        frames = []
        for i in range(200):
            pub.publish([K.BlockStored([i + 1], i or None, [i] * BS, BS, None, "GPU")])
            while raw.poll(20):
                frames.append(raw.recv_multipart())
            if len(frames) >= 6:
                break
        assert len(frames) >= 6
        state = WatchState()
        sub = Subscriber(SubscriberConfig(url), state)
        with Relay(sub.relay_config()) as relay:
            sub.on_message(relay, frames[0])
            sub.on_message(relay, frames[5])
            first = int.from_bytes(frames[0][1], "big")
            assert state.last_seq == first + 5
            # batches before the first one seen (PUB drops them until the subscriber joined)
            # and the four of the gap all come from the replay socket
            assert state.counters["replayed"] == first + 4 and state.counters["gaps"] == 0
            assert state.snapshot().num_blocks == first + 6
            # joining late: the first batch seen is 3; the past comes from the replay socket
            late = WatchState()
            Subscriber(SubscriberConfig(url), late).on_message(relay, frames[3])
            assert late.counters["replayed"] == first + 3
            assert late.snapshot().num_blocks == first + 4
            # no replay socket: the gap is marked, the view keeps going
            lone = WatchState()
            nosub = Subscriber(SubscriberConfig(url, replay_endpoint=""), lone)
            nosub.on_message(relay, frames[0])
            nosub.on_message(relay, frames[5])
            assert (lone.counters["gaps"], lone.counters["missed"]) == (1 + (first > 0), first + 4)
    finally:
        pub.close()
        ctx.destroy(linger=0)


def replay_server(ctx: zmq.Context, port: int, answer) -> threading.Thread:
    """A replay socket on ``port`` that answers one request, with the frames ``answer(start)``
    yields (each sent after the requester's identity and an empty frame), in a started thread."""
    router = ctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    router.bind(f"tcp://127.0.0.1:{port}")

    def serve() -> None:
        if router.poll(10_000):
            ident, _, start = router.recv_multipart()
            for frames in answer(int.from_bytes(start, "big")):
                router.send_multipart([ident, b"", *frames])

    server = threading.Thread(target=serve)
    # the thread drops ``serve`` (and with it the last reference to the socket) once it returns;
    # a collected socket closes at once (LINGER 0) and throws away what is still queued to send
    server.socket = router  # type: ignore[attr-defined]
    server.start()
    return server


def test_replay_with_a_topic_frame_as_newer_vllm_sends_it():
    """Newer vLLM prefixes replay replies with the topic: [topic, seq, payload]."""
    batches = {
        s: payload([K.BlockStored([s + 1], s or None, [s] * BS, BS, None, "GPU")]) for s in range(4)
    }

    def answer(start: int):
        yield from ([b"kv-events", K.seq_bytes(s), batches[s]] for s in range(start, 4))
        yield [b"kv-events", K.END_SEQ, b""]

    port, _ = free_ports()
    ctx = zmq.Context()
    try:
        server = replay_server(ctx, port + 1, answer)
        state = WatchState()
        sub = Subscriber(SubscriberConfig(f"tcp://127.0.0.1:{port}"), state)
        with Relay(sub.relay_config()) as relay:
            sub.on_message(relay, [b"kv-events", K.seq_bytes(3), batches[3]])  # joined late, at 3
        server.join(10)
        assert state.counters["replayed"] == 3 and state.snapshot().num_blocks == 4
        assert state.counters["gaps"] == 0
    finally:
        ctx.destroy(linger=0)


def test_every_socket_the_subscriber_reads_holds_a_bounded_number_of_bytes_unread(monkeypatch):
    """zmq bounds a receive queue in messages: 10,000 of up to 4 MiB each let a server sending
    faster than the page folds fill 40 GiB (measured: 2.5 GB within 15 s, 8 batches folded).
    Both sockets the subscriber's reader process reads, the live SUB and a replay's DEALER, must
    be set to a message cap and a message count whose product stays within 64 MiB (run here
    in this process, where the spy sees them)."""
    opts: dict[int, dict[int, int]] = {}  # socket id -> option -> value
    kinds: dict[int, int] = {}
    real = zmq.Socket.setsockopt

    def spy(sock, opt, value):
        kinds[id(sock)] = sock.type
        opts.setdefault(id(sock), {})[opt] = value
        return real(sock, opt, value)

    monkeypatch.setattr(zmq.Socket, "setsockopt", spy)
    port, _ = free_ports()
    ctx = zmq.Context()
    pub = ctx.socket(zmq.PUB)
    try:
        pub.bind(f"tcp://127.0.0.1:{port}")
        server = replay_server(ctx, port + 1, lambda start: iter([[K.END_SEQ, b""]]))
        sockets = Sockets(Subscriber(SubscriberConfig(f"tcp://127.0.0.1:{port}")).relay_config())
        try:
            assert sockets.replay(0, 1) == ([], True)
        finally:
            sockets.ctx.destroy(linger=0)
        server.join(10)
    finally:
        ctx.destroy(linger=0)
    assert {zmq.SUB, zmq.DEALER} <= set(kinds.values()), sorted(kinds.values())
    for sock, kind in kinds.items():
        if kind in (zmq.SUB, zmq.DEALER):
            got = opts[sock]
            assert got[zmq.RCVHWM] * got[zmq.MAXMSGSIZE] <= 64 << 20, zmq.SocketType(kind).name


def test_a_replay_larger_than_the_subscriber_keeps_is_cut_and_the_rest_is_a_gap():
    """A hostile replay socket answers with 80 batches of 1 MiB each (every one under the
    message limit): the subscriber keeps the first ones up to 64 MiB, in order."""
    big = b"\x00" * (1 << 20)

    def answer(start: int):
        yield from ([K.seq_bytes(s), big] for s in range(80))
        yield [K.END_SEQ, b""]

    port, _ = free_ports()
    ctx = zmq.Context()
    try:
        server = replay_server(ctx, port + 1, answer)
        sub = Subscriber(SubscriberConfig(f"tcp://127.0.0.1:{port}", replay_timeout_s=30))
        with Relay(sub.relay_config()) as relay:
            got, answered = relay.replay(0, 10_000)
        server.join(30)
        assert answered and 0 < sum(len(p) for _, p in got) <= 64 << 20
        assert [s for s, _ in got] == list(range(len(got)))
    finally:
        ctx.destroy(linger=0)


def hostile_publisher(ctx: zmq.Context, url: str) -> zmq.Socket:
    pub = ctx.socket(zmq.XPUB)  # an XPUB hears a subscriber join: nothing is sent before that
    pub.setsockopt(zmq.LINGER, 0)
    pub.bind(url)
    return pub


def send_one_message(pub: zmq.Socket, frames: int, size: int = 1 << 20) -> None:
    """Once a subscriber has joined: one message of ``frames`` frames, each a view of the same
    ``size`` bytes (zero-copy: this process never holds more than one frame)."""
    assert pub.poll(10_000), "no subscriber joined"
    pub.recv()
    chunk = bytes(size)
    for _ in range(frames - 1):
        pub.send(chunk, zmq.SNDMORE, copy=False)
    pub.send(chunk, copy=False)


APP_UNDER_FLOOD = """
import sys, time
from paged.viz.watch.subscriber import Subscriber, SubscriberConfig
sub = Subscriber(SubscriberConfig(sys.argv[1], replay_endpoint="")).start()
end = time.monotonic() + 30
while time.monotonic() < end and not (sub.state.counters["malformed"] or sub.disconnects):
    time.sleep(0.02)
sub.stop()
# VmHWM, not ru_maxrss: that one carries over the peak of the process this one was forked from
peak = next(int(line.split()[1]) >> 10 for line in open("/proc/self/status") if "VmHWM" in line)
print(peak, sub.state.counters["malformed"])
"""


def test_one_message_of_many_frames_cannot_fill_the_app_memory():
    """libzmq bounds each frame (MAXMSGSIZE) and the whole messages it queues (RCVHWM), yet
    holds a message of any number of frames whole before its first frame is readable: one
    message of 384 frames of 1 MiB took 384 MiB of the app. Its sockets now live in a child
    process with a memory cap; the app (a fresh interpreter here, its peak memory its own)
    stays near what it imports and is told, in one line, that the message was malformed."""
    port, _ = free_ports()
    url = f"tcp://127.0.0.1:{port}"
    ctx = zmq.Context()
    try:
        pub = hostile_publisher(ctx, url)
        app = subprocess.Popen(
            [sys.executable, "-c", APP_UNDER_FLOOD, url],
            cwd=Path(__file__).resolve().parents[2],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            send_one_message(pub, frames=384)
            out, _ = app.communicate(timeout=60)
        finally:
            app.kill()
    finally:
        ctx.destroy(linger=0)
    peak, malformed = map(int, out.split())
    assert malformed == 1
    assert peak < 160, f"the app held {peak} MiB at its peak"


@pytest.mark.parametrize(
    "frames, size, why, said",
    [
        (256, 1 << 20, "a message over the reader's 64 MiB cap", ("starting a new one",)),
        (
            1,
            5 << 20,
            "a 5 MiB frame",
            # the reader says so, or, on a loaded machine, dies at its cap before it can
            ("dropped the connection for good; starting a new one", "reader process ended"),
        ),
    ],
)
def test_a_message_the_reader_cannot_hold_costs_one_reconnect(frames, size, why, said):
    """libzmq drops the connection on a frame over MAXMSGSIZE, or one its capped process cannot
    allocate, and never reconnects after such a protocol error: the view stayed "gone" for good.
    The reader process ends instead (at its cap it may also die first: libzmq aborts, or glibc
    cannot give a thread its thread-local data); a new one reconnects and the view goes on."""
    port, _ = free_ports()
    url = f"tcp://127.0.0.1:{port}"
    ctx = zmq.Context()
    state = WatchState()
    config = SubscriberConfig(url, replay_endpoint="", reader_memory_bytes=64 << 20)
    sub = Subscriber(config, state).start()
    try:
        pub = hostile_publisher(ctx, url)
        send_one_message(pub, frames, size)
        wait_until(lambda: sub.disconnects == 1)
        good = [b"", K.seq_bytes(0), payload([request_blocks(SYSTEM, 0)])]
        end = time.monotonic() + 10
        while state.last_seq is None:  # sent again until a new reader has joined
            assert time.monotonic() < end, f"never read on after {why}"
            pub.send_multipart(good)
            time.sleep(0.05)
        assert state.snapshot().num_blocks == 2 and sub.disconnects == 1
        assert state.counters["malformed"] == 1
        assert any(s in state.last_error for s in said), state.last_error
    finally:
        sub.stop()
        ctx.destroy(linger=0)


def test_a_socket_reader_that_ends_is_started_again_and_the_view_goes_on():
    """At its cap libzmq may also abort (its queue of a message of millions of empty frames
    cannot grow): a reader gone is a disconnect, said in one line; a new reader reconnects,
    asks the replay socket what it missed, and the view goes on without a restart."""
    with watching_the_system_prompt() as (pub, sub, state):
        wait_until(lambda: sub.connected)
        first = sub.relay
        assert first is not None
        first.proc.kill()  # as an abort at the cap would
        pub.publish([request_blocks([5] * (3 * BS), 1)])  # while no reader listens
        wait_until(lambda: sub.relay is not first and state.snapshot().num_blocks == 5)
        assert sub.disconnects == 1 and "socket reader process ended" in state.last_error
        assert state.counters["restarts"] == 0 and state.counters["gaps"] == 0


@contextmanager
def watching_the_system_prompt():
    """A publisher and a subscriber on a free port, once the subscriber has folded the system
    prompt's two blocks: ``(publisher, subscriber, state)``; both closed after."""
    port, _ = free_ports()
    url = f"tcp://127.0.0.1:{port}"
    state = WatchState()
    pub = K.KVEventPublisher(url)
    sub = Subscriber(SubscriberConfig(url), state).start()
    try:
        publish_until(pub, [request_blocks(SYSTEM, 0)], lambda: state.snapshot().num_blocks == 2)
        yield pub, sub, state
    finally:
        sub.stop()
        pub.close()


def collect(pub: K.KVEventPublisher, url: str, ctx: zmq.Context, events_for, n: int) -> list:
    """Publish until a raw subscriber has caught ``n`` batches; returns their frames."""
    raw = ctx.socket(zmq.SUB)
    raw.setsockopt(zmq.LINGER, 0)
    raw.setsockopt(zmq.SUBSCRIBE, b"")
    raw.connect(url)
    frames: list = []
    for i in range(400):
        pub.publish(events_for(i))
        while raw.poll(20):
            frames.append(raw.recv_multipart())
        if len(frames) >= n:
            break
    raw.close(linger=0)
    assert len(frames) >= n
    return frames


def test_a_reconnect_to_a_new_process_that_got_ahead_is_a_restart():
    """Old process: seqs up to k. New process on the same port has sent more by the time we
    reconnect, so its seq looks like a gap; the replay socket's different bytes for seq k show
    it is a new process: the old blocks go, the new process's history is replayed."""
    port, _ = free_ports()
    url = f"tcp://127.0.0.1:{port}"
    ctx = zmq.Context()
    try:
        state = WatchState()
        sub = Subscriber(SubscriberConfig(url), state)
        relay = Relay(sub.relay_config())
        old = K.KVEventPublisher(url)
        try:
            for f in collect(
                old,
                url,
                ctx,
                lambda i: [K.BlockStored([10_000 + i], None, [1] * BS, BS, None, "GPU")],
                2,
            )[:2]:
                sub.on_message(relay, f)
        finally:
            old.close()
        k = state.last_seq
        assert k is not None and state.snapshot().num_blocks == k + 1
        new = K.KVEventPublisher(url)
        try:
            frames = collect(
                new,
                url,
                ctx,
                lambda i: [K.BlockStored([20_000 + i], None, [2] * BS, BS, None, "GPU")],
                k + 4,
            )
            ahead = next(f for f in frames if int.from_bytes(f[1], "big") > k + 1)
            sub._rejoined = True  # what the monitor sets on a reconnect
            sub.on_message(relay, ahead)
            seq = int.from_bytes(ahead[1], "big")
            assert state.counters["restarts"] == 1 and state.last_seq == seq
            snap = state.snapshot()
            assert snap.num_blocks == seq + 1 and all(c.preview == (2,) * BS for c in snap.chains)
        finally:
            new.close()
    finally:
        relay.close()
        ctx.destroy(linger=0)


def test_a_finished_run_holding_its_sockets_is_caught_up_on_connect():
    """A run that published everything before the subscriber joined and now only holds its
    sockets open sends nothing live: the view comes from the replay socket alone."""
    port, _ = free_ports()
    url = f"tcp://127.0.0.1:{port}"
    pub = K.KVEventPublisher(url)
    try:
        for i in range(5):
            pub.publish([K.BlockStored([i + 1], i or None, [i] * BS, BS, None, "GPU")])
        wait_until(lambda: pub.next_seq == 5)
        state = WatchState()
        sub = Subscriber(SubscriberConfig(url), state).start()
        try:
            wait_until(lambda: state.snapshot().num_blocks == 5)
            assert state.last_seq == 4 and state.counters["replayed"] == 5
            assert state.counters["batches"] == 0 and state.counters["gaps"] == 0
        finally:
            sub.stop()
    finally:
        pub.close()


def test_a_new_process_that_sent_all_before_the_reconnect_replaces_the_view():
    """Killed, then a new process on the same port publishes its whole run before the
    subscriber has reconnected, and goes quiet: the reconnect's replay shows its cache, once."""
    port, _ = free_ports()
    url = f"tcp://127.0.0.1:{port}"
    state = WatchState()
    sub = Subscriber(SubscriberConfig(url), state).start()
    try:
        old = K.KVEventPublisher(url)
        try:
            publish_until(old, [request_blocks(SYSTEM, 0)], lambda: state.snapshot().num_blocks)
        finally:
            old.close()
        wait_until(lambda: not sub.connected)
        new = K.KVEventPublisher(url)
        try:
            for i in range(3):
                new.publish([K.BlockStored([50 + i], None, [5] * BS, BS, None, "GPU")])
            wait_until(lambda: state.counters["restarts"] == 1 and state.last_seq == 2)
            time.sleep(0.3)  # live copies of the replayed batches may still land: dropped
            snap = state.snapshot()
            assert snap.num_blocks == 3 and all(c.preview == (5,) * BS for c in snap.chains)
            assert state.counters["restarts"] == 1
        finally:
            new.close()
    finally:
        sub.stop()


def test_a_live_copy_of_a_replayed_batch_is_dropped_and_a_new_one_is_a_restart():
    state = WatchState()
    sub = Subscriber(SubscriberConfig("tcp://127.0.0.1:5557", replay_endpoint=""), state)
    batches = [
        payload([K.BlockStored([s + 1], s or None, [s] * BS, BS, None, "GPU")]) for s in range(3)
    ]
    for s, p in enumerate(batches):
        state.feed(s, p, replayed=True)
    sub.on_message(None, [b"", K.seq_bytes(1), batches[1]])  # the same bytes: a copy
    assert state.counters["restarts"] == 0 and state.last_seq == 2
    assert state.snapshot().num_blocks == 3
    other = payload([K.BlockStored([99], None, [9] * BS, BS, None, "GPU")], ts=2000.0)
    sub.on_message(None, [b"", K.seq_bytes(1), other])  # seq 1 again, other bytes: new process
    assert state.counters["restarts"] == 1 and state.last_seq == 1


def test_every_reader_shares_one_drawing_of_the_chains_until_the_state_changes(monkeypatch):
    """Drawing 200k blocks' chains takes most of a second and every watching session asks each
    second: a state draws once per change, and with ``max_age`` at most once in that long."""
    import paged.viz.watch.state as W

    drawn = []
    real = W._chains
    monkeypatch.setattr(W, "_chains", lambda *a: drawn.append(1) or real(*a))
    msgs, _ = shared_prompt_stream()
    state = fold(msgs[:2])
    first = state.snapshot()
    assert [state.snapshot() for _ in range(3)][-1].chains == first.chains
    assert len(drawn) == 1, "readers of an unchanged state each drew it again"
    state.feed(*msgs[2])
    assert state.snapshot(max_age=60).num_blocks == first.num_blocks, "drawn just now: kept"
    assert len(drawn) == 1
    now = state.snapshot()  # no staleness allowed: the change is drawn
    assert now.num_blocks == fold(msgs[:3]).snapshot().num_blocks > first.num_blocks
    state.malformed("garbage")
    assert state.snapshot().counters["malformed"] == 1  # counters are part of the drawing
    state.restart()
    assert state.snapshot().num_blocks == 0
    drawn.clear()
    assert state.snapshot(top=1).chains == state.snapshot().chains[:1] and len(drawn) == 2


def test_a_replay_steps_forward_by_folding_only_the_new_batches(monkeypatch):
    """The recording player's slider: any order of steps shows what a fresh fold to that step
    shows, and a step forward decodes only the batches it adds."""
    import paged.viz.watch.state as W

    decoded = []
    real = W.decode_batch
    monkeypatch.setattr(W, "decode_batch", lambda p: decoded.append(p) or real(p))
    msgs, _ = shared_prompt_stream()
    msgs = [*msgs, (len(msgs), b"\xc1 not msgpack"), (0, msgs[0][1])]  # garbage, then a restart
    replay = W.Replay(msgs)
    # step, then batches decoded to get there: forward only the new ones, back all again
    for upto, new in ((1, 1), (3, 2), (2, 2), (6, 4), (6, 0), (0, 0), (4, 4), (5, 1)):
        before = len(decoded)
        got = replay.at(upto).snapshot()
        assert len(decoded) - before == new, f"step {upto}"
        fresh = fold(msgs, upto).snapshot()
        assert (got.num_blocks, got.chains, got.counters, got.last_seq) == (
            fresh.num_blocks,
            fresh.chains,
            fresh.counters,
            fresh.last_seq,
        ), f"step {upto}"


def test_a_replay_step_that_raised_does_not_fold_its_batch_again(monkeypatch):
    msgs, _ = shared_prompt_stream()
    replay = Replay(msgs)
    applied: list[int] = []
    real = WatchState.apply

    def once_broken(self, seq, *a, **k):
        applied.append(seq)
        real(self, seq, *a, **k)
        if len(applied) == 2:
            raise RuntimeError("a page rerun stopped midway")

    monkeypatch.setattr(WatchState, "apply", once_broken)
    with pytest.raises(RuntimeError):
        replay.at(4)
    replay.at(4)
    assert applied == [0, 1, 2, 3], "a batch was folded twice"


def test_a_seq_at_the_top_of_its_range_does_not_end_the_subscriber():
    """Eight bytes of seq reach 2**64 - 1. On the next reconnect the subscriber asked the replay
    socket for ``seq .. seq + max_replay``, and msgpack cannot carry an int past 2**64 - 1 to the
    reader process: the OverflowError ended the subscriber's thread, and the page went on saying
    "connected" over a view that never changed again. The new server's batches still fold."""
    port, _ = free_ports()
    url = f"tcp://127.0.0.1:{port}"
    ctx = zmq.Context()
    state = WatchState()
    sub = Subscriber(SubscriberConfig(url, replay_timeout_s=0.2), state).start()
    top = (1 << 64) - 1
    try:
        pub = hostile_publisher(ctx, url)
        assert pub.poll(10_000), "no subscriber joined"
        pub.recv()
        end = time.monotonic() + 10
        while state.last_seq != top:
            assert time.monotonic() < end, "the batch at the top seq never folded"
            pub.send_multipart([b"", K.seq_bytes(top), payload([request_blocks(SYSTEM, 0)])])
            time.sleep(0.05)
        pub.close(linger=0)
        wait_until(lambda: not sub.connected)
        pub = hostile_publisher(ctx, url)  # the server back, counting from 0 again
        wait_until(lambda: sub.connected)
        good = [b"", K.seq_bytes(0), payload([request_blocks([5] * (3 * BS), 1)])]
        end = time.monotonic() + 10
        while state.last_seq != 0:
            assert sub.alive, "the subscriber's thread ended"
            assert time.monotonic() < end, "the new server's batch never folded"
            pub.send_multipart(good)
            time.sleep(0.05)
        assert state.snapshot().num_blocks == 3
    finally:
        sub.stop()
        ctx.destroy(linger=0)


def test_the_reader_answers_an_app_holding_more_than_1024_files():
    """An app server with many sessions holds many descriptors (a socket each, and the files it
    reads). The pipe from the reader process then has a number past 1023, where select() raises
    ValueError: the subscriber's thread ended on its first poll. poll() has no such bound."""
    import os
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 1100
    if soft < want:
        if hard != resource.RLIM_INFINITY and hard < want:
            pytest.skip(f"this process may open only {hard} files")
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    held: list[int] = []
    try:
        while not held or held[-1] < 1030:
            held.append(os.open(os.devnull, os.O_RDONLY))
        port, _ = free_ports()
        sub = Subscriber(SubscriberConfig(f"tcp://127.0.0.1:{port}", replay_endpoint=""))
        with Relay(sub.relay_config()) as relay:
            assert relay._back.fileno() > 1023
            assert relay.poll(10, 1) == ([], [])
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_reader_whose_app_went_away_ends_without_a_traceback():
    """The app's end of the pipe closed mid-answer (the server stopped, the subscriber closed
    it): the reader ends with status 0 and writes nothing to the server's log, where a
    BrokenPipeError traceback read as a crash."""
    import json
    import subprocess
    import sys
    from dataclasses import asdict

    from paged import IMPORT_ROOT as ROOT

    port, _ = free_ports()
    sub = Subscriber(SubscriberConfig(f"tcp://127.0.0.1:{port}", replay_endpoint=""))
    child = subprocess.Popen(
        [sys.executable, "-m", "paged.viz.watch.relay", json.dumps(asdict(sub.relay_config()))],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert child.stdin is not None and child.stdout is not None and child.stderr is not None
    child.stdout.close()  # nobody will read the answer
    body = b"\x93\xa4poll\x0a\x01"  # msgpack ["poll", 10, 1]
    child.stdin.write(len(body).to_bytes(4, "big") + body)
    child.stdin.close()
    try:
        assert child.wait(30) == 0
    finally:
        child.kill()
    assert child.stderr.read() == b""


def test_a_reader_that_keeps_ending_is_started_ever_less_often(monkeypatch):
    """A server can end every reader it meets (a frame over the limit on each connection:
    zmq gives the connection up). Measured: a new reader process every 2 s for as long as the
    page watched (14 in 30 s; heavier messages make each one cost more). The wait between
    starts doubles up to 30 s while readers keep ending, and is 1 s again after a reader that
    lived that long."""
    import paged.viz.watch.subscriber as KS

    clock = [0.0]
    lives = iter([0.5] * 7 + [31.0, 0.5, 0.5])  # seconds each reader lived
    waits: list[float] = []

    class EndingRelay:
        def __init__(self, config) -> None:
            clock[0] += next(lives)
            raise KS.RelayError("the socket reader process ended (exit status -6)")

    class Stop:
        def is_set(self) -> bool:
            return len(waits) >= 10

        def wait(self, timeout: float) -> bool:
            waits.append(timeout)
            clock[0] += timeout
            return self.is_set()

    monkeypatch.setattr(KS, "Relay", EndingRelay)
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    state = WatchState()
    sub = Subscriber(SubscriberConfig("tcp://127.0.0.1:5557", replay_endpoint=""), state)
    sub._stop = Stop()  # type: ignore[assignment]
    sub._run()
    assert waits == [1, 2, 4, 8, 16, 30, 30, 1, 2, 4]
    assert state.last_error.endswith("starting a new one in 4 s")


def test_one_poll_of_the_reader_answers_in_time_and_loses_nothing(monkeypatch):
    """Reading a message of a million empty frames takes the reader about a second of CPU, and
    a poll read on while messages kept coming (up to batch_limit, 2,000, as a malformed one
    counts a few bytes whatever its frames): the answer missed the app's deadline, the app
    thread waited 10 s, killed the reader and dropped what it had read. A poll now answers
    after POLL_SECONDS of reading, and the next one reads on from there."""
    import paged.viz.watch.relay as KR

    monkeypatch.setattr(KR, "POLL_SECONDS", 0.05)
    port, _ = free_ports()
    url = f"tcp://127.0.0.1:{port}"
    ctx = zmq.Context()
    pub = ctx.socket(zmq.PUB)
    pub.setsockopt(zmq.LINGER, 0)
    pub.bind(url)
    config = Subscriber(SubscriberConfig(url, replay_endpoint="", rcvhwm=64)).relay_config()
    sockets = Sockets(config)
    try:
        while not sockets.poll(10, 1)[0]:  # the monitor says connected
            pass
        time.sleep(0.2)  # the subscription reaches the publisher
        for _ in range(20):
            pub.send_multipart([b""] * 20_000)
        time.sleep(0.5)  # all of them queued in the reader
        first = sockets.poll(10, 2_000)[1]
        assert 0 < len(first) < 20
        got = len(first)
        end = time.monotonic() + 10
        while got < 20 and time.monotonic() < end:
            got += len(sockets.poll(10, 2_000)[1])
        assert got == 20
    finally:
        sockets.ctx.destroy(linger=0)
        ctx.destroy(linger=0)


def test_a_bug_in_folding_is_one_line_and_the_view_goes_on(monkeypatch):
    """Only a reader that ended (RelayError) or could not start (OSError) was caught: any other
    exception (two were found: an OverflowError, a ValueError from select) ended the thread
    unsaid, and the page went on saying "connected" over a view that never changed. It is
    now logged, said in one line, and a new reader catches up from the replay socket."""
    real = WatchState.apply
    failed: list[bool] = []

    def apply_once_broken(self, *args, **kwargs):
        if not failed:
            failed.append(True)
            raise RuntimeError("a bug")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(WatchState, "apply", apply_once_broken)
    with watching_the_system_prompt() as (_, sub, state):
        assert failed and sub.alive
        assert "RuntimeError, ref " in state.last_error and "\n" not in state.last_error


def test_a_port_that_hangs_up_is_greeted_ever_less_often():
    """An open port with no KV-event server behind it accepts and hangs up: libzmq greeted it
    again within 0.2 s, ten times a second for as long as the page watched. The reader now waits
    1 s, then 2, then 4 (doubling up to 30 s) before each new connection."""
    import socket

    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    server.settimeout(0.2)
    port = server.getsockname()[1]
    sub = Subscriber(SubscriberConfig(f"tcp://127.0.0.1:{port}", replay_endpoint="")).start()
    accepted: list[float] = []
    try:
        # counted from the first greeting: a reader process may take seconds to start on a
        # loaded machine, and that is not the backoff under test
        end = time.monotonic() + 30
        while time.monotonic() < end:
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            if not accepted:
                end = time.monotonic() + 6.5
            accepted.append(time.monotonic())
            conn.close()
    finally:
        sub.stop()
        server.close()
    gaps = [b - a for a, b in zip(accepted, accepted[1:], strict=False)]
    # connections at about 0, 1, 3 and 7 s: three in 6.5 s (libzmq alone: about 40)
    assert 2 <= len(accepted) <= 4, accepted
    assert all(g > 0.9 for g in gaps) and gaps == sorted(gaps), gaps


def test_a_publisher_lying_about_its_seq_cannot_make_missed_meaningless(monkeypatch):
    """A publisher sending seqs near 2**64, and jumping between them, made "missed" read about
    1.7e22 batches. A jump beyond what a server could have sent since the last batch (1,000 a
    second, plus 1,000) is a restart, never that many missed; a plausible gap is still one."""
    import paged.viz.watch.subscriber as KS

    clock = [100.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    state = WatchState()
    sub = Subscriber(SubscriberConfig("tcp://127.0.0.1:5557", replay_endpoint=""), state)
    stored = K.BlockStored([1], None, [1] * BS, BS, None, "GPU")

    def send(seq: int, after_s: float = 0.01) -> None:
        clock[0] += after_s  # each batch its own bytes: a repeated one is dropped as a copy
        sub.on_message(None, [b"", K.seq_bytes(seq), payload([stored], ts=clock[0])])

    send(5)  # joined late: 5 before it, plausible
    assert (state.counters["gaps"], state.counters["missed"]) == (1, 5)
    top = (1 << 64) - 2
    for i in range(1_000):
        send(top - (i % 2) * (1 << 62))
    assert state.counters["missed"] < 10_000, state.counters["missed"]
    assert state.counters["restarts"] == 1_000 and state.last_seq == top - (1 << 62)
    send(top - (1 << 62) + 1 + 1_500, after_s=1.0)  # 1,500 missed in a second: plausible
    assert state.counters["missed"] < 10_000 + 1_500 and state.counters["restarts"] == 1_000
    assert KS.MAX_BATCHES_PER_S == 1_000


class _ReadyButGone:
    """A socket whose poll says a message is ready that is gone by the time it is read, as when
    the connection that brought it is dropped in between: a blocking read would wait for ever."""

    def __init__(self, real: zmq.Socket) -> None:
        self.real = real

    def poll(self, *args, **kwargs) -> int:
        return zmq.POLLIN

    def recv_multipart(self, flags: int = 0):
        if not flags & zmq.NOBLOCK:
            raise AssertionError("a blocking read of a message that is gone never returns")
        raise zmq.Again()

    def __getattr__(self, name):
        return getattr(self.real, name)


def test_a_message_ready_then_gone_stalls_neither_the_reader_nor_the_publisher():
    port, _ = free_ports()
    sockets = Sockets(Subscriber(SubscriberConfig(f"tcp://127.0.0.1:{port}")).relay_config())
    try:
        sockets.sub = _ReadyButGone(sockets.sub)
        assert sockets.poll(10, 100) == ([], [])
    finally:
        sockets.ctx.destroy(linger=0)
    port, _ = free_ports()
    pub = K.KVEventPublisher(f"tcp://127.0.0.1:{port}")
    try:
        pub._serve_replay.__func__(SimpleNamespace(_replay=_ReadyButGone(pub._replay)))
        pub.publish([request_blocks(SYSTEM, 0)])
        assert pub.flush(5)  # its thread goes on
    finally:
        pub.close()
