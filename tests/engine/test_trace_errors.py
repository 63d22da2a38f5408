"""A trace that cannot be used raises one clear TraceError, whatever is wrong with it."""

import io
import json
from pathlib import Path

import pytest

from paged.engine.core import events as E
from paged.engine.trace import io as T
from paged.engine.trace.header import PAGED, RunHeader
from paged.engine.trace.io import SCHEMA_VERSION, TraceError, TraceWriter, make_header, read
from paged.engine.trace.recorder import record
from paged.engine.trace.scenario import load as load_scenario
from tests.sinks import ListSink


def _write_trace(path):
    header = make_header(
        [RunHeader("paged", PAGED, num_slots=64, block_size=16)],
        model="m",
        device="cpu",
    )
    with TraceWriter(path, header) as w:
        bus = E.EventBus()
        bus.subscribe(w.sink("paged"))
        bus.emit(E.RequestArrived, req="A", prompt_len=3, max_tokens=2)
        bus.emit(E.StepEnd, num_running=0, num_waiting=1)
    return path


def test_a_good_trace_round_trips(tmp_path):
    t = read(_write_trace(tmp_path / "t.jsonl"))
    assert [e.kind for e in t.runs["paged"]] == ["request_arrived", "step_end"]


@pytest.mark.parametrize(
    "mangle, message",
    [
        (lambda text: "", "empty"),
        (lambda text: text[: len(text) - 30], "truncated"),  # cut mid-line
        (lambda text: "\n".join(text.splitlines()[:-1]) + "\n", "truncated"),  # end line lost
        (lambda text: text.replace('"kind":"step_end"', '"kind":"bogus"'), "unknown event kind"),
        (lambda text: text.replace("{", "{{", 3), "corrupt"),
        (
            lambda text: text.replace(f'"schema_version":{SCHEMA_VERSION}', '"schema_version":99'),
            "schema version 99",
        ),
        (lambda text: json.dumps({"hello": "world"}) + "\n", "not a paged-KV trace"),
        # valid JSON that no page can draw: every page showing the model name failed
        (lambda text: text.replace('"model":"', '"model":"m\\ud800', 1), "lone surrogate"),
        (lambda text: text.replace('"req":"', '"req":"\\uDC00', 1), "lone surrogate"),
    ],
)
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
    import queue
    import threading

    bus, q, listed = E.EventBus(), queue.Queue[E.Event](), ListSink()
    bus.subscribe(q.put)
    bus.subscribe(listed)
    got = []
    consumer = threading.Thread(target=lambda: got.extend(q.get(timeout=5) for _ in range(3)))
    consumer.start()
    bus.emit(E.RequestArrived, req="A", prompt_len=3, max_tokens=2)
    bus.step = 1
    bus.emit(E.Admitted, req="A", num_tokens=3)
    bus.emit(E.StepEnd, num_running=1, num_waiting=0)
    consumer.join(timeout=5)
    assert got == listed.events
    assert [(e.step, e.seq) for e in got] == [(0, 0), (1, 1), (1, 2)]


# --- the reader checks everything before the viewer folds it --------------------------------

SCENARIO = """
title = "two"
[arena]
num_blocks = 4
block_size = 4
max_model_len = 16
[[requests]]
id = {id_a}
prompt = "{prompt}"
max_tokens = 3
ignore_eos = true
[[requests]]
id = "B"
prompt_len = 5
max_tokens = 12
arrival_step = 1
[[requests]]
id = "C"
prompt_len = 2
max_tokens = 2
"""


def _recorded(tmp_path, id_a='"A"', prompt="hello there") -> str:
    path = tmp_path / "s.toml"
    path.write_text(SCENARIO.format(id_a=id_a, prompt=prompt), encoding="utf-8")
    buf = io.StringIO()
    record(load_scenario(path), ["max", "paged"], buf, forward="skip")
    return buf.getvalue()


