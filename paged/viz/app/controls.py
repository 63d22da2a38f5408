"""Controls the pages share: a row of plain buttons standing in for a segmented control, and a
file uploader in the page's language.

A row of plain buttons stands in for a segmented control.

Streamlit's segmented control is a radio group: once clicked it keeps keyboard focus and takes
the arrow keys for itself (moving its own selection), so the lesson could no longer be stepped
with ← →. Plain buttons take focus too, but do nothing with arrow keys, so the page's
shortcuts keep working."""

from __future__ import annotations

from collections.abc import Callable, Sequence

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


#: The uploader's own words (its button, and its "8MB per file • JSON" line) are Streamlit's,
#: in English whatever the page's language. On a Chinese page they are hidden (type size 0:
#: still there for a screen reader's "Upload" button) and the page's own words are drawn in
#: their place, scoped to the one uploader by its key's class.
_UPLOAD_CSS = """<style>
.st-key-{key} [data-testid="stFileUploaderDropzone"] button [data-testid="stMarkdownContainer"] p,
.st-key-{key} [data-testid="stFileUploaderDropzoneInstructions"] span {{ font-size: 0; }}
.st-key-{key} [data-testid="stFileUploaderDropzone"] button [data-testid="stMarkdownContainer"]
  p::after {{ content: "{button}"; font-size: 14px; }}
.st-key-{key} [data-testid="stFileUploaderDropzoneInstructions"] span::after {{
  content: "{limit}"; font-size: 14px; }}
</style>"""


def file_uploader(label: str, *, key: str, lang: str, max_mb: int, **kwargs):
    """``st.file_uploader`` whose button and size line speak the page's language."""
    if lang != "en":
        words = ui_text.load("pages")[lang]
        st.html(
            _UPLOAD_CSS.format(
                key=key,
                button=words["upload_button"],
                limit=words["upload_limit"].format(mb=max_mb),
            )
        )
    return st.file_uploader(label, key=key, max_upload_size=max_mb, **kwargs)
