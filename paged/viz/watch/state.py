"""What a KV-event stream says about a server's prefix cache, folded batch by batch.

Pure Python (no Streamlit, no zmq, no torch): the subscriber thread feeds ``WatchState`` raw
``(seq, payload)`` messages; the watch page reads ``snapshot()``. Everything is bounded: the
blocks tracked (``max_blocks``), the ring of recent raw batches kept for recording (``ring_bytes``)
and the per-second rate history.

vLLM's events carry block hashes, each block's parent hash, its token ids and the block size.
They do not carry physical block ids, which request holds a block, reference counts or block
tables, so nothing here pretends to know them. What they do show is how many physical copies of a
hash the server holds: vLLM can cache one hash in two physical blocks (two requests computed the
same prefix at once) and then sends one store, and later one removal, per copy. Each hash keeps
that count; a removal takes one copy away, and the hash goes only with its last copy.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

import msgspec

from paged.engine.interop.kv_events import (
    MAX_MESSAGE_BYTES,
    InBatch,
    InCleared,
    InRemoved,
    InStored,
    MalformedBatch,
    decode_batch,
)

Hash = int | bytes
PREVIEW_TOKENS = 8  # token ids kept per block (the rest are counted, not stored)
RECORD_FORMAT = "paged-kv/kv-events-jsonl"


def short_hash(h: Hash) -> str:
    """A block hash as 16 hex digits (ints as uint64, bytes by their first 8 bytes)."""
    if isinstance(h, bytes):
        return h[:8].hex()
    return f"{h % (1 << 64):016x}"


@dataclass(frozen=True, slots=True)  # no __dict__: a view holds up to 200k of them
class Block:
    parent: Hash | None
    num_tokens: int
    preview: tuple[int, ...]  # the first PREVIEW_TOKENS token ids
    copies: int = 1  # physical blocks the server reports holding this hash in


@dataclass(frozen=True)
class Chain:
    """One tree of blocks linked by parent hashes: a root (its parent is not held) and every held
    block below it. ``shared`` is how many blocks from the root lie above the deepest branch
    point, the prefix that two or more cached continuations share."""

    root: Hash
    num_blocks: int
    depth: int  # blocks on the longest root-to-leaf path
    leaves: int
    shared: int
    hit_tokens: int  # tokens of the longest hit-ready prefix
    preview: tuple[int, ...]


@dataclass(frozen=True)
class Snapshot:
    """What the page draws: counters, chains (largest first), rates per second."""

    num_blocks: int
    chains: list[Chain]
    nodes: list[tuple[str, str, str]]  # (id, parent id or "", first token ids) for a plot
    rates: list[tuple[int, int, int]]  # (unix second, stored, removed)
    counters: dict[str, int]
    last_error: str
    last_seq: int | None
    block_size: int | None
    last_message_age: float | None
    kept_batches: int = 0  # raw batches in the ring, kept for the recording
    kept_bytes: int = 0  # their size; never more than ``WatchState.ring_bytes`` (bar one batch)
    num_copies: int = 0  # physical blocks behind ``num_blocks`` hashes (more when duplicated)


@dataclass
class WatchState:
    """The folded prefix cache of one server, plus the health of its stream."""

    max_blocks: int = 200_000
    ring_bytes: int = 16 << 20
    max_rate_seconds: int = 120
    max_nodes: int = 400
    blocks: dict[Hash, Block] = field(default_factory=dict)
    ring: deque[tuple[int, bytes]] = field(default_factory=deque)
    rates: deque[list[int]] = field(default_factory=deque)
    counters: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(
            (
                "batches",
                "events",
                "stored",
                "removed",
                "cleared",
                "malformed",
                "gaps",
                "missed",
                "replayed",
                "restarts",
                "untracked",
            ),
            0,
        )
    )
    last_error: str = ""
    last_seq: int | None = None
    block_size: int | None = None
    last_message_at: float | None = None
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _ring_total: int = 0
    _changes: int = 0  # bumped by everything that changes what a snapshot shows
    _drawn: tuple[int, int, float, Snapshot] | None = None  # (changes, top, when, the snapshot)
    _drawing: threading.Lock = field(default_factory=threading.Lock, repr=False)

    # --- sequence numbers -------------------------------------------------------------------

    def classify(self, seq: int) -> str:
        """``ok`` (next in order, or the first seen), ``gap`` (seq jumped ahead: batches were
        missed) or ``restart`` (seq went back: a PUB socket never repeats a seq, so this is a
        new server process counting from 0 again)."""
        if self.last_seq is None or seq == self.last_seq + 1:
            return "ok"
        return "gap" if seq > self.last_seq else "restart"

    def mark_gap(self, missed: int) -> None:
        """Batches that could not be replayed: the view may hold blocks since evicted."""
        with self.lock:
            self._changes += 1
            self.counters["gaps"] += 1
            self.counters["missed"] += max(0, missed)

    def restart(self) -> None:
        """A new server process: its cache starts empty, and so does ours."""
        with self.lock:
            self._changes += 1
            self.counters["restarts"] += 1
            self.blocks.clear()
            self.last_seq = None

    # --- folding ----------------------------------------------------------------------------

    def holds(self, seq: int, payload: bytes, look_back: int = 1024) -> bool:
        """Whether batch ``seq`` with exactly these bytes is among the last ones folded: a live
        copy of a batch already replayed, not a new process counting again."""
        with self.lock:
            for i, (s, p) in enumerate(reversed(self.ring)):
                if i >= look_back or s < seq:
                    return False
                if s == seq:
                    return p == payload
        return False

    def note(self, why: str) -> None:
        """Something the viewer must know that no message caused (``last_error``, one line)."""
        with self.lock:
            self._changes += 1
            self.last_error = why[:200]

    def malformed(self, why: str) -> None:
        with self.lock:
            self._changes += 1
            self.counters["malformed"] += 1
            self.last_error = why[:200]

    def feed(
        self, seq: int, payload: bytes, now: float | None = None, replayed: bool = False
    ) -> bool:
        """Decode and fold one batch. A malformed one is counted and changes nothing else (not
        even the sequence number: garbage cannot fake a gap or a restart). Returns whether it
        was applied."""
        try:
            batch = decode_batch(payload)
        except MalformedBatch as e:
            self.malformed(f"seq {seq}: {e}")
            return False
        self.apply(seq, batch, payload, now, replayed)
        return True

    def apply(
        self,
        seq: int,
        batch: InBatch,
        payload: bytes,
        now: float | None = None,
        replayed: bool = False,
    ) -> None:
        """Fold a batch already decoded from ``payload`` (kept in the ring for recording)."""
        with self.lock:
            self._changes += 1
            self._apply(batch, int(time.time() if now is None else now))
            self.last_seq = seq
            self.last_message_at = time.monotonic()
            self.counters["replayed" if replayed else "batches"] += 1
            self._remember(seq, payload)

    def _apply(self, batch: InBatch, second: int) -> None:
        stored = removed = 0
        for ev in batch.events:
            match ev:
                case InStored():
                    stored += self._store(ev)
                case InRemoved():
                    for h in ev.block_hashes:
                        removed += self._remove(h)
                case InCleared():
                    self.counters["cleared"] += 1
                    self.blocks.clear()
        self.counters["events"] += len(batch.events)
        self.counters["stored"] += stored
        self.counters["removed"] += removed
        self._rate(second, stored, removed)

    def _remove(self, h: Hash) -> bool:
        b = self.blocks.get(h)
        if b is None:
            return False
        if b.copies > 1:
            self.blocks[h] = replace(b, copies=b.copies - 1)
        else:
            del self.blocks[h]
        return True

    def _store(self, ev: InStored) -> int:
        self.block_size = ev.block_size
        parent, n = ev.parent_block_hash, 0
        for i, h in enumerate(ev.block_hashes):
            toks = ev.token_ids[i * ev.block_size : (i + 1) * ev.block_size]
            old = self.blocks.get(h)
            if old is not None or len(self.blocks) < self.max_blocks:
                # a hash stored again while held is a second physical copy (the count is an int:
                # a stream repeating one store cannot grow memory)
                copies = 1 if old is None else old.copies + 1
                self.blocks[h] = Block(parent, len(toks), tuple(toks[:PREVIEW_TOKENS]), copies)
                n += 1
            else:
                self.counters["untracked"] += 1
            parent = h
        return n

    def _rate(self, second: int, stored: int, removed: int) -> None:
        if self.rates and self.rates[-1][0] == second:
            self.rates[-1][1] += stored
            self.rates[-1][2] += removed
        else:
            self.rates.append([second, stored, removed])
            while len(self.rates) > self.max_rate_seconds:
                self.rates.popleft()

    def _remember(self, seq: int, payload: bytes) -> None:
        self.ring.append((seq, payload))
        self._ring_total += len(payload)
        while self._ring_total > self.ring_bytes and len(self.ring) > 1:
            self._ring_total -= len(self.ring.popleft()[1])

    # --- reading ----------------------------------------------------------------------------

    def held(self) -> list[tuple[Hash, Hash | None, int]]:
        """Every hash held, as ``(hash, parent, copies)``, in the order first stored."""
        with self.lock:
            return [(h, b.parent, b.copies) for h, b in self.blocks.items()]

    def snapshot(self, top: int = 50, max_age: float = 0.0) -> Snapshot:
        """What the page draws. Drawing the chains of 200k blocks takes most of a second, and
        every session watching this server asks once a second: a snapshot is drawn once per
        change of state and reused by every reader until then, or, with ``max_age``, for up to
        that many seconds after it was drawn, changes or not (the page, which redraws every
        second, passes most of a second). Only the message age is always new."""
        with self._drawing:  # one reader draws; the others wait and take its snapshot
            with self.lock:
                changes = self._changes
            drawn = self._drawn
            now = time.monotonic()
            if (
                drawn is None
                or drawn[1] != top
                or (drawn[0] != changes and now - drawn[2] >= max_age)
            ):
                drawn = self._drawn = self._draw(top, now)
        with self.lock:
            age = None if self.last_message_at is None else time.monotonic() - self.last_message_at
        return replace(drawn[3], last_message_age=age)

    def _draw(self, top: int, now: float) -> tuple[int, int, float, Snapshot]:
        """A drawing tagged with the change it shows (taken with the copy, under one lock) and
        ``now``; its message age is left for ``snapshot`` to fill in."""
        with self.lock:
            changes = self._changes
            blocks = dict(self.blocks)
            rates = [(s, a, b) for s, a, b in self.rates]
            counters = dict(self.counters)
            last_error, last_seq, bs = self.last_error, self.last_seq, self.block_size
            kept = (len(self.ring), self._ring_total)
        chains, nodes = _chains(blocks, top, self.max_nodes)
        copies = sum(b.copies for b in blocks.values())
        snap = Snapshot(
            len(blocks),
            chains,
            nodes,
            rates,
            counters,
            last_error,
            last_seq,
            bs,
            None,
            *kept,
            num_copies=copies,
        )
        return changes, top, now, snap

    def recording(self, max_bytes: int | None = None) -> list[str]:
        """The ring as JSONL lines: a header, then one ``{"seq", "batch"}`` per batch. With
        ``max_bytes``, only the newest batches whose lines (and newlines) fit in it: a download
        the page's own upload limit refused could never be opened again."""
        with self.lock:
            ring = list(self.ring)
        head = msgspec.json.encode({"format": RECORD_FORMAT, "version": 1}).decode()
        room = None if max_bytes is None else max_bytes - len(head) - 1
        lines: list[str] = []
        for seq, payload in reversed(ring):
            try:
                batch = decode_batch(payload)
            except MalformedBatch:  # pragma: no cover - only decoded batches enter the ring
                continue
            raw = msgspec.json.encode(_Line(seq, batch))
            if room is not None:
                room -= len(raw) + 1
                if room < 0:
                    break
            lines.append(raw.decode())
        return [head, *reversed(lines)]


