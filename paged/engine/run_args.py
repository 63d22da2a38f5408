"""The settings beside ``EngineArgs``: which model runs where (``ModelArgs``) and where its
prefix-cache events go (``KVEventArgs``). Each declares its flags once, in ``add_cli_args``, with
its fields' defaults, so ``generate``, ``record`` and ``LLM`` cannot drift apart. Pure Python, no
torch: a typo is refused before a model loads.
"""

from __future__ import annotations

import argparse
from collections.abc import Collection
from dataclasses import dataclass

from paged.engine.engine_args import CliFlag, add_flags
from paged.engine.errors import InvalidConfigError
from paged.engine.model.backends import BACKENDS

#: Longest ``--kv-events-hold``: an hour is far past any watcher that joins late.
MAX_HOLD_S = 3600


@dataclass(frozen=True)
class ModelArgs:
    """The model (a local Llama-family HF folder; None: the bundled SmolLM2-135M-Instruct), the
    device and dtype it loads on, and the attention backend it runs with."""

    model: str | None = None
    device: str = "auto"
    dtype: str | None = None
    attention: str = "auto"

    @classmethod
    def add_cli_args(
        cls, parser: argparse.ArgumentParser, only: Collection[str] | None = None
    ) -> argparse.ArgumentParser:
        return add_flags(parser, cls, MODEL_FLAGS, only)

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace) -> ModelArgs:
        return cls(**{name: getattr(args, name) for name in MODEL_FLAGS})


MODEL_FLAGS = {
    "model": CliFlag(
        "local Llama-family HF directory (default: bundled SmolLM2-135M-Instruct)", "PATH"
    ),
    "device": CliFlag("auto, cpu or cuda"),
    "dtype": CliFlag("float32, bfloat16 or float16"),
    "attention": CliFlag(
        "kernels for attention and the steps around it: cpu (C), triton, torch (auto: the "
        "fastest this device runs)",
        choices=BACKENDS,
    ),
}


@dataclass(frozen=True)
class KVEventArgs:
    """Publish prefix-cache events in vLLM's KV-event format on ``kv_events`` (PUB on PORT,
    replay on PORT+1), on loopback unless ``kv_events_allow_remote``; ``kv_events_hold`` seconds
    the sockets stay open after a command's run, for watchers that join late. Raises
    InvalidConfigError for a malformed or remote address, a flag that qualifies no address, or a
    hold outside 0..MAX_HOLD_S."""

    kv_events: str | None = None
    kv_events_allow_remote: bool = False
    kv_events_hold: float = 0.0

    def __post_init__(self) -> None:
        if type(self.kv_events_allow_remote) is not bool:  # 'no' is truthy: a safety flag
            raise InvalidConfigError(
                f"kv_events_allow_remote must be true or false, got "
                f"{self.kv_events_allow_remote!r:.40}"
            )
        hold = self.kv_events_hold
        if type(hold) not in (int, float) or not 0 <= hold <= MAX_HOLD_S:
            raise InvalidConfigError(
                f"--kv-events-hold must be 0..{MAX_HOLD_S} seconds, not {hold}"
            )
        if self.kv_events is None:
            if self.kv_events_allow_remote or hold:  # as a flag: it would do nothing
                raise InvalidConfigError(
                    "--kv-events-allow-remote and --kv-events-hold apply only with --kv-events"
                )
            return
        from paged.engine.interop.kv_events import (  # pyzmq stays off other commands
            EndpointError,
            parse_endpoint,
        )

        try:
            parse_endpoint(self.kv_events, self.kv_events_allow_remote)
        except EndpointError as e:
            raise InvalidConfigError(str(e)) from None

    @classmethod
    def add_cli_args(cls, parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
        return add_flags(parser, cls, KV_EVENT_FLAGS)

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace) -> KVEventArgs:
        return cls(**{name: getattr(args, name) for name in KV_EVENT_FLAGS})


KV_EVENT_FLAGS = {
    "kv_events": CliFlag(
        "publish prefix-cache events in vLLM's KV-event format (PUB on PORT, replay on PORT+1); "
        "loopback unless --kv-events-allow-remote",
        "tcp://HOST:PORT",
    ),
    "kv_events_allow_remote": CliFlag("allow a --kv-events address beyond this machine"),
    "kv_events_hold": CliFlag(
        "keep the KV-event sockets open S seconds (0-3600) after the run, so a watcher that "
        "joins late can still replay it",
        "S",
        float,
    ),
}
