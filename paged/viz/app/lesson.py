"""The lesson page: two allocators side by side, frame by frame.

The server folds a trace once (cached by content hash), draws every frame once with the app's
renderers and hands them to the lesson player (paged/viz/player/payload.py), which steps in the browser: a
keypress never reaches the server. The player keeps ``lesson``, ``frame`` (and ``present``) in
the URL; a page run reads ``?frame`` back, so a link opens that exact frame. State here is what
to replay (lesson, source, live run, upload). Controls are buttons, so they never take the
arrow keys; the one input (file upload) shows only when opening a file.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import streamlit as st

from paged import IMPORT_ROOT
from paged.engine.trace import io as T
from paged.viz import safe, ui_text
from paged.viz.app import address
from paged.viz.app.boundary import boundary
from paged.viz.app.component import mount_player
from paged.viz.app.controls import choice_buttons, file_uploader
from paged.viz.app.live_registry import REGISTRY, session_alive, session_id
from paged.viz.export import frame_csv, lecture, standalone
from paged.viz.fold.kernel.frames import KernelLesson, fold_kernel, kernel_lessons, load_kernel_spec
from paged.viz.fold.lesson import Lesson, build
from paged.viz.fold.lesson_folder import (
    LESSONS_DIR,
    LessonError,
    available,
    file_digest,
    lesson_titles,
    load_spec,
    trace_path,
)
from paged.viz.fold.lesson_model import Outline
from paged.viz.live import upload as child
from paged.viz.live.follow import LiveView
from paged.viz.live.held import Held
from paged.viz.live.run import LiveRun, record_command
from paged.viz.player import payload
from paged.viz.player.kernel import kernel_payload
from paged.viz.render import html

MAX_UPLOAD_MB = safe.MAX_UPLOAD_MB  # an uploaded trace (README: resource limits)
#: Uploads' drawings over all sessions (each fold runs in a child process that exits: the
#: server keeps no frames). A maximal upload's drawing is about 3.7 MB a language, so this
#: holds about eight in both; each goes when the last session showing it ends, or for a
#: newer one. With the one child folding (about 220 MB) the server stays under the 1 GiB
#: docs/classroom.md promises.
UPLOADS_HELD_BYTES = 64 << 20
#: A drawing deflates to about half its trace's bytes: room is made for twice that first
HELD_PER_TRACE_BYTE = 1
#: What an upload's outline holds beside its drawings
OUTLINE_BYTES = 4 << 10
UPLOADS = Held(UPLOADS_HELD_BYTES, alive=session_alive)
SOURCES = ("lesson", "live", "upload")

UI = {
    "en": {
        "source": "What to replay",
        "sources": {
            "lesson": "Recorded lesson",
            "live": "Run it live now",
            "upload": "Open a trace file",
        },
        "lesson": "Lesson",
        "lessons": "All lessons",
        "upload": "A trace (.jsonl) recorded by the engine",
        "no_trace": "This lesson has no recorded trace yet ({path}). Record one with "
        "`python -m paged record --scenario {scenario} --out {path}`, or run "
        "it live (“Run it live now”).",
        "bad_frame": "The link's frame {raw!r} is not a frame number; showing frame 0.",
        "bad_lesson": "There is no lesson named {raw!r}; showing {name}.",
        "recorded": "Every frame below is folded from allocator events the engine "
        "recorded running {model} on {device} ({created}).",
        "uploaded": "Replaying {name}: events recorded running {model} on {device} ({created}).",
        "recorded_dry": "Every frame below is folded from allocator events the engine recorded "
        "in a dry run ({created}): its own scheduler and allocators, the model's forward pass "
        "skipped, each request stopping at its scripted length.",
        "uploaded_dry": "Replaying {name}: events recorded in a dry run ({created}): the "
        "engine's scheduler and allocators, the model's forward pass skipped.",
        "live_go": "Record on the engine now",
        "live_stop": "Stop",
        "live_wait": "Starting the engine… (loading the model takes a moment)",
        "live_running": "Recording: {frames} frames so far. {progress}",
        "live_done": "Recorded {frames} frames live. The view below is the finished trace.",
        "live_failed": "The live run failed: {why}",
        "live_stopped": "Stopped after {frames} frames; step through what was recorded.",
        "live_hint": "Runs this lesson's scenario on the real engine in a separate process "
        "and shows every frame as its events stream in.",
        "live_save": "Download this trace",
        "figure": "Lecture figures (one per step, for slides)",
        "no_browser": "Lecture figures need Chromium: run `make browser`, or "
        "`python -m paged export --lesson NAME --out DIR` where it is installed.",
        "forward": "Forward pass",
        "forwards": {"model": "Real model (SmolLM2-135M)", "skip": "Dry run (no model)"},
        "upload_help": "Open any trace with one contiguous and one paged run.",
        "no_scenario": "This lesson has no scenario.toml to run live.",
        "fold_wait": "Another upload is being folded: this one waits its turn (one at a time).",
        "csv": "Every frame's numbers (CSV)",
        "csv_help": "One row per run per frame, as the player shows it: slots per category "
        "(tokens, reserved, internal, external, free) and the queue, for your own plots.",
    },
    "zh": {
        "source": "回放内容",
        "sources": {"lesson": "已录制的课程", "live": "现在实时运行", "upload": "打开 trace 文件"},
        "lesson": "课程",
        "lessons": "全部课程",
        "upload": "引擎录制的 trace（.jsonl）",
        "no_trace": "这个课程还没有录制好的 trace（{path}）。可以用 "
        "`python -m paged record --scenario {scenario} --out {path}` 录制，"
        "或选择“现在实时运行”。",
        "bad_frame": "链接里的帧号 {raw!r} 不是数字，已显示第 0 帧。",
        "bad_lesson": "没有名为 {raw!r} 的课程，已显示 {name}。",
        "recorded": "下面每一帧都由引擎运行 {model}（设备 {device}，{created}）时记录的"
        "分配器事件逐条折叠而来。",
        "uploaded": "回放 {name}：引擎运行 {model}（设备 {device}，{created}）时记录的事件。",
        "recorded_dry": "下面每一帧都由引擎空跑（{created}）时记录的分配器事件逐条折叠而来："
        "调度器和分配器是引擎自己的，跳过了模型的前向计算，每个请求在脚本给定的长度停止。",
        "uploaded_dry": "回放 {name}：引擎空跑（{created}）时记录的事件：调度器和分配器是引擎"
        "自己的，跳过了模型的前向计算。",
        "live_go": "现在用引擎录制",
        "live_stop": "停止",
        "live_wait": "正在启动引擎……（加载模型需要一点时间）",
        "live_running": "录制中：已有 {frames} 帧。{progress}",
        "live_done": "实时录制了 {frames} 帧。下面显示的是完整的 trace。",
        "live_failed": "实时运行失败：{why}",
        "live_stopped": "已在第 {frames} 帧处停止，可以逐帧查看已录下的部分。",
        "live_hint": "在单独的进程里用真实引擎运行本课的场景，事件一边产生一边显示成帧。",
        "live_save": "下载这份 trace",
        "figure": "课堂插图（每步一张，可放进幻灯片）",
        "no_browser": "导出插图需要 Chromium：运行 `make browser`，或在装有它的机器上运行 "
        "`python -m paged export --lesson NAME --out DIR`。",
        "forward": "前向计算",
        "forwards": {"model": "真实模型（SmolLM2-135M）", "skip": "空跑（不加载模型）"},
        "upload_help": "可打开任何包含一个连续分配运行和一个分页运行的 trace。",
        "no_scenario": "这个课程没有可实时运行的 scenario.toml。",
        "fold_wait": "另一个上传的 trace 正在折叠：这一个排队等候（一次只折叠一个）。",
        "csv": "每一帧的数字（CSV）",
        "csv_help": "每次运行的每一帧一行，与播放器所显示的一致：各类槽位数（已算 token、预留、"
        "内部碎片、外部碎片、空闲）和队列，可用自己的工具作图。",
    },
}


def lessons_root() -> Path:
    """Where lessons live; ``PAGED_KV_LESSONS`` points tests at a folder of their own."""
    return Path(os.environ.get("PAGED_KV_LESSONS", LESSONS_DIR))


# --- cached folds ----------------------------------------------------------------------------


@st.cache_resource(max_entries=16, show_spinner=False)
def _recorded_lesson(name: str, root: str, digest: str) -> Lesson:
    """Fold a lesson's recorded trace once per content hash (frames are immutable: shared)."""
    spec = load_spec(name, Path(root))
    return replace(build(spec, T.read(trace_path(spec))), key=f"{root}:{name}:{digest}")


