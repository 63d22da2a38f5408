"""Run one scenario under several allocators, in lockstep, and write every event to a trace.

Lockstep (step every run once per round) keeps the runs aligned step for step, so a live viewer
sees both sides of the comparison grow together. With the real model the forward pass runs for
each allocator; with ``forward="skip"`` a stand-in model stops each request at its ``output_len``.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import IO

from paged.engine.core import events as E
from paged.engine.core.allocators import PagedAllocator
from paged.engine.core.engine_core import EngineConfig, EngineCore, build_core
from paged.engine.core.request import Request, SamplingParams
from paged.engine.engine_args import KV_CACHE_DTYPES, EngineArgs, check_output_path
from paged.engine.errors import InvalidConfigError
from paged.engine.sim.simulate import EOS, FILLER, DryRunner
from paged.engine.trace.header import RunHeader
from paged.engine.trace.io import TraceError, TraceWriter, check_header, make_header
from paged.engine.trace.scenario import FILLER_TEXT, AttentionSpec, Scenario
from paged.engine.trace.scenario_runs import ScenarioRun, by_allocator


@dataclass
class Run:
    name: str
    core: EngineCore
    requests: list[Request]


@dataclass
class Recorded:
    """A finished recording: its trace's header line (the object, as written) and each run by
    name."""

    header: dict
    runs: dict[str, Run]


def _tokenize(sr, tokenizer) -> list[int]:
    if sr.prompt_len is not None:
        ids: list[int] = []
        filler = tokenizer.encode(FILLER_TEXT, add_special_tokens=False)
        while len(ids) < sr.prompt_len:
            ids += filler
        return ids[: sr.prompt_len]
    if sr.chat:
        msgs = [{"role": "user", "content": sr.prompt}]
        return list(
            tokenizer.apply_chat_template(
                msgs, add_generation_prompt=True, tokenize=True, return_dict=False
            )
        )
    return tokenizer.encode(sr.prompt)


def _dry_tokens(sr) -> list[int]:
    n = sr.prompt_len if sr.prompt_len is not None else max(1, round(len(sr.prompt.split()) * 1.3))
    return [FILLER] * n


def build_requests(scenario: Scenario, tokenizer=None) -> list[Request]:
    """The scenario's requests; one with ``n`` samples becomes ``id.0`` .. ``id.(n-1)``, sample
    ``k`` seeded ``seed + k`` and sharing sample 0's prompt blocks (``parent_id``)."""
    reqs = []
    for sr in scenario.requests:
        ids = _tokenize(sr, tokenizer) if tokenizer is not None else _dry_tokens(sr)
        for k, req_id in enumerate(sr.sample_ids):
            seed = None if sr.seed is None else sr.seed + k
            reqs.append(
                Request(
                    req_id=req_id,
                    prompt_token_ids=list(ids),
                    params=SamplingParams(
                        max_tokens=sr.max_tokens,
                        ignore_eos=sr.ignore_eos,
                        temperature=sr.temperature,
                        seed=seed,
                    ),
                    arrival_step=sr.arrival_step,
                    forced_output_len=None
                    if tokenizer is not None
                    else (sr.output_len or sr.max_tokens),
                    parent_id=sr.sample_ids[0] if k else None,
                )
            )
    return reqs


def _copy(r: Request) -> Request:
    return Request(
        req_id=r.req_id,
        prompt_token_ids=list(r.prompt_token_ids),
        params=r.params,
        arrival_step=r.arrival_step,
        forced_output_len=r.forced_output_len,
        known_final_len=r.known_final_len,
        parent_id=r.parent_id,
    )


