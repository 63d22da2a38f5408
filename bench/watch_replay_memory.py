"""The app server's memory after tabs that replayed a recording on the watch page close.

Starts the app (``streamlit run app.py``), opens ``--tabs`` Chromium tabs on the watch page,
loads the same KV-event recording (``--mb`` MB, built here from synthetic batches) in each and
waits until each shows its last batch, then closes them all and reads the server's resident
memory (its process and children, VmRSS) at intervals. Prints one line per sample:

    .venv/bin/python bench/watch_replay_memory.py [--tabs 4] [--mb 7.8]

Needs Debian's Chromium (/usr/bin/chromium) and Playwright. A measurement, not a test: on a
shared machine the numbers move by tens of MiB between runs.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import msgspec  # noqa: E402

from paged.engine.interop import kv_events as K  # noqa: E402
from paged.viz import ui_text  # noqa: E402
from paged.viz.export.serve import CHROMIUM, running_app  # noqa: E402
from paged.viz.watch.state import WatchState  # noqa: E402

T = ui_text.load("watch_page")["en"]


def recording(mb: float) -> str:
    """A recording of about ``mb`` MB: batches of eight stored blocks in chains of 16 tokens,
    the oldest evicted as it goes, as a busy server's prefix cache would."""
    st, seq, lines_bytes = WatchState(), 0, 0
    while lines_bytes < mb * 1e6:
        evs: list = [
            K.BlockStored(
                [seq * 8 + j + 1],
                seq * 8 + j if j else None,
                list(range(j, j + 16)),
                16,
                None,
                "GPU",
            )  # fmt: skip
            for j in range(8)
        ]
        if seq > 50:
            evs.append(K.BlockRemoved([(seq - 50) * 8 + 1], "GPU"))
        st.feed(seq, msgspec.msgpack.encode(K.EventBatch(1000.0 + seq, evs)))
        seq += 1
        if seq % 100 == 0:
            lines_bytes = sum(len(line) + 1 for line in st.recording())
    return "\n".join(st.recording()) + "\n"


def server_rss_mib(pid: int) -> float:
    """VmRSS of ``pid`` and its descendants, MiB."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            status = Path(f"/proc/{p}/status").read_text()
            kids = Path(f"/proc/{p}/task/{p}/children").read_text().split()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1])
        todo += [int(k) for k in kids]
    return total / 1024


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tabs", type=int, default=4)
    ap.add_argument("--mb", type=float, default=7.8)
    ap.add_argument("--after", default="0,5,10,20", help="seconds after closing to sample at")
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        rec = Path(tmp) / "recording.jsonl"
        rec.write_text(recording(args.mb), encoding="utf-8")
        print(f"recording: {rec.stat().st_size / 1e6:.1f} MB", flush=True)
        info: dict = {}
        with running_app(info=info) as app, sync_playwright() as pw:
            pid = info["pid"]
            browser = pw.chromium.launch(executable_path=CHROMIUM)
            ctx = browser.new_context(viewport={"width": 1280, "height": 900})
            pages = []
            for _ in range(args.tabs):
                page = ctx.new_page()
                page.goto(f"{app}/watch", wait_until="domcontentloaded")
                page.get_by_text(T["source_recording"], exact=True).click()
                pages.append(page)
            time.sleep(2)
            print(f"before: {server_rss_mib(pid):.0f} MiB ({args.tabs} tabs open)", flush=True)
            t0 = time.monotonic()
            for page in pages:
                page.locator("input[type=file]").set_input_files(str(rec))
            for page in pages:
                page.get_by_text("Batch ", exact=False).last.wait_for(timeout=300_000)
                page.wait_for_function(
                    "() => /Batch (\\d+) of \\1 /.test(document.body.innerText)",
                    timeout=300_000,
                )
            print(
                f"holding: {server_rss_mib(pid):.0f} MiB "
                f"(every tab at its last batch after {time.monotonic() - t0:.0f} s)",
                flush=True,
            )
            for page in pages:
                page.close()
            closed = time.monotonic()
            for at in sorted(float(s) for s in args.after.split(",")):
                time.sleep(max(0.0, closed + at - time.monotonic()))
                print(f"{at:g} s after closing: {server_rss_mib(pid):.0f} MiB", flush=True)
            browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