class _Line(msgspec.Struct):
    seq: int
    batch: InBatch


class _Header(msgspec.Struct):
    format: str
    version: int


class RecordingError(ValueError):
    """A recording file is not a KV-event JSONL recording (one line saying why)."""


_LINE = msgspec.json.Decoder(_Line)
MAX_RECORDING_BYTES = 64 << 20
MAX_RECORDING_LINES = 100_000
#: What a replay holds beside its batches' bytes, from above: measured with tracemalloc
#: (recordings up to 8 MB folded), about 150 B per batch and 450 to 520 B per block held.
BATCH_OVERHEAD = 512
BLOCK_BYTES = 640
STATE_BYTES = 64 << 10  # the rest of a fold: counters, the per-second rates


def read_recording(text: str) -> list[tuple[int, bytes]]:
    """Parse a recording back into ``(seq, msgpack payload)`` pairs, ready for ``feed``. Every
    line is decoded strictly; RecordingError names the first bad one."""
    if len(text) > MAX_RECORDING_BYTES:
        raise RecordingError(f"recording is larger than {MAX_RECORDING_BYTES >> 20} MiB")
    # newlines only: a string in a batch (a medium, say) may hold U+2028 or U+0085, which JSON
    # leaves as they are and str.splitlines cuts at, so the page's own download would not open
    lines = [line.removesuffix("\r") for line in text.split("\n")]
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines:
        raise RecordingError("recording is empty")
    try:
        head = msgspec.json.decode(lines[0], type=_Header)
    except (msgspec.DecodeError, msgspec.ValidationError):
        head = None
    if head is None or head.format != RECORD_FORMAT or head.version != 1:
        raise RecordingError(
            f"not a KV-event recording (its first line is no {RECORD_FORMAT} header)"
        )
    if len(lines) > MAX_RECORDING_LINES + 1:
        raise RecordingError(f"recording holds more than {MAX_RECORDING_LINES} batches")
    out = []
    enc = msgspec.msgpack.Encoder()
    for i, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        if len(line) > MAX_MESSAGE_BYTES:
            raise RecordingError(f"line {i} is longer than {MAX_MESSAGE_BYTES} bytes")
        try:
            rec = _LINE.decode(line)
            payload = enc.encode(rec.batch)
            decode_batch(payload)  # the same bounds as the wire
        except (msgspec.DecodeError, msgspec.ValidationError, MalformedBatch) as e:
            raise RecordingError(f"line {i}: {str(e).splitlines()[0][:160]}") from None
        out.append((rec.seq, payload))
    return out


