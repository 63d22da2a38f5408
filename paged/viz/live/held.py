"""Folded and drawn lessons the server holds for its sessions, bounded by bytes.

A fold and a drawing of a large trace take seconds of CPU and a few hundred MB while they run,
so ``Held.get`` makes one at a time over the whole server (``gate``, shared by every ``Held``):
a caller that finds the gate taken is told (``waiting``) and waits its turn, then finds what
another session made meanwhile instead of making it again. What is kept is counted in bytes
(``lesson_bytes``, ``payload_bytes``) and the least recently used goes first past
``max_bytes``. An entry may name its owners (session ids): once none of them is alive
(``alive``, checked every ``REAP_INTERVAL_S`` seconds) it is dropped. Each release hands the
freed memory back to the system (glibc keeps it otherwise). No Streamlit here.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from paged.viz import safe
from paged.viz.fold.lesson import Lesson
from paged.viz.watch.held import give_back_memory

#: What a folded lesson keeps: per arena slot of a frame (category, owner, position) and per
#: frame (its tables, captions, panels). Fitted to the six-step lesson, the lab's largest
#: scenario and maximal uploads (7.8 MB, 11k frames of 128 slots: 160 MB; 3.6 MB, 2.6k frames
#: of 1,024 slots: 74 MB), each over-estimated.
BYTES_PER_CELL = 12
BYTES_PER_FRAME = 6 << 10
REAP_INTERVAL_S = 2.0


def lesson_bytes(lesson: Lesson) -> int:
    """About what ``lesson`` holds in memory: its frames times their arena slots."""
    return BYTES_PER_CELL * sum(
        len(s.frames) * s.run.num_slots for s in (lesson.left, lesson.right)
    )


def payload_bytes(payload: dict) -> int:
    return len(json.dumps(payload, separators=(",", ":")))


@dataclass
class Entry:
    value: Any
    size: int
    owners: set[str] = field(default_factory=set)
    payloads: dict[str, dict] = field(default_factory=dict)


@dataclass
class Held:
    """A byte-bounded LRU of made values (folded lessons) and their drawings per language.
    Thread-safe; the newest entry is kept even past ``max_bytes`` so its caller's next rerun
    does not make it again."""

    max_bytes: int
    alive: Callable[[str], bool] | None = None
    gate: threading.BoundedSemaphore = safe.FOLDS
    _entries: OrderedDict[Any, Entry] = field(default_factory=OrderedDict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _reaper: threading.Thread | None = None

    def get(
        self,
        key: Any,
        make: Callable[[], tuple],
        owner: str | None = None,
        waiting: Callable[[], object] | None = None,
        expect: int = 0,
    ) -> Any:
        """The value under ``key``, made by ``make() -> (value, bytes)`` under the gate when
        missing (or ``(value, bytes, {lang: drawing})``, drawn in the same turn). ``owner`` (a
        session id) holds it until that session ends. ``expect``: about the bytes it will hold,
        made room for (least recently used first) before it is made, so what is held and what
        is being made stay under ``max_bytes`` together."""
        return self._entry(key, make, owner, waiting, expect).value

    def _entry(
        self,
        key: Any,
        make: Callable[[], tuple],
        owner: str | None,
        waiting: Callable[[], object] | None,
        expect: int,
    ) -> Entry:
        entry = self._hit(key, owner)
        if entry is not None:
            return entry
        with self._turn(waiting):
            entry = self._hit(key, owner)  # made by another session while this one waited
            if entry is not None:
                return entry
            if expect:
                with self._lock:
                    self._evict(room=expect)
                give_back_memory()
            value, size, *drawn = make()
            payloads = drawn[0] if drawn else {}
            size += sum(payload_bytes(p) for p in payloads.values())
            entry = Entry(value, size, {owner} if owner else set(), dict(payloads))
            self._put(key, entry)
            return entry

    def payload(
        self,
        key: Any,
        lang: str,
        draw: Callable[[], dict],
        waiting: Callable[[], object] | None = None,
    ) -> dict:
        """``key``'s drawing in ``lang``, drawn once under the gate and kept with its entry
        (drawn but not kept when the entry has gone meanwhile)."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and lang in entry.payloads:
                self._entries.move_to_end(key)
                return entry.payloads[lang]
        with self._turn(waiting):
            with self._lock:
                entry = self._entries.get(key)
                if entry is not None and lang in entry.payloads:
                    return entry.payloads[lang]
            drawn = draw()
            with self._lock:
                entry = self._entries.get(key)
                if entry is not None:
                    entry.payloads[lang] = drawn
                    entry.size += payload_bytes(drawn)
                    self._entries.move_to_end(key)
                    self._evict()
            return drawn

    def peek(self, key: Any) -> Any:
        """The value under ``key``, or None; makes nothing."""
        entry = self._hit(key, None)
        return None if entry is None else entry.value

    def held_bytes(self) -> int:
        with self._lock:
            return sum(e.size for e in self._entries.values())

    def __contains__(self, key: Any) -> bool:
        with self._lock:
            return key in self._entries

    def drop_ended(self) -> int:
        """Drop entries whose every owner has ended; returns how many went."""
        if self.alive is None:
            return 0
        with self._lock:
            owned = [(k, set(e.owners)) for k, e in self._entries.items() if e.owners]
        gone = [k for k, owners in owned if not any(self.alive(o) for o in owners)]
        with self._lock:
            for k in gone:
                self._entries.pop(k, None)
        if gone:
            give_back_memory()
        return len(gone)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
        give_back_memory()

    def turn(self, waiting: Callable[[], object] | None = None):
        """The server's one turn, for work that is not kept (a figure drawn for a download):
        a context manager; ``waiting`` is called first when another holds it."""
        return self._turn(waiting)

    # --- inside ------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _turn(self, waiting: Callable[[], object] | None):
        if not self.gate.acquire(blocking=False):
            if waiting is not None:
                waiting()
            self.gate.acquire()
        try:
            yield
        finally:
            self.gate.release()
            give_back_memory()  # what the fold or drawing used while it ran

    def _hit(self, key: Any, owner: str | None) -> Entry | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
                if owner:
                    entry.owners.add(owner)
            return entry

    def _put(self, key: Any, entry: Entry) -> None:
        with self._lock:
            self._entries[key] = entry
            self._evict()
            if entry.owners and self.alive is not None and self._reaper is None:
                self._reaper = threading.Thread(target=self._reap, name="held-reaper", daemon=True)
                self._reaper.start()

    def _evict(self, room: int = 0) -> None:
        """Past ``max_bytes`` (less ``room``), the least recently used go; never the newest
        unless room is being made. Under _lock."""
        total = sum(e.size for e in self._entries.values())
        keep = 0 if room else 1
        while total + room > self.max_bytes and len(self._entries) > keep:
            _, old = self._entries.popitem(last=False)
            total -= old.size

    def _reap(self) -> None:
        stop = threading.Event()
        while not stop.wait(REAP_INTERVAL_S):
            with contextlib.suppress(Exception):  # a reaper that dies would hold memory for ever
                self.drop_ended()
