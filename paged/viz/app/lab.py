"""The scenario lab page: edit a what-if scenario, record it as a dry run, step through it.

The table, arena and policy are read through ``paged.viz.live.lab`` (every value checked, each
bad one named by row and field before anything runs); "Record" runs the engine's dry run in
this process (no torch: the scheduler and allocators with a stand-in model) and the lesson
player opens on it. A link is anyone's to open, so what it may cost is bounded: a scenario
past the drawing budget is refused from its table before anything runs (or stopped at the step
that passes it), recording, folding and drawing take the server's one turn (``paged.viz.live.held``),
and the result is kept by the scenario's canonical form, so the next session to open the same
link pays nothing. The URL's ``?scenario=`` carries the scenario (deflated) so a link opens
the same what-if; while a dry run of that very scenario is shown, the player adds its frame
(``?lesson=lab&frame=N``), and opening such a link records the dry run again (it is the
scenario's alone) and opens on that frame. A run on the real model, or one the table has
changed since, is not what the link would reproduce: then the URL names no frame. The URL is
read once per session, as hostile input.
"""

from __future__ import annotations

import functools
import hashlib
import tempfile
from dataclasses import replace
from pathlib import Path

import streamlit as st

from paged import IMPORT_ROOT
from paged.engine.trace.io import TraceError
from paged.viz import safe, ui_text
from paged.viz.app import address
from paged.viz.app.component import mount_player
from paged.viz.app.controls import choice_buttons
from paged.viz.app.live_registry import REGISTRY, session_id
from paged.viz.export import standalone
from paged.viz.fold.lesson import Lesson
from paged.viz.live import lab as S
from paged.viz.live.held import Held, lesson_bytes
from paged.viz.live.run import LiveRun, record_command
from paged.viz.player import payload
from paged.viz.render import html

COLUMNS = S.REQUEST_FIELDS
#: Recordings, folds and drawings of scenarios, shared by every session that opens the same
#: one: the lab's largest holds about 40 MB (docs/classroom.md)
LAB_HELD_BYTES = 64 << 20
LAB_HELD = Held(LAB_HELD_BYTES)


def _ss():
    return st.session_state


def _init(t: dict) -> None:
    """The starting scenario: the link's, else the example. Once per session. A link that
    names a frame (the player writes ``frame`` while a dry run of the linked scenario is shown)
    records that dry run again and opens on that frame, presenting if it says so."""
    ss = _ss()
    if "lab_base" in ss:
        return
    base = S.example()
    token = st.query_params.get("scenario")
    replay = False
    if token:
        try:
            base, bad = S.decode(token)
        except S.LabError as e:
            ss.lab_notice = t["bad_link"].format(why=e)
        else:
            # placeholders stand in the table: say so rather than pass them off as the link's
            if bad:
                ss.lab_notice = t["link_fields"].format(n=len(bad), first=S.describe(bad[0]))
            replay = not bad  # only the very scenario the frame was shown for
    raw = st.query_params.get("frame")
    ss.lab_replay = replay and raw is not None
    ss.lab_start = 0
    if ss.lab_replay and raw is not None:
        try:
            ss.lab_start = int(raw)
        except ValueError:
            ss.lab_notice = t["bad_frame"].format(raw=raw)
    ss.lab_present = ss.lab_replay and st.query_params.get("present") == "1"
    ss.lab_gen, ss.lab_rec, ss.lab_policy = 0, None, base.policy
    ss.lab_base = base  # last: it marks the state complete (a failure above is retried whole)


def _table(lab: S.Lab, t: dict, gen: int) -> list[dict]:
    rows = [{k: getattr(r, k) for k in COLUMNS} for r in lab.requests]
    cc = st.column_config
    edited = st.data_editor(
        rows,
        key=f"lab_table_{gen}",
        num_rows="dynamic",
        width="stretch",
        hide_index=False,
        column_order=COLUMNS,
        column_config={
            "id": cc.TextColumn(t["col_id"], width="small"),
            "prompt": cc.TextColumn(t["col_prompt"], width="large"),
            "max_tokens": cc.NumberColumn(t["col_max_tokens"], step=1, format="%d"),
            "arrival_step": cc.NumberColumn(t["col_arrival_step"], step=1, format="%d"),
            "stop_after": cc.NumberColumn(t["col_stop_after"], step=1, format="%d"),
        },
    )
    return [dict(r) for r in edited]


def _arena(lab: S.Lab, t: dict, gen: int) -> dict:
    cols = st.columns(3)
    out = {}
    for col, key in zip(cols, ("num_blocks", "block_size", "max_model_len"), strict=True):
        out[key] = col.number_input(t[key], value=getattr(lab, key), step=1, key=f"lab_{key}_{gen}")
    return out