def _upload_key(spec, root: Path, data: bytes, file_name: str) -> str:
    return f"upload:{root}:{spec.name}:{hashlib.sha256(data).hexdigest()}:{file_name}"


def _uploaded_lesson(spec, root: Path, data: bytes, file_name: str, t: dict) -> Outline:
    """Fold and draw an upload once per content in a child process (viz.live.upload), one at
    a time over the server (UPLOADS): a session that must wait is told so. The server keeps
    the outline and the drawing, held for the session until it ends; the session itself
    keeps neither (Streamlit keeps a closed tab's state a while for a reconnect)."""
    data.decode("utf-8")  # a binary file is refused here, before a child starts
    key = _upload_key(spec, root, data, file_name)
    lang = _ss().get("lang", "en")

    def fold() -> tuple[Outline, int, dict[str, dict]]:
        outline, drawn = child.fold(spec, root, data, file_name, key, lang)
        return outline, OUTLINE_BYTES, {lang: drawn}

    note = st.empty()
    try:
        outline: Outline = UPLOADS.get(
            key,
            fold,
            owner=session_id(),
            waiting=lambda: note.info(t["fold_wait"]),
            expect=HELD_PER_TRACE_BYTE * len(data),
        )
    finally:
        note.empty()
    return outline


def _upload_file(outline: Outline):
    """The session's uploaded file behind ``outline`` (Streamlit keeps it for the session)."""
    up = _ss().get("pk_upload")
    if (
        up is None
        or _upload_key(outline.spec, lessons_root(), up.getvalue(), up.name) != outline.key
    ):
        raise LessonError("the uploaded file is gone: open it again")
    return up