def record(
    scenario: Scenario,
    allocators: list[str] | None,
    out: str | IO[str] | None = None,
    *,
    forward: str = "model",
    model_path: str | None = None,
    device: str = "auto",
    dtype: str | None = None,
    attention: str = "auto",
    sinks: dict | None = None,
    progress: Callable[[str], None] | None = None,
    model=None,
    kv_cache_dtype: str = "auto",
) -> Recorded:
    """Record ``scenario`` under each allocator (one run named after each), or, when
    ``allocators`` is empty or None, under the scenario's own ``[[runs]]``. ``out`` (a path or
    stream) receives the trace; ``sinks`` maps run names to extra event subscribers; ``model``
    is an already loaded model (else one is loaded, in ``dtype`` or the scenario's);
    ``kv_cache_dtype`` as in ``EngineArgs``, for runs that do not set their own. Returns the
    header and the finished runs."""
    if kv_cache_dtype not in KV_CACHE_DTYPES:
        raise InvalidConfigError(f"unknown KV cache dtype {str(kv_cache_dtype)[:40]!r}")
    plans = by_allocator(allocators) if allocators else scenario.runs
    if not plans:
        raise InvalidConfigError("no allocator to record")
    if kv_cache_dtype != "auto":
        plans = tuple(
            replace(p, kv_cache_dtype=kv_cache_dtype) if p.kv_cache_dtype == "auto" else p
            for p in plans
        )
    if isinstance(out, (str, os.PathLike)):
        check_output_path(out, "trace")  # before the model loads
    say = progress or (lambda msg: None)
    make_runner, eos, model_name, device_name, tokenizer = _forward(
        forward, model_path, device, dtype or scenario.dtype, attention, say, model
    )
    base = build_requests(scenario, tokenizer)
    if forward == "model" and any(p.allocator in ("oracle", "pow2") for p in plans):
        probe = ScenarioRun("paged", kv_cache_dtype=kv_cache_dtype)
        _tell_oracle(base, _engine_config(scenario, probe), make_runner, eos, say)
    runs: dict[str, Run] = {}
    configs: list[RunHeader] = []
    for plan in plans:
        cfg = _engine_config(scenario, plan)
        runner = make_runner(cfg)
        core = build_core(cfg, runner, eos)
        reqs = [core.add_request(_copy(r)) for r in base]
        runs[plan.label] = Run(plan.label, core, reqs)
        # what this run differs by (plain runs keep the old header)
        if plan.plain:
            kv = {}
        elif forward == "model":  # a real arena backs the run: it says what it stores
            kv = _arena_kv_config(runner.arena)
        else:
            kv = _dry_kv_config(plan, scenario)
        configs.append(RunHeader.from_engine(plan.label, cfg, core.allocator.view_block_size, **kv))
    header = make_header(
        configs,
        model=model_name,
        device=device_name,
        scenario=scenario.raw,
        forward=forward,
        requests=[
            {"id": r.req_id, "prompt_len": r.prompt_len, "max_tokens": r.params.max_tokens}
            for r in base
        ],
    )
    try:  # what a reader would refuse (runs of unequal bytes), refused before any step
        check_header(header)
    except TraceError as e:
        raise InvalidConfigError(f"this recording could not be read back: {e}") from None
    writer = TraceWriter(out, header, flush=True) if out is not None else None
    if scenario.attention is not None and forward == "model":
        for run in runs.values():
            _probe(run, scenario.attention)
    for name, run in runs.items():
        if writer is not None:
            run.core.bus.subscribe(writer.sink(name))
        for sink in (sinks or {}).get(name, ()):
            run.core.bus.subscribe(sink)
    try:
        _lockstep(list(runs.values()), say)
    except BaseException:
        if writer is not None:
            writer.abort()  # no end line: a failed recording reads as truncated
        raise
    if writer is not None:
        writer.close()
    return Recorded(header, runs)


def _probe(run: Run, spec: AttentionSpec) -> None:
    """Record how ``spec``'s requests read their K/V in ``run``, a paged run of the real model
    (a contiguous run's table is one slot a block: nothing to walk)."""
    from functools import partial

    from paged.engine.model.attention import AttentionProbe

    if not isinstance(run.core.allocator, PagedAllocator):
        return
    from paged.kernels.cpu import MAX_TILE

    if run.core.allocator.block_size > MAX_TILE:
        raise InvalidConfigError(
            f"[attention] walks one block a tile: blocks of at most {MAX_TILE} slots, "
            f"not {run.core.allocator.block_size}"
        )
    emit = partial(run.core.bus.emit, E.AttentionRead)
    attention = run.core.runner.attention  # type: ignore[attr-defined]
    attention.probe = AttentionProbe(spec.requests, spec.layer, spec.kv_head, emit)
    if spec.split is not None:
        attention.set_split(spec.split)


