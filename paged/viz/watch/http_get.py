"""One HTTP GET whose whole exchange ends by a deadline: connect, TLS handshake, request and every
byte of the answer, not each ``recv`` on its own (a server sending one byte a second would
otherwise hold a poll open for as long as it liked).

The answer is read raw, at most ``max_bytes`` plus room for the headers, and only then parsed by
the standard library from memory, so a status line or header block that is not HTTP (random
bytes, a hundred headers) is one line, never an exception of ``http.client``'s own. No redirect is
followed and no proxy is used: the address asked for is the one read.

No torch, no Streamlit, no zmq.
"""

from __future__ import annotations

import http.client
import io
import socket
import ssl
import time
from urllib.parse import urlsplit

HEAD_BYTES = 64 << 10  # status line and headers, beyond the body's own limit
CHUNK = 64 << 10


class GetError(ValueError):
    """The answer could not be had, or was not HTTP (one line saying why)."""


def get(url: str, timeout: float, max_bytes: int) -> bytes:
    """The body of a ``200`` answer to ``GET url``, all of it read within ``timeout`` seconds.

    Raises GetError: nothing listening, no whole answer in time, more than ``max_bytes``, an
    answer that is not HTTP, or a status other than 200 (``HTTP <code>`` in the message)."""
    deadline = time.monotonic() + timeout
    parts = urlsplit(url)
    tls = parts.scheme == "https"
    host = parts.hostname or ""
    port = parts.port or (443 if tls else 80)
    try:
        raw = _exchange(parts, host, port, tls, deadline, max_bytes + HEAD_BYTES)
    except TimeoutError:
        raise GetError(f"no whole answer within {timeout:g} s") from None
    except (OSError, ValueError) as e:
        raise GetError(_first_line(e)) from None
    return _body(raw, max_bytes)


def _exchange(parts, host: str, port: int, tls: bool, deadline: float, limit: int) -> bytes:
    sock = socket.create_connection((host, port), timeout=_left(deadline))
    try:
        if tls:
            # the handshake runs in one call, which CPython bounds by the socket's timeout as a whole
            sock.settimeout(_left(deadline))
            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=host)
        netloc = f"[{host}]" if ":" in host else host
        if parts.port:
            netloc += f":{parts.port}"
        request = (
            f"GET {parts.path or '/'} HTTP/1.0\r\nHost: {netloc}\r\nAccept: text/plain\r\n"
            "Accept-Encoding: identity\r\nConnection: close\r\n\r\n"
        )
        sock.settimeout(_left(deadline))
        sock.sendall(request.encode("ascii"))
        got = bytearray()
        while True:
            sock.settimeout(_left(deadline))
            chunk = sock.recv(CHUNK)
            if not chunk:
                return bytes(got)
            got += chunk
            if len(got) > limit:
                return bytes(got)  # _body says it is too much
    finally:
        sock.close()


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError
    return left


class _Buffered:
    """What ``http.client.HTTPResponse`` reads from: the answer already in memory."""

    def __init__(self, raw: bytes) -> None:
        self.raw = raw

    def makefile(self, mode: str) -> io.BytesIO:
        return io.BytesIO(self.raw)


def _body(raw: bytes, max_bytes: int) -> bytes:
    if not raw:
        raise GetError("the server closed the connection without answering")
    resp = http.client.HTTPResponse(_Buffered(raw))  # type: ignore[arg-type]
    try:
        resp.begin()
        if resp.status != 200:
            raise GetError(f"HTTP {resp.status}")
        body = resp.read(max_bytes + 1)
    except http.client.HTTPException as e:
        raise GetError(f"the answer is not HTTP ({type(e).__name__})") from None
    except ValueError as e:
        raise GetError(f"the answer is not HTTP ({_first_line(e)})") from None
    if len(body) > max_bytes:
        raise GetError(f"more than {max_bytes >> 20} MiB")
    return body


def _first_line(e: BaseException) -> str:
    why = str(e).splitlines()[0][:160] if str(e) else type(e).__name__
    return why
