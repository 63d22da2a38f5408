"""The watch page (AppTest, no browser) follows a publisher on loopback fed by stand-in
prefix-cache events (the shared-system-prompt workload), and survives the publisher being killed
and restarted, 1,000 malformed messages and 100k events in a burst (memory bounded, asserted).
Every wait is bounded."""

from __future__ import annotations

import time
import tracemalloc
from pathlib import Path

import msgspec
import pytest
from streamlit.testing.v1 import AppTest

from paged.engine.interop import kv_events as K
from paged.viz import ui_text
from paged.viz.watch.state import WatchState
from tests.engine.test_kv_events import (
    FakeEvicted,
    FakeStepEnd,
    FakeStored,
    free_ports,
    hostile_publisher,
    send_malformed,
    send_probe,
)

T = ui_text.load("watch_page")["en"]
BS = 4
SYSTEM = tuple(range(100, 108))


def page() -> AppTest:
    at = AppTest.from_string(
        "from paged.viz.app.watch import render\nrender('en')", default_timeout=60
    )
    at.run()
    assert not at.exception, at.exception
    return at


def metric(at: AppTest, key: str) -> int:
    [m] = [m for m in at.metric if m.label == T[key]]
    return int(str(m.value).replace(",", ""))


#: Waits end as soon as what they wait for is seen: a generous bound costs a passing run nothing,
#: and a loaded machine (the suite beside other work) may need it.
PATIENCE = 60.0


def rerun_until(at: AppTest, cond, timeout: float = PATIENCE) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        at.run()
        assert not at.exception, at.exception
        if cond():
            return
        time.sleep(0.1)
    raise AssertionError("page never showed it")


def shared_prompt_workload(tr: K.EngineEventTranslator, tag: int) -> None:
    """Three requests behind one system prompt, as the prefix cache would report them: the
    system prompt's two blocks once, then one block per request."""
    h_sys = [1000 * tag + 1, 1000 * tag + 2]
    tr(FakeStored(h_sys[0], None, SYSTEM[:BS], BS, physical=0))
    tr(FakeStored(h_sys[1], h_sys[0], SYSTEM[BS:], BS, physical=1))
    tr(FakeStepEnd())
    for r in range(3):
        tr(FakeStored(1000 * tag + 10 + r, h_sys[1], (r,) * BS, BS, physical=2 + r))
        tr(FakeStepEnd())


