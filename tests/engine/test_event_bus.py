"""The bus builds every event without its dataclass __init__ when it can: the event must be the one
the constructor builds, and whatever the constructor refused or filled in must stay so."""

import dataclasses

import pytest

from paged.engine.core import events as E
from tests.sinks import ListSink

#: A value of each field type events use (their annotations are strings).
SAMPLE = {
    "str": "r7",
    "int": 7,
    "tuple[int, ...]": (3, 4),
    "tuple[tuple[int, int], ...]": ((1, 2), (5, 6)),
    "float": 0.25,
    "tuple[float, ...]": (0.5, 0.5),
    "tuple[tuple[float, ...], ...]": ((1.0, 2.5), (3.0, 1.5)),
}


def _fields(cls: type[E.Event]) -> dict:
    return {
        f.name: SAMPLE[str(f.type)]
        for f in dataclasses.fields(cls)
        if f.name not in ("step", "seq")
    }


@pytest.mark.parametrize("cls", list(E.EVENT_TYPES.values()), ids=list(E.EVENT_TYPES))
def test_an_event_the_bus_builds_is_the_one_its_constructor_builds(cls):
    bus, sink = E.EventBus(), ListSink()
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
    bus, sink = E.EventBus(), ListSink()
    bus.subscribe(sink)
    bus.emit(E.SwapFallback, req="a", need_blocks=2, free_cpu_blocks=1)
    assert sink.events[-1].reason == E.SWAP_FALLBACK_CPU_FULL
    with pytest.raises(TypeError):
        bus.emit(E.TokensWritten, req="a", positions=(1,))
    with pytest.raises(TypeError):
        bus.emit(E.TokensWritten, req="a", positions=(1,), slots=(2,), slot=(2,))
    assert len(sink.events) == 1


@pytest.mark.parametrize("cls", list(E.EVENT_TYPES.values()), ids=list(E.EVENT_TYPES))
def test_an_event_names_a_request_exactly_when_it_is_a_request_event(cls):
    names = [f.name for f in dataclasses.fields(cls)]
    assert ("req" in names) == issubclass(cls, E.RequestEvent)
    if "req" in names:  # a trace line keeps its key order: kind, step, seq, req, ...
        assert names[:3] == ["step", "seq", "req"]


def test_a_handler_table_covers_every_kind_or_refuses_to_be_built():
    def seen(log, ev):
        log.append(("seen", ev.kind))

    def ignored(log, ev):
        log.append(("ignored", ev.kind))

    table = E.handler_table({E.RequestEvent: seen, E.StepEnd: seen}, default=ignored)
    assert set(table) >= set(E.EVENT_TYPES.values())
    log: list = []
    for ev in (
        E.Finished(step=0, seq=0, req="A", final_len=3, num_generated=2, reason="eos"),
        E.StepEnd(step=0, seq=1, num_running=0, num_waiting=0),
        E.AllBlocksCleared(step=0, seq=2),
    ):
        table[type(ev)](log, ev)
    assert log == [("seen", "finished"), ("seen", "step_end"), ("ignored", "all_blocks_cleared")]
    with pytest.raises(TypeError, match="no handler for event kinds .*block_copied"):
        E.handler_table({E.StepEnd: seen})
    with pytest.raises(TypeError, match="not event types"):
        E.handler_table({int: seen}, default=ignored)  # type: ignore[dict-item]


def test_a_subclass_of_an_event_type_takes_its_base_handler():
    @dataclasses.dataclass(frozen=True)
    class LateFinish(E.Finished):
        pass

    table = E.handler_table({E.Finished: lambda log, ev: log.append("finished")}, default=print)
    log: list = []
    table[LateFinish](
        log, LateFinish(step=0, seq=0, req="A", final_len=1, num_generated=1, reason="eos")
    )
    assert log == ["finished"]
    with pytest.raises(KeyError):
        table[E.Event]
