"""Events in, frames out: the pure fold, its captions and chapters, and the lessons built on it.
No Streamlit, no plotly, no torch."""
