"""PagedAttention, seen: the Streamlit entry point. Pages and navigation only; every page lives
in viz/ (see viz/app/pages.py for the registry)."""

from pathlib import Path

import streamlit as st

from viz.app.pages import navigation

# A local file, not a material icon: those make the browser fetch the favicon from the network.
ICON = str(Path(__file__).resolve().parent / "viz" / "player" / "icon.png")

st.set_page_config(page_title="PagedAttention, side by side", page_icon=ICON, layout="wide")
navigation().run()
