"""A local cache of the bundled model's conversion from GGUF.

Why: transformers de-quantizes the Q4_1 GGUF and rebuilds the tokenizer from its metadata on every
load (~15-20 s on this 2-core CPU), while the same fp32 weights saved as safetensors load in under
a second. Every `python -m paged` run, every live run of the app and every test process paid
that. The cache holds exactly the tensors the GGUF load produced (saved once, bit for bit), so a
cached load is the same model; it is derived locally, never downloaded.

A cached load needs no transformers at all: beside the weights the cache keeps ``engine.json``
(our ``ModelConfig``, RoPE's inverse frequencies exactly as transformers computed them, whether
the head is tied) and the tokenizer's own files (read by ``paged.engine.model.tokenizer``), so a model process
starts about three seconds sooner. A cache written before ``engine.json`` existed is loaded through
transformers once and gets the file then.

Where: ``$PAGED_MODEL_CACHE`` if set (``off`` disables caching), else
``$XDG_CACHE_HOME/seeing-pagedattention`` or ``~/.cache/seeing-pagedattention``. One folder per
source file and library version (size, mtime and versions in its name), written to a temporary
folder and renamed into place, so concurrent first loads never see half a cache. A cache that
fails to load is removed and rebuilt from the GGUF, unless the failure is the machine's (out of
memory: raised) or the reader's (no permission: the GGUF is loaded, the cache kept); a cache that
cannot be written is skipped with one line on stderr. Each cache names its source file
(``source.json``); writing one removes those whose file is gone or changed (a deleted clone's).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import sys
import tempfile
from dataclasses import asdict
from importlib.metadata import version
from pathlib import Path

import torch

from paged.engine.model.weights import LAYER_NAMES, LayerWeights, ModelConfig, ModelWeights

WEIGHTS = "model.safetensors"
FACTS = "engine.json"
FACTS_FORMAT = 1
SOURCE = "source.json"  # which file a cache converts: a cache whose file is gone is removed


def cache_root() -> Path | None:
    """The cache's parent folder, or None when caching is switched off."""
    env = os.environ.get("PAGED_MODEL_CACHE", "").strip()
    if env.lower() in ("off", "0", "no", "false"):
        return None
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "seeing-pagedattention"


def cache_dir(source: Path) -> Path | None:
    """The folder for ``source``'s conversion: a new source file or library version gets a new
    folder, never a stale one."""
    root = cache_root()
    if root is None:
        return None
    st = source.stat()
    key = f"{source.resolve()}|{st.st_size}|{st.st_mtime_ns}|{version('transformers')}"
    key += f"|{torch.__version__}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return root / f"{source.stem}-{digest}"


def load_cached(folder: Path, dtype: torch.dtype):
    """(tokenizer, model) from a complete cache folder, or None when there is none or it is
    unreadable (then it is removed, to be rebuilt)."""
    if not (folder / WEIGHTS).is_file():
        return None
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(folder)
        hf = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype)
    except MemoryError:  # the machine's state, not the cache's: a rebuild would need more
        raise
    except PermissionError as e:  # someone else's cache: load from the source, keep theirs
        print(f"model cache {folder} not readable ({e.strerror}); not used", file=sys.stderr)
        return None
    except Exception as e:  # a truncated or foreign cache is rebuilt, whatever broke in it
        print(f"model cache {folder} unreadable ({type(e).__name__}); rebuilding", file=sys.stderr)
        shutil.rmtree(folder, ignore_errors=True)
        return None
    return tokenizer, hf


def store(folder: Path, tokenizer, hf, source: Path | None = None) -> None:
    """Save the converted model and the tokenizer; a failure to write costs only the speed-up.
    Only an fp32 load is stored (the GGUF's de-quantized tensors as they are); a cached load in
    another dtype casts them, as the GGUF load itself does. With ``source`` (the file converted)
    the folder names it, and caches whose own source file is gone or changed are removed."""
    if hf.dtype != torch.float32:
        return
    from safetensors.torch import save_model
    from transformers import AutoConfig

    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=folder.name + ".", dir=folder.parent))
        try:
            config = hf.config.to_dict()
            config.pop("quantization_config", None)  # the saved tensors are plain fp32
            config.pop("_name_or_path", None)
            AutoConfig.for_model(**config).save_pretrained(tmp)
            save_model(hf, str(tmp / WEIGHTS))
            tokenizer.save_pretrained(tmp)
            if source is not None:
                (tmp / SOURCE).write_text(json.dumps(_stamp(source)), encoding="utf-8")
            # another process may have finished first: its copy is as good as ours
            with contextlib.suppress(OSError):
                os.rename(tmp, folder)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    except OSError as e:
        print(f"model cache not written ({e.strerror or e}); loads stay slow", file=sys.stderr)
        return
    prune(folder.parent)


