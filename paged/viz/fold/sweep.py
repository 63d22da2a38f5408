"""Sweep lessons: one workload recorded at several block sizes, one trace per size.

A folder ``paged/lessons/<name>/`` with a ``narration.toml``::

    title = { en = "...", zh = "..." }
    traces = "traces/b{block_size}.jsonl"        # one trace per size, a paged run in each
    block_sizes = [1, 8, 16, 32, 128, 256]
    kernel_table = "kernels/b{block_size}/kernels.csv"   # optional: bench/kernel_speed.py --out
    record = "python paged/lessons/block-size/record.py"      # how the traces were made
    [[sections]]
    chart = "composition"                        # which chart the page draws beside the text
    title = { en = "...", zh = "..." }
    text = { en = "...{b16.internal_share}...", zh = "..." }

Every number the narration quotes is a ``{placeholder}`` filled by ``narration_context`` from
the traces (``b16.internal_share``) or from ``paged.engine.sim.capacity`` arithmetic
(``b16.long_table_bytes``); all categories come from ``paged.engine.core.accounting``. Pure Python, no
Streamlit, no torch.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from paged.engine.core import events as E
from paged.engine.core.accounting import StepAccount, account, time_averaged_shares
from paged.engine.sim.capacity import (
    DEFAULT_ENTRY_BYTES,
    ESSAY_ENTRY_BYTES,
    block_table_bytes,
    blocks_for,
)
from paged.engine.trace import io as T
from paged.viz.fold.lesson_folder import LESSONS_DIR, read_lesson_toml, texts
from paged.viz.fold.narration import SafeFormatter

#: The essay's long request (§5.2): a 32,768-token sequence, 100 of them at once.
LONG_LEN, LONG_BATCH = 32768, 100


class SweepError(ValueError):
    """A sweep lesson cannot be used; the message is one line saying why."""


@dataclass(frozen=True)
class Section:
    chart: str
    title: dict[str, str]
    text: dict[str, str]


@dataclass(frozen=True)
class SweepSpec:
    """What ``narration.toml`` says."""

    name: str
    folder: Path
    title: dict[str, str]
    intro: dict[str, str]
    traces: str
    block_sizes: tuple[int, ...]
    kernel_table: str | None
    record: str
    sections: tuple[Section, ...]

    def trace_path(self, block_size: int) -> Path:
        return self.folder / self.traces.format(block_size=block_size)

    def kernel_path(self, block_size: int) -> Path | None:
        if not self.kernel_table:
            return None
        return self.folder / self.kernel_table.format(block_size=block_size)


@dataclass(frozen=True)
class SizeResult:
    """One block size's run, reduced by the accounting fold and the block-table events."""

    block_size: int
    num_slots: int
    steps: int
    requests: int
    preemptions: int
    held_shares: dict[str, float]  # token_states / reservation / internal, as shares of held
    arena_shares: dict[str, float]  # the five categories, as shares of the arena
    internal_per_request: float  # never-used slots per running request, step-averaged
    mean_entries: float  # block-table entries per request when it finished
    max_entries: int
    mean_kv_slots: float  # K/V slots a request filled: its last token's K/V is never computed
    peak_held: int
    model: str
    device: str
    forward: str

    @property
    def mean_len(self) -> float:
        """Mean tokens per request at its end, prompt plus output: one more than the K/V slots
        it filled (a checked trace holds every ``final_len`` to prompt + output - 1)."""
        return self.mean_kv_slots + 1 if self.requests else 0.0

    @property
    def mean_tail(self) -> float:
        """Mean never-used slots per request at its end: its last block's unfilled part."""
        return self.mean_entries * self.block_size - self.mean_kv_slots

    @property
    def table_bytes(self) -> float:
        """Mean block-table bytes per request (``DEFAULT_ENTRY_BYTES`` per entry)."""
        return self.mean_entries * DEFAULT_ENTRY_BYTES


HELD = ("token_states", "reservation", "internal")