@pytest.mark.load  # a soak: a kill, a restart, 1,000 bad messages and 100k events; make test
def test_watch_page_follows_a_publisher_through_kill_restart_garbage_and_a_flood():
    port, _ = free_ports()
    url = f"tcp://127.0.0.1:{port}"
    at = page()
    at.text_input(key="kvw_addr").set_value(url).run()
    at.button(key="kvw_connect").click().run()
    assert not at.exception and not at.error
    sub = at.session_state["kvw_sub"]
    try:
        # 1. the shared chain
        pub = K.KVEventPublisher(url)
        tr = K.EngineEventTranslator(pub)
        end = time.monotonic() + PATIENCE
        while sub.state.snapshot().num_blocks < 5 and time.monotonic() < end:
            shared_prompt_workload(tr, 1)  # PUB drops batches until the subscriber joined
            time.sleep(0.1)
        rerun_until(at, lambda: metric(at, "m_blocks") == 5)
        assert metric(at, "m_chains") == 1
        [table] = at.dataframe
        row = table.value.iloc[0]
        assert (row[T["cols"]["blocks"]], row[T["cols"]["shared"]], row[T["cols"]["leaves"]]) == (
            5,
            2,
            3,
        )
        # 2. killed: the view keeps what it had; restarted: a new process, a new cache
        pub.close()
        rerun_until(at, lambda: not sub.connected)
        assert metric(at, "m_blocks") == 5
        pub = K.KVEventPublisher(url)
        tr = K.EngineEventTranslator(pub)
        end = time.monotonic() + PATIENCE
        while sub.state.counters["restarts"] < 1 and time.monotonic() < end:
            tr(FakeStored(7, None, (9,) * BS, BS, physical=0))
            tr(FakeStepEnd())
            time.sleep(0.1)
        rerun_until(at, lambda: metric(at, "m_blocks") == 1)
        pub.close()
        # 3. a hostile server on the same port: 1,000 malformed messages change nothing
        rerun_until(at, lambda: not sub.connected)
        with hostile_publisher(url) as bad:
            end = time.monotonic() + PATIENCE
            while sub.state.counters["malformed"] == 0 and time.monotonic() < end:
                send_probe(bad)
                time.sleep(0.05)
            base = sub.state.counters["malformed"]
            send_malformed(bad, 1000)
            rerun_until(at, lambda: metric(at, "m_malformed") == base + 1000)
            assert metric(at, "m_blocks") == 1
            assert len(at.warning) == 1 and "\n" not in at.warning[0].value
        # 4. a flood: 100k events (stores and their evictions) in one burst
        pub = K.KVEventPublisher(url)
        try:
            end = time.monotonic() + PATIENCE
            while sub.state.counters["restarts"] < 2 and time.monotonic() < end:
                pub.publish([K.AllBlocksCleared()])
                time.sleep(0.1)
            # a probe still in flight must land before the count is taken (under load it may not)
            events0 = -1
            while events0 != sub.state.counters["events"] and time.monotonic() < end:
                events0 = sub.state.counters["events"]
                time.sleep(0.5)
            tracemalloc.start()
            for b in range(1000):
                hs = [b * 100 + i for i in range(50)]
                evs = [K.BlockStored([h], None, list(range(16)), 16, None, "GPU") for h in hs]
                evs += [K.BlockRemoved([h], "GPU") for h in hs]
                pub.publish(evs)
            end = time.monotonic() + 60
            while sub.state.counters["events"] < events0 + 100_000 and time.monotonic() < end:
                time.sleep(0.1)
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
        finally:
            pub.close()
        st = sub.state
        assert st.counters["events"] == events0 + 100_000
        assert sum(len(p) for _, p in st.ring) <= st.ring_bytes
        assert len(st.rates) <= st.max_rate_seconds
        assert peak < 64 << 20, peak  # the ring alone may hold 16 MiB; nothing grows with N
        rerun_until(at, lambda: metric(at, "m_blocks") == 0)
        assert metric(at, "m_removed") >= 50_000
    finally:
        sub.stop()
    assert not sub.alive


def test_a_bad_address_is_one_error_line():
    at = page()
    at.text_input(key="kvw_addr").set_value("tcp://8.8.8.8:5557").run()
    at.button(key="kvw_connect").click().run()
    assert len(at.error) == 1 and "not loopback" in at.error[0].value
    assert "kvw_sub" not in at.session_state


def recorded_workload() -> str:
    """The workload plus one eviction, folded and offered as the page's download would be."""
    batches: list[list] = []

    class Collect:
        def publish(self, events) -> None:
            batches.append(list(events))

    tr = K.EngineEventTranslator(Collect())  # type: ignore[arg-type]
    shared_prompt_workload(tr, 1)
    tr(FakeEvicted(1012, physical=4))
    tr(FakeStepEnd())
    state = WatchState()
    for seq, evs in enumerate(batches):
        state.feed(seq, msgspec.msgpack.encode(K.EventBatch(float(seq), evs)))
    return "\n".join(state.recording()) + "\n"


def test_a_recording_replays_step_by_step():
    at = page()
    at.radio(key="kvw_source").set_value("recording").run()
    data = recorded_workload().encode()
    at.file_uploader(key="kvw_upload").set_value(("kv.jsonl", data, "application/jsonl")).run()
    assert not at.exception and not at.error
    shown = []
    for i in range(1, 6):
        at.slider(key="kvw_step").set_value(i).run()
        shown.append(metric(at, "m_blocks"))
    # stepping: the system prompt (2 blocks), then a block per request, then one evicted
    assert shown == [2, 3, 4, 5, 4]


