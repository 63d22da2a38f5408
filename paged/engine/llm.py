"""``LLM``: the offline API. Prompts in, completions out, in input order.

One model, one KV arena and one runner live as long as the ``LLM``; each ``generate`` call gets a
fresh allocator and engine core over that arena, so ``num_preemptions`` describes the last call.
"""

from __future__ import annotations

import dataclasses
import operator
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any

from paged.engine.core import events as E
from paged.engine.core.engine_core import EngineConfig, EngineCore, build_core
from paged.engine.core.request import Request, SamplingParams, check_prompt
from paged.engine.engine_args import EngineArgs, check_output_path
from paged.engine.errors import InvalidConfigError, InvalidRequestError
from paged.engine.interop import kv_events as KV
from paged.engine.model.arena import bytes_per_block
from paged.engine.model.attention import resolve_backend
from paged.engine.model.loader import LoadedModel, load_model, resolve_device
from paged.engine.model.runner import build_runner
from paged.engine.run_args import KVEventArgs, ModelArgs
from paged.engine.trace.header import RunHeader
from paged.engine.trace.io import TraceWriter, make_header
from paged.kernels.fp8 import resolve_kv_dtype


@dataclass
class RequestOutput:
    prompt: str | None  # None when the prompt was given as token ids
    prompt_token_ids: list[int]
    token_ids: list[int]
    text: str
    finish_reason: str | None
    num_preemptions: int
    #: Which of the prompt's ``SamplingParams.n`` samples this is (0 when n is 1).
    sample_index: int = 0


#: The settings ``LLM()`` takes by name, by the class that checks them; a command's
#: ``--kv-events-hold`` is its own, after the run.
_SETTINGS: dict[type, frozenset[str]] = {
    EngineArgs: frozenset(f.name for f in fields(EngineArgs)),
    ModelArgs: frozenset(f.name for f in fields(ModelArgs)) - {"model"},
    KVEventArgs: frozenset(f.name for f in fields(KVEventArgs)) - {"kv_events_hold"},
}


