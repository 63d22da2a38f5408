"""The server's Prometheus ``/metrics`` beside its KV events: cache usage, prefix-cache queries
and hits, running and waiting requests, polled in a background thread.

Names as vLLM 0.32 exposes them: ``vllm:kv_cache_usage_perc`` (a fraction, 0 to 1),
``vllm:prefix_cache_queries`` and ``vllm:prefix_cache_hits`` (counters, in tokens; the client
library appends ``_total``), ``vllm:num_requests_running`` and ``vllm:num_requests_waiting``.
Series of one name (one per engine or model label) are summed, the usage averaged.

The response is hostile data: at most ``MAX_BYTES`` are read, within ``TIMEOUT_S``, no redirect
is followed and no proxy is used, only those names are kept, and a bad answer is one line in
``last_error``. The address follows the KV endpoint's rules: loopback unless opted in.

No torch, no Streamlit, no zmq.
"""

from __future__ import annotations

import ipaddress
import math
import re
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from dataclasses import dataclass
from urllib.parse import urlsplit

from paged.engine.interop.kv_events import EndpointError

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

_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)(\s+\S+)?$")


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


def parse(text: str) -> dict[str, float]:
    """The five names from a Prometheus text exposition; other lines are skipped unread."""
    sums: dict[str, list[float]] = {}
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
        if math.isfinite(value):
            sums.setdefault(name, []).append(value)
    out = {}
    for name, values in sums.items():
        out[name] = sum(values) / len(values) if name == USAGE else sum(values)
    return out


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None  # a redirect could lead anywhere: the address asked for is the one read


_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect())


def fetch(url: str, timeout: float = TIMEOUT_S, max_bytes: int = MAX_BYTES) -> dict[str, float]:
    """One GET of ``url``, read up to ``max_bytes`` and parsed. Raises MetricsError."""
    try:
        with _OPENER.open(url, timeout=timeout) as resp:
            body = resp.read(max_bytes + 1)
    except urllib.error.HTTPError as e:
        raise MetricsError(f"{url} answered HTTP {e.code}: no metrics there") from None
    except (urllib.error.URLError, OSError, ValueError) as e:
        why = getattr(e, "reason", e)
        raise MetricsError(f"cannot read {url}: {str(why).splitlines()[0][:160]}") from None
    if len(body) > max_bytes:
        raise MetricsError(f"{url} answered more than {max_bytes >> 20} MiB")
    values = parse(body.decode("utf-8", errors="replace"))
    if not values:
        raise MetricsError(f"{url} has none of vLLM's metrics ({', '.join(NAMES)})")
    return values


@dataclass(frozen=True)
class Sample:
    at: float  # unix seconds
    values: dict[str, float]

    def hit_rate(self, before: Sample | None) -> float | None:
        """Prefix-cache hits per query between ``before`` and this sample (counters)."""
        if before is None or QUERIES not in self.values or HITS not in self.values:
            return None
        dq = self.values[QUERIES] - before.values.get(QUERIES, 0.0)
        dh = self.values[HITS] - before.values.get(HITS, 0.0)
        return dh / dq if dq > 0 and 0 <= dh <= dq else None


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
        """One fetch; whether it brought a sample."""
        self.polls += 1
        try:
            values = fetch(self.url)
        except MetricsError as e:
            self.last_error = str(e)
            return False
        self.samples.append(Sample(time.time(), values))
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
