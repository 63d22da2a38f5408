"""What a lesson step's narration may quote, as typed values, and the facts a paragraph may
depend on (``[if NAME]``).

``paged.viz.fold.narration`` fills these from the frames at a step's keyframe; a lesson names them as
``{L.running}``, ``{R.avg_waste_share}``, ``{ev.need_slots}``, ``{fp8.e4m3_top1}``,
``{block_size}``. Pure Python.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from paged.viz.data.fp8_accuracy import Fp8Facts
from paged.viz.fold.tier_facts import TierFacts


@dataclass(frozen=True)
class SideFacts(TierFacts):
    """One side at the keyframe (``L`` or ``R``): its frame, its run's scoreboard, what its
    cache shared so far, and (inherited) what its tiers did. Shares are printed as the strip
    (whole percents) and the scoreboard (``avg_*``, one decimal) print them."""

    running: int
    waiting: int
    step: int
    token_share: str
    reservation_share: str
    internal_share: str
    external_share: str
    free_share: str
    token_states: int
    reservation: int
    internal: int
    external: int
    free: int
    waste: int  # reservation + internal + external slots
    blocks: int  # entries in all block tables
    avg_token_share: str
    avg_waste_share: str
    avg_reservation_share: str
    avg_internal_share: str
    avg_external_share: str
    avg_free_share: str
    max_running: int
    mean_running: str
    steps: int
    blocked_req: str  # "-" when nobody was refused
    blocked_reason: str
    shared: int
    saved: int
    saved_share: str
    hit_tokens: int  # prefill tokens the prefix cache spared so far
    copies: int  # blocks copied on write so far


@dataclass(frozen=True)
class RequestFacts:
    """The matched event's request at the keyframe, on both sides."""

    req: str  # its display label
    req_id: str  # the engine's id
    left_reserved: int  # slots its left run holds (or reserved and let go within this frame)
    left_released: int  # the run it held until now, when it let go of it in this frame
    left_never: int  # left slots it held and will never fill (hatched there)
    right_never: int
    hole_between: bool  # the left run it let go of lies between two runs still alive
    right_finished: bool  # it stops on the right in this same frame
    right_blocks: int
    right_table: str  # "0→#3, 1→#7", or "-"
    prompt_len: int | None = None  # None: the frames do not know the request
    max_tokens: int | None = None
    prompt_blocks: int | None = None
    moves: str | None = None  # a swap's block moves, "#3→c0, #7→c1"
    #: the token positions it wrote on the right in this frame ("33", "32–33"; "-": none)
    right_wrote: str = "-"
    #: tokens it took shared on the right in this frame (another's blocks, or cached ones)
    right_shared_tokens: int = 0


@dataclass(frozen=True)
class EventFacts:
    """The event a step's rule matched. Narration quotes the event's own fields
    (``{ev.need_slots}``) and, for an event that names a request, that request's facts;
    ``{ev.req}`` is then the request's display label and ``{ev.req_id}`` the engine's id.
    A name neither has raises AttributeError, which the formatter shows as ``?``."""

    fields: Mapping[str, object]  # the event as its JSON line has it
    request: RequestFacts | None = None

    def __getattr__(self, name: str) -> object:
        # Reached only for names that are not dataclass fields: the ones a lesson quotes.
        if not name.startswith("_"):
            request = self.__dict__.get("request")
            value = getattr(request, name, None)
            if value is not None:
                return value
            fields = self.__dict__.get("fields", {})
            if name in fields:
                return fields[name]
        raise AttributeError(name)


@dataclass(frozen=True)
class NarrationContext:
    """Everything a step's narration may quote, taken at its keyframe."""

    L: SideFacts  # the left side, as lessons write it: {L.running}
    R: SideFacts
    frame: int
    block_size: int
    num_slots: int
    num_blocks: int
    max_model_len: int | None
    ev: EventFacts | None = None  # None when the step's rule names no event
    fp8: Fp8Facts | None = None  # None when the accuracy data file is unusable

    def names(self) -> dict[str, object]:
        """The placeholders' namespace; an absent event or accuracy file is left out, so a
        lesson quoting it shows ``?``."""
        out = dict(vars(self))
        for optional in ("ev", "fp8"):
            if out[optional] is None:
                del out[optional]
        return out

    @property
    def request(self) -> RequestFacts | None:
        """The matched event's request, when there is one."""
        return self.ev.request if self.ev is not None else None


IF_TAG = re.compile(r"^\[(if|unless) ([a-z_]+)\]\s*", re.MULTILINE)


def _request_says(test: Callable[[RequestFacts], bool]) -> Callable[[NarrationContext], bool]:
    return lambda ctx: ctx.request is not None and test(ctx.request)


#: ``[if NAME]`` conditions: each reads the narration context at the step's keyframe.
CONDITIONS: dict[str, Callable[[NarrationContext], bool]] = {
    # the step's request holds a reservation on the left / blocks on the right at the keyframe
    "left_admitted": _request_says(lambda r: r.left_reserved > 0),
    "right_admitted": _request_says(lambda r: r.right_blocks > 0),
    # the left run released at the keyframe lay between two runs still alive
    "hole_between": _request_says(lambda r: r.hole_between),
    # the step's request stopped at the keyframe with left slots it never filled (hatched)
    "left_never": _request_says(lambda r: r.left_never > 0),
    # the step's request stops on the right in this same frame (each side keeps its own pace)
    "right_finished": _request_says(lambda r: r.right_finished),
    "fewer_steps": lambda ctx: ctx.R.steps < ctx.L.steps,
    "same_steps": lambda ctx: ctx.R.steps == ctx.L.steps,
    "more_steps": lambda ctx: ctx.R.steps > ctx.L.steps,
    "more_concurrent": lambda ctx: ctx.R.max_running > ctx.L.max_running,
    # what the tiers did (viz.fold.tier_facts)
    "swapped": lambda ctx: ctx.R.swaps_out > 0,
    "relocated": lambda ctx: ctx.R.relocated > 0,
    "swap_fell_back": lambda ctx: ctx.R.fallbacks > 0,
    "left_preempted": lambda ctx: ctx.L.preemptions > 0,
    "left_recomputed": lambda ctx: ctx.L.recomputed > 0,
    "right_recomputed": lambda ctx: ctx.R.recomputed > 0,
    "less_waiting": lambda ctx: ctx.R.waited < ctx.L.waited,
}
