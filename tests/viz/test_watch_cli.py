"""``python -m paged watch``: the page's subscriber and fold in a terminal. Duplicated hashes (one
hash in two physical blocks, as vLLM 0.32 can hold them), connect and listen modes, Ctrl-C, bad
addresses and hostile streams. Loopback sockets on free ports; every wait is bounded."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import msgspec
import zmq

from paged.engine.interop import kv_events as K
from paged.viz.watch import __main__ as cli
from paged.viz.watch.state import WatchState, read_recording

ROOT = Path(__file__).resolve().parents[2]
BS = 4


def free_port() -> int:
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port < 65534:
            return port
    raise RuntimeError("no free port")


def encode(events: list, ts: float = 1.0) -> bytes:
    return msgspec.msgpack.encode(K.EventBatch(ts, events, 0))


def stored(h, parent=None) -> K.BlockStored:
    return K.BlockStored([h], parent, [h % 7] * BS, BS, None, "GPU")


def test_one_hash_in_two_physical_blocks_goes_with_its_last_copy():
    state = WatchState()
    state.feed(0, encode([stored(1), stored(2, 1)]))
    state.feed(1, encode([stored(2, 1)]))  # a second request computed the same block
    assert dict((h, n) for h, _, n in state.held()) == {1: 1, 2: 2}
    snap = state.snapshot()
    assert (snap.num_blocks, snap.num_copies) == (2, 3)
    state.feed(2, encode([K.BlockRemoved([2], "GPU")]))  # one copy evicted: still a hit
    assert dict((h, n) for h, _, n in state.held()) == {1: 1, 2: 1}
    state.feed(3, encode([K.BlockRemoved([2], "GPU")]))
    assert [h for h, _, _ in state.held()] == [1]
    state.feed(4, encode([K.BlockRemoved([2, 1], "GPU")]))  # one unknown, one held
    assert state.held() == []
    assert state.snapshot().counters["removed"] == 3  # a hash not held removes nothing
    # a clear drops every copy
    state.feed(5, encode([stored(9), stored(9), K.AllBlocksCleared()]))
    assert state.held() == []


def test_the_json_view_names_hashes_as_sent():
    state = WatchState()
    b = b"\xab" * 32
    state.feed(0, encode([stored(5), K.BlockStored([b], 5, [1] * BS, BS, None, None)]))
    state.feed(1, encode([K.BlockStored([b], 5, [1] * BS, BS, None, None)]))
    v = cli.view(state)
    assert v["num_blocks"] == 2
    assert v["counters"] == {"stored": 3, "removed": 0, "cleared": 0, "malformed": 0, "gaps": 0}
    assert v["blocks"] == [
        {"hash": 5, "parent": None, "copies": 1},
        {"hash": b.hex(), "parent": 5, "copies": 2},
    ]
    assert v["chains"][0]["root"] == 5 and v["chains"][0]["blocks"] == 2
    json.dumps(v)  # all of it is JSON


def run_cli(args: list[str], timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "paged", "watch", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_connect_mode_follows_our_publisher_and_prints_one_object(tmp_path):
    port = free_port()
    saved = tmp_path / "watched.jsonl"
    with K.KVEventPublisher(f"tcp://127.0.0.1:{port}") as pub:
        # the replay socket is on PORT+1 by default: everything published before the
        # subscriber joined comes back through it
        pub.publish([stored(1), stored(2, 1)])
        pub.publish([stored(2, 1)])
        pub.publish([K.BlockRemoved([2], "GPU")])
        assert pub.flush()
        out = run_cli([f"tcp://127.0.0.1:{port}", "--seconds", "3", "--json", "--save", str(saved)])
    assert out.returncode == 0, out.stderr
    v = json.loads(out.stdout)
    assert v["blocks"] == [
        {"hash": 1, "parent": None, "copies": 1},
        {"hash": 2, "parent": 1, "copies": 1},
    ]
    assert v["counters"]["stored"] == 3 and v["counters"]["removed"] == 1
    # what was saved is a recording the page reads, and folds to the view printed
    again = WatchState()
    for seq, payload in read_recording(saved.read_text(encoding="utf-8")):
        again.feed(seq, payload)
    assert cli.view(again) == v
    assert not [f for f in tmp_path.iterdir() if f != saved]  # no temporary file left


def test_save_to_a_folder_that_is_not_there_is_one_line(tmp_path):
    out = run_cli(["tcp://127.0.0.1:5557", "--save", str(tmp_path / "no" / "x.jsonl")])
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "--save" in out.stderr and out.stdout == ""


def test_listen_mode_waits_for_a_server_that_connects():
    """vLLM's publisher connects to a ``tcp://127.0.0.1:P`` endpoint: the watcher must bind."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "paged", "watch", f"tcp://127.0.0.1:{port}", "--listen"]
        + ["--replay", "", "--seconds", "3", "--json"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    ctx = zmq.Context()
    try:
        pub = ctx.socket(zmq.PUB)
        pub.setsockopt(zmq.LINGER, 0)
        pub.connect(f"tcp://127.0.0.1:{port}")
        seq = 0
        deadline = time.monotonic() + 60
        # PUB drops until the connection is up and subscribed: send the same store for as long
        # as the watcher runs (its 3 s start once it listens, however slow its start); each is
        # a new batch, so the copies count how many arrived
        while proc.poll() is None and time.monotonic() < deadline:
            pub.send_multipart([b"", K.seq_bytes(seq), encode([stored(3)])])
            seq += 1
            time.sleep(0.05)
        out, err = proc.communicate(timeout=30)
    finally:
        ctx.destroy(linger=0)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    v = json.loads(out)
    assert v["num_blocks"] == 1 and v["blocks"][0]["hash"] == 3
    assert 1 <= v["blocks"][0]["copies"] <= seq


def test_listening_on_a_taken_port_is_one_line():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = run_cli([f"tcp://127.0.0.1:{port}", "--listen", "--seconds", "2"])
    assert out.returncode == 0
    assert "cannot listen on" in out.stdout and "Traceback" not in out.stdout + out.stderr


def test_ctrl_c_prints_the_view_and_exits_0():
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "paged", "watch", f"tcp://127.0.0.1:{port}"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # the signal goes to its group only, as a terminal's would
        # Ctrl-C's default, as in a terminal's foreground: a suite started in the background
        # (`make check &`) hands its children SIGINT ignored, and Python then keeps it so
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    time.sleep(2)
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert "0 blocks held" in out and "Traceback" not in err


def test_bad_addresses_and_arguments_are_one_line():
    for args in (
        ["tcp://10.0.0.1:5557"],
        ["tcp://*:5557", "--listen"],
        ["not-an-address"],
        ["tcp://127.0.0.1:5557", "--replay", "tcp://8.8.8.8:1"],
        ["tcp://127.0.0.1:5557", "--seconds", "-1"],
    ):
        out = run_cli(args)
        assert out.returncode == 2, args
        assert len(out.stderr.strip().splitlines()) == 1, out.stderr
        assert out.stdout == ""
        if "not loopback" in out.stderr:  # this command's own opt-in is named
            assert "--allow-remote" in out.stderr and "--kv-events" not in out.stderr


def test_a_hostile_stream_is_counted_not_folded():
    port = free_port()
    ctx = zmq.Context()
    pub = ctx.socket(zmq.PUB)
    pub.setsockopt(zmq.LINGER, 0)
    pub.bind(f"tcp://127.0.0.1:{port}")
    stop = threading.Event()

    def flood() -> None:
        i = 0
        while not stop.is_set():
            pub.send_multipart([b"", K.seq_bytes(i), b"\xc1" * (i % 9 + 1)])
            pub.send_multipart([b"x"] * 5)  # wrong framing
            i += 1
            time.sleep(0.002)

    t = threading.Thread(target=flood)
    t.start()
    try:
        out = run_cli([f"tcp://127.0.0.1:{port}", "--replay", "", "--seconds", "3", "--json"])
    finally:
        stop.set()
        t.join()
        ctx.destroy(linger=0)
    assert out.returncode == 0, out.stderr
    v = json.loads(out.stdout)
    assert v["num_blocks"] == 0 and v["counters"]["malformed"] > 0
    assert v["last_error"] and "\n" not in v["last_error"]