def fold(messages: Iterable[tuple[int, bytes]], upto: int | None = None) -> WatchState:
    """A fresh state with the first ``upto`` recorded batches applied (all when None), each at
    its own timestamp: what the player shows at that step."""
    replay = Replay(list(messages))
    return replay.at(len(replay.messages) if upto is None else upto)


class Replay:
    """A recording's batches folded up to a step, for a player: a step forward folds only the
    batches it adds (a recording holds up to ~100k, and the page's slider asked for all of them
    again on every move); a step back folds again from the start."""

    def __init__(self, messages: list[tuple[int, bytes]]) -> None:
        self.messages = messages
        self._state, self._done = WatchState(), 0

    def held_bytes(self) -> int:
        """The most this replay holds at any step, from above: its batches, and as many
        blocks as the whole recording stores (a fold to its end counts them), at most the
        fold's ``max_blocks``. Folds forward to the end."""
        full = self.at(len(self.messages))
        blocks = min(full.max_blocks, full.counters["stored"])
        batches = sum(len(p) + BATCH_OVERHEAD for _, p in self.messages)
        return batches + blocks * BLOCK_BYTES + STATE_BYTES

    def at(self, upto: int) -> WatchState:
        upto = max(0, min(upto, len(self.messages)))
        if upto < self._done:
            self._state, self._done = WatchState(), 0
        state = self._state
        while self._done < upto:
            seq, payload = self.messages[self._done]
            self._done += 1  # counted first: a batch that raised is never folded twice
            if state.classify(seq) == "restart":
                state.restart()
            try:
                batch = decode_batch(payload)
            except MalformedBatch as e:
                state.malformed(f"seq {seq}: {e}")
                continue
            state.apply(seq, batch, payload, now=batch.ts)
        return state