def _draw_upload(outline: Outline, lang: str) -> dict:
    """An upload's drawing in ``lang``, folded again in a child from the session's file."""
    up = _upload_file(outline)
    return child.fold(outline.spec, lessons_root(), up.getvalue(), up.name, outline.key, lang)[1]


@st.cache_data(max_entries=4, show_spinner=False)
def _titles(root: str, stamps: tuple[tuple[str, int, int], ...]) -> dict[str, dict[str, str]]:
    """The lesson picker's titles, read once per state of the lesson files (``stamps``: each
    lesson.toml's name, mtime and size, so an edited title is read again), not every run."""
    return lesson_titles(Path(root))


def _stamps(root: Path, names: list[str]) -> tuple[tuple[str, int, int], ...]:
    out = []
    for name in names:
        with contextlib.suppress(OSError):  # gone since it was listed: its title goes too
            folder = root / name
            own = folder / "lesson.toml"
            s = (own if own.exists() else folder / "kernel.toml").stat()
            out.append((name, s.st_mtime_ns, s.st_size))
    return tuple(out)


# --- session state ---------------------------------------------------------------------------


@dataclass
class View:
    """What the stepping view needs for one run of the page. ``refresh`` rebuilds the lesson
    from a live stream on every tick (None for a recorded trace, which never changes).
    Streamlit keeps a fragment's arguments for the session: an upload's is its outline."""

    lesson: Lesson | Outline
    lang: str
    refresh: Callable[[], Lesson | None] | None = None


def _ss():
    return st.session_state


INTRO = "six-steps"  # the lesson a link without ?lesson= opens, listed first


def _init_from_url(names: list[str], t: dict) -> None:
    """Read ``?lesson=`` and ``?frame=`` once per session; later the session is the truth and
    the URL follows it."""
    ss = _ss()
    if "pk_frame" in ss:
        return
    qp = st.query_params
    default = INTRO if INTRO in names else (names[0] if names else "")
    raw_lesson = qp.get("lesson", default)
    ss.pk_lesson = raw_lesson if raw_lesson in names else default
    if raw_lesson not in names:
        ss.pk_notice = t["bad_lesson"].format(raw=raw_lesson, name=default)
    raw = qp.get("frame", "0")
    try:
        ss.pk_frame = int(raw)
    except ValueError:
        ss.pk_frame = 0
        ss.pk_notice = t["bad_frame"].format(raw=raw)
    ss.pk_source = "lesson"


