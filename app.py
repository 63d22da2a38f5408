"""PagedAttention, seen: the Streamlit entry point of a checkout (`make run`). Pages and
navigation live in viz/ (viz/app/pages.py holds the registry); an installed wheel runs the same
through viz/app/script.py (`paged app`)."""

from viz.app.pages import run_app

run_app()
