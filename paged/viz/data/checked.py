"""Reading a data file a bench script wrote (``paged/viz/data/*.json``) as the hostile input it is.

A file in the package was still written by a script, and may be edited, truncated or replaced:
each reader checks sizes, types and ranges here and fails with one line that names the file's
kind and the first bad field, never a traceback. Pure Python.
"""

from __future__ import annotations

import datetime
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

_DATE = re.compile(r"\d{4}-\d{2}-\d{2}", re.ASCII)


@dataclass(frozen=True)
class DataFile:
    """One kind of data file: ``label`` names it in every error (``"fp8 accuracy data"``),
    ``error`` is the one-line exception its readers catch."""

    label: str
    error: type[ValueError]
    max_bytes: int = 64 * 1024

    def fail(self, problem: str) -> NoReturn:
        raise self.error(f"{self.label}: {problem}")

    def read(self, path: Path) -> object:
        """The parsed JSON of ``path``, refused past ``max_bytes`` or unreadable."""
        try:
            if path.stat().st_size > self.max_bytes:
                raise self.error(f"{self.label} is larger than {self.max_bytes // 1024} KiB")
            return json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise self.error(f"no {self.label} at {path.name}") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
            raise self.error(f"{self.label} unreadable: {str(e)[:120]}") from None

    def document(self, doc: object) -> dict:
        if not isinstance(doc, dict):
            raise self.error(f"{self.label} is not a JSON object")
        return doc

    def number(self, v: object, lo: float, hi: float, what: str) -> float:
        """A finite number in ``[lo, hi]`` (a JSON true is not 1)."""
        if (
            not isinstance(v, (int, float))
            or isinstance(v, bool)
            or not math.isfinite(v)
            or not lo <= v <= hi
        ):
            self.fail(f"{what} must be a number in [{lo}, {hi}]")
        return float(v)

    def whole(self, v: object, lo: int, hi: int, what: str) -> int:
        """A whole number in ``[lo, hi]``: a count written as 12.5 is a broken file, not 12."""
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            self.fail(f"{what} must be a whole number in [{lo}, {hi}]")
        return v

    def choice(self, v: object, allowed: tuple[str, ...], what: str) -> str:
        if v not in allowed:
            self.fail(f"{what} must be one of {', '.join(allowed)}")
        return str(v)

    def text(self, v: object, most: int, what: str) -> str:
        if not isinstance(v, str) or not 0 < len(v) <= most:
            self.fail(f"{what} must be a text of 1 to {most} characters")
        return v

    def date(self, v: object, what: str) -> datetime.date:
        """A day written ``YYYY-MM-DD``."""
        try:
            if isinstance(v, str) and _DATE.fullmatch(v):
                return datetime.date.fromisoformat(v)
        except ValueError:
            pass
        self.fail(f"{what} must be a date written YYYY-MM-DD")