def test_a_prompt_with_line_separators_round_trips(tmp_path):
    text = _recorded(tmp_path, prompt="one\u2028two\u2029three\x85four")
    assert len(text.splitlines()) > len(text.rstrip("\n").split("\n"))  # splitlines would cut it
    t = T.loads(text)
    assert "\u2028" in t.header["scenario"]["requests"][0]["prompt"]
    (tmp_path / "t.jsonl").write_text(text, encoding="utf-8")
    assert T.read(tmp_path / "t.jsonl").runs == t.runs


def test_integer_request_ids_become_strings_at_the_scenario_edge(tmp_path):
    t = T.loads(_recorded(tmp_path, id_a="5"))
    reqs = {ev.req for ev in t.runs["paged"] if ev.kind == E.RequestArrived.kind}
    assert reqs == {"5", "B", "C"}


def test_a_recording_that_fails_writes_no_end_line(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text(SCENARIO.format(id_a='"A"', prompt="hi"), encoding="utf-8")
    out = tmp_path / "t.jsonl"

    def crash(ev):
        if ev.seq == 6:
            raise RuntimeError("killed")

    good = _recorded(tmp_path)
    out.write_text(good, encoding="utf-8")  # a trace recorded before, to be re-recorded in place
    with pytest.raises(RuntimeError):
        record(load_scenario(path), ["paged"], str(out), forward="skip", sinks={"paged": [crash]})
    # the previous trace is untouched (not cut short, as a Ctrl-C would leave it); the run's own
    # events are beside it and read as truncated
    assert out.read_text(encoding="utf-8") == good
    with pytest.raises(TraceError, match="truncated"):
        read(out.with_name("t.jsonl.partial"))
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def _lines(tmp_path) -> list[str]:
    return _recorded(tmp_path).split("\n")


def _edit(lines: list[str], kind: str, run: str, nth: int = 0, fn=None, **changes) -> list[str]:
    """Change field values of the ``nth`` event of ``kind`` in ``run`` (or apply ``fn``)."""
    out, seen = list(lines), 0
    for i, line in enumerate(out):
        if f'"kind":"{kind}"' in line and f'"run":"{run}"' in line:
            if seen == nth:
                obj = json.loads(line)
                obj.update(changes)
                if fn is not None:
                    fn(obj)
                out[i] = json.dumps(obj)
                return out
            seen += 1
    raise AssertionError(f"no {kind} #{nth} in {run}")


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda ls: _edit(ls, "slots_reserved", "max", 1, start=2), "overlap"),
        (lambda ls: _edit(ls, "block_allocated", "paged", 1, physical=0), "already in"),
        (lambda ls: _edit(ls, "block_allocated", "paged", 0, physical=4), "outside the arena"),
        (lambda ls: _edit(ls, "block_allocated", "paged", 0, logical=3), "logical"),
        (lambda ls: _edit(ls, "block_freed", "paged", 0, ref_count=1), "ref_count"),
        (
            lambda ls: _edit(
                ls, "tokens_written", "paged", 0, fn=lambda o: o["slots"].__setitem__(0, 9)
            ),
            "does not map",
        ),
        (lambda ls: _edit(ls, "tokens_written", "max", 2, positions=[0], slots=[0]), "twice"),
        (lambda ls: _edit(ls, "admitted", "paged", 0, req="Q"), "never arrived"),
        (lambda ls: _edit(ls, "request_arrived", "paged", 0, prompt_len=True), "integer"),
        (lambda ls: _edit(ls, "request_arrived", "paged", 0, max_tokens=3.0), "integer"),
        (lambda ls: _edit(ls, "step_end", "paged", 0, num_waiting=7), "waiting"),
        (lambda ls: _edit(ls, "step_end", "paged", 1, seq=0), "seq"),
        (lambda ls: _edit(ls, "finished", "max", 0, final_len=99), "final_len"),
        (lambda ls: _edit(ls, "admission_blocked", "max", 0, free_slots=12), "free slots"),
        (lambda ls: _edit(ls, "admission_blocked", "max", 0, reason="no_free_block"), "reason"),
        (lambda ls: _edit(ls, "admission_blocked", "max", 0, need_slots=8), "would have fit"),
        (lambda ls: _edit(ls, "admission_blocked", "max", 0, reason="no_hole"), "would have fit"),
        (
            lambda ls: [ls[0].replace('"num_slots":16', '"num_slots":1000000000')] + ls[1:],
            "num_slots",
        ),
        (lambda ls: [ls[0].replace('"block_size":4', '"block_size":3')] + ls[1:], "block_size"),
        (lambda ls: [ls[0]] + [x for x in ls[1:] if '"kind":"block_freed"' not in x], "memory"),
        (
            lambda ls: [
                ls[0],
                '{"kind":"step_end","run":"max","v":' + "[" * 10**5 + "]" * 10**5 + "}",
            ],
            "nests",
        ),
        (lambda ls: [ls[0], '{"run":"max","x":"' + "a" * (2 << 20) + '"}'], "longer"),
        (lambda ls: [ls[0], '{"kind":"step_end","run":"max","step":' + "9" * 5000 + "}"], "JSON"),
        (lambda ls: [ls[0], '{"kind":"step_end","run":"max","step":NaN}'], "JSON"),
    ],
)
def test_impossible_traces_are_one_line_naming_the_line(tmp_path, edit, message):
    lines = edit(_lines(tmp_path))
    with pytest.raises(TraceError, match=message) as info:
        T.loads("\n".join(lines))
    msg = str(info.value)
    assert "\n" not in msg and ("line" in msg or "header" in msg or "end" in msg)


