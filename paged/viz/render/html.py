"""Small HTML pieces for the lesson page: metrics strip, block tables / reservations, queue,
legend. Pure functions from frames to strings (testable without a browser); the CSS lives here
too so the look is defined in one place. Everything shown is escaped or generated."""

from __future__ import annotations

from html import escape

from paged.engine.core import events as E
from paged.engine.core.accounting import CATEGORIES
from paged.viz.fold.panels import finished_labels, queue_entries, table_rows
from paged.viz.fold.percent import percents
from paged.viz.fold.reducer import PAGED, Frame
from paged.viz.render.style import (
    CATEGORY_COLOURS,
    CATEGORY_MARKS,
    CHANGED,
    INK,
    MUTED,
    REQUEST_COLOURS,
    SIDE_COLOURS,
    words,
)
from paged.viz.render.svg import swatch

MAX_ROWS = 14  # requests listed per panel; a classroom arena never has more
MAX_MAPS = 12  # block-table entries shown per request (first ones, "…", the last two)
MAX_CHIPS = 16  # queue entries shown per group

_CHIP_COLOURS = "".join(
    f".pk-c{i} {{ background:{c}; border-color:{c}; }} .pk-c{i}.waiting, .pk-c{i}.blocked "
    f"{{ color:{c}; }}\n"
    for i, c in enumerate(REQUEST_COLOURS)
)

CSS = f"""
<style>
{_CHIP_COLOURS}
.pk-strip {{ margin: 0 0 .35rem 0; }}
.pk-bar {{ display:flex; height:22px; border-radius:5px; overflow:hidden; background:#eee; }}
.pk-bar > div {{ height:100%; color:white; font-size:12px; font-weight:600; line-height:22px;
  text-align:center; white-space:nowrap; overflow:hidden; display:flex; flex-wrap:wrap;
  justify-content:center; align-content:flex-start; }}
/* Whether a share's label fits its segment depends on the screen's width: a label that does
   not fit whole wraps onto a second line, under the segment's clipped edge, beside this
   full-height empty first item (a cut "10.5%" reads as another number). The share stays in
   the title and in the numbers under the bar. */
.pk-bar > div::before {{ content:""; width:0; height:100%; }}
.pk-nums {{ display:flex; flex-wrap:wrap; gap:.2rem .9rem; font-size:13px; color:{INK};
  margin-top:.3rem; }}
.pk-nums .sw {{ display:inline-block; width:10px; height:10px; border-radius:2px;
  margin-right:4px; vertical-align:-1px; }}
.pk-nums b {{ font-variant-numeric: tabular-nums; }}
.pk-q {{ margin-left:auto; color:{MUTED}; }}
.pk-panel {{ font-size:13px; color:{INK}; line-height:1.45; }}
.pk-panel h5 {{ font-size:12px; text-transform:uppercase; letter-spacing:.04em; color:{MUTED};
  margin:.1rem 0 .3rem 0; padding:0; font-weight:600; }}
.pk-row {{ display:flex; align-items:flex-start; gap:.35rem; margin:.12rem 0; }}
.pk-chip {{ display:inline-block; min-width:1.45rem; text-align:center; border-radius:4px;
  font-weight:700; font-size:12px; padding:0 .3rem; color:white; line-height:1.35rem; }}
.pk-map {{ display:inline-block; font-family: ui-monospace, Menlo, Consolas, monospace;
  font-size:12px; padding:0 .28rem; margin:0 .2rem .2rem 0; border-radius:4px;
  border:1px solid #d9dee5; background:#f8f9fb; line-height:1.3rem; }}
.pk-map.new {{ border:2px solid {CHANGED}; background:white; }}
.pk-maps {{ display:flex; flex-wrap:wrap; }}
.pk-run {{ font-family: ui-monospace, Menlo, Consolas, monospace; font-size:12px; }}
.pk-dim {{ color:{MUTED}; }}
.pk-why {{ color:{INK}; font-size:12px; }}
.pk-q-entry {{ display:inline-flex; align-items:center; gap:.25rem; margin:0 .45rem .25rem 0; }}
.pk-chip.waiting {{ background:white !important; border:2px solid; line-height:1.2rem; }}
.pk-chip.blocked {{ background:white !important; border:2px dashed {INK};
  line-height:1.2rem; }}
.pk-legend {{ display:flex; flex-wrap:wrap; gap:.3rem 1.1rem; font-size:13px; color:{INK};
  align-items:center; }}
.pk-legend svg.cell {{ display:inline-block; width:15px; height:15px; margin-right:5px;
  vertical-align:-3px; }}
.pk-legend {{ margin-top: .4rem; }}
.pk-side-body {{ display:flex; gap:.9rem; align-items:flex-start; margin-top:.5rem; }}
.pk-side-grid {{ flex: 5 1 0; min-width:0; }}
.pk-side-panel {{ flex: 3 1 0; min-width:0; }}
.pk-side-panel .pk-panel + .pk-panel {{ margin-top:.7rem; }}
.pk-side-title {{ font-size:1.15rem; font-weight:700; margin:0 0 .25rem 0; }}
.pk-score .sw {{ display:inline-block; width:10px; height:10px; border-radius:2px;
  margin-top:5px; }}
.pk-big {{ display:flex; gap:.8rem; margin-top:.6rem; }}
.pk-big > div {{ flex:1; font-size:11px; color:{MUTED}; line-height:1.2; }}
.pk-big b {{ display:block; font-size:1.6rem; color:{INK}; font-weight:700;
  font-variant-numeric: tabular-nums; }}
.pk-narration p {{ font-size:1.02rem; line-height:1.55; margin-bottom:.45rem; }}
</style>
"""


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
        # a row this frame changed: kept when presenter mode condenses the panel (player.js)
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
    too long for the screen (player.js fills in how many)."""
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
