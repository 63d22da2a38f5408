"""The paper's numbers page: Fig. 2's memory categories and Fig. 13's concurrency, recomputed by
our own scheduler and allocators (``engine.simulate``, forward pass skipped) beside the values
the vLLM paper printed.

Only the paper's four token-state shares and its "about 4x" are typed in, as citations with
their source. Everything else on the page is folded from the engine's events by
``engine.accounting``. No torch.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import plotly.graph_objects as go
import streamlit as st

from engine import events as E
from engine import workload
from engine.accounting import CATEGORIES
from engine.simulate import DEFAULT_NUM_SLOTS, build_requests, run_policy
from viz import ui_text
from viz.style import CATEGORY_COLOURS, INK, MUTED, words

POLICIES = ("max", "pow2", "oracle", "paged")
WORKLOAD = "sharegpt"
BLOCK_SIZE = 16
MAX_MODEL_LEN = 2048
SEED = 0
REQUEST_CHOICES = (100, 300, 1000)
DEFAULT_REQUESTS = 300

#: Citations, not results: token-state share of KV memory (Kwon et al., SOSP 2023, Fig. 2).
PAPER_SOURCE = "Kwon et al., SOSP 2023, Fig. 2"
PAPER_TOKEN_SHARE = {"max": 0.204, "pow2": 0.268, "oracle": 0.382, "paged": 0.963}
#: The essay's table prints Pow2 as 32.0% and calls its source "Table 1".
ESSAY_POW2 = 0.320
#: Fig. 13: vLLM keeps about 4x as many requests in the batch as Orca (Max) on ShareGPT.
FIG13_SOURCE = "Kwon et al., SOSP 2023, Fig. 13"
FIG13_RATIO = 4

PAPER_NAMES = {"max": "Orca (Max)", "pow2": "Orca (Pow2)", "oracle": "Orca (Oracle)",
               "paged": "vLLM"}

TEXT = ui_text.load("paper_page")  # viz/text/paper_page.toml
NAMES = {lang: TEXT[lang]["policy_names"] for lang in TEXT}  # each policy's short name


@dataclass(frozen=True)
class PolicyRow:
    """One policy's run, reduced to what the page shows."""
    policy: str
    shares: dict[str, float]       # time-averaged share per accounting category
    mean_running: float
    steps: int
    preemptions: int


@dataclass(frozen=True)
class WorkloadFacts:
    requests: int
    mean_input: float
    mean_output: float
    num_slots: int


def workload_facts(n: int) -> WorkloadFacts:
    items = workload.generate(WORKLOAD, n, MAX_MODEL_LEN, SEED)
    num_slots = DEFAULT_NUM_SLOTS // BLOCK_SIZE * BLOCK_SIZE
    return WorkloadFacts(n, sum(i.input_len for i in items) / n,
                         sum(i.output_len for i in items) / n, num_slots)