def _arena_kv_config(arena) -> dict:
    """A real arena's element type and bytes per block."""
    return {
        "kv_cache_dtype": str(arena.dtype).removeprefix("torch."),
        "block_bytes": arena.nbytes // arena.num_blocks,
    }


#: What a dry run's arena would store, by ``kv_cache_dtype`` ("auto": the scenario's dtype,
#: else float32, the CPU default). torch's names, as a real arena writes them.
_DRY_KV_DTYPES = {"fp8_e4m3": "float8_e4m3fn", "fp8_e5m2": "float8_e5m2"}


def _dry_kv_config(plan: ScenarioRun, scenario: Scenario) -> dict:
    """A dry run stands for the default model (SmolLM2-135M, the capacity preset of the same
    name): its blocks weigh what that model's blocks would, so runs of different element types
    still compare equal bytes without loading it."""
    from paged.engine.sim.capacity import preset

    dtype = _DRY_KV_DTYPES.get(plan.kv_cache_dtype, scenario.dtype or "float32")
    shape = preset("smollm2-135m", dtype)
    return {"kv_cache_dtype": dtype, "block_bytes": shape.bytes_per_token * scenario.block_size}


def _engine_config(scenario: Scenario, plan: ScenarioRun) -> EngineConfig:
    blocks = plan.arena_blocks(scenario.num_blocks)
    swaps = plan.preemption_mode == "swap"
    return EngineArgs(
        allocator=plan.allocator,
        num_blocks=blocks,
        block_size=scenario.block_size,
        max_model_len=scenario.max_model_len,
        kv_cache_dtype=plan.kv_cache_dtype,
        preemption_mode=plan.preemption_mode,
        num_cpu_blocks=plan.tier_blocks(blocks) if swaps else None,
        # the scenario's switch is for its paged runs: a contiguous run shares nothing
        enable_prefix_caching=scenario.enable_prefix_caching and plan.allocator == "paged",
    ).create_engine_config()


def _lockstep(runs: list[Run], say: Callable[[str], None]) -> None:
    total = sum(len(r.requests) for r in runs)
    while any(r.core.has_unfinished() for r in runs):
        for r in runs:
            if r.core.has_unfinished():
                r.core.step()
        done = sum(1 for r in runs for q in r.requests if q.finish_reason)
        step = max(r.core.step_count for r in runs)
        say(f"step {step}: {done}/{total} requests finished")


def _tell_oracle(
    base: list[Request], config: EngineConfig, make_runner, eos, say: Callable[[str], None]
) -> None:
    """An oracle knows each final length in advance: learn them from a silent paged run."""
    say("probing final lengths for the oracle/pow2 policies ...")
    core = build_core(config, make_runner(config), eos)
    probe = [core.add_request(_copy(r)) for r in base]
    core.run_to_completion()
    for r, p in zip(base, probe, strict=True):
        r.known_final_len = p.num_computed


def _forward(forward, model_path, device, dtype, attention, say, model=None):
    """``make_runner(config)``: a runner over a fresh arena built as ``config`` says (with a CPU
    tier when it swaps); and what the header says of the model."""
    if forward == "skip":
        return (lambda config: DryRunner()), EOS, "none (forward skipped)", "none", None
    if forward != "model":
        raise InvalidConfigError(f"forward must be 'model' or 'skip', got {forward!r}")
    from paged.engine.model.loader import load_model
    from paged.engine.model.runner import build_runner

    if model is None:
        model = load_model(model_path, device=device, dtype=dtype)
    say(f"model loaded on {model.device}")
    return (
        lambda config: build_runner(model, config, attention),
        model.config.stop_ids,
        model.name,
        str(model.device),
        model.tokenizer,
    )


#: How often a recording says which step it is at, in seconds (a dry step takes microseconds).
PROGRESS_EVERY_S = 1.0


def stderr_progress() -> Callable[[str], None]:
    """A ``progress`` for ``record`` that prints on stderr: every message, except that the
    per-step line ("step N: ...") comes at most once per ``PROGRESS_EVERY_S`` (a 20,000-step
    dry run printed 20,000 lines)."""
    last = [-math.inf]

    def say(msg: str) -> None:
        if msg.startswith("step "):
            now = time.monotonic()
            if now - last[0] < PROGRESS_EVERY_S:
                return
            last[0] = now
        print(msg, file=sys.stderr, flush=True)

    return say