def _chains(
    blocks: dict[Hash, Block], top: int, max_nodes: int
) -> tuple[list[Chain], list[tuple[str, str, str]]]:
    children: dict[Hash, list[Hash]] = {}
    roots = []
    for h, b in blocks.items():
        if b.parent is not None and b.parent in blocks and b.parent != h:
            children.setdefault(b.parent, []).append(h)
        else:
            roots.append(h)
    sizes: dict[Hash, int] = {}
    chains = []
    for r in roots:
        chains.append(_chain(r, blocks, children, sizes))
    chains.sort(key=lambda c: (-c.num_blocks, -c.depth, short_hash(c.root)))
    nodes: list[tuple[str, str, str]] = []
    used: set[str] = set()
    for c in chains[:top]:
        stack: list[tuple[Hash, str]] = [(c.root, "")]
        while stack and len(nodes) < max_nodes:
            h, parent_id = stack.pop()
            nid = short_hash(h)
            if nid in used:  # two hashes alike in 16 hex digits: plotly needs distinct ids
                nid = f"{nid}~{len(nodes)}"
            used.add(nid)
            nodes.append((nid, parent_id, " ".join(str(t) for t in blocks[h].preview)))
            stack.extend((k, nid) for k in children.get(h, ()))
    return chains[:top], nodes


def _chain(
    root: Hash, blocks: dict[Hash, Block], children: dict[Hash, list[Hash]], sizes: dict[Hash, int]
) -> Chain:
    """Walk one tree iteratively (a hostile stream may build chains deeper than the stack).
    Every block has one parent, so what hangs below a root is a tree; blocks whose parent links
    form a cycle have no root and are never reached."""
    order: list[tuple[Hash, int]] = []
    stack = [(root, 1)]
    while stack:
        h, d = stack.pop()
        order.append((h, d))
        stack.extend((k, d + 1) for k in children.get(h, ()))
    below: dict[Hash, int] = {}  # tokens on the longest path from a block down
    leaves = shared = 0
    for h, d in reversed(order):
        kids = children.get(h, ())
        sizes[h] = 1 + sum(sizes[k] for k in kids)
        below[h] = blocks[h].num_tokens + max((below[k] for k in kids), default=0)
        leaves += not kids
        if len(kids) > 1:
            shared = max(shared, d)
    return Chain(
        root,
        len(order),
        max(d for _, d in order),
        leaves,
        shared,
        below[root],
        blocks[root].preview,
    )