def _stamp(source: Path) -> dict:
    st = source.stat()
    return {"path": str(source.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def prune(root: Path) -> list[Path]:
    """Remove the caches in ``root`` whose source file (``source.json``) is gone or changed:
    each is about 520 MB, and every clone, virtualenv or library upgrade leaves one behind.
    A cache without ``source.json`` (written before it existed) is left alone. Returns the
    folders removed."""
    gone = []
    for stamp in root.glob(f"*/{SOURCE}"):
        try:
            was = json.loads(stamp.read_text(encoding="utf-8"))
            now = _stamp(Path(was["path"]))
        except FileNotFoundError:
            now = None
        except (OSError, ValueError, KeyError, TypeError):
            continue  # unreadable: not ours to judge
        if now != was:
            shutil.rmtree(stamp.parent, ignore_errors=True)
            gone.append(stamp.parent)
    return gone


def store_facts(folder: Path, weights) -> None:
    """Write ``engine.json`` for ``weights`` (a ``ModelWeights`` loaded from this
    folder or from the file it caches), so later loads skip transformers. Written to a
    temporary name and renamed; a failure to write costs only the speed-up."""
    facts = {
        "format": FACTS_FORMAT,
        "config": asdict(weights.config),
        "inv_freq": weights.inv_freq.float().cpu().tolist(),  # fp32 values: exact as floats
        "rope_scaling": weights.rope_scaling,
        "tied": weights.tied,
    }
    tmp = folder / f"{FACTS}.{os.getpid()}.tmp"
    try:
        tmp.write_text(json.dumps(facts), encoding="utf-8")
        os.replace(tmp, folder / FACTS)
    except OSError as e:
        with contextlib.suppress(OSError):
            tmp.unlink()
        print(f"model cache facts not written ({e.strerror or e})", file=sys.stderr)


def load_light(folder: Path, dtype: torch.dtype):
    """(tokenizer, weights) straight from the cache's files, without transformers, or None when
    the folder lacks ``engine.json`` (an older cache) or anything in it is unreadable (then the
    caller loads through transformers, which removes and rebuilds a broken cache)."""
    from paged.engine.model.tokenizer import Tokenizer

    try:
        facts = json.loads((folder / FACTS).read_text(encoding="utf-8"))
        if facts.get("format") != FACTS_FORMAT:
            return None
        from safetensors.torch import load_file

        tensors = load_file(str(folder / WEIGHTS))
        tokenizer = Tokenizer.from_folder(folder)
        fields = dict(facts["config"])
        fields["stop_token_ids"] = tuple(fields.get("stop_token_ids", ()))  # JSON gave a list
        config = ModelConfig(**fields)

        def weight(name: str) -> torch.Tensor:
            t = tensors[name]
            return t if t.dtype == dtype else t.to(dtype)

        layers = [
            LayerWeights(
                **{
                    field: weight(f"model.layers.{i}.{name}.weight")
                    for field, name in LAYER_NAMES.items()
                }
            )
            for i in range(config.num_layers)
        ]
        # a tied head is one tensor, which safetensors saved once, under either name
        embed = weight(next(n for n in _EMBED_NAMES if n in tensors))
        return tokenizer, ModelWeights(
            config,
            embed,
            layers,
            weight("model.norm.weight"),
            embed if facts["tied"] else weight("lm_head.weight"),
            torch.tensor(facts["inv_freq"], dtype=torch.float32),
            float(facts["rope_scaling"]),
        )
    except (OSError, ValueError, KeyError, TypeError, RuntimeError, StopIteration):
        return None


#: Where the embedding is saved: its own name, or the head's when the two are one tensor.
_EMBED_NAMES = ("model.embed_tokens.weight", "lm_head.weight")
