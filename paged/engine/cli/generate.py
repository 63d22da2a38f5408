"""``python -m paged generate``: complete prompts on the real model through the paged engine."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from paged.engine.core.request import SamplingParams, check_prompt
from paged.engine.engine_args import EngineArgs, check_output_path
from paged.engine.errors import InvalidRequestError
from paged.engine.files import NotRegularFileError, read_bounded
from paged.engine.run_args import KVEventArgs, ModelArgs


def add_parser(sub) -> None:
    p = sub.add_parser("generate", help="generate completions with the paged-KV engine")
    p.add_argument("prompts", nargs="*", metavar="PROMPT", help="prompt text (several allowed)")
    p.add_argument(
        "--prompts-file", metavar="F", help="a JSON list of strings, or one prompt per line"
    )
    p.add_argument("--max-tokens", type=int, default=64, metavar="N", help="new tokens per prompt")
    p.add_argument("--json", action="store_true", help="one JSON object per prompt, then a summary")
    p.add_argument("--ignore-eos", action="store_true", help="always generate --max-tokens tokens")
    EngineArgs.add_cli_args(p)
    p.add_argument("--chat", action="store_true", help="wrap each prompt in the chat template")
    ModelArgs.add_cli_args(p)
    p.add_argument("--temperature", type=float, default=0.0, metavar="T")
    p.add_argument("--top-p", type=float, default=1.0, metavar="P")
    p.add_argument("--seed", type=int, default=None, metavar="S")
    p.add_argument(
        "--n",
        type=int,
        default=1,
        metavar="N",
        help="samples per prompt (sample i seeded seed + i); paging shares the "
        "prompt's blocks and copies a block on write",
    )
    p.add_argument("--trace", default=None, metavar="PATH", help="write the run's event trace")
    KVEventArgs.add_cli_args(p)
    p.set_defaults(run=run)


#: Far more text than any run here generates from; without a bound ``--prompts-file /dev/zero``
#: reads without end into a MemoryError traceback.
MAX_PROMPTS_FILE_BYTES = 64 << 20


def read_prompts_file(path: str) -> list[str]:
    """A JSON list of strings, or else one prompt per non-blank line; a UTF-8 byte-order mark is
    skipped. Raises InvalidRequestError for a missing or unreadable file, a binary one (NUL
    bytes), or JSON that is not a list of strings (an object, a bare string)."""
    p = Path(path)
    try:
        data = read_bounded(p, MAX_PROMPTS_FILE_BYTES)
        if data is None:
            raise InvalidRequestError(
                f"prompts file {p} is larger than {MAX_PROMPTS_FILE_BYTES >> 20} MiB"
            )
        text = data.decode("utf-8-sig")
    except FileNotFoundError:
        raise InvalidRequestError(f"prompts file {p} does not exist") from None
    except (OSError, UnicodeDecodeError) as e:
        why = e.strerror if isinstance(e, NotRegularFileError) else type(e).__name__
        raise InvalidRequestError(f"prompts file {p} cannot be read: {why}") from None
    if "\x00" in text:
        raise InvalidRequestError(f"prompts file {p} holds NUL bytes (is it a binary file?)")
    head = text.lstrip()[:1]
    if head in ("[", "{"):
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as e:
            raise InvalidRequestError(
                f"prompts file {p} is not valid JSON: {getattr(e, 'msg', type(e).__name__)}"
            ) from None
        if not isinstance(data, list) or not all(isinstance(s, str) for s in data):
            raise InvalidRequestError(f"prompts file {p} must hold a JSON list of strings")
        return data
    if head == '"':
        try:
            json.loads(text)
        except ValueError:
            pass  # a first line that starts with a quote: plain prompts
        else:
            raise InvalidRequestError(
                f"prompts file {p} holds one JSON string; write a JSON "
                "list of strings, or one prompt per line"
            )
    # lines end at \n (or \r\n) only: str.splitlines also cuts at U+2028, U+0085, a form feed
    # and more, which split one prompt holding them into several
    lines = (line.removesuffix("\r") for line in text.split("\n"))
    return [line for line in lines if line.strip()]


def check_max_tokens(max_tokens: int, max_model_len: int) -> None:
    """No request can outgrow ``max_model_len``, so a larger ``--max-tokens`` is a mistake, and
    with ``--ignore-eos`` it would make a run of hours: refused in one line instead."""
    if max_tokens > max_model_len:
        raise InvalidRequestError(
            f"--max-tokens {max_tokens:,} exceeds max_model_len {max_model_len:,} "
            "(no request grows past it)"
        )


def run(args) -> int:
    prompts = list(args.prompts)
    if args.prompts_file:
        prompts += read_prompts_file(args.prompts_file)
    if not prompts:
        raise InvalidRequestError("no prompts given (pass PROMPT arguments or --prompts-file)")
    for i, p in enumerate(prompts):
        check_prompt(i, p)
    params = SamplingParams(
        max_tokens=args.max_tokens,
        temperature=args.temperature,
        top_p=args.top_p,
        seed=args.seed,
        ignore_eos=args.ignore_eos,
        n=args.n,
    )
    engine_args = EngineArgs.from_cli_args(args)
    if args.max_model_len is not None:
        check_max_tokens(args.max_tokens, args.max_model_len)
    if args.trace is not None:
        check_output_path(args.trace, "--trace", (args.prompts_file,) if args.prompts_file else ())
    model_args, kv_args = ModelArgs.from_cli_args(args), KVEventArgs.from_cli_args(args)
    from paged.engine.llm import LLM  # torch and transformers load only once the input is sane

    llm = LLM.from_engine_args(engine_args, model_args, kv_args, trace=args.trace)
    t0 = time.perf_counter()
    try:
        check_max_tokens(args.max_tokens, llm.config.max_model_len)
        outputs = llm.generate(prompts, params, chat=args.chat, progress=_progress_printer())
        _print_outputs(args, llm, outputs, time.perf_counter() - t0)
        if args.trace is not None:
            warn_if_app_refuses(args.trace)
        if llm.kv_publisher is not None:
            llm.kv_publisher.flush()  # the hold's announcement says the stream is complete
            hold_publisher(args.kv_events_hold)  # after the outputs: a Ctrl-C here loses nothing
    finally:
        llm.close()
    return 0


def warn_if_app_refuses(path: str) -> None:
    """One line on stderr when the trace just written is valid but past what the app draws
    (it refuses it on upload): the file stays, for tools that read it with larger limits."""
    from paged.engine.trace.io import too_large_to_open

    if (why := too_large_to_open(path)) is not None:
        print(f"warning: the app will not open {path}: {why}", file=sys.stderr, flush=True)


#: How often ``generate`` says how far it is, in seconds (a step takes milliseconds).
PROGRESS_EVERY_S = 1.0


def _progress_printer():
    """A ``progress`` for ``LLM.generate`` that prints on stderr at most once per
    ``PROGRESS_EVERY_S``, so a long run says it is alive without a line per step."""
    last = [time.monotonic()]

    def say(line: str) -> None:
        now = time.monotonic()
        if now - last[0] >= PROGRESS_EVERY_S:
            last[0] = now
            print(f"generating: {line}", file=sys.stderr, flush=True)

    return say


def hold_publisher(seconds: float) -> None:
    """Keep the KV-event sockets open ``seconds`` for watchers that join late. Said before the
    wait, so a watcher (or a test) knows the stream is complete; a Ctrl-C ends the wait early
    (the run is done, so nothing is lost)."""
    if seconds <= 0:
        return
    print(
        f"holding the KV-event sockets open for {seconds:g} s (Ctrl-C ends the wait)",
        file=sys.stderr,
        flush=True,
    )
    from paged.engine.cli.main import (
        Terminated,  # here: engine.cli.main imports this module's parser
    )

    try:
        time.sleep(seconds)
    except Terminated:  # SIGTERM, SIGHUP: the process is asked to end, not the wait
        raise
    except KeyboardInterrupt:
        print("hold ended early", file=sys.stderr)


def _print_outputs(args, llm, outputs, elapsed: float) -> None:
    num_tokens = sum(len(o.token_ids) for o in outputs)
    summary = {
        "num_requests": len(outputs),
        "num_generated_tokens": num_tokens,
        "num_preemptions": llm.num_preemptions,
        "elapsed_s": round(elapsed, 3),
        "tokens_per_s": round(num_tokens / elapsed, 2) if elapsed > 0 else None,
        "allocator": args.allocator,
        "attention": llm.runner.attention_backend,
        "device": str(llm.model.device),
        "num_blocks": llm.arena.num_blocks,
        "block_size": llm.arena.block_size,
        "kv_cache_dtype": str(llm.arena.dtype),
        "enable_prefix_caching": args.enable_prefix_caching,
        "prefill_tokens_computed": llm.prefill_tokens_computed,
        "prefix_cache_hit_tokens": llm.prefix_cache_hit_tokens,
    }
    if args.json:
        for o in outputs:
            print(
                json.dumps(
                    {
                        "prompt": o.prompt,
                        "prompt_token_ids": o.prompt_token_ids,
                        "token_ids": o.token_ids,
                        "text": o.text,
                        "finish_reason": o.finish_reason,
                        "num_preemptions": o.num_preemptions,
                        "sample_index": o.sample_index,
                    },
                    ensure_ascii=False,
                )
            )
        print(json.dumps({"summary": summary}))
    else:
        for i, o in enumerate(outputs):
            if len(outputs) > 1:
                print(f"--- [{i}] {o.prompt!r}")
            print(o.text)
        n_prompts = len(outputs) // args.n  # every prompt gets args.n samples
        what = f"{n_prompts} prompt{'s' * (n_prompts != 1)}"
        what += f" ({args.n} samples each)" if args.n > 1 else ""
        print(
            f"{num_tokens} tokens for {what} in {elapsed:.2f} s "
            f"({summary['tokens_per_s']} tok/s), {llm.num_preemptions} preemptions",
            file=sys.stderr,
        )
    sys.stdout.flush()
