"""Query parameters written by the browser, in place: the address bar says where the reader is
without a history entry for each thing it says.

Streamlit pushes a history entry for every ``st.query_params`` write, and on a page change it
drops the query and pushes the new page first, so a page that wrote a parameter back (``?lang=zh``
on every page in Chinese, the lab's ``?scenario=``) would make one page change two entries, and
Back would seem to do nothing once. ``keep`` hands the parameters to a small browser component
(``paged/viz/player/address.js``) that writes them with ``history.replaceState``, as the lesson
player writes its frame. The server reads the URL as before: the browser sends the address
with every run.
"""

from __future__ import annotations

from pathlib import Path

ASSETS = Path(__file__).resolve().parent.parent / "player"

_COMPONENT = None


def component():
    """The registered Streamlit component (v2, inline), created once."""
    global _COMPONENT
    if _COMPONENT is None:
        import streamlit as st

        _COMPONENT = st.components.v2.component(
            "pk_address",
            html="<span hidden></span>",
            js=(ASSETS / "address.js").read_text(encoding="utf-8"),
        )
    return _COMPONENT


def keep(params: dict[str, str | None], key: str) -> None:
    """Write ``params`` into the address bar in place: a value sets its parameter, None
    removes it, others are left as they are. ``key`` names the caller (one per page run)."""
    component()(data={"params": params}, key=f"pk_address_{key}")