def _current(t: dict) -> tuple[S.Lab, list[S.FieldError]]:
    """What the form says now, with every bad value."""
    ss = _ss()
    st.markdown(t["requests"].format(n=S.MAX_REQUESTS))
    rows = _table(ss.lab_base, t, ss.lab_gen)
    arena = _arena(ss.lab_base, t, ss.lab_gen)
    with st.container(horizontal=True, vertical_alignment="center"):
        st.markdown(f"**{t['policy']}**", width="content")
        choice_buttons(
            S.POLICIES,
            "lab_policy",
            format_func=lambda p: t[f"policy_{p}"],
            key_prefix="lab_policy",
        )
    try:
        lab, errors = S.from_dict({"requests": rows, **arena, "policy": ss.lab_policy})
    except S.LabError as e:
        return ss.lab_base, [S.FieldError(None, "requests", str(e))]
    return lab, errors or S.check(lab)


def _show_errors(errors: list[S.FieldError], t: dict) -> None:
    for e in errors:
        where = (
            # a request's field by its column's heading, as the table shows it
            t["row"].format(n=e.row + 1, field=t.get(f"col_{e.field}", e.field))
            if e.row is not None
            else t["arena"].format(field=e.field)
        )
        st.error(
            t["bad_field"].format(where=safe.md_text(where), message=safe.md_text(e.message)),
            icon=":material/error:",
        )


def _side_titles(t_by_lang: dict, policy: str) -> dict[str, dict[str, str]]:
    from paged.viz.fold.lesson_folder import load_spec

    right = load_spec("six-steps").side_titles["right"]
    return {"left": {lg: t_by_lang[lg][f"side_{policy}"] for lg in t_by_lang}, "right": right}


def render(lang: str = "en") -> None:
    """Draw the scenario lab in ``lang``."""
    texts = ui_text.load("lab")
    t = texts[lang]
    st.html(f"<style>{html.css()}</style>")
    _init(t)
    ss = _ss()
    st.markdown(f"### {t['title']}")
    st.caption(t["intro"])
    if ss.get("lab_notice"):
        st.warning(safe.md_text(ss.pop("lab_notice")))
    lab, errors = _current(t)
    _show_errors(errors, t)
    token = S.encode(lab) if not errors else None
    with st.container(horizontal=True, vertical_alignment="center"):
        clicked = st.button(
            t["record"],
            key="lab_record",
            type="primary",
            disabled=bool(errors),
            icon=":material/play_arrow:",
        )
        st.download_button(
            t["download"],
            S.to_toml(lab) if not errors else "",
            file_name="lab.toml",
            mime="application/toml",
            key="lab_toml",
            disabled=bool(errors),
            on_click="ignore",
            icon=":material/download:",
        )
    if token is not None:
        st.caption(t["link"])
        st.code(f"{_base_url()}?scenario={token}", language=None, wrap_lines=True)
    replay = ss.pop("lab_replay", False)  # once: the link's frame, recorded again
    if (clicked or replay) and not errors:
        try:
            rec, _ = _drawn(lab, None, texts)
        except S.TooLarge as e:
            st.error(t["too_big"].format(steps=e.steps, slots=e.slots))
            return
        except S.LabError as e:
            st.error(safe.md_text(t["failed"].format(why=e)))
            return
        ss.lab_rec = (lab, rec)
        if clicked:
            ss.lab_start, ss.lab_present = 0, False
    _real_model(lab, errors, t, lang)
    # In place (no history entry per edit). A frame in the address promises that the link
    # reopens it: only while a dry run of this very scenario is shown.
    params: dict[str, str | None] = {} if token is None else {"scenario": token}
    if not _linkable(lab):
        params.update(lesson=None, frame=None, present=None)
    if params:
        address.keep(params, key="lab")
    _player(lab, texts, lang)
    st.caption(t["real_model"])


@functools.cache
def _lab_folder() -> Path:
    """This process's own folder for lab scenarios: made fresh and private (0700). A fixed
    /tmp/paged-kv-lab could be made first by another user of the machine, with a link at a
    name computed from the example's TOML: the app then wrote through it into any file."""
    return Path(tempfile.mkdtemp(prefix="paged-kv-lab-"))


def _linkable(lab: S.Lab) -> bool:
    """Whether the recording shown is one a link to ``lab`` reproduces: a dry run (the real
    model is not run again from a link) of the scenario the form holds now."""
    rec = _ss().get("lab_rec")
    return rec is not None and rec[0] == lab and rec[1].dry


def _scenario_file(lab: S.Lab) -> Path:
    """The lab's TOML where the engine's child process can read it (one file per content)."""
    folder = _lab_folder()
    if not folder.is_dir():  # a tmp cleaner took it while the app ran
        _lab_folder.cache_clear()
        folder = _lab_folder()
    text = S.to_toml(lab)
    path = folder / f"{hashlib.sha256(text.encode()).hexdigest()[:16]}.toml"
    path.write_text(text, encoding="utf-8")
    return path


