"""What tests subscribe to an EventBus to see what it emitted."""

from __future__ import annotations

from dataclasses import dataclass, field

from paged.engine.core.events import Event


@dataclass
class ListSink:
    """Collects events in memory."""

    events: list[Event] = field(default_factory=list)

    def __call__(self, ev: Event) -> None:
        self.events.append(ev)
