"""The class's routes on the app's own server (Starlette, under Streamlit's ``st.App``).

- ``POST /pk/class/new`` ``{lesson, lang}``: the lecturer's page opens a room; answers its code,
  its key (kept by that page alone) and the followers' link. Only from this machine unless the
  app was started with ``PAGED_CLASS_LECTURERS=any``: a room is the lecturer's, not a student's.
- ``GET /pk/class/{code}``: the follower's page, the lesson's one-file player that follows.
- ``GET /pk/class/{code}/events``: the room's state as server-sent events, on every change;
  the first one carries the follower's token (and so does its id: a reconnect keeps it).
- ``POST /pk/class/{code}/answer`` ``{token, q, a}``: a follower's answer to the question asked.
- ``POST /pk/class/{code}/frame`` ``{key, frame}``, ``.../reveal`` ``{key, q}``,
  ``.../tally`` ``{key, q}``: the lecturer steps, reveals, and reads the live distribution.

A body is at most ``MAX_BODY`` bytes of JSON; a refusal is one line, ``{"error": ...}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import socket
from collections.abc import AsyncIterator, Awaitable, Callable

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from paged.viz.classroom.rooms import ClassError, Room, Rooms

MAX_BODY = 4096
KEEPALIVE_S = 15.0
LECTURERS_ENV = "PAGED_CLASS_LECTURERS"
LOOPBACK = {"127.0.0.1", "::1", "localhost"}

ROOMS = Rooms()
_SIGNALS: dict[str, asyncio.Event] = {}
#: set once the routes are on the server: the lesson page offers the class link only then
MOUNTED = False


@functools.lru_cache(maxsize=16)
def _lesson(name: str):
    from paged.engine.trace import io as T
    from paged.viz.fold.lesson import build
    from paged.viz.fold.lesson_folder import load_spec, trace_path

    spec = load_spec(name)
    return build(spec, T.read(trace_path(spec)))


@functools.lru_cache(maxsize=16)
def _page(name: str, lang: str) -> str:
    from paged.viz.export import standalone

    return standalone.page(_lesson(name), langs=(lang,))


def _shipped() -> set[str]:
    from paged.viz.fold.lesson_folder import available, load_spec

    return {n for n in available() if load_spec(n).steps}


def _notify(room: Room) -> None:
    ev = _SIGNALS.pop(room.code, None)
    if ev is not None:
        ev.set()


def _signal(room: Room) -> asyncio.Event:
    return _SIGNALS.setdefault(room.code, asyncio.Event())


async def _body(request: Request) -> dict:
    raw = b""
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > MAX_BODY:
            raise ClassError(f"a request body holds at most {MAX_BODY} bytes", 413)
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise ClassError("the body must be JSON") from None
    if not isinstance(data, dict):
        raise ClassError("the body must be a JSON object")
    return data


def _refusing(
    handler: Callable[[Request], Awaitable[Response]],
) -> Callable[[Request], Awaitable[Response]]:
    async def run(request: Request) -> Response:
        try:
            return await handler(request)
        except ClassError as e:
            return JSONResponse({"error": str(e)}, status_code=e.status)

    return run


async def open_room(request: Request) -> Response:
    host = request.client.host if request.client else ""
    if host not in LOOPBACK and os.environ.get(LECTURERS_ENV) != "any":
        raise ClassError("a class is opened from the lecturer's machine", 403)
    data = await _body(request)
    lesson, lang = data.get("lesson"), data.get("lang")
    if not isinstance(lesson, str) or lesson not in _shipped():
        raise ClassError("a class follows one of the shipped lessons")
    if lang not in ("en", "zh"):
        raise ClassError("lang is en or zh")
    from paged.viz.player.payload import exercises_data

    built = await asyncio.to_thread(_lesson, lesson)
    room = ROOMS.open(lesson, lang, built.num_frames, exercises_data(built, lang))
    await asyncio.to_thread(_page, lesson, lang)  # drawn now, not when 60 phones ask at once
    path = f"/pk/class/{room.code}"
    return JSONResponse(
        {"code": room.code, "key": room.key, "follow": path, "link": _link(request, path)}
    )


def _link(request: Request, path: str) -> str:
    """The address students type: the lecturer's own when it is not this machine's loopback,
    else this machine's address on its network (the lecturer's browser says 127.0.0.1, which no
    phone can reach), on the port the lecturer reached."""
    host = request.url.hostname or "127.0.0.1"
    port = request.url.port
    if host in LOOPBACK:
        with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))  # no packet is sent: this only picks the outward address
            host = s.getsockname()[0]
    return f"http://{host}{f':{port}' if port else ''}{path}"


async def follower_page(request: Request) -> Response:
    room = ROOMS.get(request.path_params["code"])
    page = await asyncio.to_thread(_page, room.lesson, room.lang)
    tag = (
        f"<script type='application/json' id='pk-follow'>{json.dumps({'code': room.code})}</script>"
    )
    return HTMLResponse(page.replace("</body>", tag + "</body>", 1))


async def events(request: Request) -> Response:
    room = ROOMS.get(request.path_params["code"])
    last = request.headers.get("last-event-id", "")
    token = last if last in room.followers else room.join()

    async def stream() -> AsyncIterator[str]:
        try:
            yield f"id: {token}\nevent: hello\ndata: {json.dumps({'token': token, **room.state()})}\n\n"
            sent = room.version
            while True:
                ev = _signal(room)
                if room.version == sent:
                    try:
                        await asyncio.wait_for(ev.wait(), KEEPALIVE_S)
                    except TimeoutError:
                        yield ": still here\n\n"
                        continue
                sent = room.version
                yield f"id: {token}\ndata: {json.dumps(room.state())}\n\n"
        finally:
            room.followers.discard(token)
            for given in room.answers.values():
                given.pop(token, None)

    headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
    return StreamingResponse(stream(), media_type="text/event-stream", headers=headers)


async def answer(request: Request) -> Response:
    room = ROOMS.get(request.path_params["code"])
    data = await _body(request)
    room.answer(data.get("token"), data.get("q"), data.get("a"))
    return Response(status_code=204)


async def frame(request: Request) -> Response:
    room = ROOMS.get(request.path_params["code"])
    data = await _body(request)
    room.go(data.get("key"), data.get("frame"))
    _notify(room)
    return Response(status_code=204)


async def reveal(request: Request) -> Response:
    room = ROOMS.get(request.path_params["code"])
    data = await _body(request)
    room.reveal(data.get("key"), data.get("q"))
    _notify(room)
    return Response(status_code=204)


async def tally(request: Request) -> Response:
    room = ROOMS.get(request.path_params["code"])
    data = await _body(request)
    return JSONResponse(room.tally(data.get("key"), data.get("q")))


def routes() -> list[Route]:
    """The class's routes, for ``st.App(..., routes=routes())``."""
    global MOUNTED
    MOUNTED = True
    r = _refusing
    return [
        Route("/pk/class/new", r(open_room), methods=["POST"]),
        Route("/pk/class/{code}", r(follower_page), methods=["GET"]),
        Route("/pk/class/{code}/events", r(events), methods=["GET"]),
        Route("/pk/class/{code}/answer", r(answer), methods=["POST"]),
        Route("/pk/class/{code}/frame", r(frame), methods=["POST"]),
        Route("/pk/class/{code}/reveal", r(reveal), methods=["POST"]),
        Route("/pk/class/{code}/tally", r(tally), methods=["POST"]),
    ]
