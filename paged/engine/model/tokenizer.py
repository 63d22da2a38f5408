"""The tokenizer of a cached model, without transformers.

Why: importing transformers and building its tokenizer wrapper costs about three seconds of CPU
before a model process can start (``python -m paged generate``, every live run the app starts),
while the files it reads are ordinary: ``tokenizer.json`` (the ``tokenizers`` library's own
format), ``tokenizer_config.json`` (the special tokens) and ``chat_template.jinja``. This class
reads those three files and answers what the engine asks of a tokenizer, the way transformers
answers it (``tests/model/test_model_cache.py`` holds the two to the same ids and text): ``encode``
runs the fast tokenizer, ``decode`` its decoder, and ``apply_chat_template`` renders the
template in a sandboxed Jinja environment with transformers' settings, then encodes the text
without adding special tokens.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The files a tokenizer folder holds; all three are read, and copied by ``save_pretrained``.
FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")
_SPECIAL = ("bos_token", "eos_token", "pad_token", "unk_token")


@dataclass
class Tokenizer:
    """``encode``/``decode``/``apply_chat_template`` over a ``tokenizers.Tokenizer``."""

    backend: Any  # tokenizers.Tokenizer
    special: dict[str, str]  # bos_token, eos_token, ... as text, from tokenizer_config.json
    chat_template: str | None
    folder: Path

    @classmethod
    def from_folder(cls, folder: Path) -> Tokenizer:
        """Read a folder written by transformers' ``save_pretrained``. Raises OSError or
        ValueError when a file is missing or malformed."""
        from tokenizers import Tokenizer as Backend

        backend = Backend.from_file(str(folder / "tokenizer.json"))
        config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
        special = {k: _token_text(config[k]) for k in _SPECIAL if config.get(k) is not None}
        template_file = folder / "chat_template.jinja"
        template = template_file.read_text(encoding="utf-8") if template_file.is_file() else None
        return cls(backend, special, template, folder)

    @property
    def eos_token_id(self) -> int | None:
        eos = self.special.get("eos_token")
        return None if eos is None else self.backend.token_to_id(eos)

    def __len__(self) -> int:
        return int(self.backend.get_vocab_size(with_added_tokens=True))

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return list(self.backend.encode(text, add_special_tokens=add_special_tokens).ids)

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return str(self.backend.decode(list(ids), skip_special_tokens=skip_special_tokens))

    def apply_chat_template(
        self,
        messages: list[dict[str, str]],
        add_generation_prompt: bool = False,
        tokenize: bool = True,
        return_dict: bool = False,
    ) -> list[int] | str:
        """The conversation as the model was trained to see it: text, or its token ids."""
        if return_dict:
            raise ValueError("return_dict is not supported; the engine takes plain ids")
        if self.chat_template is None:
            raise ValueError(f"the tokenizer in {self.folder} has no chat template")
        text = _compiled(self.chat_template).render(
            messages=messages, add_generation_prompt=add_generation_prompt, **self.special
        )
        return self.encode(text, add_special_tokens=False) if tokenize else text

    def save_pretrained(self, folder: str | Path) -> None:
        """Copy the tokenizer's files into ``folder`` (a model directory transformers reads)."""
        dest = Path(folder)
        dest.mkdir(parents=True, exist_ok=True)
        for name in FILES:
            if (self.folder / name).is_file():
                shutil.copyfile(self.folder / name, dest / name)


def _token_text(value: Any) -> str:
    """A special token as saved: plain text, or an added-token record with its ``content``."""
    return str(value["content"] if isinstance(value, dict) else value)


_TEMPLATES: dict[str, Any] = {}


def _compiled(source: str) -> Any:
    """The template compiled once per source, in a sandbox set up as transformers sets it up
    (trimmed blocks, loop controls, a ``tojson`` that does not escape HTML, and a
    ``raise_exception`` a template may call)."""
    if source not in _TEMPLATES:
        import jinja2.ext
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(message: str) -> None:
            raise jinja2.exceptions.TemplateError(message)

        def tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None) -> str:
            return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent)

        env = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
        )
        env.filters["tojson"] = tojson
        env.globals["raise_exception"] = raise_exception
        _TEMPLATES[source] = env.from_string(source)
    return _TEMPLATES[source]
