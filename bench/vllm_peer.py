"""Our engine beside vLLM's CPU build and transformers: throughput and prefix caching, one run.

Each engine runs in its own long-lived process (vLLM in ``.venv-peer``, ``make peer-venv``), so
each one's resident set is its own; the driver hands them the same token ids, one job at a time,
interleaved, and times nothing itself (each worker times its own ``generate``); before each
job it waits until every engine's processes are idle, so no job pays for another's threads
still spinning after theirs. Jobs:

- ``batch``: 16 prompts of equal length (no padding, so transformers' batch is its exact case)
  x 64 new tokens in one batch, greedy, EOS ignored: ours, vLLM, transformers.
- ``prefix_off`` / ``prefix_on``: bench/prefix.py's workload (16 requests sharing a 256-token
  system prompt, 32 new tokens) with prefix caching off and on: ours and vLLM. vLLM runs one
  engine with caching on: "off" gives each request its own ``cache_salt`` (vLLM's switch for
  keeping requests from sharing blocks) and "on" starts from ``reset_prefix_cache()``, so no
  round reuses an earlier round's blocks; ours gets a fresh allocator per ``generate`` anyway.

Two lanes, one per precision (``--lanes``): float32 (ours, vLLM and transformers, all in fp32:
the exactness lane) and bfloat16, the dtype vLLM's CPU build runs by default (its ``auto`` on
x86), ours with ``dtype="bfloat16"`` (cpu.c's bf16 matmul) against vLLM with the same. Each
lane's engines run in their own processes, interleaved with the other lane's.

Rounds rotate the engines' order; each figure is the median of the rounds. The 1-minute load
average (``uptime``) is printed beside each round: on a shared machine the ratios mean more
than the tok/s. Beside each batch figure, its roofline fraction: the machine's read bandwidth
and its 2048^3 GEMM peak in fp32 and bf16 (torch's oneDNN/MKL) are measured in the same run, before
and after the rounds (the better of the two), and a decode step at batch 16 (2 x params FLOPs
per token, every weight read once per step) attains at most min(GEMM peak, bandwidth x
16 tokens x 2 FLOPs / bytes per weight). Exits 1 when the fp32 lane's greedy tokens differ from
transformers', or a prefix-cached run's from its uncached one.
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
DTYPES = ("float32", "bfloat16")
#: transformers runs in the float32 lane only: it is there as the token-exactness reference
LANE_ENGINES = {"float32": ("ours", "vllm", "hf"), "bfloat16": ("ours", "vllm")}


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
    total = 0
    for pid in tree_pids(os.getpid()):
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            total += next(int(x.split()[1]) for x in status.splitlines() if x.startswith("VmRSS"))
        except (OSError, StopIteration, ValueError):
            continue
    return total / 1024


def tree_pids(root: int) -> list[int]:
    """``root`` and every process under it (vLLM keeps its engine and workers in children)."""
    pids, todo = [], [root]
    while todo:
        pid = todo.pop()
        pids.append(pid)
        try:
            for task in Path(f"/proc/{pid}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, ValueError):
            continue
    return pids


def cpu_ticks(pids: list[int]) -> int:
    """User and system CPU time of ``pids`` so far, in clock ticks."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
        except (OSError, IndexError, ValueError):
            continue
    return total


def settle(roots: list[int], window: float = 0.5, timeout: float = 15.0) -> float:
    """Wait until the engines' processes are idle (under ~5 % of a core over ``window``), and
    return how long that took. An engine's threads can go on spinning after its job has
    answered (vLLM's CPU worker did for 0.5-1.5 s after each job, measured from /proc), and the
    next job, often another engine's, would pay for it on a 2-core machine."""
    began = time.monotonic()
    hz = os.sysconf("SC_CLK_TCK")
    while time.monotonic() - began < timeout:
        pids = [p for r in roots for p in tree_pids(r)]
        before = cpu_ticks(pids)
        time.sleep(window)
        if cpu_ticks(pids) - before <= 0.05 * window * hz:
            break
    return time.monotonic() - began


