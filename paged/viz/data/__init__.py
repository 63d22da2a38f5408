"""Figures the bench scripts measured and the app quotes: each JSON file beside the module that
reads it, checked as hostile input (:mod:`paged.viz.data.checked`). Pure Python."""
