"""PagedAttention, seen: the Streamlit entry point. Pages and navigation only; every page lives
in viz/ (see viz/pages.py for the registry)."""
from pathlib import Path

import streamlit as st

from viz.pages import navigation

# A local icon file: a :material/...: icon makes every browser fetch it from Google's servers.
st.set_page_config(page_title="PagedAttention, side by side",
                   page_icon=str(Path(__file__).parent / "viz" / "icon.png"), layout="wide")
navigation().run()
