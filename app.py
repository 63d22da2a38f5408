"""PagedAttention, seen: the Streamlit entry point of a checkout (`make run`). Pages and
navigation live in paged/viz/ (paged/viz/app/pages.py holds the registry); an installed wheel runs the same
through paged/viz/app/script.py (`paged app`)."""

from paged.viz.app.pages import run_app

run_app()
