"""The server's Prometheus ``/metrics`` beside its KV events: cache usage, prefix-cache queries
and hits, running and waiting requests, polled in a background thread.

Names as vLLM 0.32 exposes them: ``vllm:kv_cache_usage_perc`` (a fraction, 0 to 1),
``vllm:prefix_cache_queries`` and ``vllm:prefix_cache_hits`` (counters, in tokens; the client
library appends ``_total``), ``vllm:num_requests_running`` and ``vllm:num_requests_waiting``.
Series of one name (one per engine or model label) are summed, the usage averaged.

The response is hostile data: at most ``MAX_BYTES`` are read, the whole request (connect to last
byte) within ``TIMEOUT_S``, no redirect is followed and no proxy is used, only those names are
kept, a value outside its name's range is marked invalid, and a bad answer, HTTP or not, is one
line in ``last_error`` while polling goes on. The address follows the KV endpoint's rules:
loopback unless opted in.

The exposition is read line by line here rather than by ``prometheus_client``'s parser: that
library is not among our dependencies, and its parser rejects the whole answer at its first
malformed line, where a line we cannot read should cost only that line.

No torch, no Streamlit, no zmq.
"""

from __future__ import annotations

import ipaddress
import math
import re
import threading
import time
from collections import deque
from dataclasses import dataclass
from urllib.parse import urlsplit

from paged.engine.interop.kv_events import EndpointError
from paged.viz.watch import http_get

USAGE = "vllm:kv_cache_usage_perc"
QUERIES = "vllm:prefix_cache_queries"
HITS = "vllm:prefix_cache_hits"
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
NAMES = (USAGE, QUERIES, HITS, RUNNING, WAITING)

MAX_BYTES = 2 << 20  # one /metrics answer; vLLM's is tens of kB
TIMEOUT_S = 2.0
MIN_INTERVAL_S = 1.0
MAX_WAIT_S = 30.0  # the wait between polls doubles while they fail, up to this
HISTORY = 600  # samples kept (ten minutes at one a second)
MAX_LINE = 4096

# a label value may hold ``}`` or an escaped quote; the alternatives never overlap, so no backtracking
_LINE = re.compile(
    r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[^"}]|"(?:[^"\\]|\\.)*")*\})?\s+(\S+)(\s+\S+)?$'
)


def parse_metrics_url(text: str, allow_remote: bool = False) -> str:
    """``http://HOST:PORT`` (the server's HTTP address; ``/metrics`` is appended when no path
    is given) or the full ``http://HOST:PORT/metrics``. Raises EndpointError (one line)."""
    text = text.strip() if isinstance(text, str) else ""
    if not text or len(text) > 300 or any(c.isspace() or ord(c) < 32 for c in text):
        raise EndpointError(
            f"metrics address must look like http://127.0.0.1:8000, not {text[:80]!r}"
        )
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        parts, port = None, None
    if (
        parts is None
        or parts.scheme not in ("http", "https")
        or not parts.hostname
        or parts.username is not None
        or parts.password is not None
        or parts.query
        or parts.fragment
    ):
        raise EndpointError(
            f"metrics address must look like http://127.0.0.1:8000, not {text[:80]!r}"
        )
    host = parts.hostname
    if not allow_remote and not _loopback(host):
        raise EndpointError(
            f"metrics address {text[:80]} is not loopback; allow an address beyond this "
            "machine first"
        )
    path = parts.path if parts.path not in ("", "/") else "/metrics"
    netloc = f"[{host}]" if ":" in host else host
    return f"{parts.scheme}://{netloc}{f':{port}' if port else ''}{path}"


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class MetricsError(ValueError):
    """A /metrics answer could not be had or read (one line saying why)."""


# what each name can truly be: a usage is a fraction, counters and request counts are whole
# numbers a float still holds exactly; anything else (1e300, -5, a sum that overflowed) is invalid
_EXACT = float(2**53)
_RANGES = {
    USAGE: (0.0, 1.0, False),
    QUERIES: (0.0, _EXACT, False),
    HITS: (0.0, _EXACT, False),
    RUNNING: (0.0, _EXACT, True),
    WAITING: (0.0, _EXACT, True),
}


