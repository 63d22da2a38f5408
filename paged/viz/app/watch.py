"""The "Watch a vLLM server" page: follow a KV-event stream (vLLM's, or our engine's
``--kv-events``) and draw the server's prefix cache from it, live or from a recording.

Addresses: ``tcp://HOST:PORT`` only (the replay socket is PORT+1 unless given). A host other than
loopback is accepted only when this app itself listens on loopback alone and the user ticks the
opt-in: subscribing makes the app's server connect out, which on a shared deployment would let
any visitor probe the network behind it. The same holds for the metrics address (the server's
HTTP address, whose Prometheus ``/metrics`` is polled beside the events). Serving a classroom (the
app bound beyond loopback), the page follows only the addresses the lecturer allowed at start
(``paged/viz/watch/allowed.py``), and refuses every other in the same words.

Connect or listen: vLLM's publisher binds only an endpoint holding ``*`` or ``::``, and connects
to any other; the page connects by default and can listen (bind) instead. The help shows the
``vllm serve --kv-events-config`` line that works with each.

Recording: the page keeps the last batches (bounded in bytes) and offers them as JSONL: a header
line ``{"format": "paged-kv/kv-events-jsonl", "version": 1}``, then ``{"seq", "batch"}`` per
batch, ``batch`` being vLLM's ``EventBatch`` as JSON arrays (bytes hashes in base64). Uploading
such a file replays it batch by batch with a slider, folded in a process of its own that ends
with the tab (``paged/viz/watch/replay_child.py``), so its memory goes back whole.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import plotly.graph_objects as go
import streamlit as st

from paged.engine.interop.kv_events import EndpointError, parse_endpoint
from paged.viz import safe, ui_text
from paged.viz.app import model_files
from paged.viz.app.boundary import boundary
from paged.viz.app.controls import file_uploader
from paged.viz.app.live_registry import session_alive, session_id
from paged.viz.watch.allowed import ENV, Allowed
from paged.viz.watch.held import Held
from paged.viz.watch.metrics import HITS, QUERIES, RUNNING, USAGE, WAITING, MetricsPoller
from paged.viz.watch.replay_child import ReplayError, ReplayProcess
from paged.viz.watch.state import MAX_RECORDING_BYTES, Snapshot, short_hash
from paged.viz.watch.subscriber import Subscriber, SubscriberConfig

TEXT = ui_text.load("watch_page")  # paged/viz/text/watch_page.toml
DEFAULT_ENDPOINT = "tcp://127.0.0.1:5557"
MAX_SUBSCRIBERS = 8  # live subscriber threads in this app process, all sessions together
#: (session id, the subscriber it watches through): sessions watching one stream share one
#: subscriber, so its state, and the snapshot drawn from it, exist once for all of them
_LIVE: list[tuple[str, Subscriber]] = []
_LIVE_LOCK = threading.Lock()
#: What every session's replayed recording may hold, all together (an 8 MB recording holds
#: about 60 MiB, in a process of its own): past it a new one is refused; a closed tab's
#: process ends within REAP_INTERVAL_S
HELD_BYTES = 512 << 20
HELD: Held[ReplayProcess] = Held(HELD_BYTES, lambda sid: session_alive(sid))
#: How often the reaper stops what only closed tabs watched, and drops what they held
REAP_INTERVAL_S = 2.0
_REAPER: threading.Thread | None = None
#: One recording read and folded at a time, server-wide: until it is held it is not accounted
_READING = threading.Lock()
#: What a classroom may follow: the lecturer's list, read once when the server starts
ALLOWED = Allowed.parse(os.environ.get(ENV, ""))


def _classroom() -> bool:
    """The app is reached from beyond this machine: whoever types an address is a stranger."""
    return not model_files.server_paths_allowed(st.get_option("server.address"))


def render(lang: str = "en") -> None:
    t = TEXT.get(lang, TEXT["en"])
    st.header(t["title"])
    st.caption(t["intro"])
    st.info(t["not_carried"])
    mode = st.radio(
        t["source"],
        ["live", "recording"],
        horizontal=True,
        key="kvw_source",
        format_func=lambda m: t[f"source_{m}"],
    )
    if mode == "live":
        HELD.drop(session_id())  # the uploader is gone, and its file with it
        _live(t)
    else:
        _recording(t, lang)


# --- live -------------------------------------------------------------------------------------


def _live(t: dict) -> None:
    ss = st.session_state
    c1, c2, c3 = st.columns([3, 2, 1])
    addr = c1.text_input(t["endpoint"], value=DEFAULT_ENDPOINT, max_chars=120, key="kvw_addr")
    topic = c2.text_input(t["topic"], value="", max_chars=64, key="kvw_topic")
    m1, m2 = st.columns([2, 3])
    mode = m1.radio(
        t["mode"],
        ["connect", "listen"],
        horizontal=True,
        key="kvw_mode",
        format_func=lambda m: t[f"mode_{m}"],
    )
    metrics = m2.text_input(t["metrics"], value="", max_chars=120, key="kvw_metrics")
    with st.expander(t["vllm_help_title"]):
        st.markdown(_vllm_help(addr, t))
    remote = False
    if not _classroom():
        remote = st.checkbox(t["allow_remote"], key="kvw_remote")
    sub: Subscriber | None = ss.get("kvw_sub")
    if c3.button(t["connect"], key="kvw_connect", type="primary"):
        sub = _connect(addr, topic, remote, t, listen=mode == "listen", metrics=metrics)
    if sub is not None and st.button(t["disconnect"], key="kvw_disconnect"):
        _drop(sub)
        ss.pop("kvw_sub", None)
        sub = None
    if sub is None:
        st.caption(t["hint"])
        return
    st.fragment(boundary(t["view_failed"])(_live_view), run_every=1.0)(sub, t)


def _vllm_help(addr: str, t: dict) -> str:
    """The ``vllm serve`` lines that work with each mode, on the port typed (5557 if none)."""
    try:
        port = parse_endpoint(addr, allow_remote=True).port
    except EndpointError:
        port = 5557

    def config(endpoint: str) -> str:
        return (
            '\'{"enable_kv_cache_events": true, "publisher": "zmq", '
            f'"endpoint": "{endpoint}", "replay_endpoint": "tcp://127.0.0.1:{port + 1}"}}\''
        )

    # vLLM binds an endpoint only when it holds "*" or "::"; the IPv4-mapped loopback holds
    # "::" and still listens on loopback alone
    connect = config(f"tcp://[::ffff:127.0.0.1]:{port}")
    listen = config(f"tcp://127.0.0.1:{port}")
    return t["vllm_help"].format(connect=connect, listen=listen, port=port)


def _connect(
    addr: str, topic: str, remote: bool, t: dict, listen: bool = False, metrics: str = ""
) -> Subscriber | None:
    ss = st.session_state
    old = ss.pop("kvw_sub", None)
    if old is not None:
        _drop(old)
    classroom = _classroom()
    try:
        fresh = Subscriber(
            SubscriberConfig(
                addr,
                topic=topic,
                allow_remote=remote and not classroom,
                listen=listen,
                metrics_url=metrics.strip() or None,
            )
        )
    except EndpointError as e:
        st.error(_refused(t) if classroom else safe.md_text(e))
        return None
    polled = None if fresh.metrics is None else fresh.metrics.url
    if classroom and not ALLOWED.permits(fresh.url, polled):
        st.error(_refused(t))
        return None
    with _LIVE_LOCK:
        gone = _prune()
        sub = next((s for _, s in _LIVE if _stream(s) == _stream(fresh)), None)
        if sub is None and len({id(s) for _, s in _LIVE}) < MAX_SUBSCRIBERS:
            sub = fresh.start()
        if sub is not None:
            _LIVE.append((session_id(), sub))
            _ensure_reaper()
    for old_sub in gone:  # each may take its 2 s to end: other sessions' connects go on
        old_sub.stop()
    if sub is None:
        st.error(t["too_many"].format(n=MAX_SUBSCRIBERS))
        return None
    ss.kvw_sub = sub
    return sub


def _refused(t: dict) -> str:
    """One line for every address a classroom may not follow, typed well or not: whatever it
    says must not tell one port from another."""
    allowed = ALLOWED.shown()
    if not allowed:
        return t["none_allowed"].format(env=ENV)
    return t["not_allowed"].format(allowed=safe.md_text(allowed), env=ENV)


def _stream(sub: Subscriber) -> tuple:
    """What a subscriber follows, addresses normalised: two sessions asking for the same
    stream are given one subscriber (the remote opt-in only decides whether it may be asked)."""
    metrics = None if sub.metrics is None else sub.metrics.url
    return (sub.url, sub.replay_url, sub.config.topic, sub.config.listen, metrics)


def _prune() -> list[Subscriber]:
    """Forget the subscribers only gone sessions watched (a closed tab never says goodbye) and
    return them, for the caller to stop once it has let go of ``_LIVE_LOCK`` (held here, on every
    connect): stopping one waits up to 2 s for its thread, and with the lock held every other
    session's connect waited too. Called on every connect and by the reaper."""
    keep = [(sid, sub) for sid, sub in _LIVE if sub.alive and session_alive(sid)]
    held = {id(sub) for _, sub in keep}
    gone = list({id(sub): sub for _, sub in _LIVE if id(sub) not in held}.values())
    _LIVE[:] = keep
    return gone


