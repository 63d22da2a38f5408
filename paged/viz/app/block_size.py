"""The block-size page: one workload recorded at six block sizes, folded by the accounting,
drawn as the trade between empty slots and block-table entries (the essay's §3.3, §5.2, §5.3).

The text and the traces live in ``paged/lessons/block-size/`` (see ``paged.viz.fold.sweep``); this module only
lays them out. No torch.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import plotly.graph_objects as go
import streamlit as st

from paged.engine.sim.capacity import block_table_bytes
from paged.viz import ui_text
from paged.viz.fold import sweep
from paged.viz.render.style import CATEGORY_COLOURS, CATEGORY_MARKS, INK, MUTED, words

LESSON = "block-size"

UI = ui_text.load("block_size_page")  # paged/viz/text/block_size_page.toml
LABEL_PX = 12  # the smallest label a chart of this page writes
KERNEL_CMD = "bench/kernel_speed.py --block-size N --out paged/lessons/block-size/kernels/bN"
LAYOUT = dict(
    paper_bgcolor="white",
    plot_bgcolor="white",
    dragmode=False,
    margin=dict(l=10, r=10, t=30, b=10),
    font=dict(color=INK),
)


def lessons_root() -> Path:
    """Where lessons live; ``PAGED_KV_LESSONS`` points tests at a folder of their own."""
    return Path(os.environ.get("PAGED_KV_LESSONS", sweep.LESSONS_DIR))


@st.cache_data(show_spinner=False, max_entries=8)
def _results(name: str, root: str, digests: tuple[str, ...]) -> list[sweep.SizeResult]:
    # digests: the traces' mtimes and sizes, so a re-recorded trace is folded again
    return sweep.load_results(sweep.load_spec(name, Path(root)))


def _digests(spec: sweep.SweepSpec) -> tuple[str, ...]:
    out = []
    for bs in spec.block_sizes:
        p = spec.trace_path(bs)
        out.append(f"{p.stat().st_mtime_ns}:{p.stat().st_size}" if p.is_file() else "-")
    return tuple(out)


def render(lang: str = "en") -> None:
    """Draw the page in ``lang`` ("en" or "zh")."""
    lang = lang if lang in UI else "en"
    u = UI[lang]
    root = lessons_root()
    try:
        spec = sweep.load_spec(LESSON, root)
        results = _results(LESSON, str(root), _digests(spec))
    except sweep.SweepError as e:
        st.error(str(e))
        return
    ctx = sweep.narration_context(results)
    st.header(spec.title[lang])
    _paragraph(spec.intro[lang], ctx, lang, u)
    _provenance(results[0], spec, u)
    for section in spec.sections:
        st.subheader(section.title[lang])
        text_col, chart_col = st.columns([2, 3], gap="large")
        with text_col:
            _paragraph(section.text[lang], ctx, lang, u)
        with chart_col:
            _chart(section.chart, spec, results, lang, u)
    with st.expander(u["table"]):
        st.dataframe(_table(results, u), hide_index=True)


def _paragraph(text: str, ctx: dict, lang: str, u: dict) -> None:
    body, missing = sweep.fill(text, ctx, lang)
    st.markdown(body)
    if missing:
        st.caption(u["missing"].format(names=", ".join(sorted(set(missing)))))


def _provenance(r: sweep.SizeResult, spec: sweep.SweepSpec, u: dict) -> None:
    if r.forward == "model":
        st.caption(u["recorded"].format(model=r.model, device=r.device, cmd=spec.record))
    else:
        st.caption(u["dry"].format(cmd=spec.record))


def _chart(
    kind: str, spec: sweep.SweepSpec, results: list[sweep.SizeResult], lang: str, u: dict
) -> None:
    figures = {
        "composition": composition_figure,
        "tradeoff": tradeoff_figure,
        "long_table": long_table_figure,
        "tail": tail_figure,
    }
    if kind == "kernel":
        _kernel(spec, u)
    elif kind in figures:
        st.plotly_chart(
            figures[kind](results, lang),
            theme=None,
            key=f"bs_{kind}",
            config={"displayModeBar": False},
        )


def _x(results: list[sweep.SizeResult]) -> list[float]:
    # log2 of the size: a linear axis would squash 1..32 together, and categories evenly
    # spaced would hide that 64 is missing between 32 and 128; on log2 each doubling is one
    # step and the gap shows
    return [math.log2(r.block_size) for r in results]


def _xaxis(results: list[sweep.SizeResult], u: dict) -> dict:
    """The block-size axis: log2 positions labelled with the sizes themselves."""
    xs = _x(results)
    return dict(
        title=u["block_size"],
        tickvals=xs,
        ticktext=[str(r.block_size) for r in results],
        range=[min(xs) - 0.7, max(xs) + 0.7],
        showgrid=False,
        zeroline=False,
        fixedrange=True,
        automargin=True,
    )


def composition_figure(
    results: list[sweep.SizeResult], lang: str = "en", height: int = 340
) -> go.Figure:
    """Token states, reserved and never-used slots as shares of what requests held."""
    u, w = UI[lang], words(lang)
    fig = go.Figure()
    for c in sweep.HELD:
        vals = [100 * r.held_shares[c] for r in results]
        fig.add_bar(
            x=_x(results),
            y=vals,
            name=w[c],
            marker_color=CATEGORY_COLOURS[c],
            text=[f"{v:.0f}%" if v >= 6 else "" for v in vals],
            textposition="inside",
            textfont=dict(color=CATEGORY_MARKS[c], size=13),
            hovertemplate=f"{w[c]}: %{{y:.1f}}%<extra></extra>",
        )
    fig.update_layout(
        **LAYOUT,
        barmode="stack",
        height=height,
        # a share too thin for its label at 12 px has none (hover and the table keep it):
        # squeezed into its sliver, "6%" was drawn at 6.8 px
        uniformtext=dict(minsize=LABEL_PX, mode="hide"),
        legend=dict(orientation="h", x=0, y=-0.25, traceorder="normal"),
        xaxis=_xaxis(results, u),
        yaxis=dict(
            title=u["held"],
            range=[0, 100],
            ticksuffix="%",
            gridcolor="#EEF0F3",
            fixedrange=True,
            automargin=True,
        ),
    )
    return fig


def tradeoff_figure(
    results: list[sweep.SizeResult], lang: str = "en", height: int = 340
) -> go.Figure:
    """Two curves over block size: the empty share of held slots rises, table entries fall.
    The empty share is drawn as what it is made of, reserved and never-used slots stacked in
    their categories' colours (as in the composition chart), its total written on top."""
    u, w = UI[lang], words(lang)
    empty = [100 * (1 - r.held_shares["token_states"]) for r in results]
    fig = go.Figure()
    for c in ("reservation", "internal"):
        top = c == "internal"
        fig.add_scatter(
            x=_x(results),
            y=[100 * r.held_shares[c] for r in results],
            name=w[c],
            stackgroup="empty",
            mode="lines+text" if top else "lines",
            line=dict(color=CATEGORY_COLOURS[c], width=2),
            fillcolor=CATEGORY_COLOURS[c],
            text=[f"{v:.0f}%" for v in empty] if top else None,
            textposition="top left",
            textfont=dict(color=INK),
            hovertemplate=f"{w[c]}: %{{y:.1f}}%<extra></extra>",
        )
    fig.add_scatter(
        x=_x(results),
        y=[r.mean_entries for r in results],
        name=u["entries"],
        yaxis="y2",
        mode="lines+markers+text",
        line=dict(color=INK, width=3, dash="dot"),
        text=[f"{r.mean_entries:.1f}" for r in results],
        textposition="top right",
        hovertemplate="%{y:.1f}<extra></extra>",
    )
    fig.update_layout(
        **LAYOUT,
        height=height,
        legend=dict(orientation="h", x=0, y=-0.25, traceorder="normal"),
        xaxis=_xaxis(results, u),
        yaxis=dict(
            title=u["empty"],
            range=[0, 100],
            ticksuffix="%",
            gridcolor="#EEF0F3",
            fixedrange=True,
            automargin=True,
        ),
        yaxis2=dict(
            title=u["entries"],
            type="log",
            overlaying="y",
            side="right",
            showgrid=False,
            tickvals=[1, 10, 100, 1000],
            fixedrange=True,
            range=[-0.15, 2.6],  # log10 units: room for the labels
            automargin=True,
        ),
    )
    return fig


