"""KV-cache capacity arithmetic: how many bytes a token, a block, a request and a block table
cost, and how many requests a KV budget holds with and without paging. Pure Python, no torch,
so the Streamlit pages can import it cheaply.

Units. Every byte count here is exact. For display we use binary units throughout: KiB = 2**10,
MiB = 2**20, GiB = 2**30 bytes. The essay writes "KB" and "GB" but its figures only work out in
binary units, so we read its "GB" as GiB and its "KB" as KiB:

- Llama-2-70B: 2 (K and V) x 8 KV heads x 128 x 2 bytes = 4,096 B = 4 KiB per token per layer;
  x 80 layers = 327,680 B = 320 KiB per token.
- One request at 2k / 8k / 32k tokens is 0.625 / 2.5 / 10 GiB; the essay prints 0.6 / 2.5 / 10
  "GB". In decimal GB these would be 0.67 / 2.68 / 10.7, which does not match.
- The batch table (x8, x32) is then 5 / 20 / 80 / 320 GiB, exactly as printed.
- A block of 16 tokens in one layer is 16 x 4 KiB = 64 KiB.
- A "40 GB" KV budget is 40 GiB = 42,949,672,960 B. Preallocating max_len 8192 reserves
  2.5 GiB per request, so 40 / 2.5 = 16 requests.
- Paging at a mean length of 3000: ceil(3000 / 16) = 188 blocks = 3,008 slots x 320 KiB
  = 985,661,440 B (940 MiB) per request, and 42,949,672,960 // 985,661,440 = 43 requests.
  The essay rounds this to "about 40" and the gain to 2.5x; the exact figures are 43 and
  43 / 16 = 2.6875 (about 2.7x). We show the exact ones and say so.
- A block table for 32,768 tokens at block 16 has 2,048 entries; the essay counts 8 bytes each
  (16 KiB). vLLM keeps int32 entries, 4 bytes (8 KiB), in one table allocated up front with a row
  of cdiv(max_model_len, block_size) entries per request slot, whatever a request's length.

Model shapes. Presets cover the essay's models, ours, and a few current ones (Llama 3, Mistral
with its sliding window, Qwen2.5, DeepSeek-V3 with MLA's single latent); a HF ``config.json`` or a
GGUF file on disk works too. ``dtype`` is the KV cache's element type, not the weights': a config
declaring fp32 gets a half-precision KV cache, as serving engines run it; the SmolLM2 preset is
float32 because this project runs it on CPU in fp32; pass ``dtype="bf16"`` for the GPU path.
A GGUF holds (often quantized) weights and no KV type, so it defaults to float16, the KV cache
type llama.cpp uses unless told otherwise.

Every bad input raises :class:`paged.engine.errors.InvalidConfigError` with a one-line message.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from paged.engine.core.allocators import check_block_size
from paged.engine.errors import InvalidConfigError
from paged.engine.files import NotRegularFileError, all_text_encodes, read_bounded
from paged.engine.model.gguf import GGUF_MAX_BYTES, gguf_metadata

KiB, MiB, GiB = 2**10, 2**20, 2**30
#: One block-table entry: an int32 physical block id, as vLLM's block table stores it (the essay's
#: 8 B per entry is an int64, twice that).
DEFAULT_ENTRY_BYTES = 4
#: What the essay counts per entry (§5.2); kept to check its arithmetic, never to teach with.
ESSAY_ENTRY_BYTES = 8

DTYPE_BYTES = {
    "float64": 8,
    "fp64": 8,
    "float32": 4,
    "fp32": 4,
    "float16": 2,
    "fp16": 2,
    "half": 2,
    "bfloat16": 2,
    "bf16": 2,
    "float8": 1,
    "fp8": 1,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
}


def dtype_bytes(dtype: str | int) -> int:
    """Bytes per element for a dtype name (``"bf16"``, ``"torch.float16"``, ...) or a byte count."""
    if isinstance(dtype, int) and not isinstance(dtype, bool):
        return _positive("dtype bytes", dtype)
    key = str(dtype).strip().lower().removeprefix("torch.")
    if key not in DTYPE_BYTES:
        shown, known = f"{dtype!r:.40}", ", ".join(DTYPE_BYTES)
        raise InvalidConfigError(
            f"unknown dtype {shown}; known: {known}", "unknown_dtype", dtype=shown, known=known
        )
    return DTYPE_BYTES[key]


#: The largest count or size the calculator takes. Every integer up to it is exact as a float
#: (and as a browser's number), and products of the few it multiplies stay far inside a float's
#: range, so shares and unit conversions never overflow (a config.json may hold 4,000 digits).
MAX_COUNT = 2**53 - 1
#: The most lengths, and batch sizes, one report takes: its table has a cell for each pair, and
#: 3,000 of each take 17 s and 3.5 GB of a server's memory on every rerun.
MAX_VALUES = 16
#: The largest KV budget in GiB whose byte count is within MAX_COUNT (8 PiB).
MAX_BUDGET_GIB = MAX_COUNT // GiB


def _positive(what: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        shown = f"{value!r:.40}"
        raise InvalidConfigError(
            f"{what} must be a positive integer, got {shown}",
            "not_positive",
            what=what,
            value=shown,
        )
    if value > MAX_COUNT:
        raise InvalidConfigError(
            f"{what} must be at most 2**53 - 1 ({MAX_COUNT:,}), got more",
            "too_large",
            what=what,
            most=MAX_COUNT,
        )
    return value


@dataclass(frozen=True)
class ModelShape:
    """What the KV cache of one model looks like. Promises positive integer fields.

    ``kv_tensors`` is 2 for attention that caches a K and a V per KV head, 1 for multi-head
    latent attention (MLA, DeepSeek-V2/V3), which caches one latent per token per layer:
    ``kv_lora_rank + qk_rope_head_dim`` elements, stored here as one "head" of that width.
    ``num_sliding_layers`` of the layers attend only to the last ``sliding_window`` tokens, so
    they never hold more than that many."""

    name: str
    num_layers: int
    num_kv_heads: int
    head_dim: int
    dtype_bytes: int
    max_position_embeddings: int | None = None
    kv_tensors: int = 2
    sliding_window: int | None = None
    num_sliding_layers: int = 0

    def __post_init__(self) -> None:
        for what in ("num_layers", "num_kv_heads", "head_dim", "dtype_bytes"):
            _positive(f"{self.name}: {what}", getattr(self, what))
        if self.max_position_embeddings is not None:
            _positive(f"{self.name}: max_position_embeddings", self.max_position_embeddings)
        if self.kv_tensors not in (1, 2):
            raise InvalidConfigError(f"{self.name}: kv_tensors must be 1 (MLA) or 2 (K and V)")
        if self.num_sliding_layers:
            _positive(f"{self.name}: sliding_window", self.sliding_window)
            if not 0 < self.num_sliding_layers <= self.num_layers:
                raise InvalidConfigError(
                    f"{self.name}: {self.num_sliding_layers} sliding layers of {self.num_layers}"
                )

    def with_dtype(self, dtype: str | int | None) -> ModelShape:
        """The same model with another KV element type; ``None`` keeps the current one."""
        return self if dtype is None else replace(self, dtype_bytes=dtype_bytes(dtype))

    @property
    def is_mla(self) -> bool:
        return self.kv_tensors == 1

    @property
    def bytes_per_token_per_layer(self) -> int:
        return self.kv_tensors * self.num_kv_heads * self.head_dim * self.dtype_bytes

    @property
    def bytes_per_token(self) -> int:
        """A token's KV across every layer (inside every sliding window)."""
        return self.bytes_per_token_per_layer * self.num_layers

    def _layer_tokens(self, length: int, block_size: int = 1) -> int:
        """Token slots summed over layers for one request of ``length`` tokens, in whole blocks
        of ``block_size``: sliding layers keep only the window."""
        full = self.num_layers - self.num_sliding_layers
        window = self.sliding_window
        kept = min(length, window) if window is not None and self.num_sliding_layers else length

        def cut(n: int) -> int:
            return math.ceil(n / block_size) * block_size

        return full * cut(length) + self.num_sliding_layers * cut(kept)

    def bytes_per_request(self, length: int, batch: int = 1) -> int:
        """KV bytes for ``batch`` requests of ``length`` tokens each, stored token by token."""
        _positive("length", length)
        return (
            self._layer_tokens(length) * _positive("batch", batch) * self.bytes_per_token_per_layer
        )

    def paged_bytes_per_request(self, length: int, block_size: int) -> int:
        """KV bytes of one request of ``length`` tokens held in whole blocks."""
        _positive("length", length)
        return (
            self._layer_tokens(length, _positive("block size", block_size))
            * self.bytes_per_token_per_layer
        )

    def window_blocks(self, length: int, block_size: int) -> int | None:
        """Blocks a sliding-window layer holds for a request of ``length`` tokens, when its
        window binds there (None: no layer slides, or ``length`` fits the window, so every
        layer holds ``blocks_for(length, block_size)``)."""
        w = self.sliding_window
        if w is None or not self.num_sliding_layers or length <= w:
            return None
        return blocks_for(w, block_size)

    def bytes_per_block_per_layer(self, block_size: int) -> int:
        return _positive("block size", block_size) * self.bytes_per_token_per_layer

    def bytes_per_block(self, block_size: int) -> int:
        return self.bytes_per_block_per_layer(block_size) * self.num_layers


