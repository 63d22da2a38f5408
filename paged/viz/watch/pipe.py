"""Reading a child process's answer from its pipe, by a deadline: the socket reader
(``relay``) and the replay process (``replay_child``) answer the app's server this way."""

from __future__ import annotations

import os
import select
import time


class Silent(Exception):
    """The child did not answer by the deadline."""


class Gone(Exception):
    """The child closed its end: it ended."""


def read_exact(fd: int, n: int, deadline: float) -> bytearray:
    """Exactly ``n`` bytes from ``fd`` by ``deadline`` (``time.monotonic``), or Silent / Gone."""
    buf, got = bytearray(n), 0
    view = memoryview(buf)
    # poll, not select: an app server holding over 1,023 descriptors (a socket per session)
    # gets a pipe numbered past select's FD_SETSIZE, where select raises ValueError
    ready = select.poll()
    ready.register(fd, select.POLLIN)
    while got < n:
        left = deadline - time.monotonic()
        if left <= 0 or not ready.poll(left * 1000):
            raise Silent
        k = os.readv(fd, [view[got:]])
        if k == 0:
            raise Gone
        got += k
    return buf
