"""Controls the pages share: a row of plain buttons standing in for a segmented control, and a
file uploader in the page's language.

A row of plain buttons stands in for a segmented control.

Streamlit's segmented control is a radio group: once clicked it keeps keyboard focus and takes
the arrow keys for itself (moving its own selection), so the lesson could no longer be stepped
with ← →. Plain buttons take focus too, but do nothing with arrow keys, so the page's
shortcuts keep working."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import streamlit as st

from paged.viz import ui_text


def _choose(state_key: str, value: str, on_change: Callable[[str], None] | None) -> None:
    if st.session_state.get(state_key) != value:
        st.session_state[state_key] = value
        if on_change is not None:
            on_change(value)


def choice_buttons(
    options: Sequence[str],
    state_key: str,
    *,
    format_func=str,
    key_prefix: str,
    on_change: Callable[[str], None] | None = None,
    disabled: bool = False,
) -> str:
    """Draw one button per option in the current container; the chosen one is primary.
    The choice lives in ``st.session_state[state_key]`` (set it before the first call)."""
    current = st.session_state.get(state_key, options[0])
    with st.container(horizontal=True, gap="small", width="content"):
        for opt in options:
            st.button(
                format_func(opt),
                key=f"{key_prefix}_{opt}",
                type="primary" if opt == current else "secondary",
                disabled=disabled,
                on_click=_choose,
                args=(state_key, opt, on_change),
            )
    return st.session_state.get(state_key, current)


#: The uploader's own words are Streamlit's, in English whatever the page's language: this
#: stylesheet draws the page's words in their place, scoped to one uploader by its key's class.
UPLOAD_CSS = Path(__file__).resolve().parent / "upload.css"


def _css_string(text: str) -> str:
    """``text`` as a quoted CSS string: a quote or backslash in it cannot end the string, nor
    a ``<`` the style element."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("<", "\\3c ")
    return '"' + escaped.replace("\n", " ") + '"'


def upload_css(key: str, button: str, limit: str) -> str:
    """The uploader ``key``'s rules, with the page's words for its button and size line."""
    return (
        UPLOAD_CSS.read_text(encoding="utf-8")
        .replace(".st-key-pk-uploader ", f".st-key-{key} ")
        .replace('"pk-upload-button"', _css_string(button))
        .replace('"pk-upload-limit"', _css_string(limit))
    )


def file_uploader(label: str, *, key: str, lang: str, max_mb: int, **kwargs):
    """``st.file_uploader`` whose button and size line speak the page's language."""
    if lang != "en":
        words = ui_text.load("pages")[lang]
        css = upload_css(key, words["upload_button"], words["upload_limit"].format(mb=max_mb))
        st.html(f"<style>{css}</style>")
    return st.file_uploader(label, key=key, max_upload_size=max_mb, **kwargs)