def load_spec(name: str, root: Path = LESSONS_DIR) -> SweepSpec:
    """Parse ``root/name/narration.toml``. Raises SweepError (one line) when it is unusable."""
    folder, doc = read_lesson_toml(name, "narration.toml", root, SweepError, "sweep lesson")
    try:
        sections = tuple(
            Section(s["chart"], texts(s["title"]), texts(s["text"]))
            for s in doc.get("sections", [])
        )
        sizes = tuple(int(b) for b in doc["block_sizes"])
        return SweepSpec(
            name,
            folder,
            texts(doc["title"]),
            texts(doc.get("intro", "")),
            doc["traces"],
            sizes,
            doc.get("kernel_table"),
            doc.get("record", ""),
            sections,
        )
    except (KeyError, TypeError, ValueError) as e:
        raise SweepError(f"lessons/{name}/narration.toml lacks or mistypes {e}") from None


def analyse(trace: T.Trace, run: str = "paged") -> SizeResult:
    """Fold one trace's paged run into the numbers the lesson shows."""
    if run not in trace.run_names:
        raise SweepError(f"trace has no run named {run!r} (it has {', '.join(trace.run_names)})")
    header = trace.run_header(run)
    events = trace.runs[run]
    num_slots, bs = header.num_slots, header.block_size
    accounts = account(events, num_slots, bs)
    if not accounts:
        raise SweepError(f"run {run!r} has no finished engine step")
    entries = _table_entries(events)
    finished = list(E.of_kind(events, E.Finished))
    h = trace.info
    return SizeResult(
        block_size=bs,
        num_slots=num_slots,
        steps=len(accounts),
        requests=len(finished),
        preemptions=E.count_of(events, E.Preempted),
        held_shares=_held_shares(accounts),
        arena_shares=time_averaged_shares(accounts),
        internal_per_request=_mean([a.internal / a.running for a in accounts if a.running]),
        mean_entries=_mean(list(entries.values())),
        max_entries=max(entries.values(), default=0),
        mean_kv_slots=_mean([e.final_len for e in finished]),
        peak_held=max(_held(a) for a in accounts),
        model=h.model,
        device=h.device,
        forward=h.forward,
    )


def _held(a: StepAccount) -> int:
    return a.token_states + a.reservation + a.internal


def _held_shares(accounts: list[StepAccount]) -> dict[str, float]:
    # Of what requests hold: the arena's free part says nothing about block size.
    busy = [a for a in accounts if _held(a)]
    return {c: _mean([getattr(a, c) / _held(a) for a in busy]) for c in HELD}


def _table_entries(events: list[E.Event]) -> dict[str, int]:
    """Each request's block-table length at its end: its highest logical block + 1 (a
    preempted request's table starts again, and its final table is what counts)."""
    entries: dict[str, int] = {}
    for ev in E.of_kind(events, E.BlockAllocated):
        entries[ev.req] = max(entries.get(ev.req, 0), ev.logical + 1)
    return entries


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def load_results(spec: SweepSpec) -> list[SizeResult]:
    """One SizeResult per block size, in the spec's order. Raises SweepError when a trace is
    missing or unusable (naming the file and how to record it)."""
    out = []
    for bs in spec.block_sizes:
        path = spec.trace_path(bs)
        try:
            res = analyse(T.read(path))
        except T.TraceError as e:
            raise SweepError(f"{e} (record with: {spec.record})") from None
        if res.block_size != bs:
            raise SweepError(f"{path.name} was recorded at block size {res.block_size}, not {bs}")
        out.append(res)
    return out


# --- kernel timings (measured on a GPU by bench/kernel_speed.py) ----------------------------------


@dataclass(frozen=True)
class KernelRow:
    block_size: int
    batch: int
    context: int
    paged_us: float
    contiguous_us: float


def kernel_rows(spec: SweepSpec) -> list[KernelRow]:
    """Rows of every ``kernels.csv`` the spec points to that exists; empty when none was
    measured (no GPU has run ``bench/kernel_speed.py --block-size N --out ...`` for this lesson)."""
    rows = []
    for bs in spec.block_sizes:
        path = spec.kernel_path(bs)
        if path is None or not path.is_file():
            continue
        with path.open(newline="") as f:
            for r in csv.DictReader(f):
                rows.append(
                    KernelRow(
                        bs,
                        int(r["batch"]),
                        int(r["context"]),
                        float(r["paged_us"]),
                        float(r["contiguous_us"]),
                    )
                )
    return rows


