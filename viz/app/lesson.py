"""The lesson page: two allocators side by side, frame by frame.

The server folds a trace once (cached by content hash), draws every frame once with the app's
renderers and hands them to the lesson player (viz/player/payload.py), which steps in the browser: a
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
import weakref
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import streamlit as st

from engine.trace import io as T
from viz import safe, ui_text
from viz.app import address
from viz.app.boundary import boundary
from viz.app.component import mount_player
from viz.app.controls import choice_buttons, file_uploader
from viz.app.live_registry import REGISTRY, session_alive, session_id
from viz.export import lecture as export
from viz.export import standalone
from viz.fold.lesson import Lesson, build
from viz.fold.lesson_folder import (
    LESSONS_DIR,
    LessonError,
    available,
    file_digest,
    lesson_titles,
    load_spec,
    trace_path,
)
from viz.live.follow import LiveView
from viz.live.held import Held, lesson_bytes
from viz.live.run import LiveRun, record_command
from viz.player import payload as player
from viz.render import html

ENGINE_ROOT = Path(__file__).resolve().parents[2]  # where `python -m engine` resolves
MAX_UPLOAD_MB = safe.MAX_UPLOAD_MB  # an uploaded trace (README: resource limits)
#: Folded uploads and their drawings, over all sessions: one maximal upload (about 170 MB)
#: or several smaller; each goes when the last session showing it ends, or for a newer one.
#: With the one fold being made (a few hundred MB while it draws) the server stays under the
#: 1 GiB docs/classroom.md promises.
UPLOADS_HELD_BYTES = 200 << 20
#: A folded upload holds about 20x its trace's bytes (measured on maximal uploads): room is
#: made for that before it is folded
HELD_PER_TRACE_BYTE = 24
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
        "upload": "A trace (.jsonl) recorded by the engine",
        "no_trace": "This lesson has no recorded trace yet ({path}). Record one with "
        "`python -m engine record --scenario {scenario} --out {path}`, or run "
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
        "`python -m viz.export --lesson NAME --out DIR` where it is installed.",
        "forward": "Forward pass",
        "forwards": {"model": "Real model (SmolLM2-135M)", "skip": "Dry run (no model)"},
        "upload_help": "Open any trace with one contiguous and one paged run.",
        "no_scenario": "This lesson has no scenario.toml to run live.",
        "fold_wait": "Another upload is being folded: this one waits its turn (one at a time).",
    },
    "zh": {
        "source": "回放内容",
        "sources": {"lesson": "已录制的课程", "live": "现在实时运行", "upload": "打开 trace 文件"},
        "lesson": "课程",
        "upload": "引擎录制的 trace（.jsonl）",
        "no_trace": "这个课程还没有录制好的 trace（{path}）。可以用 "
        "`python -m engine record --scenario {scenario} --out {path}` 录制，"
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
        "`python -m viz.export --lesson NAME --out DIR`。",
        "forward": "前向计算",
        "forwards": {"model": "真实模型（SmolLM2-135M）", "skip": "空跑（不加载模型）"},
        "upload_help": "可打开任何包含一个连续分配运行和一个分页运行的 trace。",
        "no_scenario": "这个课程没有可实时运行的 scenario.toml。",
        "fold_wait": "另一个上传的 trace 正在折叠：这一个排队等候（一次只折叠一个）。",
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


def _uploaded_lesson(spec, root: Path, data: bytes, file_name: str, t: dict) -> Lesson:
    """Fold an upload once per content, one fold at a time over the server (UPLOADS): a
    session that must wait is told so. The session holds it until it ends."""
    text = data.decode("utf-8")
    key = f"upload:{root}:{spec.name}:{hashlib.sha256(data).hexdigest()}:{file_name}"

    lang = _ss().get("lang", "en")

    def fold() -> tuple[Lesson, int, dict[str, dict]]:
        lesson = replace(build(spec, T.loads(text), source=file_name), key=key)
        return lesson, lesson_bytes(lesson), {lang: player.payload(lesson, lang)}

    note = st.empty()
    try:
        lesson, drawn = UPLOADS.get_drawn(
            key,
            fold,
            owner=session_id(),
            waiting=lambda: note.info(t["fold_wait"]),
            expect=HELD_PER_TRACE_BYTE * len(data),
        )
    finally:
        note.empty()
    # the session's own drawing (a few MB): a newer fold may let the lesson go before this run
    # shows it, and drawing it again would hold a second copy while it waits for its turn
    if drawn:
        _ss().pk_upload_drawn = (key, drawn)
    return lesson


@st.cache_data(max_entries=4, show_spinner=False)
def _titles(root: str, stamps: tuple[tuple[str, int, int], ...]) -> dict[str, dict[str, str]]:
    """The lesson picker's titles, read once per state of the lesson files (``stamps``: each
    lesson.toml's name, mtime and size, so an edited title is read again), not every run."""
    return lesson_titles(Path(root))


