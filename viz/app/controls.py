"""A row of plain buttons standing in for a segmented control.

Streamlit's segmented control is a radio group: once clicked it keeps keyboard focus and takes
the arrow keys for itself (moving its own selection), so the lesson could no longer be stepped
with ← →. Plain buttons take focus too, but do nothing with arrow keys, so the page's
shortcuts keep working."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import streamlit as st


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
