"""The player's payload for a live run, kept as the run streams in: each tick draws only the
frames that are new (or that changed: see below) and deflates only the pieces that are new.

What a frame shows reads only ``at(i)`` of each side and whether that side has ended
(``payload.frame_parts``): a frame drawn once is kept while those stay as they were, and
that is every frame but the newest while a stream grows. What depends on later frames is
worked out again on every tick, which is cheap: the chapters (a frame's phase reads whether
it is the last one; a keyframe may move), each step's narration (its numbers may quote the
whole run so far, as the scoreboard does), the timeline and the rest of the envelope. A frame
whose chapter text changed is given its new text, and only that piece is added.

The frames decode to exactly what ``payload.payload`` gives for the same lesson; the zlib
stream differs (pieces no frame uses any more stay in it, in the order they came). Pure
Python: no Streamlit, no torch.
"""

from __future__ import annotations

import json
import operator
import zlib
from dataclasses import dataclass, field

from paged.viz.fold import chapters
from paged.viz.fold.chapters import STEP, Chapter
from paged.viz.fold.lesson import Lesson, Side
from paged.viz.fold.narration import render_step
from paged.viz.player.payload import BODY, Pieces, envelope, frame_parts, markdown

_OPEN = b'{"pieces":['
_ZLIB_HEADER = b"\x78\x9c"  # deflate, 32 KiB window, default level (RFC 1950)
_NOT_LAST = (False, False)


def _ended(side: Side, i: int) -> int:
    """How many frames ``side`` had when frame ``i`` is past its end; -1 while it runs."""
    return len(side.frames) if i >= len(side.frames) else -1


def _last(side: Side, i: int) -> bool:
    return i >= len(side.frames) - 1


@dataclass
class _Drawn:
    """One frame as drawn: what it was drawn from, its pieces, and its record's JSON."""

    left: object
    right: object
    ended: tuple[int, int]
    parts: list[int]  # SLOTS order, less body
    phase_at: tuple[bool, bool] | None = None  # the last-frame flags its phase was read with
    phase: str = ""
    state_body: int = -1  # the piece of its own state text (between keyframes), once drawn
    body: int = -1
    json: str = ""

    def same(self, left: object, right: object, ended: tuple[int, int]) -> bool:
        return self.left is left and self.right is right and self.ended == ended