def roofline_peaks() -> dict:
    """This machine, now: read bandwidth (GB/s, the best of 5 sums of 512 MiB) and a 2048^3
    matmul's GFLOP/s in fp32 and bf16 (the best of 5 each), at torch's thread count."""
    import torch

    def best(f, n=5) -> float:
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            f()
            times.append(time.perf_counter() - t0)
        return min(times)

    x = torch.ones(128 << 20)
    out = {"bandwidth_gbs": x.numel() * 4 / best(x.sum) / 1e9}
    del x
    for name, dt in (("float32", torch.float32), ("bfloat16", torch.bfloat16)):
        a, b = torch.randn(2048, 2048).to(dt), torch.randn(2048, 2048).to(dt)
        out[f"gemm_{name}_gflops"] = 2 * 2048**3 / best(lambda a=a, b=b: a @ b) / 1e9
    return out


class Ours:
    def __init__(self, folder: Path, block_size: int, dtype: str) -> None:
        from paged.engine.core.request import SamplingParams
        from paged.engine.llm import LLM
        from paged.engine.model.loader import load_model

        model = load_model(device="cpu", dtype=dtype, progress=False)
        # every weight a decode step reads once, the tied embedding (the LM head) counted once
        w = model.weights
        self.params = (
            sum(t.numel() for layer in w.layers for t in vars(layer).values())
            + w.embed.numel()
            + w.final_norm.numel()
        )
        self.sampling = SamplingParams
        self.llm = {
            c: LLM(model, block_size=block_size, enable_prefix_caching=c, progress=False)
            for c in (False, True)
        }

    def run(self, job: str, prompts: list[list[int]], new_tokens: int, salt: str):
        llm = self.llm[job == "prefix_on"]
        outs = llm.generate(prompts, self.sampling(max_tokens=new_tokens, ignore_eos=True))
        return [o.token_ids for o in outs]


