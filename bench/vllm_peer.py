"""Our engine beside vLLM's CPU build and transformers: throughput and prefix caching, one run.

Each engine runs in its own long-lived process (vLLM in ``.venv-peer``, ``make peer-venv``), so
each one's resident set is its own; the driver hands them the same token ids, one job at a time,
interleaved, and times nothing itself (each worker times its own ``generate``). Jobs:

- ``batch``: 16 prompts of equal length (no padding, so transformers' batch is its exact case)
  x 64 new tokens in one batch, greedy, EOS ignored: ours, vLLM, transformers.
- ``prefix_off`` / ``prefix_on``: bench/prefix.py's workload (16 requests sharing a 256-token
  system prompt, 32 new tokens) with prefix caching off and on: ours and vLLM. vLLM runs one
  engine with caching on: "off" gives each request its own ``cache_salt`` (vLLM's switch for
  keeping requests from sharing blocks) and "on" starts from ``reset_prefix_cache()``, so no
  round reuses an earlier round's blocks; ours gets a fresh allocator per ``generate`` anyway.

Rounds rotate the engines' order; each figure is the median of the rounds. The 1-minute load
average (``uptime``) is printed beside each round: on a shared machine the ratios mean more
than the tok/s. Exits 1 when the greedy tokens differ.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

PEER_PY = ROOT / ".venv-peer" / "bin" / "python"
TCMALLOC = "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4"
RESULT = "@@result "  # marks the workers' answers among vLLM's own log lines
BATCH, SYSTEM_LEN = 16, 256
JOBS = {
    "batch": ("ours", "vllm", "hf"),
    "prefix_off": ("ours", "vllm"),
    "prefix_on": ("ours", "vllm"),
}


def load_average() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


# --- preparation: one HF folder and one set of token ids for every engine --------------------


def prepare(folder: Path, prompt_len: int) -> None:
    from bench.prefix import workload
    from paged.engine.model.loader import load_model, save_hf_folder
    from paged.engine.sim.workload import DEMO_PROMPTS

    model = load_model(device="cpu", dtype="float32", keep_hf=True, progress=False)
    save_hf_folder(model, folder / "hf")
    tok = model.tokenizer
    # equal lengths: each demo prompt, followed by a shared filler, cut to prompt_len tokens
    from paged.engine.trace.scenario import FILLER_TEXT

    filler = tok.encode(" " + FILLER_TEXT, add_special_tokens=False)
    batch = [(tok.encode(p) + filler)[:prompt_len] for p in DEMO_PROMPTS][:BATCH]
    shared = workload(tok, SYSTEM_LEN)
    (folder / "workload.json").write_text(json.dumps({"batch": batch, "prefix": shared}))


# --- workers: one engine each, answering jobs on stdin -----------------------------------------


def rss_mib() -> float:
    """This process's resident set plus its children's (vLLM keeps its engine in a child)."""
    total, todo = 0, [os.getpid()]
    while todo:
        pid = todo.pop()
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            total += next(int(x.split()[1]) for x in status.splitlines() if x.startswith("VmRSS"))
            for task in Path(f"/proc/{pid}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, StopIteration, ValueError):
            continue
    return total / 1024


class Ours:
    def __init__(self, folder: Path, block_size: int) -> None:
        from paged.engine.core.request import SamplingParams
        from paged.engine.llm import LLM
        from paged.engine.model.loader import load_model

        model = load_model(device="cpu", dtype="float32", progress=False)
        self.params = SamplingParams
        self.llm = {
            c: LLM(model, block_size=block_size, enable_prefix_caching=c, progress=False)
            for c in (False, True)
        }

    def run(self, job: str, prompts: list[list[int]], new_tokens: int, salt: str):
        llm = self.llm[job == "prefix_on"]
        outs = llm.generate(prompts, self.params(max_tokens=new_tokens, ignore_eos=True))
        return [o.token_ids for o in outs]


class Transformers:
    def __init__(self, folder: Path, block_size: int) -> None:
        import torch
        from transformers import AutoModelForCausalLM

        self.torch = torch
        self.model = AutoModelForCausalLM.from_pretrained(folder / "hf", dtype=torch.float32)
        self.model.eval()
        self.model.generation_config.eos_token_id = None  # HF falls back to it otherwise

    def run(self, job: str, prompts: list[list[int]], new_tokens: int, salt: str):
        x = self.torch.tensor(prompts)  # equal lengths: no padding
        with self.torch.inference_mode():
            out = self.model.generate(
                x,
                attention_mask=self.torch.ones_like(x),
                max_new_tokens=new_tokens,
                min_new_tokens=new_tokens,
                do_sample=False,
                eos_token_id=None,
                pad_token_id=0,
            )
        return out[:, x.shape[1] :].tolist()


class Vllm:
    def __init__(self, folder: Path, block_size: int) -> None:
        from vllm import LLM, SamplingParams

        self.params = SamplingParams
        self.llm = LLM(
            model=str(folder / "hf"),
            dtype="float32",
            block_size=block_size,
            max_model_len=1024,
            max_num_seqs=BATCH,
            enable_prefix_caching=True,
            seed=0,
        )

    def run(self, job: str, prompts: list[list[int]], new_tokens: int, salt: str):
        if job == "prefix_on":
            self.llm.reset_prefix_cache()
            inputs = [{"prompt_token_ids": p} for p in prompts]
        else:  # nothing shared, within the batch or with an earlier round
            inputs = [
                {"prompt_token_ids": p, "cache_salt": f"{salt}/{i}"} for i, p in enumerate(prompts)
            ]
        greedy = self.params(temperature=0.0, max_tokens=new_tokens, ignore_eos=True)
        outs = self.llm.generate(inputs, greedy, use_tqdm=False)
        return [list(o.outputs[0].token_ids) for o in outs]


ENGINES = {"ours": Ours, "hf": Transformers, "vllm": Vllm}


_answers = sys.stdout


def answer(payload: dict) -> None:
    _answers.write(RESULT + json.dumps(payload) + "\n")
    _answers.flush()


def work(name: str, folder: Path, block_size: int) -> None:
    global _answers
    # answers keep the pipe; everything else written to stdout, by this process or its children
    # (vLLM logs there), goes to the worker's log with stderr
    _answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    if name != "vllm":  # vLLM sets its own OpenMP up
        from paged.engine.threads import configure_openmp

        configure_openmp()  # before torch loads, as bench/throughput.py does for both
    work_load = json.loads((folder / "workload.json").read_text())
    engine = ENGINES[name](folder, block_size)
    engine.run("batch", work_load["batch"][:2], 2, "warm-up")  # one-off allocations
    answer({"ready": True})
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["job"] == "rss":
            answer({"rss_mib": rss_mib()})
            continue
        prompts = work_load["batch" if cmd["job"] == "batch" else "prefix"]
        t0 = time.perf_counter()
        tokens = engine.run(cmd["job"], prompts, cmd["new_tokens"], cmd["salt"])
        answer({"seconds": time.perf_counter() - t0, "tokens": tokens})


# --- the driver ----------------------------------------------------------------------------------


class Worker:
    def __init__(self, name: str, folder: Path, block_size: int) -> None:
        self.name = name
        py, env = sys.executable, dict(os.environ)
        if name == "vllm":
            py = str(PEER_PY)
            # vLLM's CPU backend as its docs set it up on a small machine: tcmalloc, 1 GiB of KV
            # cache, OpenMP threads bound to every core, none held back
            env.update(
                LD_PRELOAD=TCMALLOC,
                VLLM_CPU_KVCACHE_SPACE="1",
                VLLM_CPU_OMP_THREADS_BIND=f"0-{(os.cpu_count() or 1) - 1}",
                VLLM_CPU_NUM_OF_RESERVED_CPU="0",
            )
        self.log = open(folder / f"{name}.log", "w")  # noqa: SIM115 - lives as long as the worker
        self.proc = subprocess.Popen(
            [
                py,
                __file__,
                "--worker",
                name,
                "--folder",
                str(folder),
                "--block-size",
                str(block_size),
            ],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
        )

    def receive(self) -> dict:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith(RESULT):
                return json.loads(line[len(RESULT) :])
        raise RuntimeError(
            f"{self.name} worker ended (exit {self.proc.wait()}); see {self.log.name}"
        )

    def send(self, **cmd) -> dict:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        return self.receive()

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def drive(args) -> int:
    if not PEER_PY.exists():
        print("error: no .venv-peer; run `make peer-venv` first", file=sys.stderr)
        return 2
    folder = Path(tempfile.mkdtemp(prefix="vllm-peer-"))
    print(f"load average at start: {load_average():.2f}", flush=True)
    subprocess.run(
        [sys.executable, __file__, "--prepare", str(folder), "--prompt-len", str(args.prompt_len)],
        cwd=ROOT,
        check=True,
    )
    began = time.monotonic()
    workers = {n: Worker(n, folder, args.block_size) for n in ("ours", "hf", "vllm")}
    try:
        for w in workers.values():
            w.receive()  # ready
        print(f"all three engines loaded in {time.monotonic() - began:.0f} s", flush=True)
        seconds: dict[tuple[str, str], list[float]] = {}
        tokens: dict[tuple[str, str], list] = {}
        loads = []
        for r in range(args.rounds):
            loads.append(load_average())
            for job, engines in JOBS.items():
                n = engines[r % len(engines) :] + engines[: r % len(engines)]  # rotate the order
                new = args.new_tokens if job == "batch" else args.prefix_new_tokens
                for name in n:
                    got = workers[name].send(job=job, new_tokens=new, salt=f"round{r}")
                    seconds.setdefault((job, name), []).append(got["seconds"])
                    tokens[(job, name)] = got["tokens"]
                    print(f"  {job} {name}: {got['seconds']:.2f} s", flush=True)
            b = {e: seconds[("batch", e)][-1] for e in JOBS["batch"]}
            p = {
                e: seconds[("prefix_off", e)][-1] / seconds[("prefix_on", e)][-1]
                for e in ("ours", "vllm")
            }
            print(
                f"round {r + 1} (load {loads[-1]:.2f} at its start, {load_average():.2f} at its end): "
                f"ours / vLLM {b['vllm'] / b['ours']:.2f}x, ours / transformers "
                f"{b['hf'] / b['ours']:.2f}x, prefix speed-up ours {p['ours']:.2f}x, "
                f"vLLM {p['vllm']:.2f}x",
                flush=True,
            )
        rss = {n: w.send(job="rss")["rss_mib"] for n, w in workers.items()}
    except BaseException:
        print(f"the workers' logs are kept in {folder}", file=sys.stderr)
        raise
    finally:
        for w in workers.values():
            w.close()
    shutil.rmtree(folder)
    return report(args, seconds, tokens, rss, loads)


def report(args, seconds, tokens, rss, loads) -> int:
    med = {k: statistics.median(v) for k, v in seconds.items()}
    n = BATCH * args.new_tokens
    tps = {e: n / med[("batch", e)] for e in JOBS["batch"]}
    speedup = {e: med[("prefix_off", e)] / med[("prefix_on", e)] for e in JOBS["prefix_on"]}
    threads = os.cpu_count()
    print(
        f"\n{BATCH} prompts x {args.new_tokens} new tokens, one batch, fp32, greedy, EOS ignored, "
        f"{threads} threads each, block size {args.block_size}; median of {args.rounds} rounds; "
        f"load average (1 min) per round: {', '.join(f'{x:.2f}' for x in loads)}"
    )
    for e, label in (("ours", "ours"), ("vllm", "vLLM CPU"), ("hf", "transformers")):
        print(f"  {label:13} {tps[e]:7.1f} tok/s   resident set at the end {rss[e]:7.0f} MiB")
    print(f"  ours / vLLM         {tps['ours'] / tps['vllm']:.2f}x  (goal >= 1.0)")
    print(f"  ours / transformers {tps['ours'] / tps['hf']:.2f}x")
    print(
        f"prefix caching, {BATCH} requests sharing a {SYSTEM_LEN}-token system prompt, "
        f"{args.prefix_new_tokens} new tokens: speed-up on/off (median seconds)"
    )
    for e, label in (("ours", "ours"), ("vllm", "vLLM CPU")):
        off, on = med[("prefix_off", e)], med[("prefix_on", e)]
        print(f"  {label:13} {speedup[e]:.2f}x  ({off:.2f} s off, {on:.2f} s on)")
    print(f"  ours / vLLM speed-up {speedup['ours'] / speedup['vllm']:.2f}x  (goal >= 1.0)")
    ours = tokens[("batch", "ours")]
    same = {
        e: sum(a == b for a, b in zip(ours, tokens[("batch", e)], strict=True))
        for e in ("hf", "vllm")
    }
    print(
        f"identical greedy outputs, batch: ours = transformers {same['hf']}/{BATCH}, "
        f"ours = vLLM {same['vllm']}/{BATCH}"
    )
    prefix_same = {
        e: tokens[("prefix_on", e)] == tokens[("prefix_off", e)] for e in JOBS["prefix_on"]
    }
    cross = sum(
        a == b
        for a, b in zip(tokens[("prefix_on", "ours")], tokens[("prefix_on", "vllm")], strict=True)
    )
    print(
        f"identical, prefix: ours on = off {'yes' if prefix_same['ours'] else 'NO'}, vLLM on = off "
        f"{'yes' if prefix_same['vllm'] else 'NO'}, ours = vLLM {cross}/{BATCH}"
    )
    return 0 if same["hf"] == BATCH and all(prefix_same.values()) else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--prefix-new-tokens", type=int, default=32)
    ap.add_argument("--prompt-len", type=int, default=16, help="tokens in each batch prompt")
    ap.add_argument("--block-size", type=int, default=32, help="both engines (vLLM's CPU: x32)")
    ap.add_argument("--worker", choices=sorted(ENGINES), help=argparse.SUPPRESS)
    ap.add_argument("--prepare", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.prepare is not None:
        prepare(args.prepare, args.prompt_len)
        return 0
    if args.worker is not None:
        work(args.worker, args.folder, args.block_size)
        return 0
    return drive(args)


if __name__ == "__main__":
    sys.exit(main())