class LLM:
    """``enable_prefix_caching`` (paging only) lets a request reuse the cached K/V blocks of a
    prompt prefix computed before in the same ``generate`` call. It is off by default, so a run
    and its trace are what the essay's baseline describes; ``generate`` outputs are the same
    either way (tested token for token in fp32).

    The engine settings (``num_blocks`` to ``enable_prefix_caching``) are ``EngineArgs``'
    fields; ``LLM.from_engine_args`` takes them already checked. Raises InvalidConfigError for a
    bad setting (block size <= 0, both or neither-sane memory sizes, a budget below one block,
    unknown allocator/backend/device, missing model path)."""

    def __init__(
        self,
        model: str | os.PathLike | LoadedModel | None = None,
        trace: str | os.PathLike | Callable[[E.Event], None] | None = None,
        progress: bool = True,
        **settings: Any,
    ) -> None:
        """``settings`` are exactly the fields of ``EngineArgs``, of ``ModelArgs`` but its
        ``model`` (``device``, ``dtype``, ``attention``) and of ``KVEventArgs`` but the command's
        hold, with their defaults; any other name is a TypeError, as for any function."""
        groups: dict[type, dict[str, Any]] = {cls: {} for cls in _SETTINGS}
        for name, value in settings.items():
            owner = next((cls for cls, names in _SETTINGS.items() if name in names), None)
            if owner is None:
                raise TypeError(f"LLM() got an unexpected keyword argument {name!r}")
            groups[owner][name] = value
        # Cheap checks first: a typo should not cost a model load.
        args = EngineArgs(**groups[EngineArgs])
        self._start(
            args,
            model,
            ModelArgs(**groups[ModelArgs]),
            KVEventArgs(**groups[KVEventArgs]),
            trace,
            progress,
        )

    @classmethod
    def from_engine_args(
        cls,
        args: EngineArgs,
        model: ModelArgs | LoadedModel | None = None,
        kv_events: KVEventArgs | None = None,
        trace: str | os.PathLike | Callable[[E.Event], None] | None = None,
        progress: bool = True,
    ) -> LLM:
        """An ``LLM`` with settings ``args``, ``model`` and ``kv_events`` (checked when they
        were built, not again); what it raises is ``LLM()``'s."""
        llm = cls.__new__(cls)
        run = model if isinstance(model, ModelArgs) else ModelArgs()
        source = model.model if isinstance(model, ModelArgs) else model
        llm._start(args, source, run, kv_events or KVEventArgs(), trace, progress)
        return llm

    def _start(
        self,
        args: EngineArgs,
        model: str | os.PathLike | LoadedModel | None,
        run: ModelArgs,
        kv: KVEventArgs,
        trace: str | os.PathLike | Callable[[E.Event], None] | None,
        progress: bool,
    ) -> None:
        if not isinstance(model, (LoadedModel, str, os.PathLike, type(None))):
            raise InvalidConfigError(f"model must be a path or a loaded model, got {model!r:.40}")
        if trace is not None and not callable(trace) and not isinstance(trace, (str, os.PathLike)):
            raise InvalidConfigError(f"trace must be a path or a callable, got {trace!r:.40}")
        if not isinstance(model, LoadedModel):
            # before the load: its loader must never see a bad one, and a backend this machine
            # cannot run is said before the seconds a load takes, not after
            resolve_backend(run.attention, resolve_device(run.device, run.dtype)[0])
        if trace is not None and not callable(trace):
            check_output_path(trace, "trace")
        self.model = (
            model
            if isinstance(model, LoadedModel)
            else load_model(model, device=run.device, dtype=run.dtype, progress=progress)
        )
        self.config = _engine_config(args, self.model)
        self.runner = build_runner(self.model, self.config, run.attention)
        self.arena = self.runner.arena
        self.trace = trace
        self.num_preemptions = 0
        self.prefill_tokens_computed = self.prefix_cache_hit_tokens = 0
        self.kv_publisher = (
            None if kv.kv_events is None else _publisher(kv.kv_events, kv.kv_events_allow_remote)
        )

    def close(self) -> None:
        """Send what the KV-event publisher still queues and close its sockets."""
        if self.kv_publisher is not None:
            self.kv_publisher.close()
            self.kv_publisher = None

    @property
    def tokenizer(self):
        return self.model.tokenizer

    def generate(
        self,
        prompts: str | Sequence[str] | Sequence[Sequence[int]],
        params: SamplingParams | Sequence[SamplingParams] | None = None,
        chat: bool = False,
        progress: Callable[[str], None] | None = None,
    ) -> list[RequestOutput]:
        """Complete every prompt (text, or token ids) and return outputs in input order; a prompt
        whose params ask for ``n`` samples gives ``n`` consecutive outputs (``sample_index`` 0 to
        n - 1), so the list is as long as the sum of the ``n``. A bare
        string is one prompt (as in vLLM), never a sequence of one-character prompts.
        ``chat`` wraps text prompts in the model's chat template; ``progress``, if given, is
        told after every engine step how far the run is (one line). Everything is validated before
        the first step: InvalidRequestError for an empty, over-long or non-text prompt,
        InvalidConfigError when a request could not fit in the KV arena even alone.

        A run that fails part-way leaves its trace without an end line (it reads as truncated)
        and this ``LLM`` as it was: no per-request sampler state survives it."""
        if isinstance(prompts, str):
            items: Sequence[str | Sequence[int]] = [prompts]
        elif isinstance(prompts, Sequence) and not isinstance(prompts, (bytes, bytearray)):
            items = prompts
        else:  # None, a dict or set (no order), a generator, a tensor: say so, not a TypeError
            raise InvalidRequestError(
                f"prompts must be a text or a list of prompts, got {type(prompts).__name__}"
            )
        if params is None:  # an empty list is not "the defaults": it is 0 params for N prompts
            params = SamplingParams()
        plist: list[SamplingParams] = (
            list(params) if isinstance(params, (list, tuple)) else [params] * len(items)  # type: ignore[list-item]
        )
        if len(plist) != len(items):
            raise InvalidRequestError(f"{len(plist)} sampling params for {len(items)} prompts")
        if not all(isinstance(p, SamplingParams) for p in plist):
            raise InvalidRequestError("params must be SamplingParams (or a list of them)")
        ids = [self._tokenize(i, p, chat) for i, p in enumerate(items)]
        sps: list[SamplingParams] = [p for p in plist if isinstance(p, SamplingParams)]
        core = build_core(self.config, self.runner, self.model.config.stop_ids)
        reqs = [
            core.add_request(r)
            for i, (t, p) in enumerate(zip(ids, sps, strict=True))
            for r in _sample_requests(str(i), t, p)
        ]
        writer = self._attach_trace(core)
        if self.kv_publisher is not None:  # a fresh allocator: the cache starts empty
            self.kv_publisher.publish([KV.AllBlocksCleared()])
            core.bus.subscribe(KV.EngineEventTranslator(self.kv_publisher))
        try:
            core.run_to_completion(None if progress is None else _reporter(reqs, progress))
        except BaseException:
            if writer is not None:
                writer.abort()
            raise
        finally:
            for r in reqs:  # a seeded generator left behind would skew the next call's samples
                self.runner.forget(r.req_id)
        if writer is not None:
            writer.close()
        self.num_preemptions = core.num_preemptions
        self.prefill_tokens_computed = core.prefill_tokens_computed
        self.prefix_cache_hit_tokens = core.prefix_cache_hit_tokens
        prompt_of = [p for p, q in zip(items, sps, strict=True) for _ in range(q.n)]
        index_of = [k for q in sps for k in range(q.n)]
        return [
            RequestOutput(
                p if isinstance(p, str) else None,
                r.prompt_token_ids,
                r.output_token_ids,
                self.tokenizer.decode(r.output_token_ids, skip_special_tokens=True),
                r.finish_reason,
                r.num_preemptions,
                k,
            )
            for p, k, r in zip(prompt_of, index_of, reqs, strict=True)
        ]

    def _tokenize(self, i: int, prompt: str | Sequence[int], chat: bool) -> list[int]:
        if isinstance(prompt, str):
            check_prompt(i, prompt)
            if chat:
                msgs = [{"role": "user", "content": prompt}]
                return list(
                    self.tokenizer.apply_chat_template(
                        msgs, add_generation_prompt=True, tokenize=True, return_dict=False
                    )
                )
            return list(self.tokenizer.encode(prompt))
        try:
            if isinstance(prompt, (bytes, bytearray, dict, set)):
                raise TypeError
            ids = [operator.index(t) for t in prompt if not isinstance(t, bool)]
            if len(ids) != len(prompt):  # a bool among the ids
                raise TypeError
        except TypeError:
            raise InvalidRequestError(f"prompt {i} must be text or a list of token ids") from None
        if not ids:
            raise InvalidRequestError(f"prompt {i} is empty")
        vocab = self.model.config.vocab_size
        if any(not 0 <= t < vocab for t in ids):
            raise InvalidRequestError(f"prompt {i} holds token ids outside [0, {vocab})")
        return ids

    def _attach_trace(self, core: EngineCore) -> TraceWriter | None:
        if self.trace is None:
            return None
        if callable(self.trace):
            core.bus.subscribe(self.trace)
            return None
        name = self.config.allocator
        run = RunHeader.from_engine(name, self.config, core.allocator.view_block_size)
        header = make_header(
            [run],
            model=self.model.name,
            device=str(self.model.device),
        )
        try:
            writer = TraceWriter(self.trace, header)
        except OSError as e:
            raise InvalidConfigError(
                f"cannot write the trace {str(self.trace)[:200]!r}: "
                f"{e.strerror or type(e).__name__}"
            ) from None
        core.bus.subscribe(writer.sink(name))
        return writer