def long_table_figure(
    results: list[sweep.SizeResult], lang: str = "en", height: int = 320
) -> go.Figure:
    """Block-table bytes for the essay's batch of long requests, per block size (arithmetic
    from ``paged.engine.sim.capacity``, not from the traces: our requests are short)."""
    u = UI[lang]
    mib = [
        sweep.LONG_BATCH * block_table_bytes(sweep.LONG_LEN, r.block_size) / 2**20 for r in results
    ]
    fig = go.Figure(
        go.Bar(
            x=_x(results),
            y=mib,
            marker_color=INK,
            text=[_mib(v) for v in mib],
            textposition="outside",
            constraintext="none",  # shrunk to a narrow bar's width, a label fell to 9 px
            cliponaxis=False,
            hovertemplate="%{y:,.2f} MiB<extra></extra>",
        )
    )
    fig.update_layout(
        **{**LAYOUT, "margin": dict(l=10, r=10, t=40, b=10)},
        height=height,
        title=dict(
            text=u["long_bytes"].format(n=sweep.LONG_BATCH, len=f"{sweep.LONG_LEN:,}"),
            font=dict(size=14),
            x=0,
        ),
        xaxis=_xaxis(results, u),
        yaxis=dict(title="MiB", gridcolor="#EEF0F3", fixedrange=True, automargin=True),
    )
    return fig


