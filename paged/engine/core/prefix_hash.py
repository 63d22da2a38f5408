"""Content hashes of full KV blocks, chained so that a block's hash names its whole prefix.

``block_hash(parent, tokens)`` is sha256 over the parent's hash and the block's token ids encoded
as little-endian signed 64-bit integers, so the same prompt hashes the same in every process
(Python's ``hash()`` is salted per process) and two different prefixes collide only if sha256
does. The first block's parent is ``ROOT_HASH``. Hashes travel as 64-character hex strings, the
form a trace stores. Pure Python, no torch.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence

#: The parent of a request's first block: a fixed value, so chains agree across processes.
ROOT_HASH = hashlib.sha256(b"paged-kv prefix cache root").hexdigest()


def block_hash(parent: str, tokens: Sequence[int]) -> str:
    """The hash of a full block holding ``tokens`` whose prefix hashes to ``parent``."""
    payload = bytes.fromhex(parent) + struct.pack(f"<{len(tokens)}q", *tokens)
    return hashlib.sha256(payload).hexdigest()
