"""The stack page: PagedAttention -> FP8 -> offloading -> prefix caching, each layer with the
number it buys (``paged.viz.fold.stack`` measures them from the lessons' traces) and a link to its lesson.
Layout only; no torch."""

from __future__ import annotations

import os
from pathlib import Path

import streamlit as st

from paged.viz import ui_text
from paged.viz.fold import stack
from paged.viz.fold.lesson_folder import LESSONS_DIR
from paged.viz.fold.narration import SafeFormatter
from paged.viz.safe import md_text

UI = ui_text.load("stack_page")  # paged/viz/text/stack_page.toml


def lessons_root() -> Path:
    """Where lessons live; ``PAGED_KV_LESSONS`` points tests at a folder of their own."""
    return Path(os.environ.get("PAGED_KV_LESSONS", LESSONS_DIR))


@st.cache_data(show_spinner=False, max_entries=4, ttl=600)
def _layers(root: str) -> list[stack.Layer]:
    return stack.layers(Path(root))


def layer_text(layer: stack.Layer, lang: str) -> tuple[str, str]:
    """A layer's title and body in ``lang``, its numbers filled in (``?`` for one missing)."""
    u = UI.get(lang, UI["en"])
    title = u[f"{layer.key}_title"]
    if layer.problem:
        return title, u["unavailable"].format(problem=md_text(layer.problem))
    # strings from a trace are escaped for markdown by the formatter; a missing one shows "?"
    return title, SafeFormatter().vformat(u[f"{layer.key}_body"], (), layer.numbers)


def render(lang: str = "en") -> None:
    """Draw the page in ``lang`` ("en" or "zh"): the top layer first, as a stack is drawn."""
    lang = lang if lang in UI else "en"
    u = UI[lang]
    st.header(u["title"])
    st.markdown(u["intro"])
    layers = _layers(str(lessons_root()))
    total = len(layers)
    for n, layer in reversed(list(enumerate(layers, start=1))):
        title, body = layer_text(layer, lang)
        with st.container(border=True):
            st.caption(u["order"].format(n=n, total=total))
            st.subheader(title)
            st.markdown(body)
            query = f"lesson={layer.lesson}" + ("&lang=zh" if lang == "zh" else "")
            st.markdown(f"[{u['open']} →](lesson?{query})")