def _mib(v: float) -> str:
    # the number over its unit: as narrow as a bar one doubling wide
    return f"{v:.1f}<br>MiB" if v >= 1 else f"{v * 1024:.0f}<br>KiB"


def tail_figure(results: list[sweep.SizeResult], lang: str = "en", height: int = 320) -> go.Figure:
    """Mean never-used slots per request at its end, against the bound block size − 1."""
    u = UI[lang]
    tails = [r.mean_tail for r in results]
    fig = go.Figure()
    fig.add_bar(
        x=_x(results),
        y=tails,
        name=u["tail"],
        marker_color=CATEGORY_COLOURS["internal"],
        text=[f"{t:.1f}" for t in tails],
        textposition="outside",
        constraintext="none",
        cliponaxis=False,
        hovertemplate="%{y:.1f}<extra></extra>",
    )
    fig.add_scatter(
        x=_x(results),
        y=[r.block_size - 1 for r in results],
        name=u["bound"],
        mode="lines+markers",
        line=dict(color=MUTED, dash="dash", width=2),
        hovertemplate="%{y}<extra></extra>",
    )
    fig.update_layout(
        **LAYOUT,
        height=height,
        legend=dict(orientation="h", x=0, y=-0.25),
        xaxis=_xaxis(results, u),
        yaxis=dict(title=u["tail_axis"], gridcolor="#EEF0F3", fixedrange=True, automargin=True),
    )
    return fig


def _kernel(spec: sweep.SweepSpec, u: dict) -> None:
    rows = sweep.kernel_rows(spec)
    if not rows:
        st.info(u["no_kernel"].format(cmd=KERNEL_CMD))
        return
    c = u["kernel_cols"]
    st.dataframe(
        [
            {
                c["bs"]: r.block_size,
                c["batch"]: r.batch,
                c["context"]: r.context,
                c["paged"]: round(r.paged_us, 1),
                c["contiguous"]: round(r.contiguous_us, 1),
            }
            for r in rows
        ],
        hide_index=True,
    )
    st.caption(u["kernel_cap"])


def _table(results: list[sweep.SizeResult], u: dict) -> list[dict]:
    c = u["cols"]
    return [
        {
            c["bs"]: r.block_size,
            c["tokens"]: f"{r.held_shares['token_states']:.1%}",
            c["reserved"]: f"{r.held_shares['reservation']:.1%}",
            c["internal"]: f"{r.held_shares['internal']:.1%}",
            c["per_req"]: round(r.internal_per_request, 1),
            c["entries"]: round(r.mean_entries, 2),
            c["bytes"]: round(r.table_bytes),
            c["tail"]: round(r.mean_tail, 1),
            c["peak"]: r.peak_held,
            c["steps"]: r.steps,
            c["preempt"]: r.preemptions,
        }
        for r in results
    ]