def test_the_demo_recording_is_a_real_servers_stream_that_fills_and_evicts():
    """The Recording tab without a server: the shipped demo (a vLLM run saved by ``paged watch
    --save``) opens with a switch, steps like an upload, and shows what a fold of the file
    gives, evictions included."""
    from paged.viz.app.watch import DEMO
    from paged.viz.watch.state import read_recording

    batches = read_recording(DEMO.read_text(encoding="utf-8"))
    want = WatchState()
    for seq, payload in batches:
        want.feed(seq, payload)
    snap = want.snapshot()
    assert snap.counters["stored"] > snap.num_blocks and snap.counters["removed"] > 0
    at = page()
    at.radio(key="kvw_source").set_value("recording").run()
    assert not at.metric  # nothing shown until it is asked for
    at.toggle(key="kvw_demo").set_value(True).run()
    assert not at.exception and not at.error
    assert at.slider(key="kvw_step").value == len(batches)
    assert (metric(at, "m_blocks"), metric(at, "m_stored"), metric(at, "m_removed")) == (
        snap.num_blocks,
        snap.counters["stored"],
        snap.counters["removed"],
    )
    at.slider(key="kvw_step").set_value(1).run()
    assert metric(at, "m_stored") < snap.counters["stored"]


def test_a_foreign_recording_is_one_error_line():
    at = page()
    at.radio(key="kvw_source").set_value("recording").run()
    at.file_uploader(key="kvw_upload").set_value(
        ("x.jsonl", b'{"format": "paged-kv-trace"}\n', "application/jsonl")
    ).run()
    assert not at.exception
    assert len(at.error) == 1 and "not a KV-event recording" in at.error[0].value


def test_a_gone_sessions_subscriber_is_stopped_on_the_next_connect(monkeypatch):
    """...once the lock every session's connect takes is let go: stopping waits up to 2 s for
    the subscriber's thread, and other sessions' connects waited with it."""
    from paged.viz.app import watch as watch_page
    from paged.viz.watch.subscriber import Subscriber, SubscriberConfig

    port, _ = free_ports()
    gone = Subscriber(SubscriberConfig(f"tcp://127.0.0.1:{port}")).start()
    here = Subscriber(SubscriberConfig(f"tcp://127.0.0.1:{port}")).start()
    stopped_holding_lock = []
    stop = gone.stop

    def watched_stop(timeout: float = 2.0) -> None:
        stopped_holding_lock.append(watch_page._LIVE_LOCK.locked())
        stop(timeout)

    monkeypatch.setattr(gone, "stop", watched_stop)
    monkeypatch.setattr(watch_page, "_LIVE", [("gone", gone), ("here", here), ("gone", gone)])
    monkeypatch.setattr(watch_page, "session_alive", lambda sid: sid != "gone")
    script = f"""
from paged.viz.app import watch as watch_page
watch_page._connect("tcp://127.0.0.1:{port}", "", False, watch_page.TEXT["en"])
"""
    at = AppTest.from_string(script, default_timeout=30)
    try:
        at.run()
        assert not at.exception
        assert [sid for sid, _ in watch_page._LIVE][0] == "here"
        assert stopped_holding_lock == [False]  # once, and not under the lock
        # stop() waits 2 s for the thread; a reader process still starting on a loaded
        # machine may keep it a little longer, and it ends by itself once it sees the stop
        deadline = time.monotonic() + 20
        while gone.alive and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not gone.alive and here.alive
    finally:
        for sub in {id(s): s for _, s in watch_page._LIVE}.values():
            sub.stop()
        gone.stop()
        here.stop()


def test_a_publishers_error_text_is_shown_as_text_not_markdown():
    """A malformed batch's own tag reaches the error text (msgspec quotes it). Shown as
    markdown, a hostile publisher drew a link and an image the browser fetched."""
    at = AppTest.from_string(
        """
import dataclasses
from paged.viz.app import watch as watch_page
from paged.viz.watch.state import fold
snap = dataclasses.replace(
    fold([]).snapshot(),
    last_error="Invalid value '![x](http://127.0.0.2:9/pwn.png) [click](http://127.0.0.2:9/p) :red[**ALERT**]'",
)
watch_page._view(snap, watch_page.TEXT["en"])
""",
        default_timeout=30,
    )
    at.run()
    assert not at.exception and len(at.warning) == 1
    shown = at.warning[0].value
    # link-like words sit in code spans (drawn as characters, never fetched or followed) and
    # every other mark is backslash-escaped
    assert "` '![x](http://127.0.0.2:9/pwn.png) `" in shown
    assert "` [click](http://127.0.0.2:9/p) `" in shown
    assert ":red[" not in shown and "**ALERT" not in shown and "ALERT" in shown


