"""Our KV-event publisher speaks vLLM 0.32's protocol: a subscriber written here from the structs of
vLLM 0.32's ``vllm/distributed/kv_events.py`` (copied field by field, not imported from our code)
decodes the stream exactly, including a replay after a forced gap with 0.32's replay framing.
The older array-shaped events are kept as a fixture the decoder must still read. Loopback
sockets on free ports; every wait is bounded."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import msgspec
import pytest
import zmq

from paged.engine.core import events as E
from paged.engine.interop import kv_events as K

# --- vLLM 0.32's schema (vllm/distributed/kv_events.py), written independently of ours ---------


class VBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    ts: float
    events: list
    data_parallel_rank: int | None = None


class VEvent(msgspec.Struct, omit_defaults=True, gc=False, tag=True):
    pass


class VBlockStored(VEvent, tag="BlockStored"):
    block_hashes: list[bytes | int]
    parent_block_hash: bytes | int | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None
    extra_keys: list[tuple | None] | None = None
    group_idx: int | None = None
    kv_cache_spec_kind: str | None = None
    kv_cache_spec_sliding_window: int | None = None
    locality: str | None = None
    ownership: str | None = None
    session_id: str | None = None


class VBlockRemoved(VEvent, tag="BlockRemoved"):
    block_hashes: list[bytes | int]
    medium: str | None
    group_idx: int | None = None
    locality: str | None = None
    ownership: str | None = None


class VAllBlocksCleared(VEvent, tag="AllBlocksCleared"):
    pass


class VKVBatch(VBatch):
    events: list[VBlockStored | VBlockRemoved | VAllBlocksCleared]


# --- the older shape (vLLM's example subscriber before 0.32): array-like events -----------------


class OldEvent(msgspec.Struct, array_like=True, omit_defaults=True, gc=False, tag=True):
    pass


class OldStored(OldEvent, tag="BlockStored"):
    block_hashes: list[int]
    parent_block_hash: int | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None


class OldRemoved(OldEvent, tag="BlockRemoved"):
    block_hashes: list[int]
    medium: str | None


class OldCleared(OldEvent, tag="AllBlocksCleared"):
    pass


class OldBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    ts: float
    events: list[OldStored | OldRemoved | OldCleared]
    data_parallel_rank: int | None = None


# --- the engine's prefix-cache events with int hashes (vLLM's own kind of hash), as the
# translator reads them from the bus ---------------------------------------------------------


def FakeStored(block_hash, parent, token_ids, block_size, physical) -> E.BlockStored:
    return E.BlockStored(0, 0, block_hash, parent, token_ids, block_size, physical)


def FakeEvicted(block_hash, physical) -> E.BlockEvicted:
    return E.BlockEvicted(0, 0, block_hash, physical)


def FakeCleared() -> E.AllBlocksCleared:
    return E.AllBlocksCleared(0, 0)


def FakeStepEnd() -> E.StepEnd:
    return E.StepEnd(0, 0, num_running=0, num_waiting=0)


@contextmanager
def hostile_publisher(url: str) -> Iterator[zmq.Socket]:
    """A raw PUB socket bound where a server was: it sends whatever a test makes it send."""
    ctx = zmq.Context()
    try:
        bad = ctx.socket(zmq.PUB)
        bad.setsockopt(zmq.LINGER, 0)
        bad.setsockopt(zmq.SNDHWM, 100_000)
        bad.bind(url)
        yield bad
    finally:
        ctx.destroy(linger=0)


def send_probe(bad: zmq.Socket) -> None:
    """One malformed message, sent until a subscriber shows it has (re)connected."""
    bad.send_multipart([b"", b"probe"])


def send_malformed(bad: zmq.Socket, n: int = 1000) -> None:
    """``n`` messages with valid framing and undecodable payloads of 1 to 7 bytes."""
    for i in range(n):
        bad.send_multipart([b"", K.seq_bytes(i), b"\xc1" * (i % 7 + 1)])


def free_ports() -> tuple[int, int]:
    """Two consecutive free loopback ports (publisher and its replay socket)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port >= 65534:
            continue
        with socket.socket() as s2:
            try:
                s2.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port, port + 1
    raise RuntimeError("no two consecutive free ports")


