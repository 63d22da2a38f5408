"""The measured accuracy cost of an FP8 KV cache, as a lesson and the stack page quote it.

``paged/viz/data/fp8_accuracy.json`` is written by ``bench/fp8_accuracy.py --write-data`` (the model
is never loaded here)::

    {"source": "bench/fp8_accuracy.py", "prompts": 12, "new_tokens": 48,
     "scale_granularity": {"en": "...", "zh": "..."},
     "results": {"fp8_e4m3": {"top1_agreement": 0.95, "mean_common_prefix": 17.8},
                 "fp8_e5m2": {...}}}

``scale_granularity`` says how the kernels scale, in each language the narration speaks (a plain
string, as older files have it, stands for every language). Newer files also say what the figures
are measured against (``reference``: the KV dtype of the arena compared with, ``float32``), at
how many torch threads (``threads``), and how far they moved over the thread counts measured
(``spread_threads``, ``spread``: per format, ``[lowest, highest]`` of each figure); a file
without them shows ``?`` where a lesson quotes them.

The file is data from a script, so it is checked like any input: types, ranges, sizes; a bad
or missing file is one ``Fp8DataError`` line, and the narration shows ``?`` instead of a number.
Pure Python.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from paged.viz.data.checked import DataFile

DATA = Path(__file__).resolve().with_name("fp8_accuracy.json")
FORMATS = ("fp8_e4m3", "fp8_e5m2")


class Fp8DataError(ValueError):
    """The accuracy file is missing or malformed; the message is one line."""


FILE = DataFile("fp8 accuracy data", Fp8DataError)
MAX_BYTES = FILE.max_bytes


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
    reference: str = ""  # the KV dtype measured against ("float32"); "" when the file is older
    threads: int = 0  # torch threads of the shipped figures; 0: not said
    spread_threads: tuple[int, ...] = ()
    #: per format, (lowest, highest) of each figure over ``spread_threads``
    spread: dict[str, tuple[Fp8Accuracy, Fp8Accuracy]] | None = None


REFERENCES = ("float32", "bfloat16", "float16")


def parse(doc: object) -> Fp8Data:
    """Check a parsed document; raise Fp8DataError naming the first bad field."""
    doc = FILE.document(doc)
    prompts = FILE.whole(doc.get("prompts"), 1, 10_000, "prompts")
    new_tokens = FILE.whole(doc.get("new_tokens"), 1, 100_000, "new_tokens")
    gran = _granularity(doc.get("scale_granularity"))
    results = {
        name: Fp8Accuracy(
            FILE.number(r.get("top1_agreement"), 0, 1, f"{name} top1_agreement"),
            FILE.number(r.get("mean_common_prefix"), 0, new_tokens, f"{name} mean_common_prefix"),
        )
        for name, r in _per_format(doc.get("results"), "results").items()
    }
    reference = doc.get("reference", "")
    if reference and reference not in REFERENCES:
        FILE.fail(f"reference must be one of {', '.join(REFERENCES)}")
    threads = FILE.whole(doc.get("threads", 0), 0, 1024, "threads")
    counts = doc.get("spread_threads", [])
    if not isinstance(counts, list) or len(counts) > 16:
        FILE.fail("spread_threads must be a list of up to 16 counts")
    spread_threads = tuple(FILE.whole(c, 1, 1024, "spread_threads") for c in counts)
    return Fp8Data(
        prompts,
        new_tokens,
        gran,
        results,
        reference,
        threads,
        spread_threads,
        _spread(doc.get("spread"), new_tokens, results),
    )


def _spread(
    raw: object, new_tokens: int, results: dict[str, Fp8Accuracy]
) -> dict[str, tuple[Fp8Accuracy, Fp8Accuracy]] | None:
    """``{format: {figure: [lo, hi]}}``, each range ordered and holding the shipped figure."""
    if raw is None:
        return None
    out = {}
    for name, r in _per_format(raw, "spread").items():
        ends = []
        for key, hi in (("top1_agreement", 1), ("mean_common_prefix", new_tokens)):
            pair = r.get(key)
            if not isinstance(pair, list) or len(pair) != 2:
                FILE.fail(f"spread {name} {key} must be [lo, hi]")
            lo_v, hi_v = (FILE.number(v, 0, hi, f"spread {name} {key}") for v in pair)
            shipped = getattr(results[name], key)
            if not lo_v <= shipped <= hi_v:
                FILE.fail(f"spread {name} {key} must hold the shipped figure")
            ends.append((lo_v, hi_v))
        out[name] = (
            Fp8Accuracy(ends[0][0], ends[1][0]),
            Fp8Accuracy(ends[0][1], ends[1][1]),
        )
    return out


def _per_format(raw: object, what: str) -> dict[str, dict]:
    """``raw``'s object for each float8 format, every one present."""
    if not isinstance(raw, dict):
        FILE.fail(f"{what} must be an object")
    for name in FORMATS:
        if not isinstance(raw.get(name), dict):
            FILE.fail(f"no {name} in {what}")
    return {name: raw[name] for name in FORMATS}


LANGS = ("en", "zh")


def _granularity(v: object) -> dict[str, str]:
    """A short text for each language; a single text stands for all of them."""
    texts = dict.fromkeys(LANGS, v) if isinstance(v, str) else v
    if not isinstance(texts, dict) or any(
        not isinstance(texts.get(lg), str) or not 0 < len(texts[lg]) <= 200 for lg in LANGS
    ):
        FILE.fail("scale_granularity must be a short text for each of en, zh")
    return {lg: texts[lg] for lg in LANGS}


def load(path: Path = DATA) -> Fp8Data:
    """Read and check the data file."""
    return parse(FILE.read(path))


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
    reference: str = "?"  # the KV dtype measured against, as lessons name it ("fp32")
    threads: str = "?"  # torch threads of the figures shown
    spread_threads: str = "?"  # the thread counts measured, "1 and 2"
    e4m3_top1_range: str = "?"  # "95.1–95.5%"
    e4m3_prefix_range: str = "?"  # "16.8–17.8"


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
        reference=_SHORT.get(d.reference, "?"),
        threads=str(d.threads) if d.threads else "?",
        spread_threads=" / ".join(map(str, d.spread_threads)) or "?",
        e4m3_top1_range=_range(d, "top1_agreement", lambda v: f"{100 * v:.1f}", "%"),
        e4m3_prefix_range=_range(d, "mean_common_prefix", lambda v: f"{v:.1f}", ""),
    )


_SHORT = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


def _range(d: Fp8Data, key: str, fmt, unit: str) -> str:
    if d.spread is None:
        return "?"
    lo, hi = (getattr(a, key) for a in d.spread["fp8_e4m3"])
    a, b = fmt(lo), fmt(hi)
    return f"{a}{unit}" if a == b else f"{a}–{b}{unit}"
