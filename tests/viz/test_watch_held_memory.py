"""Four tabs replay one recording on the watch page and close: what they held goes back to the
system within one reap, not only to the allocator. Each tab loads its replay on its own thread,
as Streamlit's script runners do, in a stand-in server (a child interpreter) whose resident
memory, with its replay processes', is read before, while they hold it and after the reap."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CHILD = r"""
import json, os, threading
import msgspec
from paged.engine.interop import kv_events as K
from paged.viz.watch.held import Held
from paged.viz.watch.replay_child import ReplayProcess
from paged.viz.watch.state import WatchState

def rss_mib(pid="self"):
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
    except OSError:
        return 0.0

def server_mib():
    kids = open(f"/proc/{os.getpid()}/task/{os.getpid()}/children").read().split()
    return rss_mib() + sum(rss_mib(k) for k in kids)

def recording(batches):
    st = WatchState()
    for seq in range(batches):
        evs = [K.BlockStored([seq * 8 + j + 1], seq * 8 + j if j else None,
                             list(range(j, j + 16)), 16, None, "GPU") for j in range(8)]
        if seq > 50:
            evs.append(K.BlockRemoved([(seq - 50) * 8 + 1], "GPU"))
        st.feed(seq, msgspec.msgpack.encode(K.EventBatch(1000.0 + seq, evs)))
    return "\n".join(st.recording()) + "\n"

text = recording(3000)
tabs = {}
held = Held(2 << 30, lambda sid: tabs.get(sid, False))
before = server_mib()
data = text.encode()

def tab(sid):
    tabs[sid] = True
    replay = ReplayProcess(data)
    held.put(sid, "rec", replay, replay.size)
    for upto in range(0, replay.batches, 500):  # the slider, moved about
        replay.snapshot(upto)

threads = [threading.Thread(target=tab, args=(str(i),)) for i in range(4)]
for t in threads: t.start()
for t in threads: t.join()
holding = server_mib()
tabs.clear()  # the four tabs close
left = held.reap()
print(json.dumps({"before": before, "holding": holding, "after": server_mib(), "left": left}))
"""


def test_what_closed_tabs_held_goes_back_to_the_system_on_the_next_reap():
    done = subprocess.run(
        [sys.executable, "-c", CHILD], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    m = json.loads(done.stdout)
    grown = m["holding"] - m["before"]
    assert m["left"] == 0 and grown > 20, m  # the tabs did hold tens of MiB
    kept = m["after"] - m["before"]
    print(f"RSS MiB: {m['before']:.0f} before, {m['holding']:.0f} holding, {m['after']:.0f} after")
    assert kept < 0.15 * grown, m