def recv(sub: zmq.Socket, timeout_ms: int = 3000) -> list[bytes]:
    assert sub.poll(timeout_ms), "no message within the timeout"
    return sub.recv_multipart()


def subscribe(ctx: zmq.Context, port: int, topic: bytes = b"") -> zmq.Socket:
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt(zmq.SUBSCRIBE, topic)
    sub.connect(f"tcp://127.0.0.1:{port}")
    return sub


def wait_joined(pub: K.KVEventPublisher, sub: zmq.Socket) -> int:
    """PUB drops messages until the subscription arrives: publish probes until one shows up.
    Returns the next seq the subscriber will see."""
    for _ in range(100):
        pub.publish([K.AllBlocksCleared()])
        if sub.poll(50):
            while sub.poll(200):
                _, seq, _ = sub.recv_multipart()
            return int.from_bytes(seq, "big") + 1
    raise AssertionError("subscriber never joined")


@pytest.fixture
def pub():
    port, _ = free_ports()
    p = K.KVEventPublisher(f"tcp://127.0.0.1:{port}", topic="kv-events")
    yield p, port
    p.close()


def test_documented_subscriber_decodes_translated_engine_events(pub):
    p, port = pub
    ctx = zmq.Context()
    try:
        sub = subscribe(ctx, port, b"kv-events")
        first = wait_joined(p, sub)
        tr = K.EngineEventTranslator(p)
        tr(FakeStored(11, None, (1, 2, 3, 4), 4, physical=7))
        tr(FakeStored(12, 11, (5, 6, 7, 8), 4, physical=3))
        tr(FakeStepEnd())
        tr(FakeEvicted(12, physical=3))
        tr(FakeCleared())
        tr(FakeStepEnd())
        tr(FakeStepEnd())  # an empty step publishes nothing
        dec = msgspec.msgpack.Decoder(VKVBatch)
        topic, seq, payload = recv(sub)
        assert topic == b"kv-events" and len(seq) == 8
        assert int.from_bytes(seq, "big") == first
        b1 = dec.decode(payload)
        assert isinstance(b1.ts, float)
        assert b1.data_parallel_rank == 0
        assert b1.events == [
            VBlockStored([11], None, [1, 2, 3, 4], 4, None, "GPU", None),
            VBlockStored([12], 11, [5, 6, 7, 8], 4, None, "GPU", None),
        ]
        _, seq2, payload2 = recv(sub)
        assert int.from_bytes(seq2, "big") == first + 1
        assert dec.decode(payload2).events == [VBlockRemoved([12], "GPU"), VAllBlocksCleared()]
        assert not sub.poll(200)
        # the raw msgpack, as vLLM 0.32 encodes it: an array batch of maps tagged under "type",
        # every required field present (None included), unset optional ones left out
        assert msgspec.msgpack.decode(payload) == [
            b1.ts,
            [
                {
                    "type": "BlockStored",
                    "block_hashes": [11],
                    "parent_block_hash": None,
                    "token_ids": [1, 2, 3, 4],
                    "block_size": 4,
                    "lora_id": None,
                    "medium": "GPU",
                    "lora_name": None,
                },
                {
                    "type": "BlockStored",
                    "block_hashes": [12],
                    "parent_block_hash": 11,
                    "token_ids": [5, 6, 7, 8],
                    "block_size": 4,
                    "lora_id": None,
                    "medium": "GPU",
                    "lora_name": None,
                },
            ],
            0,
        ]
        raw = msgspec.msgpack.decode(payload2)
        assert raw[1] == [
            {"type": "BlockRemoved", "block_hashes": [12], "medium": "GPU"},
            {"type": "AllBlocksCleared"},
        ]
        # and a batch vLLM 0.32 itself encodes reads back the same through our decoder
        again = K.decode_batch(msgspec.msgpack.encode(b1))
        assert again.events == [
            K.InStored([11], None, [1, 2, 3, 4], 4, None, "GPU"),
            K.InStored([12], 11, [5, 6, 7, 8], 4, None, "GPU"),
        ]
    finally:
        ctx.destroy(linger=0)


