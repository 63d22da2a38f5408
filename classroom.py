"""The app with the class's routes on its own server (`make class`): the same pages as app.py,
served by Streamlit's ``st.App`` so that students' browsers can follow the lecturer
(paged/viz/classroom/routes.py, docs/classroom.md)."""

from pathlib import Path

import streamlit as st

from paged.viz.classroom.routes import routes

app = st.App(str(Path(__file__).resolve().parent / "app.py"), routes=routes())
