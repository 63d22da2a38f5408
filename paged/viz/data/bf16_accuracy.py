"""The measured accuracy of this engine's bfloat16 model, as the capacity and stack pages quote it.

``paged/viz/data/bf16_accuracy.json`` is written by ``bench/bf16_accuracy.py --write-data`` (the
model is never loaded here): the bf16 run (``--dtype bfloat16``: bf16 weights and arena, fp32
activations and sums) against the fp32 run of the same checkpoint::

    {"source": "bench/bf16_accuracy.py", "prompts": 12, "new_tokens": 48, "equal": 8,
     "mean_common_prefix": 36.25, "top1_agreement": 0.9931, "positions": 576, "threads": 1,
     "matmul": "vdpbf16ps", "measured": "2026-12-07"}

``equal``: prompts whose greedy tokens are identical; ``mean_common_prefix``: greedy tokens equal
before the first difference, on average; ``top1_agreement``: teacher-forced, over ``positions``;
``matmul``: whether cpu.c's bf16 matmul used the CPU's bf16 dot product or widened to fp32.
The file is checked like any input (:mod:`paged.viz.data.checked`): a bad or missing one is
one ``Bf16DataError`` line, and the pages show ``?`` for every figure. Pure Python.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path

from paged.viz.data.checked import DataFile

DATA = Path(__file__).resolve().with_name("bf16_accuracy.json")
MATMULS = ("vdpbf16ps", "widened")


class Bf16DataError(ValueError):
    """The bf16 accuracy file is missing or malformed; the message is one line."""


FILE = DataFile("bf16 accuracy data", Bf16DataError)


@dataclass(frozen=True)
class Bf16Accuracy:
    prompts: int
    new_tokens: int
    equal: int
    mean_common_prefix: float
    top1_agreement: float
    positions: int
    threads: int
    matmul: str
    measured: datetime.date


def parse(doc: object) -> Bf16Accuracy:
    """Check a parsed document; raise Bf16DataError naming the first bad field."""
    doc = FILE.document(doc)
    FILE.text(doc.get("source"), 80, "source")
    prompts = FILE.whole(doc.get("prompts"), 1, 10_000, "prompts")
    new_tokens = FILE.whole(doc.get("new_tokens"), 1, 100_000, "new_tokens")
    return Bf16Accuracy(
        prompts=prompts,
        new_tokens=new_tokens,
        equal=FILE.whole(doc.get("equal"), 0, prompts, "equal"),
        mean_common_prefix=FILE.number(
            doc.get("mean_common_prefix"), 0, new_tokens, "mean_common_prefix"
        ),
        top1_agreement=FILE.number(doc.get("top1_agreement"), 0, 1, "top1_agreement"),
        # teacher-forced over every prompt's continuation: at most one position per token
        positions=FILE.whole(doc.get("positions"), 1, prompts * new_tokens, "positions"),
        threads=FILE.whole(doc.get("threads"), 1, 1024, "threads"),
        matmul=FILE.choice(doc.get("matmul"), MATMULS, "matmul"),
        measured=FILE.date(doc.get("measured"), "measured"),
    )


def load(path: Path = DATA) -> Bf16Accuracy:
    """Read and check the data file."""
    return parse(FILE.read(path))


#: What the pages quote, each a placeholder in their texts (``{bf16_top1}``).
KEYS = (
    "bf16_prompts",
    "bf16_new_tokens",
    "bf16_equal",
    "bf16_prefix",
    "bf16_top1",
    "bf16_positions",
    "bf16_threads",
    "bf16_matmul",
    "bf16_measured",
)


def quotes(path: Path | None = None) -> dict[str, str]:
    """The file's figures (``path``, else ``DATA``) formatted as the pages quote them; every one
    ``?`` when the file is unusable, so a page says less rather than failing."""
    try:
        d = load(path or DATA)
    except Bf16DataError:
        return dict.fromkeys(KEYS, "?")
    return {
        "bf16_prompts": str(d.prompts),
        "bf16_new_tokens": str(d.new_tokens),
        "bf16_equal": str(d.equal),
        "bf16_prefix": f"{d.mean_common_prefix:.1f}",
        "bf16_top1": f"{100 * d.top1_agreement:.2f}%",
        "bf16_positions": str(d.positions),
        "bf16_threads": str(d.threads),
        "bf16_matmul": d.matmul,
        "bf16_measured": d.measured.isoformat(),
    }
