"""The class's routes (paged/viz/classroom/routes.py) called as the server calls them (ASGI, in
this process): a room is opened only from the lecturer's machine, a body that is too large, not
JSON or not an object is one line, and a follower's page carries its room's code."""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor

import pytest
from starlette.applications import Starlette

from paged.viz.classroom import routes

APP = Starlette(routes=routes.routes())


def call(method: str, path: str, body: bytes = b"", client: str = "127.0.0.1") -> tuple[int, bytes]:
    """One request through the routes: its status and its body."""
    scope = {
        "type": "http",
        "method": method,
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": [(b"content-type", b"application/json")],
        "client": (client, 5000),
        "server": ("127.0.0.1", 8501),
        "scheme": "http",
        "http_version": "1.1",
        "root_path": "",
    }
    sent: list[dict] = []
    chunks = [body[i : i + 1024] for i in range(0, len(body), 1024)] or [b""]

    async def receive() -> dict:
        if chunks:
            c = chunks.pop(0)
            return {"type": "http.request", "body": c, "more_body": bool(chunks)}
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        sent.append(message)

    # a loop of its own, in a thread: a browser test's driver may hold this thread's loop
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, APP(scope, receive, send)).result()
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    return status, b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


@pytest.fixture(scope="module")
def room() -> dict:
    status, body = call("POST", "/pk/class/new", b'{"lesson": "six-steps", "lang": "en"}')
    assert status == 200
    return json.loads(body)


def test_a_class_is_opened_from_the_lecturers_machine_only(room, monkeypatch):
    monkeypatch.delenv(routes.LECTURERS_ENV, raising=False)
    status, body = call(
        "POST", "/pk/class/new", b'{"lesson": "six-steps", "lang": "en"}', "10.0.0.7"
    )
    assert status == 403 and json.loads(body)["error"]
    assert room["follow"] == f"/pk/class/{room['code']}" and len(room["key"]) >= 24


@pytest.mark.parametrize(
    "body",
    [b"x" * (routes.MAX_BODY + 1), b"not json", b"[1, 2]", b'"s"', b"\xff\xfe", b""],
)
def test_a_body_too_large_or_not_a_json_object_is_one_line(room, body):
    status, out = call("POST", f"/pk/class/{room['code']}/answer", body)
    assert status in (400, 413)
    err = json.loads(out)["error"]
    assert err and "\n" not in err and "Traceback" not in err


def test_a_lesson_that_is_not_shipped_is_refused(room):
    for body in [
        b'{"lesson": "../../etc", "lang": "en"}',
        b'{"lesson": "six-steps", "lang": "fr"}',
    ]:
        status, out = call("POST", "/pk/class/new", body)
        assert status == 400 and "\n" not in json.loads(out)["error"]


def test_a_follower_cannot_move_the_frame(room):
    status, _ = call("POST", f"/pk/class/{room['code']}/frame", b'{"key": "guess", "frame": 5}')
    assert status == 403
    ok = json.dumps({"key": room["key"], "frame": 5}).encode()
    assert call("POST", f"/pk/class/{room['code']}/frame", ok)[0] == 204


def test_the_followers_page_is_the_lesson_player_with_its_rooms_code(room):
    status, page = call("GET", f"/pk/class/{room['code'].lower()}")
    assert status == 200
    text = page.decode()
    assert "id='pk-follow'" in text and room["code"] in text and "followInit" in text
    assert call("GET", "/pk/class/NOPE0")[0] == 404
