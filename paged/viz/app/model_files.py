"""Model files for the capacity page, read with bounds: a config.json, or a GGUF's metadata.

The page gets these files by upload. A server path is accepted only while the app listens on
localhost alone (``server_paths_allowed``), and then it is read like an upload: a regular file
only (never a device, FIFO or directory), at most ``GGUF_MAX_BYTES`` / ``CONFIG_MAX_BYTES`` of it.

Bounds (documented in README "Serving a classroom"):

- config.json: at most ``CONFIG_MAX_BYTES`` (1 MiB);
- GGUF: only the header and key/value metadata are parsed, from at most ``GGUF_MAX_BYTES``
  (8 MiB) at the start of the file, by paged/engine/model/gguf.py (its docstring lists the other
  bounds; pure Python, no numpy, no gguf package).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from paged.engine.errors import InvalidConfigError
from paged.engine.model.gguf import GGUF_MAX_BYTES as GGUF_MAX_BYTES  # the page's upload bound
from paged.engine.model.gguf import gguf_metadata
from paged.engine.sim.capacity import (
    CONFIG_MAX_BYTES as CONFIG_MAX_BYTES,  # the page's upload bound
)
from paged.engine.sim.capacity import (
    ModelShape,
    config_json,
    shape_from_config,
    shape_from_gguf_metadata,
)

LOCAL_ADDRESSES = frozenset({"127.0.0.1", "localhost", "::1"})


def server_paths_allowed(address: str | None) -> bool:
    """Server paths are offered only when the app is bound to a loopback address: then the
    person typing a path is at this computer. ``None`` or "" means every interface: no."""
    return bool(address) and address in LOCAL_ADDRESSES


def read_local(path: str, limit: int) -> bytes:
    """At most ``limit`` bytes from the start of a regular file; anything else is refused
    with an ``InvalidConfigError`` (one line)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except OSError as e:
        raise InvalidConfigError(
            f"cannot open {path}: {e.strerror}",
            "cannot_open",
            path=path,
            errno=errno.errorcode.get(e.errno or 0, str(e.errno)),
        ) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise InvalidConfigError(f"{path} is not a regular file", "not_regular", path=path)
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(limit)
    finally:
        os.close(fd)


def config_shape(data: bytes, name: str, dtype: str | None = None) -> ModelShape:
    """A model shape from a config.json's bytes (``name`` labels errors)."""
    if len(data) > CONFIG_MAX_BYTES:
        mib = CONFIG_MAX_BYTES >> 20
        raise InvalidConfigError(
            f"{name} is larger than {mib} MiB", "config_too_big", name=name, mib=mib
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InvalidConfigError(
            f"cannot read {name} as JSON: {str(e)[:120]}", "not_utf8", name=name, at=e.start
        ) from None
    cfg = config_json(text, name)
    return _checked(lambda: shape_from_config(cfg, name, Path(name).stem, dtype), name)


def gguf_shape(data: bytes, name: str, dtype: str | None = None) -> ModelShape:
    """A model shape from the first bytes of a GGUF file (``name`` labels errors)."""
    meta = gguf_metadata(data, name)
    return _checked(lambda: shape_from_gguf_metadata(meta, name, Path(name).stem, dtype), name)


def _checked(build, name: str) -> ModelShape:
    try:
        return build()
    except InvalidConfigError:
        raise
    except (TypeError, ValueError, ZeroDivisionError, OverflowError) as e:
        # a hostile file's values of the wrong type: one line, not a traceback
        raise InvalidConfigError(
            f"{name}: a shape value has the wrong type ({e})", "wrong_type", name=name
        ) from None
