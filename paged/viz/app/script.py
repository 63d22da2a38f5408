"""The Streamlit script of an installed wheel (``paged app``): the checkout's app.py, which lies
outside every package and so is not in the wheel."""

from paged.viz.app.pages import run_app

run_app()
