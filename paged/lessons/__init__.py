"""Lessons as data: one folder per lesson (``lesson.toml`` or ``narration.toml``, the scenario
and its recorded traces), shipped inside the package so an installed wheel has them too.
paged.viz.fold.lesson_folder finds them through ``importlib.resources``; no Python lives here but
the block-size lesson's recording script."""
