"""The KV-event wire against the real vLLM 0.32 (``make peer``; skipped where vllm is not
installed): our publisher's stream decoded by vLLM's own ``KVEventBatch`` decoder, live and
through the replay socket; vLLM's own ``ZmqEventPublisher`` folded by ``python -m paged watch``
in both socket modes, duplicated hashes included, and compared with vLLM's decoder. No model is
loaded here: these take seconds."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import msgspec
import pytest
import zmq

from paged.engine.interop import kv_events as K
from tests.engine.test_kv_events import (
    FakeCleared,
    FakeEvicted,
    FakeStepEnd,
    FakeStored,
    free_ports,
    subscribe,
    wait_joined,
)

kv = pytest.importorskip("vllm.distributed.kv_events")

ROOT = Path(__file__).resolve().parents[2]
BS = 32
DECODER = msgspec.msgpack.Decoder(kv.KVEventBatch)


def vllm_view(batch) -> list[tuple]:
    """Each event as vLLM's classes read it: (class name, the fields we care about)."""
    out = []
    for e in batch.events:
        if isinstance(e, kv.BlockStored):
            out.append(
                (
                    "BlockStored",
                    e.block_hashes,
                    e.parent_block_hash,
                    e.token_ids,
                    e.block_size,
                    e.lora_id,
                    e.medium,
                    e.lora_name,
                )
            )
        elif isinstance(e, kv.BlockRemoved):
            out.append(("BlockRemoved", e.block_hashes, e.medium))
        else:
            assert isinstance(e, kv.AllBlocksCleared)
            out.append(("AllBlocksCleared",))
    return out


def test_vllms_decoder_reads_our_stream_live_and_through_replay():
    port, _ = free_ports()
    pub = K.KVEventPublisher(f"tcp://127.0.0.1:{port}", topic="kv")
    ctx = zmq.Context()
    try:
        sub = subscribe(ctx, port, b"kv")
        first = wait_joined(pub, sub)
        tr = K.EngineEventTranslator(pub)
        a, b = list(range(BS)), list(range(BS, 2 * BS))
        tr(FakeStored(11, None, tuple(a), BS, physical=1))
        tr(FakeStored(12, 11, tuple(b), BS, physical=2))
        tr(FakeStepEnd())
        tr(FakeEvicted(12, physical=2))
        tr(FakeCleared())
        tr(FakeStepEnd())
        expected = [
            [
                ("BlockStored", [11], None, a, BS, None, "GPU", None),
                ("BlockStored", [12], 11, b, BS, None, "GPU", None),
            ],
            [("BlockRemoved", [12], "GPU"), ("AllBlocksCleared",)],
        ]
        live = []
        for _ in expected:
            assert sub.poll(5000)
            topic, seq, payload = sub.recv_multipart()
            batch = DECODER.decode(payload)  # raises on any mismatch with 0.32's schema
            assert topic == b"kv" and batch.data_parallel_rank == 0
            live.append((int.from_bytes(seq, "big"), vllm_view(batch)))
        assert [v for _, v in live] == expected
        assert [s for s, _ in live] == [first, first + 1]
        assert pub.flush()
        # the replay, read as vLLM's framing says: [b"", topic, seq, payload] ... [b"", b"", -1, b""]
        dealer = ctx.socket(zmq.DEALER)
        dealer.setsockopt(zmq.LINGER, 0)
        dealer.connect(f"tcp://127.0.0.1:{port + 1}")
        dealer.send_multipart((b"", first.to_bytes(8, "big")))
        replayed = []
        while True:
            assert dealer.poll(5000), "replay timed out"
            frames = dealer.recv_multipart()
            assert len(frames) == 4 and frames[0] == b""
            _, topic, seq, payload = frames
            if seq == kv.ZmqEventPublisher.END_SEQ:
                assert topic == b"" and payload == b""
                break
            assert topic == b"kv"
            replayed.append((int.from_bytes(seq, "big"), vllm_view(DECODER.decode(payload))))
        assert replayed == live
    finally:
        ctx.destroy(linger=0)
        pub.close()


def vllm_batches() -> list:
    """What vLLM's scheduler can send: one hash cached in two physical blocks (two requests
    computed the same prefix at once), removed one copy at a time; int and bytes hashes."""
    a, b = list(range(BS)), list(range(BS, 2 * BS))

    def stored(hashes, parent, tokens):
        return kv.BlockStored(
            block_hashes=hashes,
            parent_block_hash=parent,
            token_ids=tokens,
            block_size=BS,
            lora_id=None,
            medium="GPU",
            lora_name=None,
            group_idx=0,
            kv_cache_spec_kind="full_attention",
        )

    return [
        kv.KVEventBatch(ts=1.0, events=[stored([101, 102], None, a + b)]),
        kv.KVEventBatch(ts=2.0, events=[stored([101, 102], None, a + b)]),  # the second copy
        kv.KVEventBatch(ts=3.0, events=[stored([b"\x07" * 32], 102, a)]),
        kv.KVEventBatch(ts=4.0, events=[kv.BlockRemoved(block_hashes=[102], medium="GPU")]),
        kv.KVEventBatch(ts=5.0, events=[kv.BlockRemoved(block_hashes=[101, 101], medium="GPU")]),
    ]


def reference_fold(batches: list) -> Counter:
    """Copies per hash, from the batches as vLLM's own decoder reads them back."""
    held: Counter = Counter()
    enc = msgspec.msgpack.Encoder()
    for b in batches:
        for e in DECODER.decode(enc.encode(b)).events:
            if isinstance(e, kv.BlockStored):
                held.update(e.block_hashes)
            elif isinstance(e, kv.BlockRemoved):
                for h in e.block_hashes:
                    if held[h]:
                        held[h] -= 1
            else:
                held.clear()
    return +held


@pytest.mark.parametrize("mode", ["connect", "listen"])
def test_viz_watch_folds_vllms_own_publisher_duplicates_included(mode):
    """connect: vLLM binds an endpoint holding "::" (the IPv4-mapped loopback) and the watcher
    connects; listen: vLLM connects to tcp://127.0.0.1:P, so the watcher must bind."""
    port, replay = free_ports()
    endpoint = (
        f"tcp://[::ffff:127.0.0.1]:{port}" if mode == "connect" else f"tcp://127.0.0.1:{port}"
    )
    args = [f"tcp://127.0.0.1:{port}", "--seconds", "8", "--json"]
    watcher = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "paged",
            "watch",
            *args,
            *(["--listen"] if mode == "listen" else []),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(2)  # the watcher's socket reader is up (listening, or retrying its connect)
    publisher = kv.ZmqEventPublisher(
        data_parallel_rank=0, endpoint=endpoint, replay_endpoint=f"tcp://127.0.0.1:{replay}"
    )
    try:
        batches = vllm_batches()
        for b in batches:
            publisher.publish(b)
        out, err = watcher.communicate(timeout=60)
    finally:
        publisher.shutdown()
        if watcher.poll() is None:
            watcher.kill()
            watcher.wait()
    assert watcher.returncode == 0, err
    got = json.loads(out)
    want = reference_fold(batches)
    assert want == Counter({102: 1, b"\x07" * 32: 1})  # the fixture's own sense
    held = {
        (bytes.fromhex(b["hash"]) if isinstance(b["hash"], str) else b["hash"]): b["copies"]
        for b in got["blocks"]
    }
    assert held == dict(want)
    assert got["counters"]["malformed"] == 0 and got["counters"]["gaps"] == 0
    assert got["counters"]["removed"] == 3 and got["counters"]["stored"] == 5