# --- narration -------------------------------------------------------------------------------


def pct(x: float) -> str:
    return f"{100 * x:.1f}%"


@dataclass(frozen=True)
class SizeFacts:
    """One block size's numbers as narration quotes them (``{b16.internal_share}``)."""

    block_size: int
    steps: int
    preemptions: int
    token_share: str  # shares of what requests hold
    reserved_share: str
    internal_share: str
    internal_per_request: str
    entries: str  # mean block-table entries per request
    max_entries: int
    table_bytes: str
    peak_held: str
    long_entries: str  # the essay's long request (LONG_LEN tokens): its table's entries
    long_table_bytes: str
    long_table_batch: str  # ... and LONG_BATCH such tables


def _size_facts(r: SizeResult) -> SizeFacts:
    long_bytes = block_table_bytes(LONG_LEN, r.block_size)
    return SizeFacts(
        block_size=r.block_size,
        steps=r.steps,
        preemptions=r.preemptions,
        token_share=pct(r.held_shares["token_states"]),
        reserved_share=pct(r.held_shares["reservation"]),
        internal_share=pct(r.held_shares["internal"]),
        internal_per_request=f"{r.internal_per_request:.1f}",
        entries=f"{r.mean_entries:.1f}",
        max_entries=r.max_entries,
        table_bytes=f"{r.table_bytes:,.0f}",
        peak_held=f"{r.peak_held:,}",
        long_entries=f"{blocks_for(LONG_LEN, r.block_size):,}",
        long_table_bytes=_bytes(long_bytes),
        long_table_batch=_bytes(long_bytes * LONG_BATCH),
    )


def _bytes(n: float) -> str:
    for unit, size in (("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


def narration_context(results: list[SizeResult]) -> dict:
    """Values the narration may quote: ``b{size}.*`` per block size, and shared facts."""
    first = results[0]
    ctx: dict[str, object] = {f"b{r.block_size}": _size_facts(r) for r in results}
    ctx.update(
        requests=first.requests,
        mean_len=f"{first.mean_len:.1f}",
        mean_kv_slots=f"{first.mean_kv_slots:.1f}",
        runs=len(results),
        num_slots=f"{first.num_slots:,}",
        entry_bytes=DEFAULT_ENTRY_BYTES,
        essay_entry_bytes=ESSAY_ENTRY_BYTES,
        long_len=f"{LONG_LEN:,}",
        long_batch=LONG_BATCH,
        smallest=results[0].block_size,
        largest=results[-1].block_size,
        model=first.model,
        device=first.device,
    )
    return ctx


def fill(text: str, ctx: dict, lang: str) -> tuple[str, list[str]]:
    """Fill ``text``'s placeholders; join hard-wrapped TOML lines into paragraphs (Chinese
    joins without a space). Returns the text and the placeholders that had no value."""
    fmt = SafeFormatter()
    filled = fmt.vformat(text.strip(), (), ctx)  # first, so joins see the numbers themselves
    paras = [_join(p.splitlines(), lang) for p in filled.split("\n\n")]
    return "\n\n".join(p for p in paras if p), fmt.missing


def _join(lines: list[str], lang: str) -> str:
    out = ""
    for line in (ln.strip() for ln in lines):
        if not out:
            out = line
        elif line.startswith(("- ", "* ")):  # a markdown list item keeps its own line
            out += "\n" + line
        else:
            out += _glue(out[-1], line[0], lang) + line
    return out


def _glue(before: str, after: str, lang: str) -> str:
    """Chinese lines join without a space, except where a Latin letter or digit meets a
    Chinese character: a space keeps "block 里" from reading as one word."""
    if lang != "zh":
        return " "
    latin = [c.isascii() and c.isalnum() for c in (before, after)]
    han = [not c.isascii() and c.isalnum() for c in (before, after)]
    return " " if (latin[0] and han[1]) or (han[0] and latin[1]) else ""
