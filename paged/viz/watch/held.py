"""What the watch page's sessions hold, server-wide, within one budget of bytes.

A replayed recording (its batches and the cache folded from them) held about 60 MiB per tab, in
the tab's session state, with no bound over tabs: 24 tabs held 1.56 GiB, kept as long as
Streamlit kept their sessions. Here each session holds at most one object, accounted in bytes;
one that would take the total past the budget is refused (the page says so in one line), and a
gone session's object is dropped on the next ``reap`` (the page's reaper calls it every few
seconds): an object with a ``close`` (a replay's process) is closed, and the freed memory is
handed back to the system, so it goes with the tab.

No Streamlit.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass
class Held(Generic[T]):
    """Session id -> (key, object, bytes). Thread-safe."""

    budget: int
    alive: Callable[[str], bool]
    _held: dict[str, tuple[str, T, int]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def get(self, session: str, key: str) -> T | None:
        """The session's object when it holds one under ``key``."""
        with self._lock:
            got = self._held.get(session)
        return got[1] if got is not None and got[0] == key else None

    def put(self, session: str, key: str, obj: T, size: int) -> bool:
        """Hold ``obj`` (``size`` bytes) for ``session`` in place of what it held; False, and
        nothing held for it, when the other sessions' objects leave less than ``size`` (the
        caller still owns ``obj`` then)."""
        self.reap()
        with self._lock:
            before = self._held.pop(session, None)
            taken = self._total() + size <= self.budget
            if taken:
                self._held[session] = (key, obj, size)
        _let_go([before])
        return taken

    def drop(self, session: str) -> None:
        with self._lock:
            dropped = self._held.pop(session, None)
        _let_go([dropped])

    def reap(self) -> int:
        """Drop what gone sessions held; return how many sessions still hold something."""
        with self._lock:
            sessions = list(self._held)
        gone = [s for s in sessions if not self.alive(s)]  # unlocked: it asks Streamlit
        with self._lock:
            dropped = [self._held.pop(s, None) for s in gone]
            left = len(self._held)
        _let_go(dropped)
        return left

    @property
    def total(self) -> int:
        with self._lock:
            return self._total()

    def _total(self) -> int:
        return sum(size for _, _, size in self._held.values())


def _let_go(entries: list) -> None:
    """Close what was held (a replay's process ends) and hand the memory back."""
    held = [e[1] for e in entries if e is not None]
    if not held:
        return
    for obj in held:
        close = getattr(obj, "close", None)
        if close is not None:
            close()
    del held, entries
    give_back_memory()


def give_back_memory() -> None:
    """Collect, then return free heap pages to the system: what a replay or a fold held is
    tens to hundreds of MiB of small objects, made on Streamlit's script threads; freed, they
    stay in those threads' glibc arenas, counted in the server's RSS, until trimmed."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
