"""Small HTML pieces for the lesson page: metrics strip, block tables / reservations, queue,
legend. Pure functions from frames to strings (testable without a browser); their look is
panels.css beside this file. Everything shown is escaped or generated."""

from __future__ import annotations

from html import escape
from pathlib import Path

from paged.engine.core import events as E
from paged.engine.core.accounting import CATEGORIES
from paged.viz.fold.panels import finished_labels, queue_entries, table_rows
from paged.viz.fold.percent import percents
from paged.viz.fold.reducer import PAGED, Frame
from paged.viz.render.style import (
    CATEGORY_COLOURS,
    CATEGORY_MARKS,
    REQUEST_COLOURS,
    SIDE_COLOURS,
    stylesheet,
    words,
)
from paged.viz.render.svg import swatch

MAX_ROWS = 14  # requests listed per panel; a classroom arena never has more
MAX_MAPS = 12  # block-table entries shown per request (first ones, "…", the last two)
MAX_CHIPS = 16  # queue entries shown per group

CSS_FILE = Path(__file__).resolve().parent / "panels.css"


def css() -> str:
    """The panels' stylesheet, its palette filled in."""
    return stylesheet(CSS_FILE)


def side_title(title: str, side: str) -> str:
    return f"<div class='pk-side-title' style='color:{SIDE_COLOURS[side]}'>{escape(title)}</div>"


def metrics_strip(frame: Frame, lang: str = "en") -> str:
    """The five categories as one 100% bar, their shares and slot counts, and the queue sizes."""
    w = words(lang)
    a = frame.account
    shown = percents(a.shares())  # printed shares sum to exactly 100
    segs = []
    for c in CATEGORIES:
        share = a.share(c)
        if share <= 0:
            continue
        text = shown[c] if share >= 0.08 else ""
        colour = CATEGORY_MARKS[c]
        segs.append(
            f"<div title='{escape(w[c])}: {getattr(a, c)} {w['slots']}' "
            f"style='width:{100 * share:.3f}%;background:{CATEGORY_COLOURS[c]};"
            f"color:{colour}'>{text}</div>"
        )
    nums = "".join(
        f"<span><span class='sw' style='background:{CATEGORY_COLOURS[c]}'></span>"
        f"{escape(w['cat_short'][c])} <b>{shown[c]}</b></span>"
        for c in CATEGORIES
    )
    queue = (
        f"<span class='pk-q'>{w['running_n']} <b>{a.running}</b> · {w['waiting_n']} "
        f"<b>{a.waiting}</b> · {w['blocked_n']} <b>{a.blocked}</b>"
        + (f" · {w['cpu_n']} <b>{a.swapped}</b>" if a.cpu_blocks else "")
        + "</span>"
    )
    return (
        f"<div class='pk-strip'><div class='pk-bar'>{''.join(segs)}</div>"
        f"<div class='pk-nums'>{nums}{queue}</div></div>"
    )


def numbers_table(frame: Frame, title: str, i: int, lang: str = "en") -> str:
    """The grid's text alternative for a screen reader: each category's slots and share, and
    the queue, as a table no one sees (``pk-sr``); the block tables beside it are text already."""
    w = words(lang)
    a = frame.account
    shown = percents(a.shares())
    rows = "".join(
        f"<tr><th scope='row'>{escape(w[c])}</th><td>{getattr(a, c)}</td><td>{shown[c]}</td></tr>"
        for c in CATEGORIES
    )
    queue = "".join(
        f"<tr><th scope='row'>{escape(w[k + '_n'])}</th><td>{getattr(a, k)}</td><td></td></tr>"
        for k in ("running", "waiting", "blocked")
    )
    head = "".join(f"<th scope='col'>{escape(w[k])}</th>" for k in ("category", "slots", "share"))
    cap = escape(w["grid_numbers"].format(side=title, frame=i))
    return f"<table class='pk-sr'><caption>{cap}</caption><tr>{head}</tr>{rows}{queue}</table>"


