"""A /metrics server that is hostile rather than merely absent: an answer that is not HTTP, a
server that sends one byte at a time, values no real vLLM could report. Each is one line, the
poll ends by its deadline, polling goes on, and ``--json`` stays strict JSON."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress

import pytest

from paged.viz.watch import metrics as M

OK = b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n"


@contextmanager
def raw_server(answer: Callable[[socket.socket], None]) -> Iterator[str]:
    """A loopback TCP server that hands each connection to ``answer`` and closes it."""
    srv = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        srv.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            with conn, suppress(OSError):
                conn.recv(4096)
                answer(conn)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.getsockname()[1]}/metrics"
    finally:
        stop.set()
        t.join(5)
        srv.close()


def random_bytes(conn: socket.socket) -> None:
    conn.sendall(os.urandom(3000))


def many_headers(conn: socket.socket) -> None:
    conn.sendall(
        b"HTTP/1.0 200 OK\r\n" + b"X-A: b\r\n" * 150 + b"\r\nvllm:num_requests_running 1\n"
    )


def drip(conn: socket.socket) -> None:
    """One byte every 0.3 s, each well within a per-recv timeout, the whole far beyond it."""
    for byte in OK + b"vllm:num_requests_running 1\n":
        conn.sendall(bytes([byte]))
        time.sleep(0.3)


@pytest.mark.parametrize("answer", [random_bytes, many_headers], ids=["random", "headers"])
def test_an_answer_that_is_not_http_is_one_line_and_polling_goes_on(answer):
    with raw_server(answer) as url:
        p = M.MetricsPoller(url, interval=1.0).start()
        try:
            deadline = time.monotonic() + 8
            while p.polls < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            p.stop()
    assert p.polls >= 2, "the poller thread died on the first answer"
    assert "not HTTP" in p.last_error and "\n" not in p.last_error
    assert not p.samples


def test_a_slow_drip_ends_at_the_deadline_for_the_whole_request():
    with raw_server(drip) as url:
        began = time.monotonic()
        with pytest.raises(M.MetricsError, match="within 1 s"):
            M.fetch(url, timeout=1.0)
        took = time.monotonic() - began
    assert took < 1.5


def serve_text(body: bytes) -> Callable[[socket.socket], None]:
    return lambda conn: conn.sendall(OK + body)


def test_values_outside_their_range_are_invalid_never_numbers():
    body = (
        b"vllm:kv_cache_usage_perc 1e300\n"
        b"vllm:num_requests_running -5\n"
        b"vllm:num_requests_waiting 2.5\n"
        b"vllm:prefix_cache_queries_total 1e308\n"
        b"vllm:prefix_cache_queries_total 1e308\n"
        b"vllm:prefix_cache_hits_total 12\n"
    )
    with raw_server(serve_text(body)) as url:
        s = M.fetch(url)
    assert s.values == {M.HITS: 12.0}
    assert s.invalid == {M.USAGE, M.RUNNING, M.WAITING, M.QUERIES}


def test_series_that_are_each_fine_but_overflow_together_are_invalid():
    s = M.parse(
        'vllm:num_requests_running{engine="0"} 6e15\nvllm:num_requests_running{engine="1"} 6e15\n'
        'vllm:kv_cache_usage_perc{model_name="a}b\\"c"} 0.5\n'
    )
    assert s.invalid == {M.RUNNING}
    assert s.values == {M.USAGE: 0.5}  # a label value holding } and \" is still read


def test_watch_json_is_strict_json_whatever_the_server_sends(capsys):
    from paged.viz.watch.__main__ import main

    body = b"vllm:prefix_cache_hits_total 1e308\nvllm:prefix_cache_hits_total 1e308\n"
    with raw_server(serve_text(body)) as url:
        rc = main(
            ["tcp://127.0.0.1:5", "--replay", "", "--metrics", url, "--seconds", "1.5", "--json"]
        )
    out = capsys.readouterr().out
    assert rc == 0
    got = json.loads(out, parse_constant=lambda c: pytest.fail(f"non-JSON token {c}"))
    assert got["metrics"]["invalid"] == [M.HITS]
    assert got["metrics"]["values"] == {}