def _engine_config(args: EngineArgs, model: LoadedModel) -> EngineConfig:
    """``args`` made concrete by what the model tells: its context length, and the bytes of one
    block in the arena's element type (which sizes a budget: float8 fits twice bf16's blocks)."""
    kv_dtype = resolve_kv_dtype(args.kv_cache_dtype, model.dtype)
    per_block = bytes_per_block(model.config, args.block_size, kv_dtype)
    return args.create_engine_config(model.config.max_position_embeddings, per_block)


def _publisher(endpoint: str, allow_remote: bool) -> KV.KVEventPublisher:
    try:
        return KV.KVEventPublisher(endpoint, allow_remote=allow_remote)
    except KV.EndpointError as e:  # the port is taken
        raise InvalidConfigError(str(e)) from None


def _sample_requests(rid: str, ids: list[int], params: SamplingParams) -> list[Request]:
    """The requests behind one prompt: itself when ``params.n`` is 1, else ``n`` samples
    ``rid.k`` seeded ``seed + k``, each after the first sharing the first one's prompt blocks."""
    if params.n == 1:
        return [Request(rid, ids, params)]
    out = []
    for k in range(params.n):
        seed = None if params.seed is None else params.seed + k
        p = dataclasses.replace(params, n=1, seed=seed)
        out.append(Request(f"{rid}.{k}", list(ids), p, parent_id=f"{rid}.0" if k else None))
    return out


def _reporter(reqs: list[Request], say: Callable[[str], None]) -> Callable[[EngineCore], None]:
    """An ``on_step`` that tells ``say`` the step, the requests finished and the tokens made."""

    def on_step(core: EngineCore) -> None:
        done = sum(1 for r in reqs if r.finish_reason is not None)
        made = sum(len(r.output_token_ids) for r in reqs)
        say(f"step {core.step_count}: {done}/{len(reqs)} requests finished, {made} tokens")

    return on_step
