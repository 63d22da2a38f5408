"""The app's pages, as a registry: adding a page is one import and one ``PageSpec`` line here.

Each page module exposes ``render(lang: str)``; a page that raises shows one error line
(``paged.viz.app.boundary``) and the navigation stays. The language switch sits at the top right of
every page and in the URL as ``?lang=zh``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import streamlit as st
from streamlit.navigation.page import StreamlitPage

from paged.viz import ui_text
from paged.viz.app import address, block_size, capacity, lab, lesson, paper, stack, watch
from paged.viz.app.boundary import boundary
from paged.viz.app.controls import choice_buttons

LANG_NAMES = {"en": "English", "zh": "中文"}

#: Every page's own rules: the language switch in the top bar, the address keeper hidden.
APP_CSS = Path(__file__).resolve().parent / "app.css"


@dataclass(frozen=True)
class PageSpec:
    render: Callable[[str], None]  # draws the page in a language
    title: str  # key in paged/viz/text/pages.toml
    icon: str
    url_path: str
    default: bool = False


PAGES: list[PageSpec] = [
    PageSpec(lesson.render, "lesson", ":material/view_column:", "lesson", default=True),
    PageSpec(capacity.render, "capacity", ":material/calculate:", "capacity"),
    PageSpec(paper.render, "paper", ":material/bar_chart:", "paper"),
    PageSpec(block_size.render, "block_size", ":material/grid_on:", "block-size"),
    PageSpec(stack.render, "stack", ":material/stacks:", "stack"),
    PageSpec(lab.render, "lab", ":material/science:", "lab"),
    PageSpec(watch.render, "watch", ":material/sensors:", "watch"),
]


def language() -> str:
    """The language switch, top right of every page: buttons (see viz.app.controls) so arrow keys
    keep stepping the lesson. ``?lang=zh`` is read once per session; after that the switch is
    the truth and the URL follows it, written in place (viz.app.address): Streamlit drops the query
    on a page change, and writing it back through ``st.query_params`` would make each page change
    in Chinese two history entries."""
    ss = st.session_state
    if "lang" not in ss:
        ss.lang = st.query_params.get("lang") if st.query_params.get("lang") in LANG_NAMES else "en"
    st.html(f"<style>{APP_CSS.read_text(encoding='utf-8')}</style>")
    with st.container(key="pk_lang_bar"):
        choice_buttons(list(LANG_NAMES), "lang", format_func=LANG_NAMES.get, key_prefix="lang")
        lang = ss.lang if ss.lang in LANG_NAMES else "en"
        address.keep({"lang": None if lang == "en" else lang}, key="lang")
    return lang


def _page_body(spec: PageSpec) -> Callable[[], None]:
    def body() -> None:
        lang = language()
        boundary(ui_text.load("safe")[lang]["page_failed"])(spec.render)(lang)

    body.__name__ = spec.url_path.replace("-", "_")  # st.Page needs a distinct name per page
    return body


def navigation() -> StreamlitPage:  # what st.navigation returns
    """Build the top navigation over ``PAGES``."""
    lang = st.session_state.get("lang") or st.query_params.get("lang", "en")
    lang = lang if lang in LANG_NAMES else "en"
    titles = ui_text.load("pages")[lang]
    pages = [
        st.Page(
            _page_body(p),
            title=titles[p.title],
            icon=p.icon,
            url_path=p.url_path,
            default=p.default,
        )
        for p in PAGES
    ]
    return st.navigation(pages, position="top")


def run_app() -> None:
    """The whole app, one script run: what ``app.py`` (a checkout's ``make run``) and
    ``paged/viz/app/script.py`` (the installed ``paged app``) both execute on every rerun."""
    # A local file, not a material icon: those make the browser fetch the favicon.
    icon = str(address.ASSETS / "icon.png")
    st.set_page_config(page_title="PagedAttention, side by side", page_icon=icon, layout="wide")
    navigation().run()