def test_sessions_watching_one_stream_share_its_subscriber_and_its_drawing():
    """One subscriber and one drawing per watched server, whatever the number of sessions: a
    subscriber per session would keep its own copy of the cache and draw it on its own (0.7 s of
    CPU a second at 200k blocks, per session). One session leaving keeps the others'."""
    from paged.viz.app import watch as watch_page

    port, _ = free_ports()
    pages = [page(), page()]
    addrs = [f"tcp://127.0.0.1:{port}", f" tcp://127.0.0.1:{port} "]  # one stream, two spellings
    try:
        for at, addr in zip(pages, addrs, strict=True):
            at.text_input(key="kvw_addr").set_value(addr).run()
            at.button(key="kvw_connect").click().run()
            assert not at.exception and not at.error
        first, second = (at.session_state["kvw_sub"] for at in pages)
        assert first is second, "two sessions, two subscribers to one server"
        assert len({id(s) for _, s in watch_page._LIVE}) == 1
        pages[0].button(key="kvw_disconnect").click().run()
        assert second.alive, "one session's disconnect stopped the other's view"
        pages[1].button(key="kvw_disconnect").click().run()
        assert not second.alive and watch_page._LIVE == []
    finally:
        for at in pages:
            if "kvw_sub" in at.session_state:
                at.session_state["kvw_sub"].stop()


def test_a_recording_taken_away_is_not_kept_in_the_session():
    """The player keeps the upload's batches and their fold between slider moves (up to 64 MiB
    and 100k batches); a removed upload, or a switch to the live view, must let them go rather
    than hold them as long as the tab stays open."""
    from paged.viz.app import watch as watch_page

    at = page()
    at.radio(key="kvw_source").set_value("recording").run()
    data = recorded_workload().encode()
    before = len(watch_page.HELD._held)
    for leave in ("clear", "live"):
        at.file_uploader(key="kvw_upload").set_value(("kv.jsonl", data, "application/jsonl"))
        at.run()
        assert len(watch_page.HELD._held) == before + 1
        if leave == "clear":
            at.file_uploader(key="kvw_upload").clear().run()
        else:
            at.radio(key="kvw_source").set_value("live").run()
        assert not at.exception
        assert len(watch_page.HELD._held) == before, leave
        at.radio(key="kvw_source").set_value("recording").run()


def test_listen_mode_with_metrics_duplicates_and_the_vllm_lines():
    """vLLM with ``tcp://127.0.0.1:P`` connects: the page listens, folds two copies of one hash,
    shows the server's metrics beside the tree, and its help gives both ``vllm serve`` lines."""
    import zmq

    from tests.viz.test_watch_metrics import stand_in

    port, _ = free_ports()
    at = page()
    at.text_input(key="kvw_addr").set_value(f"tcp://127.0.0.1:{port}").run()
    help_text = at.expander[0].markdown[0].value
    assert f'"endpoint": "tcp://[::ffff:127.0.0.1]:{port}"' in help_text  # vLLM listens
    assert f'"endpoint": "tcp://127.0.0.1:{port}"' in help_text  # vLLM connects
    assert help_text.count("vllm serve MODEL --kv-events-config '{") == 2
    with stand_in() as base:
        at.radio(key="kvw_mode").set_value("listen").run()
        at.text_input(key="kvw_metrics").set_value(base).run()
        at.button(key="kvw_connect").click().run()
        assert not at.error, [e.value for e in at.error]
        sub = at.session_state["kvw_sub"]
        try:
            assert sub.config.listen and sub.metrics is not None
            ctx = zmq.Context()
            try:
                pub = ctx.socket(zmq.PUB)
                pub.setsockopt(zmq.LINGER, 0)
                pub.connect(f"tcp://127.0.0.1:{port}")
                batch = msgspec.msgpack.encode(
                    K.EventBatch(1.0, [K.BlockStored([5], None, [1] * BS, BS, None, "GPU")] * 2, 0)
                )
                end = time.monotonic() + PATIENCE
                while not sub.state.held() and time.monotonic() < end:
                    pub.send_multipart([b"", K.seq_bytes(0), batch])
                    time.sleep(0.1)
            finally:
                ctx.destroy(linger=0)
            assert sub.state.held() == [(5, None, 2)]
            rerun_until(at, lambda: any(m.label == T["m_usage"] for m in at.metric))
            assert [m.value for m in at.metric if m.label == T["m_running"]] == ["4"]
            assert T["copies"].format(n=1) in [c.value for c in at.caption]
        finally:
            at.button(key="kvw_disconnect").click().run()
    assert not sub.alive