def _ensure_reaper() -> None:
    """Start the reaper unless it runs. Caller holds ``_LIVE_LOCK``."""
    global _REAPER
    if _REAPER is None or not _REAPER.is_alive():
        _REAPER = threading.Thread(target=_reap, name="kv-watch-reaper", daemon=True)
        _REAPER.start()


def _reap() -> None:
    """Every REAP_INTERVAL_S: stop the subscribers only closed tabs watched (a closed tab never
    says goodbye, and its socket reader lived on until someone else connected) and drop the
    recordings they held; end once nothing is watched or held."""
    global _REAPER
    while True:
        time.sleep(REAP_INTERVAL_S)
        with _LIVE_LOCK:
            gone = _prune()
        for sub in gone:
            sub.stop()
        held = HELD.reap()
        with _LIVE_LOCK:
            if not _LIVE and not held and HELD.total == 0:
                _REAPER = None
                return


def _drop(sub: Subscriber) -> None:
    """This session stops watching ``sub``; the subscriber stops once no session watches it."""
    sid = session_id()
    with _LIVE_LOCK:
        mine = next((i for i, (s_id, s) in enumerate(_LIVE) if s is sub and s_id == sid), None)
        if mine is not None:
            del _LIVE[mine]
        watched = any(s is sub for _, s in _LIVE)
    if not watched:
        sub.stop()