def scoreboard_card(summary, lang: str = "en") -> str:
    """One run's whole-run numbers: averaged category shares, concurrency, steps."""
    w = words(lang)
    shown = percents(summary.shares, 1)
    segs = "".join(
        f"<div title='{escape(w[c])}: {shown[c]}' "
        f"style='width:{100 * summary.shares[c]:.3f}%;background:{CATEGORY_COLOURS[c]};"
        f"color:{CATEGORY_MARKS[c]}'>"
        f"{shown[c] if summary.shares[c] >= 0.1 else ''}</div>"
        for c in CATEGORIES
        if summary.shares[c] > 0
    )
    rows = "".join(
        f"<div class='pk-row'><span class='sw' style='background:{CATEGORY_COLOURS[c]}'></span>"
        f"<span style='flex:1'>{escape(w[c])}</span><b>{shown[c]}</b></div>"
        for c in CATEGORIES
    )
    big = (
        f"<div class='pk-big'><div><b>{summary.max_running}</b>{escape(w['max_running'])}"
        f"</div><div><b>{summary.mean_running:.1f}</b>{escape(w['mean_running'])}</div>"
        f"<div><b>{summary.steps}</b>{escape(w['steps'])}</div></div>"
    )
    return (
        f"<div class='pk-panel pk-score'><h5>{escape(w['scoreboard'])}</h5>"
        f"<div class='pk-bar'>{segs}</div><div style='margin-top:.4rem'>{rows}</div>"
        f"{big}</div>"
    )


def _chip(text: str, order: int, cls: str = "", req: str | None = None) -> str:
    """A request's name on its colour (the colour classes live in CSS: short HTML). With
    ``req`` it can be tabbed to: the player then lights that request up everywhere."""
    who = f" data-req='{escape(req)}' tabindex='0'" if req is not None else ""
    return (
        f"<span class='pk-chip pk-c{order % len(REQUEST_COLOURS)} {cls}'{who}>{escape(text)}</span>"
    )


def _map_chip(m) -> str:
    # data-block: the player draws its arrow from this entry to that block on the grid
    return (
        f"<span class='pk-map{' new' if m.new else ''}' data-block='{m.physical}'>"
        f"{m.logical}→#{m.physical}</span>"
    )


def tables_panel(frame: Frame, lang: str = "en") -> str:
    """Block tables (paging) or reservation ranges (contiguous) of the requests holding memory."""
    w = words(lang)
    paged = frame.run.allocator == PAGED
    rows = table_rows(frame)
    moved = {e.req for e in E.of_kind(frame.events, E.SwappedOut, E.SwappedIn)}
    out = [f"<h5>{escape(w['block_tables'] if paged else w['reservations'])}</h5>"]
    if not rows:
        out.append(f"<div class='pk-dim'>{escape(w['none'])}</div>")
    for row in rows[:MAX_ROWS]:
        if paged:
            chips = [_map_chip(m) for m in row.mappings]
            if len(chips) > MAX_MAPS:  # first ones, an ellipsis, the newest two
                # the ellipsis names the blocks it stands for: their arrows start from it
                hidden = " ".join(str(m.physical) for m in row.mappings[MAX_MAPS - 2 : -2])
                more = f"<span class='pk-dim' data-blocks='{hidden}'>…&nbsp;</span>"
                chips = chips[: MAX_MAPS - 2] + [more] + chips[-2:]
            body = f"<div class='pk-maps'>{''.join(chips)}</div>"
        else:
            start, length = row.run or (0, 0)
            cls = "pk-map new" if row.new else "pk-map"
            body = (
                f"<span class='{cls}'>[{start}, {start + length})</span>"
                f"<span class='pk-dim'>{row.filled}/{length}</span>"
            )
        # a row this frame changed: kept when presenter mode condenses the panel (fit_present.js)
        hot = row.new or row.req in moved or any(m.new for m in row.mappings)
        out.append(
            f"<div class='pk-row{' pk-hot' if hot else ''}' data-req='{escape(row.req)}'>"
            f"{_chip(row.label, row.order, req=row.req)}{body}</div>"
        )
    if len(rows) > MAX_ROWS:
        out.append(f"<div class='pk-dim'>+{len(rows) - MAX_ROWS}</div>")
    for req, table in list(frame.cpu_tables.items())[:MAX_ROWS]:  # swapped out: on the CPU tier
        v = frame.requests[req]
        maps = "".join(f"<span class='pk-map'>{n}→c{c}</span>" for n, c in enumerate(table))
        out.append(
            f"<div class='pk-row{' pk-hot' if req in moved else ''}' data-req='{escape(req)}'>"
            f"{_chip(v.name, v.order, req=req)}"
            f"<div class='pk-maps'>"
            f"<span class='pk-dim'>{escape(w['cpu_n'])}&nbsp;</span>{maps}</div></div>"
        )
    out.append(_unchanged(w))
    return f"<div class='pk-panel pk-tables'>{''.join(out)}</div>"