#: Presets, each from the model's published config.json (checked by hand in tests/test_capacity).
PRESETS: dict[str, ModelShape] = {
    "llama-2-70b": ModelShape("llama-2-70b", 80, 8, 128, 2, 4096),  # GQA: 64 query heads
    "llama-2-7b": ModelShape("llama-2-7b", 32, 32, 128, 2, 4096),
    "llama-3-8b": ModelShape("llama-3-8b", 32, 8, 128, 2, 8192),
    "llama-3-70b": ModelShape("llama-3-70b", 80, 8, 128, 2, 8192),
    # Mistral-7B-v0.1: every layer attends to a 4,096-token sliding window.
    "mistral-7b": ModelShape(
        "mistral-7b", 32, 8, 128, 2, 32768, sliding_window=4096, num_sliding_layers=32
    ),
    # Qwen2.5-7B ships use_sliding_window: false, so every layer keeps the whole context.
    "qwen2.5-7b": ModelShape("qwen2.5-7b", 28, 4, 128, 2, 131072),
    # MLA: one latent of kv_lora_rank 512 + qk_rope_head_dim 64 = 576 per token per layer.
    "deepseek-v3": ModelShape("deepseek-v3", 61, 1, 512 + 64, 2, 163840, kv_tensors=1),
    "opt-13b": ModelShape("opt-13b", 40, 40, 128, 2, 2048),
    "smollm2-135m": ModelShape("smollm2-135m", 30, 3, 64, 4, 8192),  # fp32: our CPU path
}