def test_replay_after_forced_gap(pub):
    """The subscriber misses batches (it drops them itself), sees the seq jump, asks the replay
    socket from the first missing seq and gets exactly those batches in order, then the end
    marker; the hashes of a negative Python hash arrive as uint64."""
    p, port = pub
    ctx = zmq.Context()
    try:
        sub = subscribe(ctx, port)
        first = wait_joined(p, sub)
        for i in range(6):
            p.publish([K.BlockStored([i], None, [i] * 2, 2, None, "GPU", None)])
        dec = msgspec.msgpack.Decoder(VKVBatch)
        got = [recv(sub) for _ in range(6)]
        last = int.from_bytes(got[0][1], "big")
        assert last == first
        # forced gap: batches 1..4 are "lost"; batch 5 shows the jump
        seq5 = int.from_bytes(got[5][1], "big")
        assert seq5 > last + 1
        # a DEALER, not the docs' REQ: a REQ socket reads only the first reply of the stream
        req = ctx.socket(zmq.DEALER)
        req.setsockopt(zmq.LINGER, 0)
        req.connect(f"tcp://127.0.0.1:{port + 1}")
        req.send_multipart((b"", (last + 1).to_bytes(8, "big")))
        replayed = []
        for _ in range(100):
            assert req.poll(3000), "replay timed out"
            # vLLM 0.32's framing: [b"", topic, seq, payload]; the end [b"", b"", -1, b""]
            delim, rtopic, rseq, rpayload = req.recv_multipart()
            assert delim == b""
            if not rpayload:
                assert rtopic == b"" and rseq == (-1).to_bytes(8, "big", signed=True)
                break
            assert rtopic == b"kv-events"
            replayed.append((int.from_bytes(rseq, "big"), dec.decode(rpayload)))
        assert [s for s, _ in replayed] == list(range(last + 1, seq5 + 1))
        assert [b.events[0].block_hashes for _, b in replayed] == [[i] for i in range(1, 6)]
        assert replayed[-1][1].events == dec.decode(got[5][2]).events
        assert K.wire_hash(-1) == (1 << 64) - 1
        assert K.wire_hash((1, 2)) == K.wire_hash((1, 2)) != K.wire_hash((2, 1))
        assert 0 <= K.wire_hash("abc") < 1 << 64
    finally:
        ctx.destroy(linger=0)


def test_after_flush_a_replay_holds_every_batch_published(pub):
    """What a hold announces ("the stream is complete") must be true of the replay, batches
    still queued in the publisher's thread included."""
    p, port = pub
    for i in range(300):
        p.publish([K.BlockStored([i], None, [i] * 2, 2, None, "GPU", None)])
    assert p.flush(timeout=30)
    ctx = zmq.Context()
    try:
        req = ctx.socket(zmq.DEALER)
        req.setsockopt(zmq.LINGER, 0)
        req.connect(f"tcp://127.0.0.1:{port + 1}")
        req.send_multipart((b"", (0).to_bytes(8, "big")))
        seqs = []
        while True:
            assert req.poll(5000), "replay timed out"
            _, _, rseq, rpayload = req.recv_multipart()
            if not rpayload:
                break
            seqs.append(int.from_bytes(rseq, "big"))
        assert seqs == list(range(300))
    finally:
        ctx.destroy(linger=0)
    p.close()
    assert p.flush(timeout=1)  # a closed publisher has nothing left to send


