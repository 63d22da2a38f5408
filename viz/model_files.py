"""Model files for the capacity page, read with bounds: a config.json, or a GGUF's metadata.

The page gets these files by upload. A server path is accepted only while the app listens on
localhost alone (``server_paths_allowed``), and then it is read like an upload: a regular file
only (never a device, FIFO or directory), at most ``GGUF_MAX_BYTES`` / ``CONFIG_MAX_BYTES`` of it.

Bounds (documented in README "Serving a classroom"):

- config.json: at most ``CONFIG_MAX_BYTES`` (1 MiB);
- GGUF: only the header and key/value metadata are parsed, from at most ``GGUF_MAX_BYTES``
  (8 MiB) at the start of the file (a prefix, e.g. ``head -c 8M model.gguf``, is enough:
  the architecture keys come before the tokenizer's big arrays, which are skipped, not kept);
  at most ``GGUF_MAX_KEYS`` keys, ``GGUF_MAX_STRING`` bytes per string, and arrays of at
  most ``GGUF_MAX_KEPT`` items are kept (longer ones are skipped).

Pure Python (no numpy, no gguf package): the bytes are parsed with ``struct``.
"""

from __future__ import annotations

import json
import os
import stat
import struct
from pathlib import Path

from engine.capacity import ModelShape, shape_from_config, shape_from_gguf_metadata
from engine.request import InvalidConfigError

CONFIG_MAX_BYTES = 1 << 20
GGUF_MAX_BYTES = 8 << 20
GGUF_MAX_KEYS = 100_000
GGUF_MAX_STRING = 1 << 20
GGUF_MAX_KEPT = 4096
LOCAL_ADDRESSES = frozenset({"127.0.0.1", "localhost", "::1"})

# GGUF value types -> struct format (fixed width); 8 = string, 9 = array.
_FIXED = {
    0: "<B",
    1: "<b",
    2: "<H",
    3: "<h",
    4: "<I",
    5: "<i",
    6: "<f",
    7: "<?",
    10: "<Q",
    11: "<q",
    12: "<d",
}
_STRING, _ARRAY = 8, 9


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
        raise InvalidConfigError(f"cannot open {path}: {e.strerror}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise InvalidConfigError(f"{path} is not a regular file")
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(limit)
    finally:
        os.close(fd)


def config_shape(data: bytes, name: str, dtype: str | None = None) -> ModelShape:
    """A model shape from a config.json's bytes (``name`` labels errors)."""
    if len(data) > CONFIG_MAX_BYTES:
        raise InvalidConfigError(f"{name} is larger than {CONFIG_MAX_BYTES >> 20} MiB")
    try:
        cfg = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise InvalidConfigError(f"cannot read {name} as JSON: {str(e)[:120]}") from None
    if not isinstance(cfg, dict):
        raise InvalidConfigError(f"{name} is not a JSON object")
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
        raise InvalidConfigError(f"{name}: a shape value has the wrong type ({e})") from None


class _Cursor:
    """Reads little-endian values from a bytes prefix; running out raises ``_Truncated``."""

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = memoryview(data), 0

    def take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.data):
            raise _Truncated
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def fixed(self, kind: int):
        fmt = _FIXED[kind]
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self, keep: bool = True) -> str | None:
        n = self.fixed(10)
        if n > GGUF_MAX_STRING:
            raise InvalidConfigError(
                f"a GGUF string of {n:,} bytes (the most read is {GGUF_MAX_STRING:,})"
            )
        raw = self.take(n)
        return bytes(raw).decode("utf-8", errors="replace") if keep else None


class _Truncated(Exception):
    """The prefix ended inside the metadata."""


def gguf_metadata(data: bytes, name: str = "GGUF file") -> dict:
    """The key/value metadata of a GGUF (v2/v3, little-endian) from its first bytes. Keys read
    before the prefix ends are returned; long arrays (the tokenizer's) are skipped."""
    cur = _Cursor(data[:GGUF_MAX_BYTES])
    try:
        if bytes(cur.take(4)) != b"GGUF":
            raise InvalidConfigError(f"{name} is not a GGUF file (no GGUF magic)")
        version = cur.fixed(4)
        if version not in (2, 3):
            raise InvalidConfigError(f"{name}: GGUF version {version} is not supported")
        cur.fixed(10)  # tensor count: tensors are never read
        count = cur.fixed(10)
    except _Truncated:
        raise InvalidConfigError(f"{name} is too short to be a GGUF file") from None
    if count > GGUF_MAX_KEYS:
        raise InvalidConfigError(
            f"{name}: {count:,} metadata keys (the most read is {GGUF_MAX_KEYS:,})"
        )
    meta: dict = {}
    try:
        for _ in range(count):
            key = cur.string()
            kind = cur.fixed(4)
            meta[key] = _value(cur, kind, depth=0)
    except _Truncated:
        pass  # a prefix: what was read is all there is
    except (KeyError, struct.error, OverflowError):
        raise InvalidConfigError(f"{name}: corrupt GGUF metadata") from None
    return {k: v for k, v in meta.items() if v is not _SKIPPED}


_SKIPPED = object()


def _value(cur: _Cursor, kind: int, depth: int):
    if kind in _FIXED:
        return cur.fixed(kind)
    if kind == _STRING:
        return cur.string()
    if kind != _ARRAY or depth > 1:
        raise KeyError(kind)
    elem, n = cur.fixed(4), cur.fixed(10)
    keep = n <= GGUF_MAX_KEPT
    if elem in _FIXED and not keep:  # skip a long numeric array in one step
        cur.take(n * struct.calcsize(_FIXED[elem]))
        return _SKIPPED
    items = []
    for _ in range(n):
        if elem == _STRING and not keep:
            cur.string(keep=False)
        else:
            items.append(_value(cur, elem, depth + 1))
    return items if keep else _SKIPPED
