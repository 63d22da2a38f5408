"""A class of 60 follows the lecturer on the app's own server (classroom.py): each follower
loads the follower's page and holds the room's event stream while the lecturer steps through a
whole lesson; at a question all 60 answer, the lecturer reads the distribution and reveals.
Prints the fan-out latency (lecturer's frame sent -> every follower has it) and the server's
peak memory; asserts the bounds of docs/classroom.md: p95 under 1 s, under 1 GiB. Marked
``load``: ``pytest -m load tests/browser/test_class_load.py -s`` (about a minute)."""

from __future__ import annotations

import http.client
import json
import statistics
import threading
import time
from urllib.parse import urlparse

import pytest
from test_load import Sampler, server_rss_mb

from tests.app_server import running_app

pytestmark = [pytest.mark.load]

FOLLOWERS = 60
STEP_S = 0.25  # the lecturer's pace: four frames a second, faster than any lecture
P95_BOUND_S = 1.0
RSS_BOUND_MB = 1024


def post(host: str, port: int, path: str, body: dict) -> tuple[int, dict]:
    c = http.client.HTTPConnection(host, port, timeout=30)
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    raw = r.read()
    c.close()
    return r.status, (json.loads(raw) if raw else {})


class Follower(threading.Thread):
    """One student's browser, as far as the server can tell: the page, then the event stream;
    ``seen[version]`` is when each state arrived."""

    def __init__(self, host: str, port: int, code: str) -> None:
        super().__init__(daemon=True)
        self.host, self.port, self.code = host, port, code
        self.seen: dict[int, float] = {}
        self.states: list[dict] = []
        self.token = ""
        self.ready = threading.Event()
        self.page_bytes = 0

    def run(self) -> None:
        c = http.client.HTTPConnection(self.host, self.port, timeout=60)
        c.request("GET", f"/pk/class/{self.code}")
        self.page_bytes = len(c.getresponse().read())
        c.request("GET", f"/pk/class/{self.code}/events")
        r = c.getresponse()
        while True:
            line = r.fp.readline()
            if not line:
                return
            if line.startswith(b"data: "):
                s = json.loads(line[6:])
                self.seen.setdefault(s["v"], time.monotonic())
                self.states.append(s)
                if "token" in s:
                    self.token = s["token"]
                    self.ready.set()


def test_sixty_followers_follow_a_whole_lesson_and_answer_a_question(capsys):
    with running_app(script="classroom.py") as url:
        u = urlparse(url)
        host, port = u.hostname or "127.0.0.1", u.port or 80
        idle_mb = server_rss_mb(port)
        sampler = Sampler(port)
        sampler.start()
        status, room = post(host, port, "/pk/class/new", {"lesson": "six-steps", "lang": "en"})
        assert status == 200, room
        code, key = room["code"], room["key"]
        followers = [Follower(host, port, code) for _ in range(FOLLOWERS)]
        for f in followers:
            f.start()
        for f in followers:
            assert f.ready.wait(120), "a follower never got its token"
        assert all(f.page_bytes > 10_000 for f in followers)
        sent: dict[int, float] = {}
        version = 0
        from paged.engine.trace import io as T
        from paged.viz.fold.lesson import build
        from paged.viz.fold.lesson_folder import load_spec, trace_path
        from paged.viz.player.payload import exercises_data

        spec = load_spec("six-steps")
        lesson = build(spec, T.read(trace_path(spec)))
        question = next(
            q for q in exercises_data(lesson, "en") if q["form"] == "yesno" and q["frame"] >= 1
        )
        for frame in range(1, lesson.num_frames):
            version += 1
            sent[version] = time.monotonic()
            assert (
                post(host, port, f"/pk/class/{code}/frame", {"key": key, "frame": frame})[0] == 204
            )
            if frame == question["frame"]:
                for n, f in enumerate(followers):
                    given = "yes" if n % 3 else "no"
                    body = {"token": f.token, "q": question["id"], "a": given}
                    assert post(host, port, f"/pk/class/{code}/answer", body)[0] == 204
                _, tally = post(
                    host, port, f"/pk/class/{code}/tally", {"key": key, "q": question["id"]}
                )
                assert tally["n"] == FOLLOWERS
                assert dict(map(tuple, tally["bars"])) == {"yes": 40, "no": 20}
                version += 1
                sent[version] = time.monotonic()
                assert (
                    post(host, port, f"/pk/class/{code}/reveal", {"key": key, "q": question["id"]})[
                        0
                    ]
                    == 204
                )
            time.sleep(STEP_S)
        time.sleep(2)
        sampler.halt.set()
        lat = [f.seen[v] - t for v, t in sent.items() for f in followers if v in f.seen]
        missing = sum(1 for v in sent for f in followers if v not in f.seen)
        last = [f.states[-1] for f in followers]
        revealed = sum(question["id"] in s["revealed"] for f in followers for s in f.states)
        p95 = statistics.quantiles(lat, n=100)[94]
        with capsys.disabled():
            print(
                f"\n{FOLLOWERS} followers, {len(sent)} changes: fan-out p50 "
                f"{statistics.median(lat) * 1000:.0f} ms, p95 {p95 * 1000:.0f} ms, max "
                f"{max(lat) * 1000:.0f} ms, {missing} missed; server {idle_mb:.0f} MB idle, "
                f"peak {sampler.peak:.0f} MB"
            )
        # a change may be folded into the next if a follower was slow: never the last one
        assert all(s["frame"] == lesson.num_frames - 1 for s in last)
        assert revealed >= FOLLOWERS
        assert missing <= len(sent) * FOLLOWERS // 20
        assert p95 < P95_BOUND_S
        assert sampler.peak < RSS_BOUND_MB