def test_a_closed_publisher_refuses_and_a_taken_port_is_one_error():
    port, _ = free_ports()
    p = K.KVEventPublisher(f"tcp://127.0.0.1:{port}")
    try:
        with pytest.raises(K.EndpointError, match="cannot bind"):
            K.KVEventPublisher(f"tcp://127.0.0.1:{port}")
    finally:
        p.close()
    with pytest.raises(RuntimeError, match="closed"):
        p.publish([K.AllBlocksCleared()])


@pytest.mark.parametrize("addr", ["tcp://0.0.0.0:5557", "tcp://*:5557", "tcp://10.1.2.3:5557"])
def test_remote_address_needs_opt_in(addr):
    with pytest.raises(K.EndpointError, match="not loopback"):
        K.parse_endpoint(addr)
    assert K.parse_endpoint(addr, allow_remote=True).url == addr


@pytest.mark.parametrize(
    "addr",
    [
        "",
        "127.0.0.1:5557",
        "ipc:///tmp/x",
        "tcp://127.0.0.1",
        "tcp://127.0.0.1:99999",
        "tcp://127.0.0.1:1; rm -rf",
        "tcp://" + "a" * 400 + ":1",
    ],
)
def test_malformed_addresses(addr):
    with pytest.raises(K.EndpointError):
        K.parse_endpoint(addr)


def test_decoder_reads_the_older_array_shape():
    """Servers before 0.32 send array-like events; the watch page still follows them."""
    old = OldBatch(
        3.0, [OldStored([5], None, [1, 2], 2, None, "GPU"), OldRemoved([5], "GPU"), OldCleared()]
    )
    got = K.decode_batch(msgspec.msgpack.encode(old))
    assert got.ts == 3.0 and got.events == [
        K.InStored([5], None, [1, 2], 2, None, "GPU"),
        K.InRemoved([5], "GPU"),
        K.InCleared(),
    ]


def test_decoder_reads_every_optional_field_of_0_32():
    full = VKVBatch(
        4.0,
        [
            VBlockStored(
                [b"\x02" * 32],
                b"\x01" * 32,
                [9, 9],
                2,
                None,
                "GPU",
                "adapter",
                [("adapter",)],
                1,
                "full_attention",
                None,
                "LOCAL",
                "tier2",
                "s-1",
            ),
            VBlockRemoved([b"\x02" * 32], "CPU", 1, "REMOTE", "tier2"),
        ],
        3,
    )
    got = K.decode_batch(msgspec.msgpack.encode(full))
    assert got.data_parallel_rank == 3
    assert got.events == [
        K.InStored([b"\x02" * 32], b"\x01" * 32, [9, 9], 2, None, "GPU"),
        K.InRemoved([b"\x02" * 32], "CPU"),
    ]


def test_decoder_accepts_newer_vllm_and_rejects_hostile():
    newer = msgspec.msgpack.encode(
        [1.0, [["BlockStored", [b"\x01" * 32], None, [1, 2], 2, None, "GPU", "lora", None, 0]], 0]
    )
    ev = K.decode_batch(newer).events[0]
    assert isinstance(ev, K.InStored) and ev.block_hashes == [b"\x01" * 32]
    # newer vLLM: events as maps with a "type" key (the batch an array, or a map too)
    ev_map = {
        "type": "BlockStored",
        "block_hashes": [7],
        "parent_block_hash": 3,
        "token_ids": [1, 2],
        "block_size": 2,
        "lora_id": None,
        "medium": "GPU",
        "lora_name": None,
        "extra_keys": [None],
        "group_idx": 0,
        "kv_cache_spec_kind": "full_attention",
    }
    for batch in (
        [2.0, [ev_map, {"type": "BlockRemoved", "block_hashes": [7], "medium": None}], 0],
        {"ts": 2.0, "events": [ev_map, {"type": "AllBlocksCleared"}]},
    ):
        got = K.decode_batch(msgspec.msgpack.encode(batch))
        assert got.ts == 2.0 and got.events[0] == K.InStored([7], 3, [1, 2], 2, None, "GPU")
        assert type(got.events[1]) in (K.InRemoved, K.InCleared)
    for bad in [
        b"",
        b"\xc1",
        msgspec.msgpack.encode([1.0, [dict(ev_map, token_ids=[0] * 5)]]),
        msgspec.msgpack.encode({"ts": 1}),
        msgspec.msgpack.encode([1.0, [["Nope"]]]),
        msgspec.msgpack.encode(
            [1.0, [["BlockStored", [1], None, [0] * (K.MAX_TOKENS + 1), K.MAX_TOKENS, None, None]]]
        ),
        msgspec.msgpack.encode([1.0, [["BlockRemoved", ["x"], None]]]),
        msgspec.msgpack.encode([1.0, [["BlockStored", [1], None, [1], 0, None, None]]]),
    ]:
        with pytest.raises(K.MalformedBatch):
            K.decode_batch(bad)


