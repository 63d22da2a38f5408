"""A lesson's folder: ``paged/lessons/<name>/`` with a ``lesson.toml`` and the trace it replays.

``lesson.toml`` names the runs that go left and right and lists the steps; each step finds its
keyframe by a rule (``paged.viz.fold.keyframes``) and says its narration (``paged.viz.fold.narration``)::

    [[steps]]
    title = { en = "...", zh = "..." }
    keyframe = { side = "left", event = "admission_blocked", match = { reason = "no_hole" } }
    narration = { en = "...{ev.need_slots}...", zh = "..." }
    lead_in = { en = "...", zh = "..." }  # optional: names the frames before the keyframe

This module reads the file into a ``LessonSpec`` and finds the trace beside it. Pure Python.
"""

from __future__ import annotations

import contextlib
import hashlib
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from paged.viz.fold.facts import CONDITIONS, IF_TAG

#: The shipped lessons: the ``lessons`` package's own folder, in a checkout as in an installed
#: wheel (its lessons are package data; pyproject.toml lists them).
LESSONS_DIR = Path(str(resources.files("paged.lessons")))
LANGS = ("en", "zh")
SIDES = ("left", "right")


class LessonError(ValueError):
    """A lesson folder cannot be used; the message is one line saying why."""


@dataclass(frozen=True)
class LessonStep:
    title: dict[str, str]
    narration: dict[str, str]
    rule: dict
    absent: dict[str, str] | None = None  # said instead when the keyframe never comes
    #: the name of the frames leading up to its keyframe where all that arrived runs (what
    #: happens in them, in the lesson's own recording), instead of the bare phase name
    lead_in: dict[str, str] | None = None


@dataclass(frozen=True)
class LessonSpec:
    """What ``lesson.toml`` says."""

    name: str
    folder: Path
    title: dict[str, str]
    trace_file: str
    runs: dict[str, str]  # side -> run name in the trace
    side_titles: dict[str, dict[str, str]]
    steps: tuple[LessonStep, ...]
    summary: dict[str, str] | None = None  # one line by language: what the course index says
    #: ``[[exercises]]``: which generated questions the lesson offers, in order, and how they
    #: are worded (paged.viz.exercises.select reads them); empty: every generated one
    exercises: tuple[dict, ...] = ()


def available(root: Path = LESSONS_DIR) -> list[str]:
    """Lesson names, sorted, that have a lesson.toml."""
    return sorted(p.parent.name for p in root.glob("*/lesson.toml"))


def lesson_titles(root: Path = LESSONS_DIR) -> dict[str, dict[str, str]]:
    """Each available lesson's title by language, from its lesson.toml: what the lesson picker
    shows (the folder name stays the lesson's id, in the URL). A lesson whose file will not
    read, or that has no title, is left out: the picker then shows its folder name."""
    titles = {}
    kernels = sorted(p.parent.name for p in root.glob("*/kernel.toml"))  # a kernel lesson's file
    for name, file_name in [
        *((n, "lesson.toml") for n in available(root)),
        *((n, "kernel.toml") for n in kernels),
    ]:
        with contextlib.suppress(LessonError, KeyError, TypeError, AttributeError):
            titles[name] = texts(read_lesson_toml(name, file_name, root, LessonError)[1]["title"])
    return titles


def read_lesson_toml(
    name: str, file_name: str, root: Path, error: type[ValueError], what: str = "lesson"
) -> tuple[Path, dict]:
    """Find ``root/name/file_name`` (refusing names that leave ``root``) and parse it. Raises
    ``error`` with one line for a missing lesson or bad TOML."""
    folder = root / name
    path = folder / file_name
    if "/" in name or name.startswith(".") or not path.is_file():
        raise error(f"no {what} named {name!r}")
    try:
        return folder, tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise error(f"lessons/{name}/{file_name} is not valid TOML: {e}") from None


def load_spec(name: str, root: Path = LESSONS_DIR) -> LessonSpec:
    """Parse ``root/name/lesson.toml``. Raises LessonError (one line) when it is unusable."""
    folder, doc = read_lesson_toml(name, "lesson.toml", root, LessonError)
    try:
        steps = tuple(
            LessonStep(
                texts(s["title"]),
                texts(s["narration"]),
                dict(s["keyframe"]),
                texts(s["absent"]) if "absent" in s else None,
                texts(s["lead_in"]) if "lead_in" in s else None,
            )
            for s in doc["steps"]
        )
        for st in steps:
            for text in st.narration.values():
                unknown = {n for _, n in IF_TAG.findall(text)} - set(CONDITIONS)
                if unknown:
                    raise LessonError(
                        f"lessons/{name}/lesson.toml: unknown condition "
                        f"[if {min(unknown)}]; known: "
                        f"{', '.join(sorted(CONDITIONS))}"
                    )
        picks = doc.get("exercises", [])
        if not isinstance(picks, list) or not all(isinstance(p, dict) for p in picks):
            raise LessonError(f"lessons/{name}/lesson.toml: exercises must be [[exercises]] tables")
        from paged.viz.exercises.picks import PickError, check_pick

        try:
            for pick in picks:
                check_pick(pick, f"lessons/{name}/lesson.toml")
        except PickError as e:
            raise LessonError(str(e)) from None
        return LessonSpec(
            name=name,
            folder=folder,
            title=texts(doc["title"]),
            trace_file=doc.get("trace", "trace.jsonl"),
            runs={side: doc[side]["run"] for side in SIDES},
            side_titles={side: texts(doc[side]["title"]) for side in SIDES},
            steps=steps,
            summary=texts(doc["summary"]) if "summary" in doc else None,
            exercises=tuple(picks),
        )
    except (KeyError, TypeError) as e:
        raise LessonError(f"lessons/{name}/lesson.toml lacks {e}") from None


def texts(v) -> dict[str, str]:
    """A TOML text: one string for every language, or a table by language (English fills gaps)."""
    if isinstance(v, str):
        return {lang: v for lang in LANGS}
    return {lang: v.get(lang) or v["en"] for lang in LANGS}


def trace_path(spec: LessonSpec) -> Path:
    return spec.folder / spec.trace_file


def file_digest(path: Path) -> str:
    """Content hash: the cache key for a lesson's precomputed frames."""
    return hashlib.sha256(path.read_bytes()).hexdigest()
