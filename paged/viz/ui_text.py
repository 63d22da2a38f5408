"""UI strings as data: ``paged/viz/text/<name>.toml`` holds one ``[en]`` and one ``[zh]`` table.

``load(name)`` returns ``{"en": {...}, "zh": {...}}`` and refuses a file whose two languages do not
have the same keys and the same ``{placeholders}`` per key, so a translation can never miss a
string or quote a number the other language does not. A value is a string or a table of strings
(``[en.reasons]``: a group of strings looked up by a code). Pure Python; read once per process.
"""

from __future__ import annotations

import functools
import string
import tomllib
from pathlib import Path
from typing import Any

TEXT_DIR = Path(__file__).resolve().parent / "text"
LANGS = ("en", "zh")


class UITextError(ValueError):
    """A UI text file is missing, malformed, or its languages disagree."""


def placeholders(text: str) -> set[str]:
    """The field names a format string uses (``"{n:,} of {total}"`` -> ``{"n", "total"}``)."""
    return {f for _, f, _, _ in string.Formatter().parse(text) if f is not None}


def check(tables: dict, where: str) -> dict[str, dict[str, Any]]:
    """Validate ``{"en": {...}, "zh": {...}}``: both present, same keys, same placeholders."""
    for lang in LANGS:
        if not isinstance(tables.get(lang), dict):
            raise UITextError(f"{where}: no [{lang}] table")
    _same(tables["en"], tables["zh"], where, nested=True)
    return {"en": dict(tables["en"]), "zh": dict(tables["zh"])}


def _same(en: dict, zh: dict, where: str, nested: bool) -> None:
    if en.keys() != zh.keys():
        diff = sorted(en.keys() ^ zh.keys())
        raise UITextError(f"{where}: keys only in one language: {', '.join(diff)}")
    for key in en:
        a, b = en[key], zh[key]
        if nested and isinstance(a, dict) and isinstance(b, dict):
            _same(a, b, f"{where}: [{key}]", nested=False)
            continue
        if not isinstance(a, str) or not isinstance(b, str):
            raise UITextError(f"{where}: {key!r} is not a string in both languages")
        if placeholders(a) != placeholders(b):
            raise UITextError(f"{where}: {key!r} has different placeholders in en and zh")


@functools.cache
def load(name: str) -> dict[str, dict[str, Any]]:
    """The strings of ``paged/viz/text/<name>.toml``; raises UITextError naming what is wrong."""
    path = TEXT_DIR / f"{name}.toml"
    try:
        with path.open("rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        raise UITextError(f"no UI text file {path.name}") from None
    except tomllib.TOMLDecodeError as e:
        raise UITextError(f"{path.name}: {e}") from None
    return check(data, path.name)


def names() -> list[str]:
    """Every UI text file shipped (for the parity test)."""
    return sorted(p.stem for p in TEXT_DIR.glob("*.toml"))
