"""Where a C kernel library is built and how it is loaded again: a private folder, and a library
loaded only when it is the very file this user built there.

Loading a shared library runs its constructors, so a file at the cache's predictable name must
never be trusted for being there. The folder is created private (0700 whatever the umask) and
refused when another user owns it, or it or a folder above it may be changed by others. Each
build records its library's SHA-256 in ``NAME.sha256`` and is stored under its digest
(``NAME-DIGEST.so``); a load opens the file without following a symlink, refuses it unless this
user owns it and only this user may write it, hashes what it opened and, on Linux, loads that
same open file (``/proc/self/fd``), so nothing can be swapped in between. Anything that does not
match (no record, a zero-byte or truncated file, a symlink, a stranger's file) is rebuilt once;
what still fails raises ``CacheError`` with one line saying why.

No torch.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import stat
import subprocess
import tempfile
from pathlib import Path

MAX_LIBRARY_BYTES = 64 << 20
_FLAGS_RO = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


class CacheError(OSError):
    """The library could not be built, or not trusted, or not loaded (one line saying why)."""


def cache_dir() -> Path:
    """``$PAGED_KERNEL_CACHE``, else ``seeing-pagedattention/cpu-kernels`` under
    ``$XDG_CACHE_HOME`` or ``~/.cache``."""
    env = os.environ.get("PAGED_KERNEL_CACHE", "").strip()
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    # not the ``kernels`` folder of earlier versions: they loaded whatever lay there unchecked
    return Path(base) / "seeing-pagedattention" / "cpu-kernels"


def library(name: str, command: list[str], folder: Path) -> ctypes.CDLL:
    """The library ``name`` (a key naming its source and build) from ``folder``, built first
    by ``command`` (``{out}`` in it is replaced by the output path) when no trusted copy is
    there. Raises CacheError."""
    private_folder(folder)
    lib = _load_recorded(folder, name)
    if lib is None:
        _build(folder, name, command)
        lib = _load_recorded(folder, name)
    if lib is None:
        raise CacheError(f"the library just built in {folder} does not match its record")
    return lib


def private_folder(folder: Path) -> None:
    """Create ``folder`` (and what is missing above it) 0700; refuse one that is not this
    user's own, or that anyone else could change the contents of."""
    folder = Path(os.path.abspath(folder))
    missing = []
    p = folder
    while not os.path.lexists(p) and p != p.parent:
        missing.append(p)
        p = p.parent
    for q in reversed(missing):
        with contextlib.suppress(FileExistsError):  # made by a racing first use
            os.mkdir(q, 0o700)  # mkdir's mode only loses bits to the umask: 0700 at most
    st = os.lstat(folder)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise CacheError(f"kernel cache {folder} is not a folder (a symlink, or a file)")
    if st.st_uid != os.geteuid():
        raise CacheError(f"kernel cache {folder} belongs to another user")
    if st.st_mode & 0o077:
        os.chmod(folder, 0o700)
    for above in folder.parents:
        up = os.stat(above)
        open_to_others = up.st_mode & 0o022 and not up.st_mode & stat.S_ISVTX
        if up.st_uid not in (0, os.geteuid()) or open_to_others:
            raise CacheError(f"kernel cache {folder} lies in {above}, which others may change")


def _open_trusted(path: Path, limit: int) -> tuple[int, bytes] | None:
    """An open descriptor and the contents of ``path``, if it is a regular file (not a
    symlink) of 1 to ``limit`` bytes that this user owns and no one else may write."""
    try:
        fd = os.open(path, _FLAGS_RO)
    except OSError:
        return None  # absent, or a symlink (O_NOFOLLOW)
    try:
        st = os.fstat(fd)
        if (
            not stat.S_ISREG(st.st_mode)
            or st.st_uid != os.geteuid()
            or st.st_mode & 0o022
            or not 0 < st.st_size <= limit
        ):
            os.close(fd)
            return None
        data = b""
        while len(data) < st.st_size:
            chunk = os.read(fd, st.st_size - len(data))
            if not chunk:
                break
            data += chunk
        return fd, data
    except OSError:
        os.close(fd)
        return None


def _load_recorded(folder: Path, name: str) -> ctypes.CDLL | None:
    """The library the record names, when it is there and hashes to the record; else None."""
    record = _open_trusted(folder / f"{name}.sha256", 128)
    if record is None:
        return None
    os.close(record[0])
    digest = record[1].decode("ascii", errors="replace").strip()
    if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        return None
    path = folder / f"{name}-{digest[:16]}.so"
    opened = _open_trusted(path, MAX_LIBRARY_BYTES)
    if opened is None:
        return None
    fd, data = opened
    if hashlib.sha256(data).hexdigest() != digest:
        os.close(fd)
        return None
    # the file hashed is the file loaded: dlopen the descriptor, not the name. The descriptor
    # stays open for good: a later dlopen of the same /proc path would get this library back
    through_fd = f"/proc/self/fd/{fd}"
    try:
        return ctypes.CDLL(through_fd if os.path.exists(through_fd) else str(path))
    except OSError as e:
        os.close(fd)
        raise CacheError(f"cannot load {name}: {str(e).splitlines()[0][:160]}") from None


def _build(folder: Path, name: str, command: list[str]) -> None:
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=folder)
    os.close(fd)
    try:
        done = subprocess.run(
            [a.replace("{out}", tmp) for a in command],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if done.returncode != 0:
            first = (done.stderr.strip().splitlines() or ["no message"])[0]
            raise CacheError(f"{command[0]} failed: {first[:200]}")
        os.chmod(tmp, 0o700)  # the linker made its own file, with the umask's mode
        opened = _open_trusted(Path(tmp), MAX_LIBRARY_BYTES)
        if opened is None:
            raise CacheError(f"{command[0]} wrote no library")
        os.close(opened[0])
        digest = hashlib.sha256(opened[1]).hexdigest()
        os.replace(tmp, folder / f"{name}-{digest[:16]}.so")
        _write(folder / f"{name}.sha256", digest.encode())
    except subprocess.SubprocessError as e:
        raise CacheError(f"{command[0]} failed: {type(e).__name__}") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _write(path: Path, data: bytes) -> None:
    """``path`` holds ``data`` whole or not at all, mode 0600 (replacing a symlink there, never
    writing through it)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