def test_a_classroom_follows_only_the_addresses_the_lecturer_allowed(monkeypatch):
    """Served beyond loopback, any visitor could point the page at any loopback port and tell
    open, closing and closed ones apart. Only the lecturer's list is followed; every other
    address, typed well or not, open or closed, is refused in the same words before any
    subscriber (or socket) exists."""
    import socket

    from paged.viz.app import watch as watch_page
    from paged.viz.watch.allowed import Allowed
    from paged.viz.watch.subscriber import Subscriber

    allowed_port, closed_port = free_ports()
    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    listening.listen(1)
    open_port = listening.getsockname()[1]
    allowed = f"tcp://127.0.0.1:{allowed_port}"
    monkeypatch.setattr(watch_page, "_classroom", lambda: True)
    monkeypatch.setattr(
        watch_page, "ALLOWED", Allowed.parse(f" {allowed} , http://localhost:8000, nonsense")
    )
    started = []
    start = Subscriber.start
    monkeypatch.setattr(Subscriber, "start", lambda self: started.append(self.url) or start(self))
    refused = [
        (f"tcp://127.0.0.1:{open_port}", ""),
        (f"tcp://127.0.0.1:{closed_port}", ""),
        (f"tcp://[::1]:{allowed_port}", ""),
        ("tcp://127.0.0.1:99999", ""),
        ("tcp://8.8.8.8:5557", ""),
        ("not an address", ""),
        (allowed, f"http://127.0.0.1:{open_port}"),
    ]
    at = page()
    assert not at.checkbox, "a classroom is never offered an address beyond this machine"
    said = set()
    try:
        for addr, metrics in refused:
            at.text_input(key="kvw_addr").set_value(addr)
            at.text_input(key="kvw_metrics").set_value(metrics)
            at.button(key="kvw_connect").click().run()
            assert not at.exception and len(at.error) == 1, addr
            assert "kvw_sub" not in at.session_state, addr
            said.add(at.error[0].value)
        assert started == []
        [line] = said  # the same words for every refused address
        assert allowed in line and str(open_port) not in line and str(closed_port) not in line
        at.text_input(key="kvw_addr").set_value(f" {allowed} ")
        at.text_input(key="kvw_metrics").set_value("http://localhost:8000/")
        at.button(key="kvw_connect").click().run()
        assert not at.error and started == [allowed]
    finally:
        listening.close()
        if "kvw_sub" in at.session_state:
            at.button(key="kvw_disconnect").click().run()


def test_a_classroom_with_no_list_follows_nothing_and_any_follows_loopback(monkeypatch):
    from paged.viz.app import watch as watch_page
    from paged.viz.watch.allowed import ENV, Allowed

    port, _ = free_ports()
    monkeypatch.setattr(watch_page, "_classroom", lambda: True)
    monkeypatch.setattr(watch_page, "ALLOWED", Allowed.parse(""))
    at = page()
    at.text_input(key="kvw_addr").set_value(f"tcp://127.0.0.1:{port}")
    at.button(key="kvw_connect").click().run()
    assert len(at.error) == 1 and ENV in at.error[0].value and str(port) not in at.error[0].value
    monkeypatch.setattr(watch_page, "ALLOWED", Allowed.parse("tcp://127.0.0.1:1, ANY"))
    at.text_input(key="kvw_addr").set_value("tcp://8.8.8.8:5557")
    at.button(key="kvw_connect").click().run()
    assert len(at.error) == 1 and "kvw_sub" not in at.session_state  # loopback still
    at.text_input(key="kvw_addr").set_value(f"tcp://127.0.0.1:{port}")
    at.button(key="kvw_connect").click().run()
    assert not at.error and "kvw_sub" in at.session_state
    at.button(key="kvw_disconnect").click().run()


