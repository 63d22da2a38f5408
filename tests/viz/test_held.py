"""The server's folds and drawings (paged/viz/live/held.py): one at a time over every cache, the
waiting caller told, a value made once however many ask, bounded by bytes, and what an ended
session held let go."""

from __future__ import annotations

import threading

import pytest

from paged.viz.live import held as H


def _held(max_bytes: int = 100, alive=None) -> H.Held:
    return H.Held(max_bytes, alive=alive, gate=threading.BoundedSemaphore(1))


def test_one_fold_at_a_time_and_the_one_who_waits_is_told_and_makes_nothing():
    held = _held()
    started, release = threading.Event(), threading.Event()
    made, told, got = [], [], []

    def slow():
        made.append(1)
        started.set()
        release.wait(10)
        return "folded", 10

    first = threading.Thread(target=lambda: got.append(held.get("k", slow)))
    first.start()
    assert started.wait(10)
    second = threading.Thread(
        target=lambda: got.append(held.get("k", slow, waiting=lambda: told.append(1)))
    )
    second.start()
    second.join(0.3)
    assert second.is_alive()  # waits its turn
    release.set()
    first.join(10)
    second.join(10)
    assert got == ["folded", "folded"] and made == [1] and told == [1]


def test_two_caches_share_the_one_turn():
    gate = threading.BoundedSemaphore(1)
    a, b = H.Held(100, gate=gate), H.Held(100, gate=gate)
    told = []

    def inner():
        return b.get("y", lambda: ("y", 1), waiting=lambda: told.append(1)), 1

    done = threading.Event()

    def hold_a():
        a.get("x", lambda: (done.wait(10), 1))

    t = threading.Thread(target=hold_a)
    t.start()
    other = threading.Thread(target=inner)
    other.start()
    other.join(0.3)
    assert other.is_alive() and told == [1]
    done.set()
    t.join(10)
    other.join(10)


def test_bounded_by_bytes_least_recently_used_first():
    held = _held(max_bytes=100)
    held.get("a", lambda: ("A", 40))
    held.get("b", lambda: ("B", 40))
    held.get("a", lambda: ("A again", 40))  # a hit: "a" is now the most recent
    held.get("c", lambda: ("C", 40))
    assert "a" in held and "c" in held and "b" not in held
    assert held.held_bytes() == 80


def test_a_drawing_counts_its_bytes_and_is_drawn_once():
    held = _held(max_bytes=10_000)
    held.get("k", lambda: ("lesson", 10))
    drawn = []

    def draw():
        drawn.append(1)
        return {"frames": "x" * 1000}

    assert held.payload("k", "en", draw) == held.payload("k", "en", draw)
    assert drawn == [1] and held.held_bytes() > 1000


def test_the_newest_stays_even_past_the_bound():
    held = _held(max_bytes=10)
    held.get("a", lambda: ("A", 5))
    held.get("big", lambda: ("B", 50))
    assert "big" in held and "a" not in held


def test_what_an_ended_session_held_is_let_go():
    live = {"s1", "s2"}
    held = _held(max_bytes=1000, alive=live.__contains__)
    held.get("mine", lambda: ("M", 10), owner="s1")
    held.get("shared", lambda: ("S", 10), owner="s1")
    held.get("shared", lambda: ("S", 10), owner="s2")
    held.get("nobody's", lambda: ("N", 10))  # shared by link, no owner: stays
    live.discard("s1")
    assert held.drop_ended() == 1
    assert "mine" not in held and "shared" in held and "nobody's" in held
    live.discard("s2")
    assert held.drop_ended() == 1 and "shared" not in held and "nobody's" in held


def test_a_failed_fold_frees_the_turn():
    held = _held()

    def broken():
        raise ValueError("bad trace")

    for _ in range(2):
        with pytest.raises(ValueError):
            held.get("k", broken)
    assert held.get("k", lambda: ("ok", 1)) == "ok" and held.gate.acquire(blocking=False)


def test_room_is_made_before_a_fold_so_held_and_making_stay_under_the_bound():
    held = _held(max_bytes=100)
    held.get("a", lambda: ("A", 40))
    held.get("b", lambda: ("B", 40))
    seen = []

    def fold():
        seen.append(held.held_bytes())
        return "C", 50, {"en": {"frames": "x"}}

    held.get("c", fold, expect=50)
    assert seen == [40] and "a" not in held and "c" in held
    assert held.payload("c", "en", lambda: {"drawn": "again"}) == {"frames": "x"}
