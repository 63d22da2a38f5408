"""A lesson's ``[[exercises]]`` table checked: known keys, a known fact, wording in both
languages that quotes only what a prompt can say. ``paged.viz.fold.lesson_folder`` checks each
pick when a lesson loads, so this module reads no lesson itself. Pure Python.
"""

from __future__ import annotations

from paged.viz import ui_text
from paged.viz.exercises.table import FACTS

LANGS = ui_text.LANGS
PROMPT_VALUES = {"req", "prompt", "max_tokens", "logical"}  # question.prompt_values
PICK_KEYS = {"ask", "side", "event", "req", "nth", "prompt"}


class PickError(ValueError):
    """An ``[[exercises]]`` entry cannot be used; the message is one line saying why."""


def wording(pick: dict) -> dict[str, str] | None:
    prompt = pick.get("prompt")
    if prompt is None:
        return None
    return {lang: prompt if isinstance(prompt, str) else prompt.get(lang, "") for lang in LANGS}


def check_pick(pick: dict, where: str) -> None:
    """Refuse (PickError, one line) a pick that names an unknown fact or key, or wording
    that quotes what a prompt cannot say."""
    unknown = set(pick) - PICK_KEYS
    if unknown:
        raise PickError(f"{where}: [[exercises]] has unknown key {min(unknown)!r}")
    ask = pick.get("ask")
    if not isinstance(ask, str) or ask not in FACTS:
        raise PickError(f"{where}: [[exercises]] ask = {ask!r:.40}; known: {', '.join(FACTS)}")
    nth = pick.get("nth", 1)
    if type(nth) is not int or nth < 1:
        raise PickError(f"{where}: [[exercises]] nth must be a whole number from 1")
    if not isinstance(pick.get("prompt", ""), (str, dict)):
        raise PickError(f"{where}: [[exercises]] prompt needs en and zh text")
    for text in (wording(pick) or {}).values():
        if not isinstance(text, str) or not text:
            raise PickError(f"{where}: [[exercises]] prompt needs en and zh text")
        extra = ui_text.placeholders(text) - PROMPT_VALUES
        if extra:
            raise PickError(f"{where}: [[exercises]] prompt quotes {{{min(extra)}}}")