def preset(name: str, dtype: str | int | None = None) -> ModelShape:
    """A named model shape, optionally with another KV dtype."""
    if name not in PRESETS:
        raise InvalidConfigError(f"unknown preset {name!r}; known: {', '.join(PRESETS)}")
    return PRESETS[name].with_dtype(dtype)


def from_hf_config(path: str | Path, dtype: str | int | None = None) -> ModelShape:
    """Read a Hugging Face ``config.json`` (or a folder holding one).

    ``num_key_value_heads`` falls back to ``num_attention_heads`` (plain MHA) and ``head_dim`` to
    ``hidden_size // num_attention_heads``. A config with ``kv_lora_rank`` is MLA: one latent of
    ``kv_lora_rank + qk_rope_head_dim`` per token per layer. ``sliding_window`` caps the layers
    it applies to (all of them, or those ``layer_types`` marks ``sliding_attention``; none when
    ``use_sliding_window`` is false). The KV dtype is ``dtype`` if given, else the config's
    ``torch_dtype`` (or ``dtype``) when that is a half type, else float16: serving engines run
    fp32 checkpoints with a half-precision KV cache.
    """
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    return shape_from_config(_read_json(path), path, path.parent.name, dtype)


def shape_from_config(
    cfg: dict, path: str | Path, default_name: str, dtype: str | int | None = None
) -> ModelShape:
    """``from_hf_config`` on an already parsed config (an upload); ``path`` names it in errors."""
    if "num_hidden_layers" not in cfg and isinstance(cfg.get("text_config"), dict):
        cfg = cfg["text_config"]  # multimodal configs nest the language model's shape
    layers = _config_int(cfg, "num_hidden_layers", path)
    name = str(cfg.get("_name_or_path") or cfg.get("model_type") or default_name)
    window, sliding = _sliding(cfg, layers, path)
    kv_bytes = dtype_bytes(dtype if dtype is not None else _kv_dtype(cfg))
    context = cfg.get("max_position_embeddings")
    if cfg.get("kv_lora_rank"):
        latent = _config_int(cfg, "kv_lora_rank", path) + _config_int(cfg, "qk_rope_head_dim", path)
        return ModelShape(
            name,
            layers,
            1,
            latent,
            kv_bytes,
            context,
            kv_tensors=1,
            sliding_window=window,
            num_sliding_layers=sliding,
        )
    heads = _config_int(cfg, "num_attention_heads", path)
    kv_heads = cfg.get("num_key_value_heads") or heads
    head_dim = cfg.get("head_dim") or _config_int(cfg, "hidden_size", path) // heads
    return ModelShape(
        name,
        layers,
        kv_heads,
        head_dim,
        kv_bytes,
        context,
        sliding_window=window,
        num_sliding_layers=sliding,
    )