def simulate_policy(policy: str, n: int, on_finished=None) -> PolicyRow:
    """Run ``n`` ShareGPT-shaped requests under ``policy`` (pure Python, forward skipped).
    ``on_finished(count)`` is called as requests finish, for a progress bar."""
    items = workload.generate(WORKLOAD, n, MAX_MODEL_LEN, SEED)
    sinks: tuple[Callable[[E.Event], None], ...] = ()
    if on_finished is not None:
        done = [0]

        def count(ev: E.Event) -> None:
            if ev.kind == E.Finished.kind:
                done[0] += 1
                on_finished(done[0])
        sinks = (count,)
    res = run_policy(policy, build_requests(items, MAX_MODEL_LEN),
                     DEFAULT_NUM_SLOTS // BLOCK_SIZE, BLOCK_SIZE, MAX_MODEL_LEN, sinks=sinks)
    return PolicyRow(policy, res.shares(), res.mean_running(), res.steps, res.num_preemptions)


@st.cache_data(show_spinner=False, max_entries=32)
def _cached_policy(policy: str, n: int, _i: int, _lang: str) -> PolicyRow:
    # The bar is made inside the cached call: on a cache hit Streamlit replays it, already
    # emptied, so a cached page shows no stale progress. Underscored arguments are not part
    # of the cache key: switching language must not rerun the simulation.
    i, t, name = _i, TEXT[_lang], NAMES[_lang][policy]
    bar = st.progress(0.0, text=t["progress"].format(name=name, i=i, total=len(POLICIES),
                                                     done=0, n=n))
    step = max(1, n // 50)

    def tick(done: int) -> None:
        if done % step == 0 or done == n:
            bar.progress(done / n, text=t["progress"].format(name=name, i=i,
                                                             total=len(POLICIES), done=done, n=n))
    row = simulate_policy(policy, n, tick)
    bar.empty()
    return row


def render(lang: str = "en") -> None:
    """Draw the page in ``lang`` ("en" or "zh")."""
    lang = lang if lang in TEXT else "en"
    t = TEXT[lang]
    st.header(t["title"])
    # Bound to the URL (?requests=1000), so a link opens the same simulation.
    n = st.segmented_control(t["requests"], REQUEST_CHOICES, default=DEFAULT_REQUESTS,
                             key="requests", required=True, bind="query-params",
                             format_func=lambda v: f"{v:,}") or DEFAULT_REQUESTS
    st.markdown(t["intro"].format(n=n))
    rows = [_cached_policy(p, n, i, lang) for i, p in enumerate(POLICIES, start=1)]
    facts = workload_facts(n)
    st.caption(t["workload"].format(inp=facts.mean_input, out=facts.mean_output,
                                    slots=facts.num_slots, bs=BLOCK_SIZE, mml=MAX_MODEL_LEN))
    _fig2(rows, lang, t)
    _essay_note(t)
    _concurrency(rows, facts, lang, t)
    st.subheader(t["diff_h"])
    st.markdown(t["diff"])


def _fig2(rows: list[PolicyRow], lang: str, t: dict) -> None:
    st.subheader(t["fig2_h"])
    st.plotly_chart(fig2_figure(rows, lang), theme=None, key="paper_fig2",
                    config={"displayModeBar": False})
    st.caption(t["fig2_cap"].format(src=PAPER_SOURCE))
    w = words(lang)
    table = [{t["table_policy"]: f"{NAMES[lang][r.policy]} · {PAPER_NAMES[r.policy]}",
              **{w["cat_short"][c]: f"{r.shares[c]:.1%}" for c in CATEGORIES},
              t["table_paper"]: f"{PAPER_TOKEN_SHARE[r.policy]:.1%}",
              t["mean_running"]: f"{r.mean_running:.1f}", t["steps"]: r.steps,
              t["preemptions"]: r.preemptions} for r in rows]
    st.dataframe(table, hide_index=True)


def fig2_figure(rows: list[PolicyRow], lang: str = "en", height: int = 440) -> go.Figure:
    """Stacked 100% columns, ours beside the paper's, per policy. The paper's column shows only
    the token-state share it printed; the rest is drawn as one pale block."""
    t, w = TEXT[lang], words(lang)
    groups = [NAMES[lang][r.policy] + f"<br><span style='font-size:11px;color:{MUTED}'>"
              f"{PAPER_NAMES[r.policy]}</span>" for r in rows]
    x = [sum(([g, g] for g in groups), []), [t["ours"], t["paper"]] * len(rows)]
    fig = go.Figure()
    for c in CATEGORIES:
        vals = []
        for r in rows:
            paper = PAPER_TOKEN_SHARE[r.policy] if c == "token_states" else None
            vals += [100 * r.shares[c], None if paper is None else 100 * paper]
        fig.add_bar(x=x, y=vals, name=w[c], marker_color=CATEGORY_COLOURS[c],
                    text=[_pct(v, c) for v in vals],
                    textposition="inside", insidetextanchor="middle",
                    textfont=dict(color="white" if c != "free" else INK, size=13),
                    hovertemplate=f"{w[c]}: %{{y:.1f}}%<extra></extra>")
    rest = sum(([None, 100 * (1 - PAPER_TOKEN_SHARE[r.policy])] for r in rows), [])
    fig.add_bar(x=x, y=rest, name=t["paper_rest"], marker=dict(
        color="white", line=dict(color=MUTED, width=1), pattern=dict(shape="/", fgcolor="#B8C0CC")),
        hovertemplate=f"{t['paper_rest']}: %{{y:.1f}}%<extra></extra>")
    fig.update_layout(barmode="stack", height=height, paper_bgcolor="white",
                      plot_bgcolor="white", margin=dict(l=10, r=10, t=10, b=10),
                      legend=dict(orientation="h", x=0, y=-0.22, traceorder="normal"),
                      dragmode=False, yaxis=dict(range=[0, 100], ticksuffix="%",
                                                 gridcolor="#EEF0F3", fixedrange=True,
                                                 automargin=True),
                      xaxis=dict(fixedrange=True, tickfont=dict(size=13)), bargap=0.25)
    return fig


def _pct(v: float | None, category: str) -> str:
    # Token states carry a decimal: the paper's values are quoted to one, and ours sit beside.
    if v is None or v < 5:
        return ""
    return f"{v:.1f}%" if category == "token_states" else f"{v:.0f}%"


def _essay_note(t: dict) -> None:
    st.info(f"**{t['essay_h']}.** " + t["essay"].format(
        essay=ESSAY_POW2, paper=PAPER_TOKEN_SHARE["pow2"], src=PAPER_SOURCE))


def _concurrency(rows: list[PolicyRow], facts: WorkloadFacts, lang: str, t: dict) -> None:
    st.subheader(t["conc_h"])
    by = {r.policy: r for r in rows}
    paged = by["paged"].mean_running
    cols = st.columns(len(rows) - 1)
    for col, r in zip(cols, [r for r in rows if r.policy != "paged"], strict=True):
        col.metric(t["ratio_label"].format(name=NAMES[lang][r.policy]),
                   f"{paged / r.mean_running:.1f}x" if r.mean_running else "—")
    st.plotly_chart(concurrency_figure(rows, lang), theme=None, key="paper_conc",
                    config={"displayModeBar": False})
    st.markdown(t["conc"].format(slots=facts.num_slots, ratio=paged / by["max"].mean_running,
                                 paged=paged, max=by["max"].mean_running, fig13=FIG13_RATIO,
                                 src=FIG13_SOURCE))


def concurrency_figure(rows: list[PolicyRow], lang: str = "en", height: int = 300) -> go.Figure:
    """Mean requests running per policy at equal KV bytes."""
    t = TEXT[lang]
    colours = ["#B7642A"] * (len(rows) - 1) + ["#2F62C8"]
    fig = go.Figure(go.Bar(x=[NAMES[lang][r.policy] for r in rows],
                           y=[r.mean_running for r in rows], marker_color=colours,
                           text=[f"{r.mean_running:.1f}" for r in rows], textposition="outside",
                           textfont=dict(size=14), cliponaxis=False,
                           hovertemplate="%{x}: %{y:.1f}<extra></extra>"))
    fig.update_layout(height=height, paper_bgcolor="white", plot_bgcolor="white",
                      margin=dict(l=10, r=10, t=30, b=10), dragmode=False,
                      yaxis=dict(title=t["conc_axis"], gridcolor="#EEF0F3", fixedrange=True,
                                 automargin=True),
                      xaxis=dict(fixedrange=True, tickfont=dict(size=13), automargin=True))
    return fig
