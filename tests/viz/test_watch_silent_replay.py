"""A replay socket that never answers (or has nothing behind it) must not cost the live stream:
it is found out once, said in one line, and the view goes on folding live batches, nearly all of
what it folds when the replay works, on the same gap-heavy stream."""

from __future__ import annotations

import threading
import time

import msgspec
import pytest
import zmq

from paged.engine.interop import kv_events as K
from paged.viz.watch.state import WatchState
from paged.viz.watch.subscriber import Subscriber, SubscriberConfig
from tests.engine.test_kv_events import free_ports

BATCHES = 1_423
DROPPED_EVERY = 15  # every 15th batch never reaches the subscriber live: 94 gaps


def batch(seq: int) -> bytes:
    stored = K.BlockStored([seq + 1], seq or None, [seq % 50] * 4, 4, None, "GPU")
    return msgspec.msgpack.encode(K.EventBatch(1000.0 + seq, [stored]))


def serve_replay(router: zmq.Socket, history: dict[int, bytes], honest: bool, stop) -> None:
    """vLLM's replay protocol: ``[id, b"", start]`` in; ``[id, b"", seq, payload]`` for each
    batch kept from ``start`` on, then the end marker. A silent one reads and never answers."""
    while not stop.is_set():
        if not router.poll(50):
            continue
        ident, _, start = router.recv_multipart()
        if not honest:
            continue
        for seq in range(int.from_bytes(start, "big"), BATCHES):
            if seq in history:
                router.send_multipart([ident, b"", seq.to_bytes(8, "big"), history[seq]])
        router.send_multipart([ident, b"", K.END_SEQ, b""])


def follow_gappy_stream(replay: str) -> WatchState:
    """``replay``: ``honest``, ``silent`` (bound, never answers) or ``absent`` (nothing bound)."""
    port, _ = free_ports()
    ctx = zmq.Context()
    pub, router = ctx.socket(zmq.PUB), ctx.socket(zmq.ROUTER)
    for s in (pub, router):
        s.setsockopt(zmq.LINGER, 0)
    pub.setsockopt(zmq.SNDHWM, 100_000)
    pub.bind(f"tcp://127.0.0.1:{port}")
    if replay != "absent":
        router.bind(f"tcp://127.0.0.1:{port + 1}")
    history: dict[int, bytes] = {}
    stop = threading.Event()
    server = threading.Thread(target=serve_replay, args=(router, history, replay == "honest", stop))
    server.start()
    state = WatchState()
    sub = Subscriber(SubscriberConfig(f"tcp://127.0.0.1:{port}"), state).start()
    try:
        deadline = time.monotonic() + 15
        while not sub.connected and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # the subscription reaches the PUB socket
        for seq in range(BATCHES):
            history[seq] = batch(seq)
            if seq % DROPPED_EVERY != DROPPED_EVERY - 1:
                pub.send_multipart([b"", seq.to_bytes(8, "big"), history[seq]])
            time.sleep(0.002)
        deadline = time.monotonic() + 20
        while state.last_seq != BATCHES - 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.3)
    finally:
        sub.stop()
        stop.set()
        server.join(5)
        ctx.destroy(linger=0)
    return state


@pytest.mark.timeout(120)
@pytest.mark.parametrize("replay", ["silent", "absent"])
def test_a_silent_replay_socket_costs_one_wait_and_the_live_stream_keeps_folding(replay):
    honest = follow_gappy_stream("honest")
    silent = follow_gappy_stream(replay)
    live = BATCHES - BATCHES // DROPPED_EVERY
    assert honest.counters["replayed"] > 0 and honest.counters["gaps"] == 0
    ratio = silent.counters["batches"] / honest.counters["batches"]
    print(
        f"folded live: silent {silent.counters['batches']}, honest {honest.counters['batches']}"
        f" of {live} sent live: {100 * ratio:.1f} %"
    )
    assert ratio >= 0.95
    assert silent.counters["gaps"] >= BATCHES // DROPPED_EVERY - 1
    error = silent.snapshot().last_error
    assert "did not answer" in error and "\n" not in error
    assert silent.counters["malformed"] == 0  # a silent server sent nothing malformed