class Transformers:
    def __init__(self, folder: Path, block_size: int, dtype: str) -> None:
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
    def __init__(self, folder: Path, block_size: int, dtype: str) -> None:
        from vllm import LLM, SamplingParams

        self.params = SamplingParams
        self.llm = LLM(
            model=str(folder / "hf"),
            dtype=dtype,
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


def work(name: str, folder: Path, block_size: int, dtype: str) -> None:
    global _answers
    # answers keep the pipe; everything else written to stdout, by this process or its children
    # (vLLM logs there), goes to the worker's log with stderr
    _answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    if name != "vllm":  # vLLM sets its own OpenMP up
        from paged.engine.threads import configure_openmp

        configure_openmp()  # before torch loads, as bench/throughput.py does for both
    work_load = json.loads((folder / "workload.json").read_text())
    engine = ENGINES[name](folder, block_size, dtype)
    engine.run("batch", work_load["batch"][:2], 2, "warm-up")  # one-off allocations
    answer({"ready": True})
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["job"] == "rss":
            answer({"rss_mib": rss_mib()})
            continue
        if cmd["job"] == "roofline":
            answer({**roofline_peaks(), "params": getattr(engine, "params", 0)})
            continue
        prompts = work_load["batch" if cmd["job"] == "batch" else "prefix"]
        t0 = time.perf_counter()
        tokens = engine.run(cmd["job"], prompts, cmd["new_tokens"], cmd["salt"])
        answer({"seconds": time.perf_counter() - t0, "tokens": tokens})


# --- the driver ----------------------------------------------------------------------------------


class Worker:
    def __init__(self, name: str, folder: Path, block_size: int, dtype: str) -> None:
        self.name = f"{name} {dtype}"
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
        self.log = open(folder / f"{name}-{dtype}.log", "w")  # noqa: SIM115 - lives as long as the worker
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
                "--dtype",
                dtype,
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
    lanes = [x.strip() for x in args.lanes.split(",") if x.strip()]
    if not lanes or any(x not in DTYPES for x in lanes):
        print(f"error: --lanes takes {' and/or '.join(DTYPES)}", file=sys.stderr)
        return 2
    folder = Path(tempfile.mkdtemp(prefix="vllm-peer-"))
    print(f"load average at start: {load_average():.2f}", flush=True)
    subprocess.run(
        [sys.executable, __file__, "--prepare", str(folder), "--prompt-len", str(args.prompt_len)],
        cwd=ROOT,
        check=True,
    )
    began = time.monotonic()
    workers = {
        (n, d): Worker(n, folder, args.block_size, d) for d in lanes for n in LANE_ENGINES[d]
    }
    try:
        for w in workers.values():
            w.receive()  # ready
        print(f"{len(workers)} engines loaded in {time.monotonic() - began:.0f} s", flush=True)
        peaks = {d: workers[("ours", d)].send(job="roofline") for d in lanes}
        seconds: dict[tuple[str, str, str], list[float]] = {}
        tokens: dict[tuple[str, str, str], list] = {}
        loads, waited = [], 0.0
        for r in range(args.rounds):
            loads.append(load_average())
            for lane in lanes[r % len(lanes) :] + lanes[: r % len(lanes)]:
                for job, all_engines in JOBS.items():
                    engines = tuple(e for e in all_engines if e in LANE_ENGINES[lane])
                    order = engines[r % len(engines) :] + engines[: r % len(engines)]
                    new = args.new_tokens if job == "batch" else args.prefix_new_tokens
                    for name in order:
                        waited = max(waited, settle([w.proc.pid for w in workers.values()]))
                        got = workers[(name, lane)].send(job=job, new_tokens=new, salt=f"round{r}")
                        seconds.setdefault((lane, job, name), []).append(got["seconds"])
                        tokens[(lane, job, name)] = got["tokens"]
                        print(f"  {lane} {job} {name}: {got['seconds']:.2f} s", flush=True)
                b = {e: seconds[(lane, "batch", e)][-1] for e in LANE_ENGINES[lane]}
                p = {
                    e: seconds[(lane, "prefix_off", e)][-1] / seconds[(lane, "prefix_on", e)][-1]
                    for e in ("ours", "vllm")
                }
                hf = f", ours / transformers {b['hf'] / b['ours']:.2f}x" if "hf" in b else ""
                print(
                    f"round {r + 1} {lane} (load {loads[-1]:.2f} at the round's start, "
                    f"{load_average():.2f} now): ours / vLLM {b['vllm'] / b['ours']:.2f}x{hf}, "
                    f"prefix speed-up ours {p['ours']:.2f}x, vLLM {p['vllm']:.2f}x",
                    flush=True,
                )
        for d in lanes:  # the machine's best of before and after
            after = workers[("ours", d)].send(job="roofline")
            peaks[d] = {k: max(v, after[k]) for k, v in peaks[d].items()}
        rss = {k: w.send(job="rss")["rss_mib"] for k, w in workers.items()}
        print(f"before each job the engines were let go idle: {waited:.1f} s at most", flush=True)
    except BaseException:
        print(f"the workers' logs are kept in {folder}", file=sys.stderr)
        raise
    finally:
        for w in workers.values():
            w.close()
    shutil.rmtree(folder)
    print(
        f"\n{BATCH} prompts x {args.new_tokens} new tokens, one batch, greedy, EOS ignored, "
        f"{os.cpu_count()} threads each, block size {args.block_size}; median of {args.rounds} "
        f"rounds; load average (1 min) per round: {', '.join(f'{x:.2f}' for x in loads)}"
    )
    p0 = peaks[lanes[0]]
    print(
        f"this machine in this run: read bandwidth {p0['bandwidth_gbs']:.1f} GB/s, 2048^3 GEMM "
        f"{p0['gemm_float32_gflops']:.0f} GFLOP/s fp32, {p0['gemm_bfloat16_gflops']:.0f} "
        "GFLOP/s bf16"
    )
    ok = True
    for lane in lanes:
        ok &= report(args, lane, seconds, tokens, rss, peaks[lane])
    return 0 if ok else 1


def roofline(tps: float, lane: str, peaks: dict) -> tuple[float, str]:
    """The fraction of the decode roofline ``tps`` tokens/s reaches, and what bounds it."""
    params, size = peaks["params"], 4 if lane == "float32" else 2
    compute = peaks[f"gemm_{lane}_gflops"] * 1e9
    memory = peaks["bandwidth_gbs"] * 1e9 * BATCH * 2 / size  # FLOP/s the weights' reads allow
    bound = "GEMM peak" if compute <= memory else "bandwidth"
    return tps * 2 * params / min(compute, memory), bound


def report(args, lane, seconds, tokens, rss, peaks) -> bool:
    engines = LANE_ENGINES[lane]
    med = {(j, e): statistics.median(seconds[(lane, j, e)]) for j in JOBS for e in engines
           if (lane, j, e) in seconds}  # fmt: skip
    n = BATCH * args.new_tokens
    tps = {e: n / med[("batch", e)] for e in engines}
    speedup = {e: med[("prefix_off", e)] / med[("prefix_on", e)] for e in ("ours", "vllm")}
    print(f"{lane} lane (params {peaks['params'] / 1e6:.1f} M)")
    for e, label in (("ours", "ours"), ("vllm", "vLLM CPU"), ("hf", "transformers")):
        if e in tps:
            frac, bound = roofline(tps[e], lane, peaks)
            print(
                f"  {label:13} {tps[e]:7.1f} tok/s   {frac:6.1%} of the {lane} roofline "
                f"({bound})   resident set at the end {rss[(e, lane)]:7.0f} MiB"
            )
    print(f"  ours / vLLM         {tps['ours'] / tps['vllm']:.2f}x  (goal >= 1.0)")
    if "hf" in tps:
        print(f"  ours / transformers {tps['ours'] / tps['hf']:.2f}x")
    print(
        f"  prefix caching, {BATCH} requests sharing a {SYSTEM_LEN}-token system prompt, "
        f"{args.prefix_new_tokens} new tokens: speed-up on/off (median seconds)"
    )
    for e, label in (("ours", "ours"), ("vllm", "vLLM CPU")):
        off, on = med[("prefix_off", e)], med[("prefix_on", e)]
        print(f"    {label:13} {speedup[e]:.2f}x  ({off:.2f} s off, {on:.2f} s on)")
    print(f"    ours / vLLM speed-up {speedup['ours'] / speedup['vllm']:.2f}x  (goal >= 1.0)")
    ours = tokens[(lane, "batch", "ours")]
    same = {
        e: sum(a == b for a, b in zip(ours, tokens[(lane, "batch", e)], strict=True))
        for e in engines
        if e != "ours"
    }
    print(
        "  identical greedy outputs, batch: "
        + ", ".join(f"ours = {e} {k}/{BATCH}" for e, k in same.items())
    )
    prefix_same = {
        e: tokens[(lane, "prefix_on", e)] == tokens[(lane, "prefix_off", e)]
        for e in ("ours", "vllm")
    }
    cross = sum(
        a == b
        for a, b in zip(
            tokens[(lane, "prefix_on", "ours")], tokens[(lane, "prefix_on", "vllm")], strict=True
        )
    )
    print(
        f"  identical, prefix: ours on = off {'yes' if prefix_same['ours'] else 'NO'}, vLLM on = "
        f"off {'yes' if prefix_same['vllm'] else 'NO'}, ours = vLLM {cross}/{BATCH}"
    )
    # bf16 greedy tokens are not expected to equal another engine's: only fp32 is exact
    return same.get("hf", BATCH) == BATCH and all(prefix_same.values())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--prefix-new-tokens", type=int, default=32)
    ap.add_argument("--prompt-len", type=int, default=16, help="tokens in each batch prompt")
    ap.add_argument("--block-size", type=int, default=32, help="both engines (vLLM's CPU: x32)")
    ap.add_argument("--lanes", default=",".join(DTYPES), help="precisions to run (%(default)s)")
    ap.add_argument("--dtype", choices=DTYPES, default="float32", help=argparse.SUPPRESS)
    ap.add_argument("--worker", choices=sorted(ENGINES), help=argparse.SUPPRESS)
    ap.add_argument("--prepare", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.prepare is not None:
        prepare(args.prepare, args.prompt_len)
        return 0
    if args.worker is not None:
        work(args.worker, args.folder, args.block_size, args.dtype)
        return 0
    return drive(args)


if __name__ == "__main__":
    sys.exit(main())
