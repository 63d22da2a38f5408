"""A GGUF file's key/value metadata, read with bounds and without the ``gguf`` package.

Only the header and the key/value metadata are parsed (v2/v3, little-endian), never a tensor:
at most ``GGUF_MAX_KEYS`` keys, ``GGUF_MAX_STRING`` bytes per string, and arrays of at most
``GGUF_MAX_KEPT`` items are kept (longer ones, the tokenizer's, are skipped, not kept). At most
``GGUF_MAX_BYTES`` (8 MiB) at the start of the file are read (a prefix, e.g. ``head -c 8M
model.gguf``, is enough: the architecture keys come before the tokenizer's big arrays).

Pure Python: the bytes are parsed with ``struct``. Why not ``gguf.GGUFReader``: it decodes every
vocabulary string into numpy views (~4 s for SmolLM2's 49k tokens on this CPU) where these
skip them in ~0.1 s.
"""

from __future__ import annotations

import struct

from paged.engine.errors import InvalidConfigError

GGUF_MAX_BYTES = 8 << 20
GGUF_MAX_KEYS = 100_000
GGUF_MAX_STRING = 1 << 20
GGUF_MAX_KEPT = 4096

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
                f"a GGUF string of {n:,} bytes (the most read is {GGUF_MAX_STRING:,})",
                "gguf_string",
                size=n,
                most=GGUF_MAX_STRING,
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
            raise InvalidConfigError(
                f"{name} is not a GGUF file (no GGUF magic)", "gguf_magic", name=name
            )
        version = cur.fixed(4)
        if version not in (2, 3):
            raise InvalidConfigError(
                f"{name}: GGUF version {version} is not supported",
                "gguf_version",
                name=name,
                version=version,
            )
        cur.fixed(10)  # tensor count: tensors are never read
        count = cur.fixed(10)
    except _Truncated:
        raise InvalidConfigError(
            f"{name} is too short to be a GGUF file", "gguf_short", name=name
        ) from None
    if count > GGUF_MAX_KEYS:
        raise InvalidConfigError(
            f"{name}: {count:,} metadata keys (the most read is {GGUF_MAX_KEYS:,})",
            "gguf_keys",
            name=name,
            count=count,
            most=GGUF_MAX_KEYS,
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
        raise InvalidConfigError(
            f"{name}: corrupt GGUF metadata", "gguf_corrupt", name=name
        ) from None
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