#: How stale a drawn snapshot the live view may show: it redraws every second, and every session
#: watching one server shares that server's snapshot (drawing 200k blocks takes ~0.7 s of CPU).
SNAPSHOT_MAX_AGE = 0.9


def _live_view(sub: Subscriber, t: dict) -> None:
    snap = sub.state.snapshot(max_age=SNAPSHOT_MAX_AGE)
    if not sub.connected and sub.disconnects:
        status = t["status_gone"].format(url=sub.url)
    elif not sub.connected and sub.config.listen:
        status = t["status_listening"].format(url=sub.url)
    elif not sub.connected:
        status = t["status_waiting"].format(url=sub.url)
    elif snap.last_message_age is None:
        status = t["status_connected"].format(url=sub.url)
    else:
        status = t["status_live"].format(url=sub.url, age=snap.last_message_age)
    st.caption(
        safe.md_text(status)
        + "  \n"
        + t["status_counts"].format(disconnects=sub.disconnects, **snap.counters)
        + "  \n"
        + t["status_kept"].format(
            n=snap.kept_batches,
            mib=snap.kept_bytes / (1 << 20),
            cap=sub.state.ring_bytes / (1 << 20),
        )
    )
    _view(snap, t, sub.metrics)
    state = sub.state  # the JSONL is built on click, not on every redraw (up to 16 MiB)
    st.download_button(
        t["download"],
        lambda: "\n".join(state.recording(safe.UPLOAD_BYTES)) + "\n",
        file_name="kv-events.jsonl",
        mime="application/jsonl",
        key="kvw_download",
        on_click="ignore",
    )
    st.caption(t["download_cap"].format(mb=safe.MAX_UPLOAD_MB))


# --- recording --------------------------------------------------------------------------------

#: A real vLLM server's KV events, as ``paged watch --save`` kept them (bench/vllm_watch_demo.py):
#: the Recording tab tried without a server. Read like any upload: it is a file on disk.
DEMO = Path(__file__).resolve().parents[1] / "data" / "vllm_kv_events.jsonl"