def _real_model(lab: S.Lab, errors: list, t: dict, lang: str) -> None:
    """Record on the real model in a child process (the lesson page's live-run machinery:
    one run per server), with progress; the player opens on the finished trace."""
    ss = _ss()
    run: LiveRun | None = ss.get("lab_live")
    running = run is not None and not run.done
    if st.button(
        t["model_stop"] if running else t["model_go"],
        key="lab_model",
        disabled=bool(errors) and not running,
        icon=":material/stop:" if running else ":material/memory:",
    ):
        if running and run is not None:
            run.stop()
        else:
            try:  # the real run is as long as the dry one or shorter: refuse what it refuses
                S.record_dry(lab)
            except S.LabError as e:
                ss.lab_model_refused = str(e)
                st.rerun()
            cmd = record_command(_scenario_file(lab), "model") + [
                "--allocators",
                f"{lab.policy},paged",
            ]
            started = REGISTRY.start(session_id(), cmd, cwd=IMPORT_ROOT)
            if started is None:
                ss.lab_busy = True
            else:
                ss.lab_live, ss.lab_live_lab = started, lab
        st.rerun()
    if ss.pop("lab_busy", False):
        st.warning(ui_text.load("safe")[lang]["live_busy"])
    if refused := ss.pop("lab_model_refused", None):
        st.error(safe.md_text(t["model_refused"].format(why=refused)))
    if run is None:
        return
    if not run.done:
        st.fragment(_model_progress, run_every=1.0)(run, t)
    elif run.returncode == 0 and not run.stopped and ss.get("lab_live_taken") is not run:
        rec = S.Recording(run.text(), dry=False)
        ss.lab_rec, ss.lab_live_taken = (ss.lab_live_lab, rec), run
    elif run.error():
        st.error(safe.md_text(t["model_failed"].format(why=run.error())))


def _model_progress(run: LiveRun, t: dict) -> None:
    if run.done:
        st.rerun(scope="app")
    st.info(
        t["model_running"].format(progress=safe.md_text(run.progress() or "…")),
        icon=":material/hourglass_top:",
    )


def _base_url() -> str:
    url = getattr(st.context, "url", "") or ""
    return url.split("?")[0]


def _key(lab: S.Lab, rec: S.Recording | None) -> str:
    """A dry run is its scenario's alone: the link's canonical form names it. A run on the
    real model is named by its trace."""
    if rec is None or rec.dry:
        return f"dry:{S.encode(lab)}"
    return f"model:{lab.policy}:{hashlib.sha256(rec.trace_text.encode('utf-8')).hexdigest()}"


def _drawn(lab: S.Lab, rec: S.Recording | None, texts: dict) -> tuple[S.Recording, Lesson]:
    """``lab``'s recording (a dry run unless ``rec`` is one on the real model) and its lesson,
    made once per scenario in the server's one turn and shared; a session that waits for the
    turn is told. Raises S.LabError (S.TooLarge past the drawing budget) and TraceError."""

    def make() -> tuple[tuple[S.Recording, Lesson], int]:
        # a dry run is recorded again (its scenario alone gives it exactly), never read back
        # from its own text; a run on the real model is read from the file it wrote
        got = rec if rec is not None and not rec.dry else S.record_dry(lab)
        lesson = S.lesson_for(
            lab,
            got,
            _side_titles(texts, lab.policy),
            {lg: texts[lg]["title"] for lg in texts},
        )
        # what stays is the file to download: the events are in the lesson now, not held twice
        kept = replace(got, built=None)
        return (kept, lesson), lesson_bytes(lesson) + len(got.trace_text)

    lang = _ss().get("lang", "en")
    note = st.empty()
    try:
        return LAB_HELD.get(
            _key(lab, rec), make, waiting=lambda: note.info(texts[lang]["wait_turn"])
        )
    finally:
        note.empty()


def _player(lab: S.Lab, texts: dict, lang: str) -> None:
    t = texts[lang]
    rec = _ss().get("lab_rec")
    if rec is None:
        st.info(t["nothing"])
        return
    shown, recording = rec
    if shown != lab:
        st.caption(t["stale"])
    try:
        _, lesson = _drawn(shown, recording, texts)
    except (S.LabError, TraceError) as e:  # kept, so it can still be downloaded
        st.error(safe.md_text(t["too_large"].format(why=e)))
        st.download_button(
            "JSONL", recording.trace_text, file_name="lab.jsonl", key="lab_jsonl", on_click="ignore"
        )
        return
    st.caption(
        t["recorded"].format(
            frames=lesson.num_frames,
            left=lesson.left.summary.steps,
            right=lesson.right.summary.steps,
        )
    )
    note = st.empty()
    try:
        data = LAB_HELD.payload(
            _key(shown, recording),
            lang,
            lambda: payload.payload(lesson, lang),
            waiting=lambda: note.info(t["wait_turn"]),
        )
    finally:
        note.empty()
    ss = _ss()
    mount_player(
        data,
        lesson.clamp(ss.get("lab_start", 0)),
        ss.get("lab_present", False),
        key="lab_player",
        link_frame=_linkable(lab),
    )
    share = ui_text.load("standalone")[lang]
    key = _key(shown, recording)

    def page() -> bytes:
        drawn = {
            lg: LAB_HELD.payload(key, lg, functools.partial(payload.payload, lesson, lg))
            for lg in standalone.LANGS
        }
        return standalone.page(lesson, payloads=drawn).encode("utf-8")

    st.download_button(
        share["download"],
        data=page,
        file_name="lab.html",
        mime="text/html",
        on_click="ignore",
        key="lab_html",
        icon=":material/download:",
        help=share["download_help"],
    )