def _stamps(root: Path, names: list[str]) -> tuple[tuple[str, int, int], ...]:
    out = []
    for name in names:
        with contextlib.suppress(OSError):  # gone since it was listed: its title goes too
            s = (root / name / "lesson.toml").stat()
            out.append((name, s.st_mtime_ns, s.st_size))
    return tuple(out)


# --- session state ---------------------------------------------------------------------------


@dataclass
class View:
    """What the stepping view needs for one run of the page. ``refresh`` rebuilds the lesson
    from a live stream on every tick (None for a recorded trace, which never changes).
    Streamlit keeps a fragment's arguments for the session, so an upload's view holds only
    ``fetch`` (the lesson from UPLOADS, folded again if it was let go), never the lesson."""

    lesson: Lesson | None
    lang: str
    refresh: Callable[[], Lesson | None] | None = None
    fetch: Callable[[], Lesson] | None = None

    def current(self) -> Lesson:
        if self.lesson is not None:
            return self.lesson
        assert self.fetch is not None
        return self.fetch()


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
    st.html(html.CSS)
    root = lessons_root()
    # the introduction first, where a newcomer starts; the others in their folders' order
    names = sorted(available(root), key=lambda n: n != INTRO)
    _init_from_url(names, t)
    ss = _ss()
    if not names:
        st.error(f"No lessons found under {root}.")
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
    st.caption(_origin(lesson, t))
    refresh = None
    if source == "live" and not ss.pk_live.done:
        run, spec_ = ss.pk_live, spec
        refresh = lambda: _live_fold(run, spec_)  # noqa: E731 - a tick's rebuild
    failed = ui_text.load("safe")[lang]["frame_failed"]
    fetch = _upload_fetch(spec, root, lesson, t) if lesson.key.startswith("upload:") else None
    st.fragment(boundary(failed)(_stepping_view), run_every=0.75 if refresh else None)(
        View(None if fetch else lesson, lang, refresh, fetch), t
    )
    if refresh is None:
        boundary(failed)(_html_download)(lesson, lang, fetch)
        boundary(failed)(_figure_downloads)(lesson, lang, t, fetch)


def _origin(lesson: Lesson, t: dict) -> str:
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


def _header(spec, names: list[str], lang: str, t: dict) -> str:
    """The lesson picker on a row of its own (its labels are the lessons' titles, too wide to
    share one), then the title and the source picker; returns the chosen source."""
    ss = _ss()
    if len(names) > 1:
        root = lessons_root()
        titles = _titles(str(root), _stamps(root, names))  # the folder name is the id, in the URL
        with st.container(horizontal=True, horizontal_alignment="right"):
            choice_buttons(
                names,
                "pk_lesson",
                format_func=lambda n: titles.get(n, {}).get(lang, n),
                key_prefix="pk_lesson_pick",
                on_change=lambda _: _move_to(0),
            )
    title, pick = st.columns([2, 3], vertical_alignment="bottom")
    title.markdown(f"### {spec.title[lang]}")
    with pick, st.container(horizontal=True, horizontal_alignment="right"):
        choice_buttons(
            SOURCES, "pk_source", format_func=t["sources"].get, key_prefix="pk_source_pick"
        )
    return ss.pk_source


def _lesson_for(source: str, spec, root: Path, t: dict, lang: str) -> Lesson | None:
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


def _upload_fetch(spec, root: Path, lesson: Lesson, t: dict) -> Callable[[], Lesson]:
    """``lesson`` when asked, without holding it: while this run still holds it, or while
    UPLOADS does, else folded again from the session's file (kept by Streamlit)."""
    key, in_hand = lesson.key, weakref.ref(lesson)  # alive while this run holds it

    def fetch() -> Lesson:
        held = in_hand()
        if held is None:
            held = UPLOADS.peek(key)
        if held is not None:
            return held
        up = _ss().get("pk_upload")
        if up is None:
            raise LessonError("the uploaded file is gone: open it again")
        return _uploaded_lesson(spec, root, up.getvalue(), up.name, t)

    return fetch


