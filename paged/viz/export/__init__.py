"""Lessons out of the app: lecture figures, one-file HTML players, GIF/MP4 animations.
``python -m paged export --help``."""