def _unchanged(w: dict) -> str:
    """The line presenter mode shows in place of the unchanged rows it leaves out of a panel
    too long for the screen (fit_present.js fills in how many)."""
    return f"<div class='pk-dim pk-rest' data-t='{escape(w['unchanged'])}' hidden></div>"


def queue_panel(frame: Frame, lang: str = "en") -> str:
    """Running, waiting and blocked requests (with the allocator's reason), then finished."""
    w = words(lang)
    entries = queue_entries(frame, lang)
    out = [f"<h5>{escape(w['queue'])}</h5>"]
    groups = [
        ("running", [e for e in entries if e.state == "running"]),
        ("waiting", [e for e in entries if e.state != "running"]),
    ]
    for state, items in groups:
        if not items:
            continue
        chips = "".join(
            f"<span class='pk-q-entry'>{_chip(e.label, e.order, e.state, e.req)}</span>"
            for e in items[:MAX_CHIPS]
        )
        if len(items) > MAX_CHIPS:
            chips += f"<span class='pk-dim'>+{len(items) - MAX_CHIPS}</span>"
        out.append(
            f"<div class='pk-row'><span class='pk-dim' style='min-width:4.2rem'>"
            f"{escape(w[state])}</span><span>{chips}</span></div>"
        )
        for e in items[:MAX_CHIPS]:
            if e.why:
                colon = "：" if lang == "zh" else ": "
                out.append(
                    f"<div class='pk-why' data-req='{escape(e.req)}'><b>{escape(e.label)}</b> "
                    f"{escape(w['blocked'])}{colon}{escape(e.why)}</div>"
                )
    done = finished_labels(frame)
    if done:
        colon = "：" if lang == "zh" else ": "
        out.append(
            f"<div class='pk-dim pk-done'>{escape(w['finished'])}{colon}"
            f"{escape(', '.join(done))}</div>"
        )
    if len(out) == 1:
        out.append(f"<div class='pk-dim'>{escape(w['none'])}</div>")
    return f"<div class='pk-panel pk-queue'>{''.join(out)}</div>"


def legend(lang: str = "en") -> str:
    """What the grid's cells mean, each key a cell drawn as the grid draws it
    (``paged.viz.render.svg.swatch``: the same fill, stroke or cross, and outline)."""
    w = words(lang)
    items = [
        (swatch("token_states"), w["token_states"]),
        (swatch("reservation"), w["reservation"]),
        (swatch("internal"), w["internal"]),
        (swatch("free"), w["free"]),
        (swatch("external"), w["external"]),
        (swatch("free", changed=True), w["changed"]),
    ]
    cells = "".join(f"<span>{s}{escape(t)}</span>" for s, t in items)
    return f"<div class='pk-legend'>{cells}</div>"
