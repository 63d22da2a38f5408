"""The watch page's demo recording: a real vLLM 0.32 server's KV events, as ``paged watch --save``
keeps them. Run with vLLM's venv (``make peer-venv``):

    .venv-peer/bin/python bench/vllm_watch_demo.py [--out paged/viz/data/vllm_kv_events.jsonl]

vLLM serves the bundled SmolLM2 (converted to an HF folder) with prefix caching, blocks of 32 and
a KV cache cut to a few dozen blocks, so its cache fills and evicts: three waves of requests, four
questions behind one shared system prompt, four unrelated prompts that push those blocks out, then
the shared prompt again. ``paged watch --listen --save`` subscribes as the page does (vLLM's
publisher connects to a ``tcp://127.0.0.1:P`` endpoint) and writes the recording the page's
Recording tab opens. Start-up is 1-4 min on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
for var, value in (
    ("VLLM_CPU_KVCACHE_SPACE", "1"),
    ("VLLM_CPU_OMP_THREADS_BIND", f"0-{(os.cpu_count() or 1) - 1}"),
    ("VLLM_CPU_NUM_OF_RESERVED_CPU", "0"),
):
    os.environ.setdefault(var, value)

OUT = ROOT / "paged" / "viz" / "data" / "vllm_kv_events.jsonl"
BS = 32
SYSTEM = (
    "You are a teaching assistant for an operating systems course. Answer in two plain sentences, "
    "name the data structure involved, and say when you are not sure. "
) * 6
QUESTIONS = [
    "What is a page table?",
    "Why does paging avoid external fragmentation?",
    "What does a TLB cache?",
    "When is copy-on-write used?",
]
OTHERS = [
    "Write a short poem about the sea, the wind and a lighthouse keeper who never sleeps.",
    "List the first twenty prime numbers and say which of them are twin primes.",
    "Explain how a bicycle gear works to a child, with an example of climbing a hill.",
    "Describe a recipe for bread with flour, water, salt and yeast, step by step.",
]
OTHERS = [" ".join([p] * 4) for p in OTHERS]  # a few blocks each, so the cache must evict


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--blocks", type=int, default=20, help="vLLM's KV cache, in blocks of 32")
    args = ap.parse_args()
    try:
        from vllm import LLM, SamplingParams
        from vllm.config.kv_events import KVEventsConfig
    except ImportError:
        print("error: vllm is not installed here: run with .venv-peer/bin/python", file=sys.stderr)
        return 2
    from paged.engine.model.loader import load_model, save_hf_folder

    folder = Path(tempfile.mkdtemp(prefix="vllm-demo-"))
    model = load_model(device="cpu", dtype="float32", keep_hf=True, progress=False)
    save_hf_folder(model, folder)
    with socket.socket() as s:  # a free port for the watcher to bind (vLLM connects to it)
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # no replay socket: on one machine, with the watcher bound first, no batch goes missing
    watcher = subprocess.Popen(
        [sys.executable, "-m", "paged", "watch", f"tcp://127.0.0.1:{port}", "--listen"]
        + ["--replay", "", "--json", "--save", str(args.out)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        began = time.monotonic()
        events = KVEventsConfig(
            enable_kv_cache_events=True, publisher="zmq", endpoint=f"tcp://127.0.0.1:{port}"
        )
        llm = LLM(
            model=str(folder),
            num_gpu_blocks_override=args.blocks,
            max_model_len=320,  # what so small a cache can hold for one request
            max_num_seqs=4,
            block_size=BS,
            dtype="float32",
            enable_prefix_caching=True,
            kv_events_config=events,
            seed=0,
        )
        print(f"vLLM started in {time.monotonic() - began:.0f} s", flush=True)
        params = SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True)
        for wave in (
            [SYSTEM + q for q in QUESTIONS],  # one prefix, computed once, then hit
            OTHERS,  # the cache fills: the shared prefix's blocks are evicted
            [SYSTEM + q for q in reversed(QUESTIONS)],  # the prefix again, stored afresh
        ):
            llm.generate(wave, params)
            time.sleep(1.0)  # each wave's batches apart in the recording
        time.sleep(3)  # the last batches reach the watcher
        # SIGTERM: a script run in the background hands its children SIGINT ignored
        watcher.send_signal(signal.SIGTERM)
        out, err = watcher.communicate(timeout=60)
    finally:
        if watcher.poll() is None:
            watcher.kill()
            watcher.wait()
    if watcher.returncode != 0:
        print(f"error: the watcher failed: {err.strip()[-300:]}", file=sys.stderr)
        return 1
    view = json.loads(out)
    print(
        f"{args.out}: {args.out.stat().st_size} bytes; counters {view['counters']}, "
        f"{view['num_blocks']} blocks held at the end"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