def _kv_dtype(cfg: dict) -> str:
    declared = str(cfg.get("torch_dtype") or cfg.get("dtype") or "fp16")
    return declared if dtype_bytes(declared) <= 2 else "fp16"


def _sliding(cfg: dict, layers: int, path: str | Path) -> tuple[int | None, int]:
    """(window, number of sliding layers) from a config; (None, 0) when there is none."""
    window = cfg.get("sliding_window")
    if not window or cfg.get("use_sliding_window") is False:
        return None, 0
    window = _positive(f"{path}: sliding_window", window)
    sliding = _sliding_layers(cfg, layers, path)
    return (window, sliding) if sliding else (None, 0)


def _sliding_layers(cfg: dict, layers: int, path: str | Path) -> int:
    """How many layers slide, by transformers' own rules where a config leaves ``layer_types``
    out: Gemma-2 alternates sliding and global layers (the first slides), Gemma-3 makes every
    ``sliding_window_pattern``-th layer global, Qwen2 slides layers from ``max_window_layers``
    on; any other config with a window (Mistral) slides every layer."""
    types = cfg.get("layer_types")
    if isinstance(types, list) and len(types) == layers:
        return sum(1 for t in types if t == "sliding_attention")
    pattern = cfg.get("sliding_window_pattern")
    if cfg.get("model_type") == "gemma2":
        pattern = 2
    if pattern is not None:
        return layers - layers // _positive(f"{path}: sliding_window_pattern", pattern)
    if cfg.get("use_sliding_window") is True and "max_window_layers" in cfg:
        first = cfg["max_window_layers"]
        if isinstance(first, bool) or not isinstance(first, int) or first < 0:
            raise InvalidConfigError(
                f"{path}: max_window_layers must be an integer >= 0", "window_layers", name=path
            )
        return max(0, layers - first)
    return layers


#: A config.json is a few KB; the capacity page takes uploads up to this much, and so does the CLI
#: (``--config /dev/zero`` read without end into a MemoryError traceback).
CONFIG_MAX_BYTES = 1 << 20