def _move_to(i: int) -> None:
    _ss().pk_frame = i


# --- the page --------------------------------------------------------------------------------


def render(lang: str = "en") -> None:
    """Draw the lesson page in ``lang`` ("en" or "zh")."""
    t = UI.get(lang, UI["en"])
    st.html(f"<style>{html.css()}</style>")
    root = lessons_root()
    # the introduction first, where a newcomer starts; the others in their folders' order
    names = sorted(available(root), key=lambda n: n != INTRO) + kernel_lessons(root)
    _init_from_url(names, t)
    ss = _ss()
    if not names:
        st.error(f"No lessons found under {root}.")
        return
    if ss.pk_lesson in kernel_lessons(root):
        boundary(ui_text.load("safe")[lang]["frame_failed"])(_kernel_page)(names, root, lang, t)
        return
    try:
        spec = load_spec(ss.pk_lesson, root)
    except LessonError as e:
        st.error(safe.md_text(e))
        return
    source = _header(spec, names, lang, t)
    if ss.get("pk_notice"):
        st.info(safe.md_text(ss.pop("pk_notice")))
    lesson = _lesson_for(source, spec, root, t, lang)
    if lesson is None:
        _sync_url(ss.pk_lesson)
        return
    ss.pk_frame = lesson.clamp(ss.pk_frame)
    refresh = None
    if source == "live" and not ss.pk_live.done:
        run, spec_ = ss.pk_live, spec
        refresh = lambda: _live_fold(run, spec_)  # noqa: E731 - a tick's rebuild
    failed = ui_text.load("safe")[lang]["frame_failed"]
    st.fragment(boundary(failed)(_stepping_view), run_every=0.75 if refresh else None)(
        View(lesson, lang, refresh), t
    )
    st.caption(_origin(lesson, t))  # under the player: the first screen is the lesson's
    if refresh is None:
        boundary(failed)(_html_download)(lesson, lang)
        boundary(failed)(_csv_download)(lesson, lang, t)
        boundary(failed)(_figure_downloads)(lesson, lang, t)


def _origin(lesson: Lesson | Outline, t: dict) -> str:
    """Where the frames come from, in one line (from the trace's own header)."""
    o = dict(lesson.origin)
    # a dry run's header names no model ("none (forward skipped)" on "none"): say what ran
    dry = o.get("forward") == "skip" or str(o.get("model", "")).startswith("none")
    where = t["uploaded"] if lesson.source not in ("lesson", "live") else t["recorded"]
    if dry:
        where = t["uploaded_dry"] if lesson.source not in ("lesson", "live") else t["recorded_dry"]
    m = safe.md_text  # the header is the trace's own words: text, never markdown
    return where.format(
        name=m(lesson.source),
        model=m(o.get("model", "?")),
        device=m(o.get("device", "?")),
        created=m(o.get("created", "?")[:10]),
    )


@st.cache_resource(max_entries=4, show_spinner=False)
def _kernel_lesson(name: str, root: str, digest: str) -> KernelLesson:
    """A kernel lesson folded once per content hash of its trace."""
    spec = load_kernel_spec(name, Path(root))
    return fold_kernel(spec, T.read(spec.folder / spec.trace_file))


@st.cache_resource(max_entries=8, show_spinner=False)
def _kernel_payload(name: str, root: str, digest: str, lang: str) -> dict:
    return kernel_payload(_kernel_lesson(name, root, digest), lang)