# --- the engine hook, through our real EventBus ---------------------------------------------------
# STAND-INS again: Event subclasses shaped like the prefix cache's, emitted by the real bus.


class ListPublisher:
    def __init__(self) -> None:
        self.batches: list[list] = []

    def publish(self, events) -> None:
        self.batches.append(list(events))


def test_translator_batches_bus_events_per_step():
    bus, pub = E.EventBus(), ListPublisher()
    bus.subscribe(K.EngineEventTranslator(pub))  # type: ignore[arg-type]
    bus.emit(E.Admitted, req="0", num_tokens=8)
    bus.emit(
        E.BlockStored,
        block_hash=-5,
        parent_block_hash=None,
        token_ids=(1, 2),
        block_size=2,
        physical=4,
    )
    bus.emit(E.StepEnd, num_running=1, num_waiting=0)
    bus.step = 1
    bus.emit(E.BlockEvicted, block_hash=-5, physical=4)
    bus.emit(E.StepEnd, num_running=0, num_waiting=0)
    h = (1 << 64) - 5
    assert pub.batches == [
        [K.BlockStored([h], None, [1, 2], 2, None, "GPU", None)],
        [K.BlockRemoved([h], "GPU")],
    ]


@pytest.mark.parametrize("cmd", ["generate", "record"])
def test_cli_refuses_a_remote_address_in_one_line(cmd, capsys, tmp_path):
    from paged.engine.cli.main import main

    args = (
        ["generate", "hi"]
        if cmd == "generate"
        else [
            "record",
            "--scenario",
            str(tmp_path / "none.toml"),
            "--out",
            str(tmp_path / "t.jsonl"),
        ]
    )
    if cmd == "record":  # the scenario is checked first; give it one that parses
        args[2] = str(
            next(
                (Path(__file__).resolve().parents[2] / "paged" / "lessons").glob("*/scenario.toml")
            )
        )
    assert main([*args, "--kv-events", "tcp://0.0.0.0:5557"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "not loopback" in err[0]


@pytest.mark.parametrize("cmd", ["generate", "record"])
@pytest.mark.parametrize("hold", ["-1", "nan", "3601"])
def test_cli_refuses_a_bad_hold_in_one_line(cmd, hold, capsys, tmp_path):
    from paged.engine.cli.main import main

    scenario = next(
        (Path(__file__).resolve().parents[2] / "paged" / "lessons").glob("*/scenario.toml")
    )
    args = (
        ["generate", "hi"]
        if cmd == "generate"
        else ["record", "--scenario", str(scenario), "--out", str(tmp_path / "t.jsonl")]
    )
    port, _ = free_ports()
    rc = main([*args, "--kv-events", f"tcp://127.0.0.1:{port}", "--kv-events-hold", hold])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert err[0].startswith("error: ") and "--kv-events-hold" in err[0]
    assert not (tmp_path / "t.jsonl").exists()
