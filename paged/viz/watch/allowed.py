"""Which addresses the watch page may follow when the app serves a classroom.

Bound to a non-loopback address, the app is reached by anyone on the network, and subscribing
makes the app's server connect out: a visitor free to type any loopback port could scan the
lecturer's machine, telling open, closing and closed ports apart by what the page shows. So in
classroom mode the page follows only what the lecturer allowed when starting the server, in
``PAGED_WATCH_ENDPOINTS`` (read once): a comma-separated list of KV-event addresses
(``tcp://127.0.0.1:5557``, replay on the next port) and metrics addresses
(``http://127.0.0.1:8000``), or ``any`` for every loopback address. Every other address is
refused in the same words, before any socket exists.

No Streamlit, no zmq.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from paged.engine.interop.kv_events import EndpointError, parse_endpoint
from paged.viz.watch.metrics import parse_metrics_url

ENV = "PAGED_WATCH_ENDPOINTS"
ANY = "any"
MAX_ENTRIES = 64


@dataclass(frozen=True)
class Allowed:
    """The lecturer's list, normalised as the subscriber normalises what is typed."""

    events: frozenset[str] = frozenset()
    metrics: frozenset[str] = frozenset()
    any: bool = False

    @classmethod
    def parse(cls, text: str) -> Allowed:
        """Entries that are not loopback addresses are left out, each said in one line on
        stderr (the server's log): the list is the lecturer's, read when the server starts."""
        events: set[str] = set()
        metrics: set[str] = set()
        entries = [e.strip() for e in text.split(",") if e.strip()]
        if ANY in (e.lower() for e in entries):
            return cls(any=True)
        for entry in entries[:MAX_ENTRIES]:
            try:
                if entry.startswith(("http://", "https://")):
                    metrics.add(parse_metrics_url(entry))
                else:
                    events.add(parse_endpoint(entry, allow_remote=False).url)
            except EndpointError as e:
                print(f"{ENV}: {entry[:80]!r} left out: {e}", file=sys.stderr)
        return cls(frozenset(events), frozenset(metrics))

    def permits(self, events_url: str, metrics_url: str | None) -> bool:
        """Whether the page may follow ``events_url`` (and poll ``metrics_url``), both as the
        subscriber normalised them."""
        if self.any:
            return True
        return events_url in self.events and (metrics_url is None or metrics_url in self.metrics)

    def shown(self) -> str:
        """The list as the page names it to whoever was refused ("" when empty)."""
        return ", ".join(sorted(self.events) + sorted(self.metrics))
