"""Reading a file the user names, bounded: ``/dev/zero``, a FIFO or a huge file must end in one
error line, never a MemoryError traceback or a read that waits for ever. Pure Python (the CLI's
light commands import it)."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path


class NotRegularFileError(OSError):
    """The path names a device, a FIFO or a socket: something that may never end or never
    answer, so it is refused before a byte is read."""

    def __init__(self, path: Path) -> None:
        super().__init__(errno.EINVAL, "not a regular file", str(path))


def read_bounded(path: Path, limit: int) -> bytes | None:
    """The file's bytes, or None when it holds more than ``limit`` (reading stops one byte past
    it). Raises NotRegularFileError for a device, FIFO or socket, IsADirectoryError for a
    folder; other errors opening or reading it (missing, no permission) are the caller's."""
    # O_NONBLOCK: opening a FIFO with no writer would otherwise wait for one, for ever.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        mode = os.fstat(f.fileno()).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        if not stat.S_ISREG(mode):
            raise NotRegularFileError(path)
        data = f.read(limit + 1)
    return data if len(data) <= limit else None


def all_text_encodes(obj: object) -> bool:
    """Whether every string in ``obj`` (keys too) is valid Unicode (no lone surrogate)."""
    todo = [obj]
    while todo:
        o = todo.pop()
        if isinstance(o, str):
            try:
                o.encode("utf-8")
            except UnicodeEncodeError:
                return False
        elif isinstance(o, dict):
            todo += [*o.keys(), *o.values()]
        elif isinstance(o, list):
            todo += o
    return True