def _recording(t: dict, lang: str) -> None:
    sid = session_id()
    up = file_uploader(
        t["upload"], type=["jsonl"], key="kvw_upload", lang=lang, max_mb=safe.MAX_UPLOAD_MB
    )
    if up is not None:
        key, size, read = up.file_id, up.size, up.getvalue
    elif DEMO.is_file() and st.toggle(t["demo"], key="kvw_demo"):
        key, size, read = "demo", DEMO.stat().st_size, DEMO.read_bytes
    else:
        HELD.drop(sid)  # a removed file's batches go with it
        st.caption(t["upload_hint"])
        return
    if size > MAX_RECORDING_BYTES:
        HELD.drop(sid)
        st.error(t["too_big"].format(mb=MAX_RECORDING_BYTES >> 20))
        return
    # the slider reruns the page: read the upload once, and fold forward from the last step
    replay = HELD.get(sid, key)
    refused = st.session_state.get("kvw_refused")
    if replay is None and refused is not None and refused[0] == key:
        st.error(refused[1])  # read once: each rerun would read and fold it again
        return
    if replay is None:
        got = load_replay(sid, key, read(), t)
        if isinstance(got, str):
            st.session_state["kvw_refused"] = (key, got)
            st.error(got)
            return
        replay = got
    n = replay.batches
    upto = st.slider(t["batch"], 1, n, n, key="kvw_step") if n > 1 else 1
    try:
        snap = replay.snapshot(upto)
    except ReplayError as e:  # its process ended: the next rerun reads the upload again
        HELD.drop(sid)
        st.error(safe.md_text(e))
        return
    st.caption(t["replay_at"].format(i=upto, n=n, seq=snap.last_seq))
    _view(snap, t)


def load_replay(sid: str, key: str, data: bytes, t: dict) -> ReplayProcess | str:
    """Read and fold a recording for session ``sid`` in a process of its own and hold it in
    ``HELD``; or the one line saying why not (not a recording, or the server holds too much
    already)."""
    HELD.drop(sid)
    with _READING:
        try:
            replay = ReplayProcess(data)
        except ReplayError as e:
            if e.reason in ("not_text", "no_batches"):
                return t[e.reason]
            return safe.md_text(e)
        if not HELD.put(sid, key, replay, replay.size):
            replay.close()
            return t["held_full"].format(mib=HELD.budget >> 20)
    with _LIVE_LOCK:
        _ensure_reaper()
    return replay


# --- drawing (the same for live and recorded streams) -----------------------------------------


def _view(snap: Snapshot, t: dict, metrics: MetricsPoller | None = None) -> None:
    c = st.columns(6)
    blocks = f"{snap.num_blocks:,}"
    c[0].metric(
        t["m_blocks"],
        blocks,
        help=t["m_copies"].format(n=snap.num_copies) if snap.num_copies > snap.num_blocks else None,
    )
    c[1].metric(t["m_chains"], f"{len(snap.chains):,}")
    c[2].metric(t["m_stored"], f"{snap.counters['stored']:,}")
    c[3].metric(t["m_removed"], f"{snap.counters['removed']:,}")
    c[4].metric(t["m_malformed"], f"{snap.counters['malformed']:,}")
    c[5].metric(t["m_gaps"], f"{snap.counters['gaps']:,}")
    if snap.last_error:
        st.warning(t["last_error"].format(error=safe.md_text(snap.last_error)))
    if snap.counters["untracked"]:
        st.caption(t["untracked"].format(n=snap.counters["untracked"]))
    if snap.num_copies > snap.num_blocks:
        st.caption(t["copies"].format(n=snap.num_copies - snap.num_blocks))
    tree_at, side = st.columns([3, 1]) if metrics is not None else (st.container(), None)
    if side is not None and metrics is not None:
        with side:
            _metrics(metrics, t)
    with tree_at:
        if not snap.num_blocks:
            st.caption(t["empty"])
        else:
            st.plotly_chart(_tree(snap, t), key="kvw_tree", config={"displayModeBar": False})
    if snap.num_blocks:
        _chain_table(snap, t)
    if snap.rates:
        st.plotly_chart(_rates(snap, t), key="kvw_rates", config={"displayModeBar": False})