def _kernel_page(names: list[str], root: Path, lang: str, t: dict) -> None:
    """A kernel lesson: the picker, its title, the player over its recorded trace (one run,
    no upload or live source) and its offline HTML file."""
    ss = _ss()
    try:
        spec = load_kernel_spec(ss.pk_lesson, root)
        digest = file_digest(spec.folder / spec.trace_file)
        lesson = _kernel_lesson(spec.name, str(root), digest)
    except (LessonError, T.TraceError, OSError) as e:
        st.error(safe.md_text(e))
        return
    _title_row(safe.md_text(spec.title[lang]), names, lang, t)
    qp = st.query_params
    start = ss.pk_frame
    if qp.get("lesson") == spec.name and "frame" in qp:
        with contextlib.suppress(ValueError):
            start = int(qp["frame"])
    start = min(max(start, 0), lesson.num_frames - 1)
    data = _kernel_payload(spec.name, str(root), digest, lang)
    mount_player(data, start, qp.get("present") == "1")
    o = dict(lesson.origin)
    st.caption(  # under the player: the first screen is the lesson's
        t["recorded"].format(
            name=safe.md_text(spec.name),
            model=safe.md_text(o.get("model", "?")),
            device=safe.md_text(o.get("device", "?")),
            created=safe.md_text(o.get("created", "?")[:10]),
        )
    )
    drawn = {lg: _kernel_payload(spec.name, str(root), digest, lg) for lg in standalone.LANGS}
    st.download_button(
        ui_text.load("standalone")[lang]["download"],
        data=lambda: standalone.page(lesson, payloads=drawn).encode("utf-8"),
        file_name=f"{safe_file_stem(spec.name)}.html",
        mime="text/html",
        key="pk_kernel_html",
    )
    boundary(ui_text.load("safe")[lang]["frame_failed"])(_figure_downloads)(lesson, lang, t)


def _picker(names: list[str], lang: str, t: dict) -> None:
    """The lesson picker, folded into one button that opens the list: the lessons' titles
    are too wide for one row, and two rows of them pushed the grids below a 1280x720 screen."""
    if len(names) > 1:
        root = lessons_root()
        titles = _titles(str(root), _stamps(root, names))  # the folder name is the id, in the URL
        with st.popover(t["lessons"], width="content"):
            choice_buttons(
                names,
                "pk_lesson",
                format_func=lambda n: titles.get(n, {}).get(lang, n),
                key_prefix="pk_lesson_pick",
                on_change=lambda _: _move_to(0),
            )


def _title_row(title: str, names: list[str], lang: str, t: dict) -> Any:
    """One row over the player: the lesson's title, the picker, and (returned) the room
    on the right for what else the page puts there."""
    left, right = st.columns([1, 1], vertical_alignment="center")
    left.container(key="pk_title").markdown(f"### {title}")
    with right, st.container(horizontal=True, horizontal_alignment="right"):
        _picker(names, lang, t)
        return st.container(horizontal=True, width="content")


def _header(spec, names: list[str], lang: str, t: dict) -> str:
    """The title row with the source picker in it; returns the chosen source."""
    ss = _ss()
    with _title_row(spec.title[lang], names, lang, t):
        choice_buttons(
            SOURCES, "pk_source", format_func=t["sources"].get, key_prefix="pk_source_pick"
        )
    return ss.pk_source


def _lesson_for(source: str, spec, root: Path, t: dict, lang: str) -> Lesson | Outline | None:
    if source == "upload":
        return _upload(spec, root, t, lang)
    if source == "live":
        return _live(spec, root, t)
    path = trace_path(spec)
    if not path.is_file():
        st.warning(
            t["no_trace"].format(
                path=path.relative_to(root.parent) if root.parent in path.parents else path,
                scenario=spec.folder / "scenario.toml",
            )
        )
        return None
    try:
        return _recorded_lesson(spec.name, str(root), file_digest(path))
    except (T.TraceError, LessonError) as e:
        st.error(safe.md_text(f"{path.name}: {e}"))
        return None


def _upload(spec, root: Path, t: dict, lang: str) -> Outline | None:
    up = file_uploader(
        t["upload"],
        type=["jsonl", "json", "txt"],
        key="pk_upload",
        lang=lang,
        max_mb=MAX_UPLOAD_MB,
        help=t["upload_help"],
    )
    if up is None:
        return None
    try:
        lesson = _uploaded_lesson(spec, root, up.getvalue(), up.name, t)
    except UnicodeDecodeError:
        st.error(safe.md_text(f"{up.name} is not a text trace (it is binary)."))
        return None
    except (T.TraceError, LessonError, child.UploadError) as e:
        st.error(safe.md_text(f"{up.name}: {e}"))
        return None
    except Exception as e:  # an uploaded file is untrusted: one line, never a traceback
        msg = ui_text.load("safe")[_ss().get("lang", "en")]["upload_failed"]
        st.error(safe.md_text(safe.report(e, msg.format(name=up.name))))
        return None
    if _ss().get("pk_upload_id") != up.file_id:
        _ss().pk_upload_id, _ss().pk_frame = up.file_id, 0
    return lesson


