"""The watch page's /metrics poller against a stand-in vLLM HTTP server on loopback: the five
names read (``_total`` counters, several label sets), and everything else a server may answer
(no metrics, a 404, a redirect, an endless body, a stall) is one line, within bounds."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from paged.engine.interop.kv_events import EndpointError
from paged.viz.watch import metrics as M

VLLM_METRICS = """\
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="smollm2"} 0.25
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="smollm2"} %(queries)s
vllm:prefix_cache_hits_total{engine="0",model_name="smollm2"} %(hits)s
vllm:num_requests_running{engine="0",model_name="smollm2"} 3.0
vllm:num_requests_running{engine="1",model_name="smollm2"} 1.0
vllm:num_requests_waiting{engine="0",model_name="smollm2"} 2.0
vllm:num_requests_waiting_by_reason{engine="0",reason="capacity"} 99.0
vllm:kv_cache_usage_perc{engine="1",model_name="smollm2"} NaN
python_gc_objects_collected_total{generation="0"} 1234.0
"""


class Handler(BaseHTTPRequestHandler):
    counter = [0]
    mode = "vllm"

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        mode = self.server.mode  # type: ignore[attr-defined]
        if mode == "404" or (mode == "vllm" and self.path != "/metrics"):
            self.send_error(404)
            return
        if mode == "redirect":
            self.send_response(302)
            self.send_header("Location", "http://10.0.0.1/metrics")
            self.end_headers()
            return
        if mode == "stall":
            time.sleep(M.TIMEOUT_S + 1)
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        if mode == "flood":
            with contextlib.suppress(OSError):
                for _ in range(64):
                    self.wfile.write(b"vllm:num_requests_running 1\n" * 40_000)
            return
        if mode == "other":
            self.wfile.write(b"python_info 1\n# nothing of vLLM's here\n")
            return
        self.server.polls += 1  # type: ignore[attr-defined]
        n = self.server.polls  # type: ignore[attr-defined]
        with contextlib.suppress(OSError):  # a poller stopped mid-answer
            self.wfile.write((VLLM_METRICS % {"queries": 100.0 * n, "hits": 40.0 * n}).encode())


@contextmanager
def stand_in(mode: str = "vllm") -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.mode = mode  # type: ignore[attr-defined]
    server.polls = 0  # type: ignore[attr-defined]
    server.daemon_threads = True
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_reads_vllms_names_summed_over_engines():
    with stand_in() as base:
        url = M.parse_metrics_url(base)
        assert url == base + "/metrics"
        v = M.fetch(url).values
    assert v == {
        M.USAGE: 0.25,  # the NaN series is dropped, not averaged in
        M.QUERIES: 100.0,
        M.HITS: 40.0,
        M.RUNNING: 4.0,
        M.WAITING: 2.0,
    }


def test_the_poller_keeps_samples_and_a_hit_rate():
    with stand_in() as base:
        p = M.MetricsPoller(M.parse_metrics_url(base))
        p.poll_once()
        assert p.latest()[1] is None  # one sample: no rate yet
        p.poll_once()
    now, rate = p.latest()
    assert now is not None and now.values[M.QUERIES] == 200.0
    assert rate == pytest.approx(0.4)
    assert p.last_error == ""


@pytest.mark.parametrize(
    ("mode", "says"),
    [
        ("404", "HTTP 404"),
        ("redirect", "HTTP 302"),
        ("other", "none of vLLM's metrics"),
        ("flood", "more than"),
        ("stall", "cannot read"),
    ],
)
def test_a_server_without_metrics_is_one_line(mode, says):
    with stand_in(mode) as base:
        p = M.MetricsPoller(M.parse_metrics_url(base))
        began = time.monotonic()
        p.poll_once()
        took = time.monotonic() - began
    assert says in p.last_error and "\n" not in p.last_error
    assert len(p.last_error) < 300 and not p.samples
    assert took < M.TIMEOUT_S + 1.5


def test_nothing_listening_is_one_line():
    with stand_in() as base:
        pass  # closed: its port now refuses
    p = M.MetricsPoller(M.parse_metrics_url(base))
    p.poll_once()
    assert p.last_error.startswith("cannot read") and "\n" not in p.last_error


@pytest.mark.parametrize(
    "url",
    [
        "http://10.0.0.1:8000",
        "http://example.com:8000/metrics",
        "http://[2001:db8::1]:8000",
    ],
)
def test_a_remote_metrics_address_needs_the_opt_in(url):
    with pytest.raises(EndpointError, match="not loopback"):
        M.parse_metrics_url(url)
    assert M.parse_metrics_url(url, allow_remote=True).startswith("http://")


@pytest.mark.parametrize(
    "url",
    [
        "",
        "ftp://127.0.0.1/metrics",
        "file:///etc/passwd",
        "http://user:pw@127.0.0.1:8000",
        "http://127.0.0.1:8000/metrics?x=1",
        "http://127.0.0.1:99999",
        "http://127.0.0.1:8000/\nmetrics",
        "127.0.0.1:8000",
        "http://" + "a" * 400,
    ],
)
def test_malformed_metrics_addresses(url):
    with pytest.raises(EndpointError):
        M.parse_metrics_url(url, allow_remote=True)


def test_loopback_forms_are_accepted():
    assert M.parse_metrics_url("http://localhost:8000") == "http://localhost:8000/metrics"
    assert M.parse_metrics_url("http://[::1]:8000/") == "http://[::1]:8000/metrics"
    assert M.parse_metrics_url("http://127.0.0.2:8000/m") == "http://127.0.0.2:8000/m"


def test_the_subscriber_polls_metrics_beside_its_events():
    from paged.viz.watch.subscriber import Subscriber, SubscriberConfig

    with stand_in() as base:
        sub = Subscriber(
            SubscriberConfig("tcp://127.0.0.1:5", replay_endpoint="", metrics_url=base)
        )
        assert sub.metrics is not None
        sub.start()
        try:
            deadline = time.monotonic() + 10
            while len(sub.metrics.samples) < 2 and time.monotonic() < deadline:
                time.sleep(0.1)
        finally:
            sub.stop()
    assert len(sub.metrics.samples) >= 2
    with pytest.raises(EndpointError):
        Subscriber(SubscriberConfig("tcp://127.0.0.1:5", metrics_url="http://10.0.0.1:8000"))


def test_a_failing_metrics_address_is_asked_ever_less_often(monkeypatch):
    """Polled every 2 s whatever it answered, a port with nothing (or no HTTP server) behind it
    was asked 30 times a minute for as long as the page watched: the wait doubles while polls
    fail, up to 30 s, and is 2 s again after one that brought a sample."""
    answers = iter([False] * 6 + [True, False])
    waits: list[float] = []
    poller = M.MetricsPoller("http://127.0.0.1:9/metrics")
    monkeypatch.setattr(poller, "poll_once", lambda: next(answers))

    class Stop:
        def is_set(self) -> bool:
            return len(waits) >= 8

        def wait(self, timeout: float) -> bool:
            waits.append(timeout)
            return self.is_set()

    poller._stop = Stop()  # type: ignore[assignment]
    poller._run()
    assert waits == [4, 8, 16, 30, 30, 30, 2, 4]
