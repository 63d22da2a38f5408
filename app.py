"""PagedAttention, seen: the Streamlit entry point. Pages and navigation only; every page lives
in viz/ (see viz/pages.py for the registry)."""
import streamlit as st

from viz.pages import navigation

st.set_page_config(page_title="PagedAttention, side by side", page_icon=":material/grid_view:",
                   layout="wide")
navigation().run()
