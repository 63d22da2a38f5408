"""A trace that cannot be used raises one clear TraceError, whatever is wrong with it."""
import json

import pytest

from engine import events as E
from engine.trace import SCHEMA_VERSION, TraceError, TraceWriter, make_header, read


def _write_trace(path):
    header = make_header([{"name": "paged", "allocator": "paged", "config": {"num_slots": 64}}],
                         model="m", device="cpu")
    with TraceWriter(path, header) as w:
        bus = E.EventBus()
        bus.subscribe(w.sink("paged"))
        bus.emit(E.RequestArrived, req="A", prompt_len=3, max_tokens=2)
        bus.emit(E.StepEnd, num_running=0, num_waiting=1)
    return path


def test_a_good_trace_round_trips(tmp_path):
    t = read(_write_trace(tmp_path / "t.jsonl"))
    assert [e.kind for e in t.runs["paged"]] == ["request_arrived", "step_end"]


@pytest.mark.parametrize("mangle, message", [
    (lambda text: "", "empty"),
    (lambda text: text[: len(text) - 30], "truncated"),                       # cut mid-line
    (lambda text: "\n".join(text.splitlines()[:-1]) + "\n", "truncated"),     # end line lost
    (lambda text: text.replace('"kind":"step_end"', '"kind":"bogus"'), "unknown event kind"),
    (lambda text: text.replace("{", "{{", 3), "corrupt"),
    (lambda text: text.replace(f'"schema_version":{SCHEMA_VERSION}', '"schema_version":99'),
     "schema version 99"),
    (lambda text: json.dumps({"hello": "world"}) + "\n", "not a paged-KV trace"),
])
def test_unusable_traces_raise_one_clear_error(tmp_path, mangle, message):
    good = _write_trace(tmp_path / "good.jsonl").read_text()
    bad = tmp_path / "bad.jsonl"
    bad.write_text(mangle(good))
    with pytest.raises(TraceError, match=message) as info:
        read(bad)
    assert "\n" not in str(info.value)


def test_binary_and_missing_files(tmp_path):
    (tmp_path / "x.bin").write_bytes(b"\x89PNG\xff\xfe\x00")
    with pytest.raises(TraceError, match="binary"):
        read(tmp_path / "x.bin")
    with pytest.raises(TraceError, match="no trace file"):
        read(tmp_path / "missing.jsonl")


def test_a_live_queue_subscriber_sees_the_same_stream_in_order():
    import threading
    bus, q, listed = E.EventBus(), E.QueueSink(), E.ListSink()
    bus.subscribe(q)
    bus.subscribe(listed)
    got = []
    consumer = threading.Thread(target=lambda: got.extend(q.queue.get(timeout=5) for _ in range(3)))
    consumer.start()
    bus.emit(E.RequestArrived, req="A", prompt_len=3, max_tokens=2)
    bus.step = 1
    bus.emit(E.Admitted, req="A", num_tokens=3)
    bus.emit(E.StepEnd, num_running=1, num_waiting=0)
    consumer.join(timeout=5)
    assert got == listed.events
    assert [(e.step, e.seq) for e in got] == [(0, 0), (1, 1), (1, 2)]
