"""``generate --kv-events`` on the real model: the run's batches reach a subscriber (through the
replay socket, which holds them all: a PUB drops what it sends before a subscriber joins).
The run opens with ``AllBlocksCleared``, and the shared system prompt's blocks arrive as
``BlockStored``."""

from __future__ import annotations

import threading

import pytest
import zmq

from paged.engine.cli import generate as cmd_generate
from paged.engine.cli import main as cli
from paged.engine.interop import kv_events as K
from tests.engine.test_kv_events import free_ports

SYSTEM = "You are a careful assistant. Answer in one short sentence. "
PROMPTS = [SYSTEM + q for q in ("What is paging?", "What is a block?", "Why share prefixes?")]


@pytest.fixture
def on_session_model(smollm, monkeypatch):
    import paged.engine.llm

    monkeypatch.setattr(paged.engine.llm, "load_model", lambda *a, **k: smollm)


def replay_all(port: int, timeout: float = 1.0) -> list[tuple[int, K.InBatch]] | None:
    ctx = zmq.Context()
    try:
        d = ctx.socket(zmq.DEALER)
        d.setsockopt(zmq.LINGER, 0)
        d.connect(f"tcp://127.0.0.1:{port + 1}")
        d.send_multipart((b"", K.seq_bytes(0)))
        out = []
        for _ in range(10_000):
            if not d.poll(int(timeout * 1000)):
                return None
            _, _, seq, payload = d.recv_multipart()  # [b"", topic, seq, payload], as vLLM 0.32
            if seq == K.END_SEQ:
                return out
            out.append((int.from_bytes(seq, "big"), K.decode_batch(payload)))
        return None
    finally:
        ctx.destroy(linger=0)


@pytest.mark.model
def test_generate_publishes_its_run(on_session_model, monkeypatch):
    # the hold starts once the run is complete and lasts until the test has read the replay
    # (a fixed hold would leave both of a 2-core machine's test workers waiting for seconds)
    holding, read = threading.Event(), threading.Event()

    def hold(seconds: float) -> None:
        holding.set()
        read.wait(seconds)

    monkeypatch.setattr(cmd_generate, "hold_publisher", hold)
    port, _ = free_ports()
    rc: list[int] = []
    run = threading.Thread(
        target=lambda: rc.append(
            cli.main(
                [
                    "generate",
                    *PROMPTS,
                    "--max-tokens",
                    "2",
                    "--ignore-eos",
                    "--block-size",
                    "4",
                    "--enable-prefix-caching",
                    "--kv-events",
                    f"tcp://127.0.0.1:{port}",
                    "--kv-events-hold",
                    "120",
                ]
            )
        )
    )
    run.start()
    assert holding.wait(180), "the run never reached its hold"
    got = replay_all(port, timeout=30)  # the whole run: the hold starts when it is complete
    read.set()
    run.join(30)
    assert rc == [0] and got
    assert [s for s, _ in got] == list(range(len(got)))
    assert isinstance(got[0][1].events[0], K.InCleared)
    stored = [ev for _, b in got for ev in b.events if isinstance(ev, K.InStored)]
    assert stored and all(ev.block_size == 4 for ev in stored)
    assert {tuple(ev.token_ids) for ev in stored if ev.parent_block_hash is None}
