"""The measured accuracy cost of an FP8 KV cache, as a lesson and the stack page quote it.

``viz/data/fp8_accuracy.json`` is written by ``bench/fp8_accuracy.py --write-data`` (the model
is never loaded here)::

    {"source": "bench/fp8_accuracy.py", "prompts": 12, "new_tokens": 48,
     "scale_granularity": {"en": "...", "zh": "..."},
     "results": {"fp8_e4m3": {"top1_agreement": 0.95, "mean_common_prefix": 17.8},
                 "fp8_e5m2": {...}}}

``scale_granularity`` says how the kernels scale, in each language the narration speaks (a plain
string, as older files have it, stands for every language).

The file is data from a script, so it is checked like any input: types, ranges, sizes; a bad
or missing file is one ``Fp8DataError`` line, and the narration shows ``?`` instead of a number.
Pure Python.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

DATA = Path(__file__).resolve().parent.parent / "data" / "fp8_accuracy.json"
MAX_BYTES = 64 * 1024
FORMATS = ("fp8_e4m3", "fp8_e5m2")


class Fp8DataError(ValueError):
    """The accuracy file is missing or malformed; the message is one line."""


@dataclass(frozen=True)
class Fp8Accuracy:
    """One float8 format against full-precision KV."""

    top1_agreement: float  # teacher-forced, 0..1
    mean_common_prefix: float  # greedy tokens equal before the first difference


@dataclass(frozen=True)
class Fp8Data:
    prompts: int
    new_tokens: int
    scale_granularity: dict[str, str]  # by language: "en", "zh"
    results: dict[str, Fp8Accuracy]


def _num(v: object, lo: float, hi: float, what: str) -> float:
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
        raise Fp8DataError(f"fp8 accuracy data: {what} must be a number in [{lo}, {hi}]")
    if not lo <= v <= hi:
        raise Fp8DataError(f"fp8 accuracy data: {what} must be a number in [{lo}, {hi}]")
    return float(v)


def parse(doc: object) -> Fp8Data:
    """Check a parsed document; raise Fp8DataError naming the first bad field."""
    if not isinstance(doc, dict):
        raise Fp8DataError("fp8 accuracy data is not a JSON object")
    prompts = int(_num(doc.get("prompts"), 1, 10_000, "prompts"))
    new_tokens = int(_num(doc.get("new_tokens"), 1, 100_000, "new_tokens"))
    gran = _granularity(doc.get("scale_granularity"))
    raw = doc.get("results")
    if not isinstance(raw, dict):
        raise Fp8DataError("fp8 accuracy data: results must be an object")
    results = {}
    for name in FORMATS:
        r = raw.get(name)
        if not isinstance(r, dict):
            raise Fp8DataError(f"fp8 accuracy data: results lack {name}")
        results[name] = Fp8Accuracy(
            _num(r.get("top1_agreement"), 0, 1, f"{name} top1_agreement"),
            _num(r.get("mean_common_prefix"), 0, new_tokens, f"{name} mean_common_prefix"),
        )
    return Fp8Data(prompts, new_tokens, gran, results)


LANGS = ("en", "zh")


def _granularity(v: object) -> dict[str, str]:
    """A short text for each language; a single text stands for all of them."""
    texts = dict.fromkeys(LANGS, v) if isinstance(v, str) else v
    if not isinstance(texts, dict) or any(
        not isinstance(texts.get(lg), str) or not 0 < len(texts[lg]) <= 200 for lg in LANGS
    ):
        raise Fp8DataError(
            "fp8 accuracy data: scale_granularity must be a short text for each of en, zh"
        )
    return {lg: texts[lg] for lg in LANGS}


def load(path: Path = DATA) -> Fp8Data:
    """Read and check the data file."""
    try:
        if path.stat().st_size > MAX_BYTES:
            raise Fp8DataError(f"fp8 accuracy data is larger than {MAX_BYTES // 1024} KiB")
        return parse(json.loads(path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        raise Fp8DataError(f"no fp8 accuracy data at {path.name}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise Fp8DataError(f"fp8 accuracy data unreadable: {str(e)[:120]}") from None


@dataclass(frozen=True)
class Fp8Facts:
    """What narration quotes as ``{fp8.e4m3_top1}`` and the like: formatted for the page."""

    prompts: int
    new_tokens: int
    granularity: str  # how the kernels scale, in English
    granularity_zh: str
    e4m3_top1: str  # "95.0%"
    e5m2_top1: str
    e4m3_prefix: str  # mean tokens equal before the first difference, one decimal
    e5m2_prefix: str


def narration_facts(path: Path = DATA) -> Fp8Facts | None:
    """The data file's numbers as narration quotes them; None when the file is unusable."""
    try:
        d = load(path)
    except Fp8DataError:
        return None
    e4, e5 = d.results["fp8_e4m3"], d.results["fp8_e5m2"]
    return Fp8Facts(
        prompts=d.prompts,
        new_tokens=d.new_tokens,
        granularity=d.scale_granularity["en"],
        granularity_zh=d.scale_granularity["zh"],
        e4m3_top1=f"{100 * e4.top1_agreement:.1f}%",
        e5m2_top1=f"{100 * e5.top1_agreement:.1f}%",
        e4m3_prefix=f"{e4.mean_common_prefix:.1f}",
        e5m2_prefix=f"{e5.mean_common_prefix:.1f}",
    )
