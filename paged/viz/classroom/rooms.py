"""A class that answers together: the lecturer's room, its followers and their answers.

A room is opened by the lecturer for one shipped lesson in one language and named by a short
code (five letters and digits, none that reads as another). Whoever holds the code follows: the
room says which frame the lecturer shows, which questions are asked there and which are
revealed. Only the lecturer's key (a secret the lecturer's page keeps) moves the frame or
reveals; a follower holds a token of its own, and with it can only answer the question asked
now, once per question (a second answer replaces the first). Everything a follower sends is
validated here against the question's own form and bounds. Pure Python: the routes
(``routes.py``) put it on the app's server.
"""

from __future__ import annotations

import hmac
import re
import secrets
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

CODE_ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I/L: read aloud, typed on a phone
CODE_LEN = 5
CODE_RE = re.compile(f"[{CODE_ALPHABET}]{{{CODE_LEN}}}")
MAX_ROOMS = 8  # per server: a few lecturers at once
MAX_FOLLOWERS = 120  # per room: twice the class the bounds are measured for
ROOM_IDLE_S = 3 * 3600  # a room nobody has touched for a lecture's length is let go
MAX_NUMBER = 10**9


class ClassError(ValueError):
    """A request the room refuses; the message is one line. ``status`` is the HTTP answer."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class Room:
    code: str
    key: str
    lesson: str
    lang: str
    num_frames: int
    questions: dict[str, dict]  # id -> the payload's question (exercises_data)
    frame: int = 0
    version: int = 0
    revealed: set[str] = field(default_factory=set)
    followers: set[str] = field(default_factory=set)
    answers: dict[str, dict[str, Any]] = field(default_factory=dict)  # question -> token -> answer
    touched: float = field(default_factory=time.monotonic)

    def lecturer(self, key: object) -> None:
        """Refuse (403) anyone but the lecturer."""
        if not isinstance(key, str) or not hmac.compare_digest(key, self.key):
            raise ClassError("only the lecturer's page may do that", 403)

    def asking(self) -> list[str]:
        return [qid for qid, q in self.questions.items() if q["frame"] == self.frame]

    def state(self) -> dict:
        """What every follower is sent on each change (no answers in it: those are graded on
        each follower's own device, and nobody sees another's)."""
        return {
            "frame": self.frame,
            "asking": self.asking(),
            "revealed": sorted(
                q for q in self.revealed if self.questions[q]["frame"] == self.frame
            ),
            "v": self.version,
        }

    def changed(self) -> None:
        self.version += 1
        self.touched = time.monotonic()

    def go(self, key: object, frame: object) -> None:
        self.lecturer(key)
        if type(frame) is not int or not 0 <= frame < self.num_frames:
            raise ClassError(f"frame must be a whole number from 0 to {self.num_frames - 1}")
        if frame != self.frame:
            self.frame = frame
            self.changed()

    def reveal(self, key: object, qid: object) -> None:
        self.lecturer(key)
        if qid not in self.asking():
            raise ClassError("no such question is asked at this frame")
        assert isinstance(qid, str)
        self.revealed.add(qid)
        self.changed()

    def join(self) -> str:
        if len(self.followers) >= MAX_FOLLOWERS:
            raise ClassError(f"this class is full ({MAX_FOLLOWERS} followers)", 429)
        token = secrets.token_urlsafe(12)
        self.followers.add(token)
        return token

    def answer(self, token: object, qid: object, value: object) -> None:
        """One follower's answer to the question asked now, until it is revealed."""
        if not isinstance(token, str) or token not in self.followers:
            raise ClassError("unknown follower: open the class link again", 403)
        if not isinstance(qid, str) or qid not in self.asking():
            raise ClassError("that question is not being asked now", 409)
        if qid in self.revealed:
            raise ClassError("that question has been answered already", 409)
        given = checked(self.questions[qid], value)
        self.answers.setdefault(qid, {})[token] = given
        self.touched = time.monotonic()

    def tally(self, key: object, qid: object) -> dict:
        """The live distribution of ``qid``'s answers, for the lecturer: a count per choice,
        per cell, or per number given."""
        self.lecturer(key)
        if not isinstance(qid, str) or qid not in self.questions:
            raise ClassError("no such question")
        return distribution(self.questions[qid], list(self.answers.get(qid, {}).values()))


def checked(q: dict, value: object) -> Any:
    """``value`` as an answer of ``q``'s form, or ClassError: a choice it offers, a bounded
    whole number, or distinct cells of its grid."""
    form = q["form"]
    if form in ("yesno", "choose"):
        if not isinstance(value, str) or value not in {c["value"] for c in q["choices"]}:
            raise ClassError("not one of the choices")
        return value
    if form == "number":
        if type(value) is not int or abs(value) > MAX_NUMBER:
            raise ClassError("a whole number, please")
        return value
    if (
        not isinstance(value, list)
        or len(value) > q["cells"]
        or any(type(v) is not int or not 0 <= v < q["cells"] for v in value)
        or len(set(value)) != len(value)
    ):
        raise ClassError(f"distinct cell numbers from 0 to {q['cells'] - 1}, please")
    return sorted(value)


def distribution(q: dict, given: list[Any]) -> dict:
    """How many gave each answer: ``bars`` per choice (every choice, in order) or per number
    (most given first, at most 12), ``cells`` a count per cell of the grid."""
    out: dict[str, Any] = {"n": len(given), "form": q["form"]}
    if q["form"] in ("yesno", "choose"):
        counts = Counter(given)
        out["bars"] = [[c["value"], counts[c["value"]]] for c in q["choices"]]
    elif q["form"] == "number":
        out["bars"] = [[v, n] for v, n in Counter(given).most_common(12)]
    else:
        cells = [0] * q["cells"]
        for picked in given:
            for k in picked:
                cells[k] += 1
        out["cells"] = cells
    return out


class Rooms:
    """The server's rooms, at most ``MAX_ROOMS``; an idle room is let go for a new one."""

    def __init__(self) -> None:
        self.rooms: dict[str, Room] = {}

    def open(self, lesson: str, lang: str, num_frames: int, questions: list[dict]) -> Room:
        now = time.monotonic()
        for code in [c for c, r in self.rooms.items() if now - r.touched > ROOM_IDLE_S]:
            del self.rooms[code]
        if len(self.rooms) >= MAX_ROOMS:
            raise ClassError(f"this server holds {MAX_ROOMS} classes already", 429)
        code = "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LEN))
        while code in self.rooms:
            code = "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LEN))
        room = Room(
            code=code,
            key=secrets.token_urlsafe(24),
            lesson=lesson,
            lang=lang,
            num_frames=num_frames,
            questions={q["id"]: q for q in questions},
        )
        self.rooms[code] = room
        return room

    def get(self, code: object) -> Room:
        """The room ``code`` names (any case), or ClassError (404)."""
        c = code.upper() if isinstance(code, str) else ""
        room = self.rooms.get(c) if CODE_RE.fullmatch(c) else None
        if room is None:
            raise ClassError("no class has that code", 404)
        return room
