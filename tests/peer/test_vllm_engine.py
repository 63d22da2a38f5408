"""Our engine beside the real vLLM 0.32 engine (``make peer``; skipped where vllm is not
installed). One vLLM start (1-4 min on 2 cores) serves both checks: greedy tokens, token for
token, against ours on the same weights; and the KV events of a real vLLM run, folded by
``python -m paged watch --listen`` (vLLM connects to a ``tcp://127.0.0.1:P`` endpoint) and
compared with vLLM's own decoder reading its replay socket, duplicated blocks included.

vLLM loads an HF folder; transformers refuses ``save_pretrained`` on a GGUF-loaded model, so the
de-quantized weights are copied into a plain ``LlamaForCausalLM`` of the same config."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import msgspec
import pytest
import zmq

from tests.engine.test_kv_events import free_ports

kv = pytest.importorskip("vllm.distributed.kv_events")

ROOT = Path(__file__).resolve().parents[2]
BS = 32  # vLLM's CPU backend wants multiples of 32
NEW_TOKENS = 24
PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time, in a small village by the sea,",
]
#: one long prompt twice in one step: both requests compute its blocks before either is cached,
#: so vLLM can hold each of those hashes in two physical blocks
SHARED = " ".join(f"item {i}," for i in range(60))

for var, value in (
    ("VLLM_CPU_KVCACHE_SPACE", "1"),
    ("VLLM_CPU_OMP_THREADS_BIND", f"0-{(os.cpu_count() or 1) - 1}"),
    ("VLLM_CPU_NUM_OF_RESERVED_CPU", "0"),
):
    os.environ.setdefault(var, value)


def hf_folder(path: Path):
    """The bundled model as a plain HF folder vLLM can load; returns our LoadedModel."""
    from paged.engine.model.loader import load_model, save_hf_folder

    ours = load_model(device="cpu", dtype="float32", keep_hf=True, progress=False)
    save_hf_folder(ours, path)
    return ours


def replay_all(port: int) -> list[tuple[int, bytes]]:
    ctx = zmq.Context()
    try:
        dealer = ctx.socket(zmq.DEALER)
        dealer.setsockopt(zmq.LINGER, 0)
        dealer.connect(f"tcp://127.0.0.1:{port}")
        dealer.send_multipart((b"", (0).to_bytes(8, "big")))
        out = []
        while True:
            assert dealer.poll(10_000), "vLLM's replay socket did not answer"
            _, _, seq, payload = dealer.recv_multipart()
            if seq == kv.ZmqEventPublisher.END_SEQ:
                return out
            out.append((int.from_bytes(seq, "big"), payload))
    finally:
        ctx.destroy(linger=0)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    from vllm import LLM
    from vllm import SamplingParams as VParams
    from vllm.config.kv_events import KVEventsConfig

    from paged.engine.core.request import SamplingParams
    from paged.engine.llm import LLM as Ours

    folder = tmp_path_factory.mktemp("smollm2-hf")
    model = hf_folder(folder)
    ids = [model.tokenizer.encode(p) for p in PROMPTS]  # type: ignore[attr-defined]
    shared = model.tokenizer.encode(SHARED)  # type: ignore[attr-defined]
    ours = Ours(model, block_size=BS, kv_budget_mb=64).generate(
        ids, SamplingParams(max_tokens=NEW_TOKENS, ignore_eos=True)
    )
    port, replay = free_ports()
    watcher = subprocess.Popen(
        [sys.executable, "-m", "paged", "watch", f"tcp://127.0.0.1:{port}", "--listen", "--json"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    began = time.monotonic()
    try:
        llm = LLM(
            model=str(folder),
            dtype="float32",
            block_size=BS,
            max_model_len=1024,
            max_num_seqs=8,
            enable_prefix_caching=True,
            seed=0,
            kv_events_config=KVEventsConfig(
                enable_kv_cache_events=True,
                publisher="zmq",
                endpoint=f"tcp://127.0.0.1:{port}",
                replay_endpoint=f"tcp://127.0.0.1:{replay}",
            ),
        )
        started = time.monotonic() - began
        greedy = VParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)
        theirs = llm.generate([{"prompt_token_ids": p} for p in ids], greedy)
        llm.generate(
            [{"prompt_token_ids": shared}, {"prompt_token_ids": shared}],
            VParams(temperature=0.0, max_tokens=4, ignore_eos=True),
        )
        time.sleep(3)  # the last batches reach the watcher
        # SIGTERM: a test run started in the background of a script ignores SIGINT, and the
        # watcher inherits that, so Ctrl-C's signal would never stop it
        watcher.send_signal(signal.SIGTERM)
        out, err = watcher.communicate(timeout=60)
        replayed = replay_all(replay)
        del llm
    finally:
        if watcher.poll() is None:
            watcher.kill()
            watcher.wait()
    print(f"vLLM started in {started:.0f} s")
    return {
        "ours": [o.token_ids for o in ours],
        "theirs": [list(o.outputs[0].token_ids) for o in theirs],
        "watch": (watcher.returncode, out, err),
        "replayed": replayed,
    }


def test_greedy_tokens_match_vllm_token_for_token(run):
    assert run["theirs"] == run["ours"]


def test_viz_watch_folds_a_real_vllm_run_as_vllms_decoder_reads_it(run):
    code, out, err = run["watch"]
    assert code == 0, err
    got = json.loads(out)
    dec = msgspec.msgpack.Decoder(kv.KVEventBatch)
    held: Counter = Counter()
    for _, payload in run["replayed"]:
        for e in dec.decode(payload).events:
            if isinstance(e, kv.BlockStored):
                assert e.block_size == BS and e.medium == "GPU"
                held.update(e.block_hashes)
            elif isinstance(e, kv.BlockRemoved):
                for h in e.block_hashes:
                    held[h] -= 1 if held[h] else 0
            else:
                held.clear()
    want = {(h.hex() if isinstance(h, bytes) else h): n for h, n in held.items() if n}
    assert want, "vLLM published no stored blocks"
    assert {b["hash"]: b["copies"] for b in got["blocks"]} == want
    assert got["counters"]["malformed"] == 0
    print(
        f"{len(want)} hashes, {sum(want.values())} physical copies, duplicated: "
        f"{sum(1 for n in want.values() if n > 1)}"
    )