def _live(spec, root: Path, t: dict) -> Lesson | None:
    ss = _ss()
    scenario = spec.folder / "scenario.toml"
    run: LiveRun | None = ss.get("pk_live")
    if run is not None and ss.get("pk_live_lesson") != spec.name:
        run = None  # another lesson's run: never folded under this lesson's titles and text
    if not scenario.is_file():
        st.warning(t["no_scenario"])
        return None
    running = run is not None and not run.done
    with st.container(horizontal=True, vertical_alignment="center"):
        ss.setdefault("pk_forward", "model")
        forward = choice_buttons(
            ("model", "skip"),
            "pk_forward",
            format_func=t["forwards"].get,
            key_prefix="pk_forward",
            disabled=running,
        )
        if st.button(
            t["live_stop"] if running else t["live_go"],
            key="pk_live_btn",
            icon=":material/stop:" if running else ":material/play_arrow:",
            type="secondary" if running else "primary",
        ):
            if run is not None and running:
                run.stop()
            else:
                old = ss.get("pk_live")
                if old is not None and not old.done:  # this session's run of another lesson
                    old.stop()
                cmd = record_command(scenario, forward or "model")
                started = REGISTRY.start(session_id(), cmd, cwd=IMPORT_ROOT)
                if started is None:  # one live run per server: another session holds it
                    ss.pk_live_busy = True
                else:
                    ss.pk_live = run = started
                    ss.pk_live_lesson = spec.name
                    ss.pk_frame, ss.pk_live_seen = 0, 0
            st.rerun()
        if ss.pop("pk_live_busy", False):
            st.warning(ui_text.load("safe")[ss.get("lang", "en")]["live_busy"])
        st.caption(t["live_hint"])
    if run is None:
        return None
    return _live_lesson(run, spec, t)


def _live_view(run: LiveRun, spec) -> LiveView:
    """The session's fold of ``run`` under ``spec``: kept, so each tick reads only new lines."""
    ss = _ss()
    view = ss.get("pk_live_view")
    if view is None or view.run is not run or view.spec != spec:
        view = ss.pk_live_view = LiveView(run, spec)
    return view


def _live_fold(run: LiveRun, spec) -> Lesson | None:
    """What has streamed in so far, folded; None until every run has finished one step. The
    whole trace, end line checked, once the child has exited cleanly."""
    return _live_view(run, spec).lesson()


def _live_lesson(run: LiveRun, spec, t: dict) -> Lesson | None:
    try:
        lesson = _live_fold(run, spec)
    except T.TraceError as e:
        why = run.error() or e
        if not run.done:  # a corrupt stream can show nothing more: free the server's one slot
            run.stop()
        st.error(safe.md_text(t["live_failed"].format(why=why)))
        return None
    if run.error():
        st.error(safe.md_text(t["live_failed"].format(why=run.error())))
    if lesson is None:
        if not run.done:
            failed = ui_text.load("safe")[_ss().get("lang", "en")]["frame_failed"]
            st.fragment(boundary(failed)(_wait_for_first_frame), run_every=1.0)(run, spec, t)
        return None
    if run.stopped:
        st.info(t["live_stopped"].format(frames=lesson.num_frames))
    elif run.done and run.returncode == 0:
        st.success(t["live_done"].format(frames=lesson.num_frames))
        st.download_button(
            t["live_save"],
            run.text(),
            file_name="live-trace.jsonl",
            mime="application/jsonl",
            key="pk_live_save",
            icon=":material/download:",
        )
    return lesson