def test_the_fold_budget_refuses_a_small_trace_that_would_draw_huge(tmp_path):
    lines = _lines(tmp_path)
    small = T.Limits(max_frame_cells=40)
    T.loads("\n".join(lines))
    with pytest.raises(TraceError, match="too large to draw") as info:
        T.loads("\n".join(lines), limits=small)
    assert "corrupt" not in str(info.value)  # a whole, valid trace: only too big to draw here


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP"])
def test_a_recording_ended_by_a_signal_keeps_the_old_trace_and_writes_its_partial(tmp_path, sig):
    """SIGTERM (kill, a process manager) and SIGHUP (a closed terminal) end a recording as
    Ctrl-C does: a .partial, and no hidden temporary file left per kill."""
    import signal
    import subprocess
    import sys
    import time

    lines = ['title = "long"', "[arena]", "num_blocks = 64", "block_size = 16"]
    lines += ["max_model_len = 256"]
    for i in range(400):
        lines += ["[[requests]]", f'id = "r{i}"', "prompt_len = 40", "max_tokens = 150"]
        lines += ["ignore_eos = true", f"arrival_step = {i}"]
    (tmp_path / "long.toml").write_text("\n".join(lines) + "\n")
    target = tmp_path / "t.jsonl"
    target.write_text("the previous trace\n")
    cmd = [sys.executable, "-m", "paged", "record", "--scenario", str(tmp_path / "long.toml")]
    cmd += ["--out", str(target), "--forward", "skip"]
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(cmd, cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    end = time.monotonic() + 60
    while not any(p.stat().st_size > 10_000 for p in tmp_path.glob(".t.jsonl.*.tmp")):
        assert proc.poll() is None and time.monotonic() < end, "the recording never got going"
        time.sleep(0.05)
    proc.send_signal(getattr(signal, sig))
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + getattr(signal, sig)
    said = err.decode().strip().splitlines()  # progress lines, then one line saying why
    assert (
        said[-1] == f"terminated (signal {getattr(signal, sig)})"
        and "Traceback" not in err.decode()
    )
    assert target.read_text() == "the previous trace\n"
    assert (tmp_path / "t.jsonl.partial").stat().st_size > 10_000
    assert not list(tmp_path.glob(".t.jsonl.*"))  # no temporary file left behind
