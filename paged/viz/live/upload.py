"""An upload folded and drawn in a child process that exits.

Folding a maximal upload holds about 135 MB of frames while they are drawn, and a server that
folded in its own process kept much of it after letting it go (the allocator's arenas stay
fragmented: ``malloc_trim`` returns only whole free pages). In a child, all of it goes back
to the system when the child exits; the server receives only the drawing (a few MB, deflated)
and an ``Outline``. The child is asked with one JSON line followed by the trace's bytes on its
stdin and answers with one JSON document on its stdout; its traceback, if any, goes to the
server's log. It is killed past ``TIMEOUT_S`` and its address space is capped. The caller
keeps one fold at a time (``paged.viz.live.held``). No Streamlit here.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import traceback
from pathlib import Path

from paged import IMPORT_ROOT
from paged.engine.trace import io as T
from paged.viz.fold.lesson_folder import LessonError, LessonSpec
from paged.viz.fold.lesson_model import Outline

#: A maximal upload folds and draws in about 15 CPU-s; a server shared by a class is slower
TIMEOUT_S = 300
#: Address space the child may map beyond what it maps at start: a maximal upload peaks at
#: about 220 MB resident while it is drawn
MEMORY_BYTES = 1 << 30
MAX_REQUEST = 64 << 10


class UploadError(Exception):
    """The child could not answer (it ran too long, or died); the message is one line."""


def fold(
    spec: LessonSpec, root: Path, data: bytes, source: str, key: str, lang: str
) -> tuple[Outline, dict]:
    """``data`` (a trace's bytes, UTF-8) folded under ``spec`` and drawn in ``lang``:
    ``(Outline, payload)``. Raises TraceError or LessonError (the child's one line) for a
    trace that cannot be used, UploadError when the child could not answer."""
    got = _ask({"lesson": spec.name, "root": str(root), "source": source, "key": key}, lang, data)
    if not isinstance(got.get("payload"), dict) or type(got.get("num_frames")) is not int:
        raise UploadError("the fold's child process answered something else")
    origin = tuple((str(k), str(v)) for k, v in got.get("origin", ()))
    return Outline(spec, source, key, origin, got["num_frames"]), got["payload"]


def figure_json(spec: LessonSpec, root: Path, data: bytes, source: str, k: int, lang: str) -> str:
    """Step ``k``'s lecture figure of the upload ``data`` as plotly JSON
    (``paged.viz.export.lecture.step_figure``), folded in a child. Raises as ``fold`` does."""
    request = {"lesson": spec.name, "root": str(root), "source": source, "key": "", "figure": k}
    got = _ask(request, lang, data)
    if not isinstance(got.get("figure"), str):
        raise UploadError("the fold's child process answered something else")
    return got["figure"]


def csv_text(spec: LessonSpec, root: Path, data: bytes, source: str, lang: str) -> str:
    """Every frame's numbers of the upload ``data`` as CSV (``paged.viz.export.frame_csv``), folded
    in a child. Raises as ``fold`` does."""
    request = {"lesson": spec.name, "root": str(root), "source": source, "key": "", "csv": True}
    got = _ask(request, lang, data)
    if not isinstance(got.get("csv"), str):
        raise UploadError("the fold's child process answered something else")
    return got["csv"]


def _ask(request: dict, lang: str, data: bytes) -> dict:
    head = json.dumps({**request, "lang": lang}).encode("utf-8") + b"\n"
    proc = subprocess.Popen(
        [sys.executable, "-m", "paged.viz.live.upload"],
        cwd=IMPORT_ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        out, _ = proc.communicate(head + data, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise UploadError(f"folding this trace took longer than {TIMEOUT_S} s") from None
    finally:
        if proc.poll() is None:  # interrupted: never leave the child behind
            proc.kill()
            proc.wait()
    try:
        got = json.loads(out)
    except ValueError:
        got = None
    if not isinstance(got, dict):
        raise UploadError(
            f"the fold's child process ended without an answer (exit {proc.returncode})"
        )
    if "error" in got:
        kind = LessonError if got.get("kind") == "lesson" else T.TraceError
        raise kind(str(got["error"]))
    if "failed" in got:
        raise UploadError(f"the fold's child process failed ({got['failed']})")
    return got


# --- the child -------------------------------------------------------------------------------


def _cap_memory() -> None:
    with open("/proc/self/status") as f:
        mapped = next(int(line.split()[1]) << 10 for line in f if line.startswith("VmSize:"))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_AS, (mapped + MEMORY_BYTES, mapped + MEMORY_BYTES))


def _answer(request: dict, data: bytes) -> dict:
    from dataclasses import replace

    from paged.viz.fold.lesson import build
    from paged.viz.fold.lesson_folder import load_spec

    spec = load_spec(str(request["lesson"]), Path(str(request["root"])))
    lang, source, key = str(request["lang"]), str(request["source"]), str(request["key"])
    lesson = replace(build(spec, T.loads(data.decode("utf-8")), source=source), key=key)
    if request.get("figure") is not None:
        from paged.viz.export import lecture

        return {"figure": lecture.step_figure(lesson, int(request["figure"]), lang).to_json()}
    if request.get("csv"):
        from paged.viz.export import frame_csv

        return {"csv": frame_csv.csv_text(lesson, lang)}
    from paged.viz.player import payload

    drawn = payload.payload(lesson, lang)
    return {"origin": list(lesson.origin), "num_frames": lesson.num_frames, "payload": drawn}


def main() -> int:
    request = json.loads(sys.stdin.buffer.readline(MAX_REQUEST))
    data = sys.stdin.buffer.read()
    _cap_memory()
    try:
        answer = _answer(request, data)
    except T.TraceError as e:
        answer = {"error": str(e), "kind": "trace"}
    except LessonError as e:
        answer = {"error": str(e), "kind": "lesson"}
    except Exception as e:  # the server's log has the traceback; its page, one line
        traceback.print_exc()
        answer = {"failed": type(e).__name__}
    del data
    sys.stdout.write(json.dumps(answer, separators=(",", ":")))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