def _metrics(poller: MetricsPoller, t: dict) -> None:
    """The server's own numbers beside the tree the events draw."""
    st.markdown(t["metrics_title"])
    now, rate = poller.latest()
    if now is None:
        st.caption(safe.md_text(poller.last_error) if poller.last_error else t["metrics_waiting"])
        return
    v, bad = now.values, now.invalid
    if USAGE in v or USAGE in bad:
        st.metric(t["m_usage"], t["m_invalid"] if USAGE in bad else f"{100 * v[USAGE]:.1f} %")
    if HITS in bad or QUERIES in bad:
        st.metric(t["m_hit_rate"], t["m_invalid"])
    elif HITS in v and QUERIES in v:
        st.metric(t["m_hit_rate"], "–" if rate is None else f"{100 * rate:.0f} %")
    for name, label in ((RUNNING, t["m_running"]), (WAITING, t["m_waiting"])):
        if name in v or name in bad:
            st.metric(label, t["m_invalid"] if name in bad else f"{v[name]:g}")
    if poller.last_error:
        st.caption(safe.md_text(poller.last_error))
    usage = [(s.at, s.values[USAGE]) for s in list(poller.samples) if USAGE in s.values]
    if len(usage) > 1:
        end = usage[-1][0]
        fig = go.Figure(go.Scatter(x=[a - end for a, _ in usage], y=[100 * u for _, u in usage]))
        fig.update_layout(
            title=t["usage_title"],
            height=200,
            margin={"t": 30, "l": 0, "r": 0, "b": 0},
            yaxis={"range": [0, 100]},
            xaxis_title=t["rates_x"],
        )
        st.plotly_chart(fig, key="kvw_usage", config={"displayModeBar": False})


def _tree(snap: Snapshot, t: dict) -> go.Figure:
    """The prefix tree: each box a held block, under its parent, as wide as the blocks below it;
    labelled with its first token ids (what the events carry)."""
    # one synthetic root above the chains: plotly draws a lone root transparent
    ids = ["cache"] + [n[0] for n in snap.nodes]
    parents = [""] + [n[1] or "cache" for n in snap.nodes]
    labels = [t["tree_root"]] + [safe.plotly_text(n[2]) or "·" for n in snap.nodes]
    fig = go.Figure(
        go.Icicle(
            ids=ids,
            parents=parents,
            labels=labels,
            values=[0] + [1] * len(snap.nodes),
            branchvalues="remainder",
            root_color="#9e9e9e",
            hovertemplate=t["tree_hover"] + "<extra></extra>",
            tiling={"orientation": "h"},
            maxdepth=12,
        )
    )
    # left to right is the prompt's own order; no animation: the view redraws every second
    fig.update_layout(
        title=t["tree_title"],
        height=380,
        margin={"t": 40, "l": 0, "r": 0, "b": 0},
        transition={"duration": 0},
        uirevision="kv-tree",
    )
    return fig


def _chain_table(snap: Snapshot, t: dict) -> None:
    cols = t["cols"]
    rows = [
        {
            cols["root"]: short_hash(c.root),
            cols["blocks"]: c.num_blocks,
            cols["depth"]: c.depth,
            cols["leaves"]: c.leaves,
            cols["shared"]: c.shared,
            cols["hit"]: c.hit_tokens,
            cols["tokens"]: " ".join(str(x) for x in c.preview),
        }
        for c in snap.chains
    ]
    st.subheader(t["chains_title"])
    st.caption(t["chains_caption"])
    st.dataframe(rows, hide_index=True, key="kvw_chains")


def _rates(snap: Snapshot, t: dict) -> go.Figure:
    now = snap.rates[-1][0]
    xs = [s - now for s, _, _ in snap.rates]
    fig = go.Figure(
        [
            go.Bar(x=xs, y=[a for _, a, _ in snap.rates], name=t["stored"]),
            go.Bar(x=xs, y=[-b for _, _, b in snap.rates], name=t["removed"]),
        ]
    )
    fig.update_layout(
        title=t["rates_title"],
        barmode="relative",
        height=260,
        xaxis_title=t["rates_x"],
        margin={"t": 40, "l": 0, "r": 0, "b": 0},
    )
    return fig
