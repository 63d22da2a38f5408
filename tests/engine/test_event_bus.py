"""The bus builds every event without its dataclass __init__ when it can: the event must be the one
the constructor builds, and whatever the constructor refused or filled in must stay so."""

import dataclasses

import pytest

from engine.core import events as E

#: A value of each field type events use (their annotations are strings).
SAMPLE = {
    "str": "r7",
    "int": 7,
    "tuple[int, ...]": (3, 4),
    "tuple[tuple[int, int], ...]": ((1, 2), (5, 6)),
}


def _fields(cls: type[E.Event]) -> dict:
    return {
        f.name: SAMPLE[str(f.type)]
        for f in dataclasses.fields(cls)
        if f.name not in ("step", "seq")
    }


@pytest.mark.parametrize("cls", list(E.EVENT_TYPES.values()), ids=list(E.EVENT_TYPES))
def test_an_event_the_bus_builds_is_the_one_its_constructor_builds(cls):
    bus, sink = E.EventBus(), E.ListSink()
    bus.subscribe(sink)
    bus.step = 3
    bus.emit(E.StepEnd, num_running=0, num_waiting=0)
    bus.emit(cls, **_fields(cls))
    built, made = sink.events[-1], cls(step=3, seq=1, **_fields(cls))
    assert type(built) is cls
    assert built == made and hash(built) == hash(made) and repr(built) == repr(made)
    assert built.to_dict() == made.to_dict() and E.from_dict(built.to_dict()) == made
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.step = 4  # type: ignore[misc]


def test_the_bus_still_fills_defaults_and_refuses_wrong_fields():
    bus, sink = E.EventBus(), E.ListSink()
    bus.subscribe(sink)
    bus.emit(E.SwapFallback, req="a", need_blocks=2, free_cpu_blocks=1)
    assert sink.events[-1].reason == E.SWAP_FALLBACK_CPU_FULL
    with pytest.raises(TypeError):
        bus.emit(E.TokensWritten, req="a", positions=(1,))
    with pytest.raises(TypeError):
        bus.emit(E.TokensWritten, req="a", positions=(1,), slots=(2,), slot=(2,))
    assert len(sink.events) == 1