@dataclass
class LivePayload:
    """``update(lesson)`` is ``payload.payload(lesson, lang)`` for the newest lesson of a
    stream, at the cost of what changed since the previous one. Lessons of another spec or
    other runs start it afresh."""

    lang: str
    pieces: Pieces = field(default_factory=lambda: Pieces([], {}))
    drawn: list[_Drawn] = field(default_factory=list)
    _of: tuple = ()
    _z: zlib._Compress = field(default_factory=lambda: zlib.compressobj(6, zlib.DEFLATED, -15))
    _deflated: bytearray = field(default_factory=bytearray)
    _adler: int = 1  # the checksum of what _deflated holds, inflated (adler32 starts at 1)
    _sent: int = 0  # pieces already in the zlib stream
    _last: tuple[Lesson | None, dict] = (None, {})

    def update(self, lesson: Lesson) -> dict:
        """The player's payload for ``lesson`` (see ``payload.payload``)."""
        if self._last[0] is lesson:
            return self._last[1]
        of = (lesson.spec, lesson.left.run, lesson.right.run)
        if of != self._of:
            self.__init__(self.lang)  # type: ignore[misc]
            self._of = of
            self._adler = zlib.adler32(_OPEN)
            self._deflated += self._z.compress(_OPEN)
        del self.drawn[lesson.num_frames :]
        chs = self._chapters(lesson)
        step_bodies: dict[int, int] = {}
        for ch in chs:
            if ch.phase == STEP and ch.steps:
                text = "\n\n".join(render_step(lesson, k, self.lang).narration for k in ch.steps)
                step_bodies[ch.start] = self.pieces.add(markdown(text))
            for i in range(ch.start, ch.end + 1):
                self._body(lesson, i, ch, step_bodies.get(ch.start))
        data = envelope(lesson, self.lang, chs, self._deflate())
        self._last = (lesson, data)
        return data

    def _frame(self, lesson: Lesson, i: int) -> _Drawn:
        """Frame ``i``, drawn again only if what it reads has changed."""
        left, right = lesson.left.at(i), lesson.right.at(i)
        ended = (_ended(lesson.left, i), _ended(lesson.right, i))
        if i < len(self.drawn) and self.drawn[i].same(left, right, ended):
            return self.drawn[i]
        parts = [self.pieces.add(p) for p in frame_parts(lesson, i, self.lang)]
        d = _Drawn(left, right, ended, parts)
        if i < len(self.drawn):
            self.drawn[i] = d
        else:
            self.drawn.append(d)
        return d

    def _chapters(self, lesson: Lesson) -> list[Chapter]:
        """``chapters.chapters(lesson)``, reading each frame's phase again only where it may
        have changed."""
        at_key: dict[int, list[int]] = {}
        for k, kf in enumerate(lesson.keyframes):
            if kf is not None:
                at_key.setdefault(kf, []).append(k)
        kept = self._kept(lesson)
        out: list[Chapter] = []
        start, kind = 0, ""  # the phase chapter being grown
        for i in range(lesson.num_frames):
            d = self.drawn[i] if i < kept else self._frame(lesson, i)
            if i in at_key:  # a step's keyframe: a chapter of its own
                if kind:
                    out.append(Chapter(start, i - 1, kind))
                    kind = ""
                *also, step = at_key[i]
                out.append(Chapter(i, i, STEP, step, tuple(also)))
                continue
            flags = _NOT_LAST if i < kept else (_last(lesson.left, i), _last(lesson.right, i))
            if d.phase_at != flags:
                d.phase, d.phase_at = chapters.phase(lesson, i), flags
            if d.phase != kind:
                if kind:
                    out.append(Chapter(start, i - 1, kind))
                start, kind = i, d.phase
        if kind:
            out.append(Chapter(start, lesson.num_frames - 1, kind))
        return out

    def _kept(self, lesson: Lesson) -> int:
        """How many leading frames are drawn from the very frames both sides still show, with
        neither side at or past its last frame: nothing they read can have changed. One
        identity test per frame, in C: a tick costs the new frames, not a walk of them all."""
        lf, rf = lesson.left.frames, lesson.right.frames
        n = min(len(self.drawn), len(lf) - 1, len(rf) - 1)
        if n <= 0:
            return 0
        drawn = self.drawn[:n]
        lefts, rights = [d.left for d in drawn], [d.right for d in drawn]
        if all(map(operator.is_, lefts, lf)) and all(map(operator.is_, rights, rf)):
            return n
        return 0

    def _body(self, lesson: Lesson, i: int, ch: Chapter, step_body: int | None) -> None:
        d = self.drawn[i]
        if step_body is None:  # between keyframes: each side's state on this very frame
            if d.state_body < 0:
                d.state_body = self.pieces.add(markdown(chapters.body(lesson, ch, i, self.lang)))
            step_body = d.state_body
        if d.body != step_body:
            d.body = step_body
            record = [*d.parts[:BODY], step_body, *d.parts[BODY:]]
            d.json = json.dumps(record, separators=(",", ":"))

    def _deflate(self) -> bytes:
        """The zlib stream (RFC 1950) of ``{"pieces": [...], "frames": [...]}``. The pieces
        so far are deflated once, as they come, and flushed to a byte boundary; the frames'
        records, which a tick may change anywhere, are deflated on their own after them (a
        raw deflate stream may follow another's flushed blocks), and the checksum covers both."""
        new = self.pieces.items[self._sent :]
        if new:
            text = ("," if self._sent else "") + ",".join(json.dumps(p) for p in new)
            raw = text.encode("utf-8")
            self._adler = zlib.adler32(raw, self._adler)
            self._deflated += self._z.compress(raw) + self._z.flush(zlib.Z_SYNC_FLUSH)
            self._sent = len(self.pieces.items)
        frames = ",".join(d.json for d in self.drawn)
        tail = f'],"frames":[{frames}]}}'.encode()
        # level 1: the records are short runs of digits, where level 6 only takes longer
        last = zlib.compressobj(1, zlib.DEFLATED, -15)
        body = last.compress(tail) + last.flush()
        check = zlib.adler32(tail, self._adler).to_bytes(4, "big")
        return _ZLIB_HEADER + bytes(self._deflated) + body + check
