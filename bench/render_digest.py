"""One digest per lesson, language and renderer: run it before and after a drawing change.

    python -m bench.render_digest [--lessons six-steps,shared-prompt] > after.txt

prints ``lesson lang renderer sha256`` lines for every lesson with a ``lesson.toml``:
``player`` (every frame's SVG grids, strips, panels and captions, as the app, the standalone
HTML and the animations get them) and ``figure`` (each step's lecture figure as plotly JSON, the
source of the exported png/svg/pdf).
Two runs that print the same lines drew the same bytes. No model, no browser.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys

from paged.engine.trace import io as T
from paged.viz.export.lecture import step_figure
from paged.viz.fold.lesson import build
from paged.viz.fold.lesson_folder import LESSONS_DIR, load_spec, trace_path
from paged.viz.player import payload as player


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def digests(name: str, lang: str) -> dict[str, str]:
    spec = load_spec(name)
    lesson = build(spec, T.read(trace_path(spec)))
    payload = player.payload(lesson, lang)
    figs = [step_figure(lesson, k, lang).to_json() for k in range(len(spec.steps))]
    return {
        "player": _sha(json.dumps(payload, sort_keys=True)),
        "figure": _sha("\n".join(figs)),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lessons", default="", help="comma-separated; default: every lesson")
    args = ap.parse_args(argv)
    names = [n for n in args.lessons.split(",") if n] or sorted(
        p.parent.name for p in LESSONS_DIR.glob("*/lesson.toml")
    )
    for name in names:
        for lang in ("en", "zh"):
            for renderer, sha in digests(name, lang).items():
                print(name, lang, renderer, sha)
    return 0


if __name__ == "__main__":
    sys.exit(main())