@dataclass(frozen=True)
class Sample:
    """One poll: the names read, in range (``values``), and those whose value was not
    (``invalid``: shown as such, never as a number)."""

    at: float  # unix seconds
    values: dict[str, float]
    invalid: frozenset[str] = frozenset()

    def hit_rate(self, before: Sample | None) -> float | None:
        """Prefix-cache hits per query between ``before`` and this sample (counters)."""
        if before is None or QUERIES not in self.values or HITS not in self.values:
            return None
        dq = self.values[QUERIES] - before.values.get(QUERIES, 0.0)
        dh = self.values[HITS] - before.values.get(HITS, 0.0)
        return dh / dq if dq > 0 and 0 <= dh <= dq else None


def _in_range(name: str, value: float) -> bool:
    low, high, whole = _RANGES[name]
    return math.isfinite(value) and low <= value <= high and (not whole or value.is_integer())


def parse(text: str) -> Sample:
    """The five names from a Prometheus text exposition; other lines are skipped unread. A NaN
    series (Prometheus's "no value") is left out; a name with any series out of its range, or
    whose series add up out of it, is ``invalid``."""
    sums: dict[str, list[float]] = {}
    invalid: set[str] = set()
    for line in text.split("\n"):
        if not line.startswith("vllm:") or len(line) > MAX_LINE:
            continue
        m = _LINE.match(line.strip())
        if m is None:
            continue
        name = m.group(1).removesuffix("_total")
        if name not in NAMES:
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        if math.isnan(value):
            continue
        if _in_range(name, value):
            sums.setdefault(name, []).append(value)
        else:
            invalid.add(name)
    values = {}
    for name, series in sums.items():
        total = math.fsum(series)
        value = total / len(series) if name == USAGE else total
        if name not in invalid and _in_range(name, value):
            values[name] = value
        else:
            invalid.add(name)
    return Sample(time.time(), values, frozenset(invalid))


def fetch(url: str, timeout: float = TIMEOUT_S, max_bytes: int = MAX_BYTES) -> Sample:
    """One GET of ``url``, all of it within ``timeout`` seconds, at most ``max_bytes``, parsed.
    Raises MetricsError."""
    try:
        body = http_get.get(url, timeout, max_bytes)
    except http_get.GetError as e:
        if str(e).startswith("HTTP "):
            raise MetricsError(f"{url} answered {e}: no metrics there") from None
        if str(e).startswith("more than"):
            raise MetricsError(f"{url} answered {e}") from None
        raise MetricsError(f"cannot read {url}: {e}") from None
    sample = parse(body.decode("utf-8", errors="replace"))
    if not sample.values and not sample.invalid:
        raise MetricsError(f"{url} has none of vLLM's metrics ({', '.join(NAMES)})")
    return sample


class MetricsPoller:
    """A thread that fetches ``url`` every ``interval`` seconds; ``samples`` holds the last
    ``HISTORY``, ``last_error`` the last failure (cleared by the next success)."""

    def __init__(self, url: str, interval: float = 2.0) -> None:
        self.url = url
        self.interval = max(MIN_INTERVAL_S, interval)
        self.samples: deque[Sample] = deque(maxlen=HISTORY)
        self.last_error = ""
        self.polls = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> MetricsPoller:
        self._thread = threading.Thread(target=self._run, name="kv-metrics", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = TIMEOUT_S + 1) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def poll_once(self) -> bool:
        """One fetch; whether it brought a sample. Never raises: whatever went wrong is one
        line in ``last_error`` and the thread polls on."""
        self.polls += 1
        try:
            sample = fetch(self.url)
        except MetricsError as e:
            self.last_error = str(e)
            return False
        except Exception as e:  # a bug of ours must not end polling for good either
            self.last_error = f"cannot read {self.url}: {type(e).__name__}"
            return False
        self.samples.append(sample)
        self.last_error = ""
        return True

    def latest(self) -> tuple[Sample | None, float | None]:
        """The newest sample and the hit rate since the one before it."""
        kept = list(self.samples)[-2:]
        if not kept:
            return None, None
        now = kept[-1]
        return now, now.hit_rate(kept[0] if len(kept) == 2 else None)

    def _run(self) -> None:
        # a failing address (nothing there, or no HTTP server) is asked ever less often
        wait = self.interval
        while not self._stop.is_set():
            wait = self.interval if self.poll_once() else min(2 * wait, MAX_WAIT_S)
            self._stop.wait(wait)
