"""Drawing that fails as one line instead of a traceback: the Streamlit side of ``paged.viz.safe``."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

import streamlit as st

from paged.viz.safe import md_text, report

R = TypeVar("R")


def boundary(message: str) -> Callable[[Callable[..., R]], Callable[..., R | None]]:
    """Decorate a drawing function: an ``Exception`` it raises is logged server-side
    (``paged.viz.safe.report``) and shown as one ``st.error`` line; the call then returns None.
    Streamlit's own control flow (rerun, stop) passes through: those derive from
    ``BaseException``."""

    def wrap(fn: Callable[..., R]) -> Callable[..., R | None]:
        @functools.wraps(fn)
        def guarded(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except Exception as e:  # noqa: BLE001 - the point: no traceback reaches the page
                st.error(md_text(report(e, message)))
                return None

        return guarded

    return wrap