def _read_json(path: Path) -> dict:
    try:
        data = read_bounded(path, CONFIG_MAX_BYTES)
        if data is None:
            raise InvalidConfigError(f"{path} is larger than {CONFIG_MAX_BYTES >> 20} MiB")
        text = data.decode("utf-8")
    except FileNotFoundError:
        raise InvalidConfigError(f"no config file at {path}") from None
    except NotRegularFileError:
        raise InvalidConfigError(f"{path} is not a regular file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise InvalidConfigError(f"cannot read {path} as JSON: {e}") from None
    return config_json(text, str(path))


def config_json(text: str, name: str) -> dict:
    """A config.json's text as a dict; InvalidConfigError (one line) for anything else: not
    JSON, nested past the parser, not an object, or holding a lone surrogate (valid JSON that
    no page could draw)."""
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError as e:
        raise InvalidConfigError(
            f"cannot read {name} as JSON: {str(e)[:120]}",
            "json_syntax",
            name=name,
            line=e.lineno,
            col=e.colno,
        ) from None
    except (ValueError, RecursionError) as e:  # nested past the parser, a 5,000-digit number
        raise InvalidConfigError(
            f"cannot read {name} as JSON: {str(e)[:120]}", "json_unreadable", name=name
        ) from None
    if not isinstance(cfg, dict):
        raise InvalidConfigError(f"{name} is not a JSON object", "not_object", name=name)
    if not all_text_encodes(cfg):
        raise InvalidConfigError(
            f"{name} holds a lone surrogate (\\ud800-\\udfff)", "surrogate", name=name
        )
    return cfg


def _config_int(cfg: dict, key: str, path: str | Path) -> int:
    if key not in cfg:
        raise InvalidConfigError(f"{path} has no {key!r}", "missing_key", name=path, key=key)
    return _positive(f"{path}: {key}", cfg[key])


def from_gguf(path: str | Path, dtype: str | int | None = None) -> ModelShape:
    """Read a model's shape from a GGUF file's metadata, parsed from its first 8 MiB at most
    (paged/engine/model/gguf.py, as the capacity page reads an upload; no tensor data is touched).

    Keys are ``{arch}.block_count``, ``{arch}.attention.head_count_kv`` (falls back to
    ``head_count``), ``{arch}.attention.key_length`` (falls back to ``embedding_length //
    head_count``) with ``arch`` from ``general.architecture``. KV dtype defaults to float16.
    """
    path = Path(path)
    if not path.is_file():
        raise InvalidConfigError(f"no GGUF file at {path}")
    try:
        with open(path, "rb") as f:
            meta = gguf_metadata(f.read(GGUF_MAX_BYTES), "the file")
    except (OSError, InvalidConfigError) as e:
        raise InvalidConfigError(f"cannot read {path} as GGUF: {e}") from None
    return shape_from_gguf_metadata(meta, path, path.stem, dtype)


def shape_from_gguf_metadata(
    meta: dict, path: str | Path, default_name: str, dtype: str | int | None = None
) -> ModelShape:
    """``from_gguf`` on already read metadata (key -> value; arrays as lists)."""
    arch = meta.get("general.architecture", "llama")

    def get(key: str, default=None):
        value = meta.get(f"{arch}.{key}", default)
        if value is None:
            raise InvalidConfigError(
                f"{path} has no {arch}.{key}", "missing_key", name=path, key=f"{arch}.{key}"
            )
        return max(value) if isinstance(value, list) else value  # per-layer lists: the widest

    heads = get("attention.head_count")
    head_dim = meta.get(f"{arch}.attention.key_length") or get("embedding_length") // heads
    return ModelShape(
        str(meta.get("general.name", default_name)),
        get("block_count"),
        get("attention.head_count_kv", heads),
        head_dim,
        dtype_bytes(dtype if dtype is not None else "fp16"),
        meta.get(f"{arch}.context_length"),
    )


def load_shape(
    preset_name: str | None = None,
    config: str | Path | None = None,
    gguf: str | Path | None = None,
    dtype: str | int | None = None,
) -> ModelShape:
    """One entry point for the CLI and the page: a config path or GGUF path wins over a preset;
    with none given, the essay's Llama-2-70B."""
    if config is not None and gguf is not None:
        raise InvalidConfigError("give a config.json or a GGUF file, not both")
    if config is not None:
        return from_hf_config(config, dtype)
    if gguf is not None:
        return from_gguf(gguf, dtype)
    return preset(preset_name or "llama-2-70b", dtype)


def blocks_for(length: int, block_size: int) -> int:
    """Blocks a request of ``length`` tokens holds: a new one only when the last is full."""
    return math.ceil(_positive("length", length) / _positive("block size", block_size))


def block_table_bytes(length: int, block_size: int, entry_bytes: int = DEFAULT_ENTRY_BYTES) -> int:
    """Bytes of the entries one request of ``length`` tokens fills: one entry per block."""
    return blocks_for(length, block_size) * _positive("entry bytes", entry_bytes)


def block_table_row_bytes(
    max_model_len: int, block_size: int, entry_bytes: int = DEFAULT_ENTRY_BYTES
) -> int:
    """Bytes of one row of vLLM's block table: it is allocated once, a row per request slot of
    ``cdiv(max_model_len, block_size)`` entries, so a request's row costs this whatever its
    length."""
    return block_table_bytes(max_model_len, block_size, entry_bytes)


@dataclass(frozen=True)
class Concurrency:
    """How many requests a KV budget holds when each reserves ``max_len`` up front versus when
    each holds only the blocks its ``mean_len`` tokens fill (the essay's section 4.2 model)."""

    budget_bytes: int
    max_len: int
    mean_len: int
    block_size: int
    bytes_per_token: int
    #: One request's KV at ``max_len`` and at ``mean_len`` tokens, and at ``mean_len`` in whole
    #: blocks (sliding-window layers hold at most their window).
    prealloc_bytes_per_request: int
    mean_request_bytes: int
    paged_bytes_per_request: int
    #: Past a sliding window: the blocks each sliding-window layer holds, while the others hold
    #: ``paged_blocks_per_request``; None when no window binds.
    window_blocks_per_request: int | None = None

    @property
    def paged_blocks_per_request(self) -> int:
        return blocks_for(self.mean_len, self.block_size)

    @property
    def prealloc_requests(self) -> int:
        return self.budget_bytes // self.prealloc_bytes_per_request

    @property
    def paged_requests(self) -> int:
        return self.budget_bytes // self.paged_bytes_per_request

    @property
    def ratio(self) -> float | None:
        """paged / preallocated; ``None`` when the budget holds no preallocated request."""
        return self.paged_requests / self.prealloc_requests if self.prealloc_requests else None

    @property
    def prealloc_used_bytes(self) -> int:
        """What the preallocated requests actually fill at the mean length."""
        return self.prealloc_requests * self.mean_request_bytes

    def to_dict(self) -> dict:
        return {
            **asdict(self),
            "prealloc": self.prealloc_requests,
            "paged": self.paged_requests,
            "ratio": self.ratio,
            "prealloc_bytes_per_request": self.prealloc_bytes_per_request,
            "paged_blocks_per_request": self.paged_blocks_per_request,
            "paged_bytes_per_request": self.paged_bytes_per_request,
            "paged_tail_slots": (self.paged_blocks_per_request * self.block_size - self.mean_len),
            "window_blocks_per_request": self.window_blocks_per_request,
            "prealloc_used_bytes": self.prealloc_used_bytes,
            "prealloc_idle_bytes": self.budget_bytes - self.prealloc_used_bytes,
        }


def concurrency(
    shape: ModelShape, budget_bytes: int, max_len: int, mean_len: int, block_size: int
) -> Concurrency:
    """Validate the inputs and build a :class:`Concurrency`."""
    for what, value in (
        ("budget bytes", budget_bytes),
        ("max_len", max_len),
        ("mean length", mean_len),
        ("block size", block_size),
    ):
        _positive(what, value)
    if mean_len > max_len:
        raise InvalidConfigError(f"mean length {mean_len} exceeds max_len {max_len}")
    return Concurrency(
        budget_bytes,
        max_len,
        mean_len,
        block_size,
        shape.bytes_per_token,
        shape.bytes_per_request(max_len),
        shape.bytes_per_request(mean_len),
        shape.paged_bytes_per_request(mean_len, block_size),
        shape.window_blocks(mean_len, block_size),
    )


@dataclass(frozen=True)
class CapacityReport:
    """Everything the CLI and the page show, computed once from one shape and one setting."""

    shape: ModelShape
    block_size: int
    lengths: tuple[int, ...]
    batches: tuple[int, ...]
    concurrency: Concurrency
    entry_bytes: int = DEFAULT_ENTRY_BYTES

    def per_request_rows(self) -> list[dict]:
        return [
            {
                "length": n,
                "blocks": blocks_for(n, self.block_size),
                "window_blocks": self.shape.window_blocks(n, self.block_size),
                "by_batch": [
                    {"batch": b, "bytes": self.shape.bytes_per_request(n, b)} for b in self.batches
                ],
            }
            for n in self.lengths
        ]

    def block_table_rows(self) -> list[dict]:
        return [
            {
                "length": n,
                "entries": blocks_for(n, self.block_size),
                "entry_bytes": self.entry_bytes,
                "bytes": block_table_bytes(n, self.block_size, self.entry_bytes),
            }
            for n in self.lengths
        ]

    def lengths_beyond_context(self) -> list[int]:
        """Lengths past the model's trained context: still valid arithmetic, as in the essay."""
        ctx = self.shape.max_position_embeddings
        return [n for n in self.lengths if ctx is not None and n > ctx]

    def to_dict(self) -> dict:
        s = self.shape
        return {
            "model": asdict(s),
            "block_size": self.block_size,
            "units": "bytes; GiB = 2**30",
            "bytes_per_token_per_layer": s.bytes_per_token_per_layer,
            "bytes_per_token": s.bytes_per_token,
            "bytes_per_block_per_layer": s.bytes_per_block_per_layer(self.block_size),
            "bytes_per_block": s.bytes_per_block(self.block_size),
            "per_request": self.per_request_rows(),
            "block_table": self.block_table_rows(),
            "lengths_beyond_context": self.lengths_beyond_context(),
            "concurrency": self.concurrency.to_dict(),
        }


def build_report(
    shape: ModelShape,
    *,
    block_size: int = 16,
    budget_bytes: int = 40 * GiB,
    max_len: int = 8192,
    mean_len: int = 3000,
    lengths: tuple[int, ...] = (2048, 8192, 32768),
    batches: tuple[int, ...] = (1, 8, 32),
    entry_bytes: int = DEFAULT_ENTRY_BYTES,
) -> CapacityReport:
    """The essay's setting by default. Raises InvalidConfigError on any non-positive number."""
    if not lengths or not batches:
        raise InvalidConfigError("give at least one length and one batch size")
    if len(lengths) > MAX_VALUES or len(batches) > MAX_VALUES:
        raise InvalidConfigError(
            f"give at most {MAX_VALUES} lengths and {MAX_VALUES} batch sizes (the table has a "
            "cell for each pair)"
        )
    for n in (*lengths, *batches):
        _positive("lengths and batches", n)
    _positive("entry bytes", entry_bytes)
    check_block_size(block_size)
    conc = concurrency(shape, budget_bytes, max_len, mean_len, block_size)
    return CapacityReport(shape, block_size, tuple(lengths), tuple(batches), conc, entry_bytes)


def format_bytes(n: int) -> str:
    """Binary units, largest that keeps the value >= 1: 4,096 -> ``4 KiB``, 2**29 -> ``512 MiB``."""
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= size:
            return f"{n / size:.4g} {unit}"
    return f"{n} B"
