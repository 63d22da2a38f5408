"""One multipart message of many frames against a KV-event receiver: its peak memory.

libzmq bounds each frame (MAXMSGSIZE) and the whole messages it queues (RCVHWM), never a
message's frame count, and hands a message over only once it holds all of it. This streams one
message of ``--frames`` frames of ``--frame-bytes`` each from a raw ZMTP 3.0 publisher (a libzmq
PUB would queue the whole message before sending any of it, and hold it) to a receiver in a
fresh interpreter, and prints that process's peak resident memory (VmHWM):

- ``--receiver app`` (the default): the watch page's Subscriber, imported from ``--root`` (point
  it at another checkout to measure the code before a change); also its socket reader's peak.
- ``--receiver zmq``: a bare SUB set as the page's was (MAXMSGSIZE 4 MiB, RCVHWM 8), with its
  peak when the first frame of the message became readable.

    .venv/bin/python bench/kv_multipart.py --frames 1024
    .venv/bin/python bench/kv_multipart.py --frames 8000000 --frame-bytes 0 --receiver zmq
"""

from __future__ import annotations

import argparse
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

PEAK = "next(int(l.split()[1]) >> 10 for l in open(f'/proc/{pid}/status') if 'VmHWM' in l)"

APP = f"""
import os, sys, time
from paged.viz.watch.subscriber import Subscriber, SubscriberConfig
peak = lambda pid: {PEAK}
sub = Subscriber(SubscriberConfig(sys.argv[1], replay_endpoint="")).start()
end = time.monotonic() + 60
while time.monotonic() < end and not (sub.state.counters["malformed"] or sub.disconnects):
    time.sleep(0.02)
reader = getattr(sub, "relay", None)
try:
    reader_peak = f"{{peak(reader.proc.pid)}} MiB" if reader else "no reader process"
except (OSError, StopIteration):
    reader_peak = "the reader had ended"
print(f"app peak {{peak('self')}} MiB; reader {{reader_peak}};", sub.state.counters["malformed"],
      "malformed,", sub.disconnects, "disconnects;", sub.state.last_error[:100])
sub.stop()
"""

ZMQ = f"""
import sys, zmq
peak = lambda pid: {PEAK}
sub = zmq.Context().socket(zmq.SUB)
sub.setsockopt(zmq.RCVHWM, 8)
sub.setsockopt(zmq.MAXMSGSIZE, 4 << 20)
sub.setsockopt(zmq.SUBSCRIBE, b"")
sub.connect(sys.argv[1])
if sub.poll(60_000):
    sub.recv()
    print(f"first frame readable at a peak of {{peak('self')}} MiB")
    n = 1
    while sub.getsockopt(zmq.RCVMORE):
        sub.recv(copy=False)
        n += 1
    print(f"{{n}} frames; peak {{peak('self')}} MiB")
"""


def frame(body: bytes, more: bool = False, command: bool = False) -> bytes:
    flags = (1 if more else 0) | (4 if command else 0)
    if len(body) > 255:
        return bytes([flags | 2]) + struct.pack(">Q", len(body)) + body
    return bytes([flags, len(body)]) + body


def publisher_greeting() -> bytes:
    """ZMTP 3.0, NULL mechanism, then READY as a PUB socket."""
    greeting = b"\xff" + bytes(8) + b"\x7f\x03\x00" + b"NULL".ljust(20, b"\0") + bytes(32)
    prop = b"\x0bSocket-Type" + struct.pack(">I", 3) + b"PUB"
    return greeting + frame(b"\x05READY" + prop, command=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--frames", type=int, default=1024, help="frames in the one message (1024)")
    ap.add_argument("--frame-bytes", type=int, default=1 << 20, help="bytes in each frame (1 MiB)")
    ap.add_argument(
        "--receiver",
        choices=["app", "zmq"],
        default="app",
        help="the watch page's Subscriber (default) or a bare zmq SUB set as the page's was",
    )
    ap.add_argument(
        "--root",
        type=Path,
        default=Path(__file__).resolve().parent.parent,
        help="the checkout whose Subscriber is measured (default: this one)",
    )
    args = ap.parse_args()
    listener = socket.create_server(("127.0.0.1", 0))
    url = f"tcp://127.0.0.1:{listener.getsockname()[1]}"
    code = APP if args.receiver == "app" else ZMQ
    receiver = subprocess.Popen([sys.executable, "-c", code, url], cwd=args.root)
    conn, _ = listener.accept()
    conn.sendall(publisher_greeting())
    conn.recv(4096)  # its greeting and READY; its subscription may follow
    time.sleep(0.3)
    body = bytes(args.frame_bytes)
    sent, start = 0, time.monotonic()
    try:
        for i in range(args.frames):
            conn.sendall(frame(body, more=i < args.frames - 1))
            sent += 1
    except OSError as e:
        print(f"publisher: {e.strerror} after {sent} frames")
    print(
        f"publisher: {sent} frames of {args.frame_bytes} bytes in {time.monotonic() - start:.1f} s"
    )
    receiver.wait(120)
    conn.close()


if __name__ == "__main__":
    main()