def _live_progress(run: LiveRun, frames: int, t: dict) -> None:
    """A bar when the engine's progress line says how many requests are done, else text."""
    line = run.progress()
    text = t["live_running"].format(frames=frames, progress=safe.md_text(line))
    m = re.search(r"(\d+)\s*/\s*(\d+) requests", line)
    if m and int(m.group(2)) > 0:
        st.progress(min(1.0, int(m.group(1)) / int(m.group(2))), text=text)
    else:
        st.caption(text)


def _wait_for_first_frame(run: LiveRun, spec, t: dict) -> None:
    """Before the first frame there is nothing to step through: show progress, and rerun the
    whole page once a frame (or the end) arrives."""
    waited = time.monotonic() - run.started
    st.info(
        f"{t['live_wait']} ({waited:.0f} s) " + safe.md_text(run.progress()),
        icon=":material/hourglass_top:",
    )
    try:
        ready = run.done or _live_fold(run, spec) is not None
    except T.TraceError:
        ready = True
    if ready:
        st.rerun(scope="app")


def _sync_url(lesson: str) -> None:
    """Mirror the lesson in the URL while no player is shown (no trace yet, no file chosen).
    A player writes lesson, frame and present itself; this writes in place too (viz.app.address):
    a write through st.query_params is a history entry of its own, and coming back to this
    page (Streamlit drops the query on a page change) made that change two entries."""
    address.keep({"lesson": lesson, "frame": None}, key="lesson")


def _start_frame(lesson: Lesson | Outline) -> int:
    """The frame a page run opens on: the URL's (the player writes it there), or the session's
    when the URL names another lesson."""
    qp = st.query_params
    if qp.get("lesson") != lesson.spec.name or "frame" not in qp:
        return lesson.clamp(_ss().pk_frame)
    try:
        return lesson.clamp(int(qp["frame"]))
    except ValueError:
        return lesson.clamp(_ss().pk_frame)


@st.cache_resource(max_entries=16, show_spinner=False)
def _recorded_payload(_lesson: Lesson, key: str, lang: str) -> dict:
    """All frames of a recorded lesson, drawn once per content hash and language, shared by
    sessions."""
    return payload.payload(_lesson, lang)


def _cached_payload(lesson: Lesson | Outline, lang: str) -> dict:
    """A keyed lesson's frames drawn once per language: an upload's in its child (one fold at
    a time over the server, kept with it in UPLOADS), a recorded lesson's apart."""
    if isinstance(lesson, Lesson):
        return _recorded_payload(lesson, lesson.key, lang)
    note = st.empty()
    t = UI.get(lang, UI["en"])
    try:
        return UPLOADS.payload(
            lesson.key,
            lang,
            lambda: _draw_upload(lesson, lang),
            waiting=lambda: note.info(str(t["fold_wait"])),
        )
    finally:
        note.empty()


def _stepping_view(view: View, t: dict) -> None:
    ss = _ss()
    lesson, lang = view.lesson, view.lang
    follow = False
    # live: fold what has streamed in since the last tick
    if view.refresh is not None and isinstance(lesson, Lesson):
        run = ss.pk_live
        # A corrupt stream is reported by the page run that follows the child's end.
        with contextlib.suppress(T.TraceError):
            lesson = view.refresh() or lesson
        if run.done:
            st.rerun(scope="app")
        ss.pk_live_seen = lesson.num_frames
        follow = True
        _live_progress(run, lesson.num_frames, t)
    start = _start_frame(lesson) if view.refresh is None else lesson.num_frames - 1
    if lesson.key or isinstance(lesson, Outline):
        data = _cached_payload(lesson, lang)
    elif lesson.source == "live":  # only the frames that are new are drawn
        data = _live_view(ss.pk_live, lesson.spec).payload(lesson, lang)
    else:
        data = payload.payload(lesson, lang)
    present = st.query_params.get("present") == "1"
    mount_player(data, start, present, follow_end=follow)