def _upload(spec, root: Path, t: dict, lang: str) -> Lesson | None:
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
    except (T.TraceError, LessonError) as e:
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
                started = REGISTRY.start(session_id(), cmd, cwd=ENGINE_ROOT)
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


def _start_frame(lesson: Lesson) -> int:
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
    return player.payload(_lesson, lang)


def _cached_payload(lesson: Lesson, lang: str) -> dict:
    """A keyed lesson's frames drawn once per language: an upload's with its fold (one drawing
    at a time over the server, kept with it in UPLOADS), a recorded lesson's apart."""
    if not lesson.key.startswith("upload:"):
        return _recorded_payload(lesson, lesson.key, lang)
    own = _ss().get("pk_upload_drawn")
    if own is not None and own[0] == lesson.key and lang in own[1]:
        return own[1][lang]
    note = st.empty()
    t = UI.get(lang, UI["en"])
    try:
        return UPLOADS.payload(
            lesson.key,
            lang,
            lambda: player.payload(lesson, lang),
            waiting=lambda: note.info(str(t["fold_wait"])),
        )
    finally:
        note.empty()


def _stepping_view(view: View, t: dict) -> None:
    ss = _ss()
    lesson, lang = view.current(), view.lang
    follow = False
    if view.refresh is not None:  # live: fold what has streamed in since the last tick
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
    if lesson.key:
        data = _cached_payload(lesson, lang)
    elif lesson.source == "live":  # only the frames that are new are drawn
        data = _live_view(ss.pk_live, lesson.spec).payload(lesson, lang)
    else:
        data = player.payload(lesson, lang)
    present = st.query_params.get("present") == "1"
    mount_player(data, start, present, follow_end=follow)


def _html_download(lesson: Lesson, lang: str, fetch: Callable[[], Lesson] | None) -> None:
    """The trace on screen (recorded, uploaded or a finished live run) as one offline HTML
    file with the same player; drawn only when the button is clicked. Streamlit keeps the
    button's callable for the session: an upload's holds ``fetch``, not the lesson."""
    t = ui_text.load("standalone")[lang]
    get = fetch or (lambda: lesson)

    def page() -> bytes:
        shown = get()
        drawn = {lg: _cached_payload(shown, lg) for lg in standalone.LANGS} if shown.key else None
        return standalone.page(shown, payloads=drawn).encode("utf-8")

    name = (
        lesson.spec.name
        if lesson.source in ("lesson", "live")
        else Path(lesson.source).stem or lesson.spec.name
    )
    st.download_button(
        t["download"],
        data=page,
        file_name=f"{safe_file_stem(name)}.html",
        mime="text/html",
        on_click="ignore",
        key="pk_html_download",
        icon=":material/download:",
        help=t["download_help"],
    )


def safe_file_stem(name: str) -> str:
    """A download's file name from a hostile upload name: letters, digits, ``-_.`` only."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip(".-")[:60] or "lesson"


def _figure_downloads(
    lesson: Lesson, lang: str, t: dict, fetch: Callable[[], Lesson] | None
) -> None:
    """Each step's side-by-side figure for slides, drawn only when its button is clicked."""
    if not export.browser_available():
        st.caption(t["no_browser"])
        return
    with st.expander(t["figure"], icon=":material/download:"):
        for k, step in enumerate(lesson.spec.steps):
            with st.container(
                horizontal=True, gap="small", vertical_alignment="center", key=f"pk_figure_{k}"
            ):
                st.markdown(f"{k + 1} · {step.title[lang]}", width="stretch")
                for fmt in ("png", "svg", "pdf"):
                    st.download_button(
                        fmt.upper(),
                        key=f"pk_fig_{fmt}_{k}",
                        type="tertiary",
                        **_figure_args(lesson, k, lang, fmt, fetch),
                    )


def _figure_args(
    lesson: Lesson, k: int, lang: str, fmt: str, fetch: Callable[[], Lesson] | None
) -> dict:
    """``export.download_args``, drawing from ``fetch`` when given (an upload: the callable
    Streamlit keeps holds no lesson)."""
    args = export.download_args(lesson, k, lang, fmt)
    if fetch is not None:
        args["data"] = lambda: export.step_image(fetch(), k, lang, fmt)
    return args
