"""Reading a file the user names, bounded: ``/dev/zero`` or a huge file must end in one error
line, not a MemoryError traceback. Pure Python (the CLI's light commands import it)."""

from __future__ import annotations

from pathlib import Path


def read_bounded(path: Path, limit: int) -> bytes | None:
    """The file's bytes, or None when it holds more than ``limit`` (reading stops one byte past
    it). Errors opening or reading it (missing, a folder, no permission) are the caller's."""
    with path.open("rb") as f:
        data = f.read(limit + 1)
    return data if len(data) <= limit else None