def big_recording(batches: int, per: int) -> bytes:
    """A recording of ``batches`` batches storing ``per`` blocks each, none evicted."""
    state = WatchState(max_blocks=1 << 30, ring_bytes=1 << 40)
    h = 1
    for seq in range(batches):
        stored = K.BlockStored(list(range(h, h + per)), None, [12345] * (BS * per), BS, None, "GPU")
        state.feed(seq, msgspec.msgpack.encode(K.EventBatch(float(seq), [stored])))
        h += per
    return ("\n".join(state.recording()) + "\n").encode()


def test_tabs_replaying_recordings_stay_within_the_servers_bound(monkeypatch):
    """One 8 MB recording replayed held about 60 MiB per tab with no bound over tabs (24 tabs:
    1.56 GiB, never freed). Each replay is folded in a process of its own, accounted from above
    (its resident memory is less), against one budget for all sessions; a session past it is
    refused in one line, and a closed tab's process is ended by the reaper, with no other
    session doing anything, so what it held goes back whole."""
    from paged.viz.app import watch as watch_page
    from paged.viz.watch.held import Held

    data = big_recording(200, 40)  # ~8k blocks: a tenth of the page's 8 MB case
    budget = 100 << 20
    alive = {f"tab{i}" for i in range(6)}
    held = Held(budget, lambda sid: sid in alive)
    monkeypatch.setattr(watch_page, "HELD", held)
    monkeypatch.setattr(watch_page, "REAP_INTERVAL_S", 0.2)
    t = watch_page.TEXT["en"]
    got = [watch_page.load_replay(f"tab{i}", "f", data, t) for i in range(6)]
    kept = [g for g in got if not isinstance(g, str)]
    refused = [g for g in got if isinstance(g, str)]
    each = kept[0].size
    assert len(kept) == budget // each and held.total <= budget
    assert set(refused) == {t["held_full"].format(mib=budget >> 20)}
    for replay in kept:
        status = Path(f"/proc/{replay.proc.pid}/status").read_text()
        rss = next(int(x.split()[1]) << 10 for x in status.splitlines() if x.startswith("VmRSS"))
        assert rss <= replay.size, f"accounted {replay.size} B, holds {rss} B"
        assert replay.snapshot(200).num_blocks == 200 * 40
    # the tabs that hold replays close: within seconds their processes are gone, unasked
    alive.clear()
    end = time.monotonic() + 10
    while (held.total or any(r.proc.poll() is None for r in kept)) and time.monotonic() < end:
        time.sleep(0.1)
    assert held.total == 0, "a closed tab's replay was kept"
    assert all(r.proc.poll() is not None for r in kept), "a closed tab's replay process lives on"


def test_a_closed_tabs_subscriber_and_its_reader_end_within_seconds(monkeypatch):
    """A closed tab never says goodbye: its socket reader lived on (32 minutes, seen) until
    another session connected. The reaper now ends it within seconds, with no other connect."""
    from paged.viz.app import watch as watch_page

    port, _ = free_ports()
    monkeypatch.setattr(watch_page, "REAP_INTERVAL_S", 0.5)
    at = page()
    at.text_input(key="kvw_addr").set_value(f"tcp://127.0.0.1:{port}").run()
    at.button(key="kvw_connect").click().run()
    sub = at.session_state["kvw_sub"]
    try:
        end = time.monotonic() + 10
        while sub.relay is None and time.monotonic() < end:
            time.sleep(0.05)
        reader = sub.relay
        assert reader is not None and reader.proc.poll() is None
        time.sleep(1.5)
        assert sub.alive, "a session still open lost its subscriber"
        monkeypatch.setattr(watch_page, "session_alive", lambda sid: False)  # the tab closes
        closed = time.monotonic()
        while (sub.alive or reader.proc.poll() is None) and time.monotonic() < closed + 10:
            time.sleep(0.05)
        assert not sub.alive and reader.proc.poll() is not None
        assert time.monotonic() - closed < 5
        assert watch_page._LIVE == []
    finally:
        sub.stop()
