"""The watch page's subscriber and fold without a browser:

    python -m paged watch ENDPOINT [--replay EP] [--topic T] [--seconds S] [--json] [--listen]
                                 [--metrics http://HOST:PORT] [--save FILE]

Follows a KV-event stream (vLLM's or our engine's) exactly as the page does, and on Ctrl-C or
after S seconds prints what it folded and exits 0. ``--json`` prints one object: ``num_blocks``,
``counters`` (stored, removed, cleared, malformed, gaps), ``chains`` (largest first) and
``blocks``, each ``{"hash", "parent", "copies"}`` with hashes as sent (an int, or the hex of
bytes). ``--listen`` binds ENDPOINT and waits for the server to connect: what vLLM's publisher
does unless its endpoint holds ``*`` or ``::``. ``--metrics`` polls the server's Prometheus
``/metrics`` beside the events (``metrics`` in the JSON: the last sample's ``values``, the names
whose value was out of range as ``invalid``, and the last poll's ``error``, "" when it worked).
The JSON is always strict JSON. ``--save FILE`` also writes what was watched as a recording the
watch page opens (its Recording tab): the newest batches that fit the page's upload limit. A bad
address is one line and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

from paged.engine.interop.kv_events import EndpointError
from paged.viz import safe
from paged.viz.watch.state import Hash, Snapshot, WatchState, short_hash
from paged.viz.watch.subscriber import Subscriber, SubscriberConfig

COUNTERS = ("stored", "removed", "cleared", "malformed", "gaps")
TEXT_CHAINS = 10  # chains listed in the text view


def _hash(h: Hash | None) -> int | str | None:
    return h.hex() if isinstance(h, bytes) else h


def view(state: WatchState, top: int = 50) -> dict[str, Any]:
    """The folded state as the ``--json`` object."""
    snap = state.snapshot(top=top)
    return {
        "num_blocks": snap.num_blocks,
        "num_copies": snap.num_copies,
        "counters": {k: snap.counters[k] for k in COUNTERS},
        "chains": [
            {
                "root": _hash(c.root),
                "blocks": c.num_blocks,
                "depth": c.depth,
                "leaves": c.leaves,
                "shared": c.shared,
                "hit_tokens": c.hit_tokens,
            }
            for c in snap.chains
        ],
        "blocks": [{"hash": _hash(h), "parent": _hash(p), "copies": n} for h, p, n in state.held()],
        "last_error": snap.last_error,
    }


def text(snap: Snapshot, url: str) -> str:
    c = snap.counters
    lines = [
        f"{url}: {snap.num_blocks:,} blocks held ({snap.num_copies:,} physical copies) "
        f"in {len(snap.chains):,} chains",
        ", ".join(f"{c[k]:,} {k}" for k in COUNTERS),
    ]
    for ch in snap.chains[:TEXT_CHAINS]:
        lines.append(
            f"  chain {short_hash(ch.root)}: {ch.num_blocks} blocks, depth {ch.depth}, "
            f"{ch.leaves} leaves, {ch.hit_tokens} hit-ready tokens"
        )
    if snap.last_error:
        lines.append(f"last error: {snap.last_error}")
    return "\n".join(lines)


def _one_line(e: EndpointError, config: SubscriberConfig) -> str:
    """The error in this command's terms: its opt-in is ``--allow-remote``."""
    if not config.allow_remote:
        try:
            Subscriber(replace(config, allow_remote=True))
        except EndpointError:
            pass
        else:
            return f"{str(e).split(' is not loopback')[0]} is not loopback; pass --allow-remote to watch beyond this machine"
    return str(e).splitlines()[0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m paged watch", description=__doc__.split("\n")[0])
    ap.add_argument("endpoint", help="tcp://HOST:PORT of the server's KV-event PUB socket")
    ap.add_argument("--replay", default=None, help="replay address (default: PORT+1; '' for none)")
    ap.add_argument("--topic", default="", help="topic to subscribe to (default: all)")
    ap.add_argument("--seconds", type=float, default=None, help="stop after this many seconds")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument(
        "--listen", action="store_true", help="bind ENDPOINT; the server connects (vLLM's default)"
    )
    ap.add_argument("--metrics", default=None, help="the server's HTTP address, for /metrics")
    ap.add_argument(
        "--allow-remote", action="store_true", help="allow an address beyond this machine"
    )
    ap.add_argument("--save", type=Path, help="also write what was watched as a recording")
    args = ap.parse_args(argv)
    if args.save is not None and not args.save.parent.is_dir():
        print(f"--save: no folder {str(args.save.parent)[:200]!r}", file=sys.stderr)
        return 2
    if args.seconds is not None and not 0 < args.seconds <= 7 * 24 * 3600:
        print("--seconds must be above 0 and at most a week", file=sys.stderr)
        return 2
    if len(args.topic) > 256:
        print("--topic is longer than 256 characters", file=sys.stderr)
        return 2
    config = SubscriberConfig(
        args.endpoint,
        replay_endpoint=args.replay,
        topic=args.topic,
        allow_remote=args.allow_remote,
        listen=args.listen,
        metrics_url=args.metrics,
    )
    try:
        sub = Subscriber(config)
    except EndpointError as e:
        print(_one_line(e, config), file=sys.stderr)
        return 2
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    sub.start()
    try:
        done.wait(args.seconds)
    except KeyboardInterrupt:
        pass
    finally:
        sub.stop()
    if args.save is not None and not _save(sub.state, args.save):
        return 2
    m = sub.metrics
    sample = None if m is None else m.latest()[0]
    if args.json:
        out = view(sub.state)
        if m is not None:
            out["metrics"] = {
                "values": sample and sample.values,
                "invalid": sorted(sample.invalid) if sample else [],
                "error": m.last_error,
            }
        # strict: a number JSON cannot hold is a bug to see, never a token like Infinity
        print(json.dumps(out, allow_nan=False))
    else:
        print(text(sub.state.snapshot(), sub.url))
        if m is not None:
            got = sample and ", ".join(
                [f"{k} {v:g}" for k, v in sorted(sample.values.items())]
                + [f"{k} invalid" for k in sorted(sample.invalid)]
            )
            print(f"metrics: {got or 'no answer yet'}")
            if m.last_error:
                print(f"metrics error: {m.last_error}")
    return 0


def _save(state: WatchState, path: Path) -> bool:
    """Write the recording whole or not at all (a temporary file beside it, renamed in); one line
    on stderr where that fails."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text("\n".join(state.recording(safe.UPLOAD_BYTES)) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        print(f"--save: could not write {str(path)[:200]!r}: {e.strerror or e}", file=sys.stderr)
        return False
    return True


if __name__ == "__main__":
    sys.exit(main())