def _html_download(lesson: Lesson | Outline, lang: str) -> None:
    """The trace on screen (recorded, uploaded or a finished live run) as one offline HTML
    file with the same player; drawn only when the button is clicked."""
    t = ui_text.load("standalone")[lang]

    def page() -> bytes:
        if isinstance(lesson, Outline):  # an upload: its drawings, the frames are not held
            drawn = {lg: _cached_payload(lesson, lg) for lg in standalone.LANGS}
            return standalone.drawn_page(lesson.spec, drawn).encode("utf-8")
        shown = {lg: _cached_payload(lesson, lg) for lg in standalone.LANGS} if lesson.key else None
        return standalone.page(lesson, payloads=shown).encode("utf-8")

    st.download_button(
        t["download"],
        data=page,
        file_name=f"{safe_file_stem(_download_stem(lesson))}.html",
        mime="text/html",
        on_click="ignore",
        key="pk_html_download",
        icon=":material/download:",
        help=t["download_help"],
    )


def _csv_download(lesson: Lesson | Outline, lang: str, t: dict) -> None:
    """Every frame's numbers of the trace on screen as CSV (paged/viz/export/frame_csv.py), made
    only when the button is clicked; an upload's frames are not held, so it is folded again
    in a child, in the server's one turn."""

    # the upload's file is taken now: a deferred download may run outside the session's script
    up = None if isinstance(lesson, Lesson) else _upload_file(lesson)

    def table() -> bytes:
        if isinstance(lesson, Lesson):
            return frame_csv.csv_text(lesson, lang).encode("utf-8")
        assert up is not None
        with UPLOADS.turn():
            text = child.csv_text(lesson.spec, lessons_root(), up.getvalue(), up.name, lang)
        return text.encode("utf-8")

    st.download_button(
        t["csv"],
        data=table,
        file_name=f"{safe_file_stem(_download_stem(lesson))}.csv",
        mime="text/csv",
        on_click="ignore",
        key="pk_csv_download",
        icon=":material/table:",
        help=t["csv_help"],
    )


def _download_stem(lesson: Lesson | Outline) -> str:
    """A download's name: the lesson's, or an upload's file name without its suffix."""
    if lesson.source in ("lesson", "live"):
        return lesson.spec.name
    return Path(lesson.source).stem or lesson.spec.name


def safe_file_stem(name: str) -> str:
    """A download's file name from a hostile upload name: letters, digits, ``-_.`` only."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip(".-")[:60] or "lesson"


def _figure_downloads(lesson: Lesson | Outline | KernelLesson, lang: str, t: dict) -> None:
    """Each step's (a kernel lesson's: each chapter's) figure for slides, drawn only when its
    button is clicked."""
    if not lecture.browser_available():
        st.caption(t["no_browser"])
        return
    titles = (
        lecture.figure_titles(lesson, lang)
        if isinstance(lesson, KernelLesson)
        else [step.title[lang] for step in lesson.spec.steps]
    )
    with st.expander(t["figure"], icon=":material/download:"):
        for k, title in enumerate(titles):
            with st.container(
                horizontal=True, gap="small", vertical_alignment="center", key=f"pk_figure_{k}"
            ):
                st.markdown(f"{k + 1} · {title}", width="stretch")
                for fmt in ("png", "svg", "pdf"):
                    st.download_button(
                        fmt.upper(),
                        key=f"pk_fig_{fmt}_{k}",
                        type="tertiary",
                        **_figure_args(lesson, k, lang, fmt),
                    )


def _figure_args(lesson: Lesson | Outline | KernelLesson, k: int, lang: str, fmt: str) -> dict:
    """``lecture.download_args``; an upload's figure is folded again in a child, in the
    server's one turn, when its button is clicked."""
    if isinstance(lesson, Lesson | KernelLesson):
        return lecture.download_args(lesson, k, lang, fmt)
    up = _upload_file(lesson)  # now: a deferred download may run outside the session's script
    return dict(
        data=lambda: _upload_figure(lesson, up, k, lang, fmt),
        file_name=lecture.file_name(lesson.spec.name, k, lang, fmt),
        mime=lecture.MIME[fmt],
        on_click="ignore",
    )


def _upload_figure(outline: Outline, up, k: int, lang: str, fmt: str) -> bytes:
    import plotly.io

    with UPLOADS.turn():
        fig = child.figure_json(outline.spec, lessons_root(), up.getvalue(), up.name, k, lang)
    return lecture.figure_bytes(plotly.io.from_json(fig), fmt)
