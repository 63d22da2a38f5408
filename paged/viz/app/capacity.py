"""The KV capacity calculator page: ``render(lang="en")`` draws it with Streamlit calls.

All arithmetic lives in :mod:`paged.engine.sim.capacity`; this module only gathers inputs and lays out
results. It never imports torch. Bad input (an unreadable file, a zero block size) shows one
``st.error`` line in the page's language and stops the page, never a traceback: the form's
fields are text the page checks itself, and a model file's error is worded from its code
(``InvalidConfigError.code``, see ``error_line``), not the engine's English.

Resource limits: model files arrive by upload (config.json at most 1 MiB; a GGUF's first
8 MiB, of which only the header and metadata are parsed). A server path is offered only while
the app listens on localhost alone, and is read the same bounded way, regular files only
(see :mod:`paged.viz.app.model_files`).
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections import OrderedDict

import plotly.graph_objects as go
import streamlit as st

from paged.engine.core.allocators import MAX_BLOCK_SIZE
from paged.engine.errors import InvalidConfigError
from paged.engine.sim.capacity import (
    MAX_BUDGET_GIB,
    MAX_VALUES,
    PRESETS,
    CapacityReport,
    GiB,
    ModelShape,
    block_table_row_bytes,
    blocks_for,
    build_report,
    format_bytes,
    preset,
)
from paged.viz import safe, ui_text
from paged.viz.app import model_files
from paged.viz.app.controls import file_uploader
from paged.viz.data import bf16_accuracy
from paged.viz.render.style import INK, MUTED

TEXT = ui_text.load("capacity_page")  # paged/viz/text/capacity_page.toml
DTYPES = ("fp32", "fp16", "bf16", "fp8")


def render(lang: str = "en") -> None:
    """Draw the calculator. ``lang`` is ``"en"`` or ``"zh"`` (anything else falls back to en)."""
    t = TEXT.get(lang, TEXT["en"])
    st.header(t["title"])
    st.caption(t["intro"])
    # the settings are drawn on every run, whatever the model source says: a widget missing
    # from one run loses its value, and a bad upload must not reset the user's block size and lists
    top, below = st.container(), st.container()
    with below:
        try:
            settings, bad = _settings(t), None
        except InvalidConfigError as e:
            settings, bad = None, e
    try:
        with top:
            shape = _pick_model(t, lang)
        if shape is None:
            return
        if bad is not None:
            raise bad
        report = build_report(shape, **settings)  # type: ignore[arg-type]
    except InvalidConfigError as e:
        st.error(safe.md_text(error_line(e, t)))
        return
    _unit_metrics(report, t)
    if st.session_state.get("capacity_dtype") == "bf16":
        st.info(bf16_note(report, t))
    _request_table(report, t)
    _block_table(report, t)
    _concurrency(report, t)
    _essay_note(t)


def _pick_model(t: dict, lang: str) -> ModelShape | None:
    kinds = {"preset": t["preset"], "config": t["config"], "gguf": t["gguf"]}
    c1, c2, c3 = st.columns([2, 3, 1])
    kind = c1.radio(t["source"], list(kinds), format_func=kinds.get, key="capacity_source")
    dtype = c3.selectbox(
        t["dtype"],
        (None, *DTYPES),
        key="capacity_dtype",
        format_func=lambda d: t["model_default"] if d is None else d,
    )
    if kind == "preset":
        return preset(c2.selectbox(t["preset"], list(PRESETS), key="capacity_preset"), dtype)
    with c2:
        got = _model_file(kind, ui_text.load("safe")[lang], lang)
    if got is None:
        return None
    data, name = got
    return _read_shape(kind, data, name, dtype)


def error_line(e: InvalidConfigError, t: dict) -> str:
    """The line the page shows for ``e``: its code's text in the page's language (``t``), the
    values filled in; the message itself when it has no code (the page's own lines are raised
    already worded, and an engine error the form cannot reach keeps its English)."""
    template = t["file_errors"].get(e.code or "")
    if template is None:
        return str(e)
    params = dict(e.params)
    if "errno" in params:  # an OS error: its reason from our table, not the C library's English
        reasons = t["os_errors"]
        params["reason"] = reasons.get(params["errno"], reasons["other"]).format(**params)
    return template.format(**params)


#: Shapes (or errors) read from model files, by content: every rerun of the page (each widget
#: change) read the file again, and a crafted 8 MB GGUF header costs ~3 s of CPU to parse. An
#: error is kept as its parts (message, code, params), not the exception: its traceback holds
#: the frames that held the file's bytes.
_READ: OrderedDict[tuple, ModelShape | tuple[str, str | None, dict]] = OrderedDict()
_READ_LOCK = threading.Lock()
_READ_KEEP = 8


def _read_shape(kind: str, data: bytes, name: str, dtype: str | None) -> ModelShape:
    key = (kind, hashlib.sha256(data).hexdigest(), name, dtype)
    with _READ_LOCK:
        got = _READ.get(key)
    if got is None:
        try:
            got = (model_files.gguf_shape if kind == "gguf" else model_files.config_shape)(
                data, name, dtype
            )
        except InvalidConfigError as e:
            got = (str(e), e.code, e.params)
        with _READ_LOCK:
            _READ[key] = got
            while len(_READ) > _READ_KEEP:
                _READ.popitem(last=False)
    if isinstance(got, tuple):
        message, code, params = got
        raise InvalidConfigError(message, code, **params)
    return got


def _model_file(kind: str, s: dict, lang: str) -> tuple[bytes, str] | None:
    """The model file's bytes (bounded) and a name for errors: an upload, or a server path
    when the app listens on localhost only (see viz.app.model_files for the bounds)."""
    limit = model_files.GGUF_MAX_BYTES if kind == "gguf" else model_files.CONFIG_MAX_BYTES
    mb = max(1, limit >> 20)
    if kind == "gguf":
        up = file_uploader(
            s["gguf_upload"].format(mb=mb),
            key="capacity_gguf_upload",
            lang=lang,
            max_mb=mb,
            # the uploader counts a MB as 10**6 bytes: `head -c 8M` (8 MiB) would be refused
            help=s["gguf_help"].format(head_bytes=mb * 1_000_000),
        )
    else:
        up = file_uploader(
            s["config_upload"], type=["json"], key="capacity_config_upload", lang=lang, max_mb=mb
        )
    path = ""
    if model_files.server_paths_allowed(_server_address()):
        path = st.text_input(s["local_path"], key=f"capacity_{kind}_path").strip()
    if up is not None:
        if up.size > limit and kind != "gguf":
            raise InvalidConfigError(s["too_big"].format(name=up.name, mb=mb))
        return up.getvalue()[:limit], up.name
    if path:
        return model_files.read_local(path, limit), path
    st.info(s["need_file"])
    return None


def _server_address() -> str | None:
    """The address the server listens on (``server.address``; unset means every interface)."""
    return st.get_option("server.address")


def _settings(t: dict) -> dict:
    # text fields, checked here, each refusing a bad value in one line in the page's language:
    # a number_input refuses a value past its bound in Streamlit's own English ("value must be
    # ≤ 65536"), or by silently keeping the previous one (10**16 would leave the results as they
    # were, saying nothing)
    c = st.columns(4)
    block = c[0].text_input(
        t["block"],
        "16",
        key="capacity_block",
        max_chars=MAX_NUMBER_CHARS,
        help=t["len_help"].format(most=MAX_BLOCK_SIZE),
    )
    budget = c[1].text_input(
        t["budget"],
        "40",
        key="capacity_budget",
        max_chars=MAX_NUMBER_CHARS,
        help=t["budget_help"].format(least=MIN_BUDGET_GIB, most=MAX_BUDGET_GIB),
    )
    bound = t["len_help"].format(most=MAX_INPUT)
    max_len = c[2].text_input(
        t["max_len"], "8192", key="capacity_max_len", max_chars=MAX_NUMBER_CHARS, help=bound
    )
    mean_len = c[3].text_input(
        t["mean_len"], "3000", key="capacity_mean", max_chars=MAX_NUMBER_CHARS, help=bound
    )
    c2 = st.columns(2)
    lengths = c2[0].text_input(
        t["lengths"], "2048,8192,32768", key="capacity_lengths", max_chars=MAX_LIST_CHARS
    )
    batches = c2[1].text_input(
        t["batches"], "1,8,32", key="capacity_batches", max_chars=MAX_LIST_CHARS
    )
    most, mean = _int_field(max_len, t["max_len"], t), _int_field(mean_len, t["mean_len"], t)
    if mean > most:  # the engine says so too, in English only: this is the page's own line
        raise InvalidConfigError(t["mean_over_max"].format(mean=mean, max_len=most))
    return {
        "block_size": _int_field(block, t["block"], t, MAX_BLOCK_SIZE),
        "budget_bytes": round(_budget_field(budget, t) * GiB),
        "max_len": most,
        "mean_len": mean,
        "lengths": _int_list(lengths, t["lengths"], t),
        "batches": _int_list(batches, t["batches"], t),
    }


#: The largest length or batch size the calculator takes (a 20-digit number is a typo, and
#: overflows the table it would be shown in).
MAX_INPUT = 10_000_000
#: Room for MAX_VALUES numbers of MAX_INPUT's width, with commas and spaces.
MAX_LIST_CHARS = MAX_VALUES * 10
#: The smallest KV budget the page takes, in GiB (about a megabyte).
MIN_BUDGET_GIB = 0.001


#: Room for one number written with thousands separators, and a typo's worth more.
MAX_NUMBER_CHARS = 40
_NUMBER = re.compile(r"\d{1,3}(,\d{3})+|\d+", re.ASCII)
_DECIMAL = re.compile(r"(\d{1,3}(,\d{3})+|\d+)(\.\d+)?|\.\d+", re.ASCII)


def _int_field(text: str, what: str, t: dict, most: int = MAX_INPUT) -> int:
    """One whole number from a text field ("8192" or "8,192"), from 1 to ``most``; else one
    line, in the page's language, naming the field and the bound."""
    digits = text.strip()
    value = int(digits.replace(",", "")) if _NUMBER.fullmatch(digits) else 0
    if not 0 < value <= most:
        raise InvalidConfigError(t["bad_number"].format(what=what, text=text[:40], most=most))
    return value


def _budget_field(text: str, t: dict) -> float:
    """The KV budget in GiB ("40", "0.5", "1,024"), from MIN_BUDGET_GIB to MAX_BUDGET_GIB;
    else one line in the page's language."""
    digits = text.strip()
    value = float(digits.replace(",", "")) if _DECIMAL.fullmatch(digits) else 0.0
    if not MIN_BUDGET_GIB <= value <= MAX_BUDGET_GIB:
        raise InvalidConfigError(
            t["bad_budget"].format(
                what=t["budget"], text=text[:40], least=MIN_BUDGET_GIB, most=MAX_BUDGET_GIB
            )
        )
    return value


def _int_list(text: str, what: str, t: dict) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in text.split(","))
    except ValueError:
        values = ()
    if not values or len(values) > MAX_VALUES or min(values) <= 0 or max(values) > MAX_INPUT:
        raise InvalidConfigError(
            t["bad_list"].format(what=what, text=text[:40], most=MAX_INPUT, count=MAX_VALUES)
        )
    return values


def _unit_metrics(r: CapacityReport, t: dict) -> None:
    s, b = r.shape, r.block_size
    shape = t["shape"].format(
        layers=s.num_layers, heads=s.num_kv_heads, dim=s.head_dim, bytes=s.dtype_bytes
    )
    st.subheader(f"{safe.md_text(s.name, 80)}: {shape}")
    values = [
        ("per_token_layer", s.bytes_per_token_per_layer),
        ("per_token", s.bytes_per_token),
        ("per_block_layer", s.bytes_per_block_per_layer(b)),
        ("per_block", s.bytes_per_block(b)),
    ]
    for col, (key, n) in zip(st.columns(4), values, strict=True):
        col.metric(t[key], format_bytes(n), help=f"{n:,} B")


def bf16_note(r: CapacityReport, t: dict) -> str:
    """What a bf16 KV cache buys over fp32 in this page's budget and block size, and what this
    engine's bf16 model measured against its fp32 run (``paged/viz/data/bf16_accuracy.json``)."""
    half, full = r.shape.with_dtype("bf16"), r.shape.with_dtype("fp32")
    b, budget = r.block_size, r.concurrency.budget_bytes
    measured = bf16_accuracy.quotes()
    return t["bf16_note"].format(
        ratio=f"{full.bytes_per_block(b) / half.bytes_per_block(b):g}",
        bs=b,
        bf16_block=format_bytes(half.bytes_per_block(b)),
        fp32_block=format_bytes(full.bytes_per_block(b)),
        budget=format_bytes(budget),
        bf16_blocks=f"{budget // half.bytes_per_block(b):,}",
        fp32_blocks=f"{budget // full.bytes_per_block(b):,}",
        matmul=t.get(f"matmul_{measured['bf16_matmul']}", "?"),
        **measured,
    )


def _request_table(r: CapacityReport, t: dict) -> None:
    st.markdown(f"**{t['requests_h']}**")
    windowed = r.shape.num_sliding_layers > 0 and r.shape.sliding_window is not None
    rows = [
        {
            t["length"]: row["length"],
            t["blocks"]: row["blocks"],
            # what a sliding-window layer holds: its window's blocks once the request outgrows it
            **({t["blocks_window"]: row["window_blocks"] or row["blocks"]} if windowed else {}),
            **{
                t["batch"].format(b=c["batch"]): round(c["bytes"] / GiB, 4) for c in row["by_batch"]
            },
        }
        for row in r.per_request_rows()
    ]
    st.dataframe(rows, hide_index=True)
    st.caption(t["requests_cap"])
    if beyond := r.lengths_beyond_context():
        st.caption(
            t["beyond"].format(
                lens=", ".join(f"{n:,}" for n in beyond), ctx=r.shape.max_position_embeddings
            )
        )


def _block_table(r: CapacityReport, t: dict) -> None:
    st.markdown(
        f"**{t['table_h']}** " + t["table_sub"].format(block=r.block_size, entry=r.entry_bytes)
    )
    st.dataframe(
        [
            {t["length"]: x["length"], t["entries"]: x["entries"], t["bytes"]: x["bytes"]}
            for x in r.block_table_rows()
        ],
        hide_index=True,
    )
    c = r.concurrency
    st.caption(
        t["table_cap"].format(
            entry=r.entry_bytes,
            max_len=c.max_len,
            bs=r.block_size,
            row_entries=blocks_for(c.max_len, r.block_size),
            row_bytes=format_bytes(block_table_row_bytes(c.max_len, r.block_size, r.entry_bytes)),
        )
    )


def _concurrency(r: CapacityReport, t: dict) -> None:
    c = r.concurrency
    st.markdown(f"**{t['conc_h']}** ({format_bytes(c.budget_bytes)})")
    m = st.columns(3)
    m[0].metric(t["prealloc"], c.prealloc_requests)
    m[1].metric(t["paged"], c.paged_requests)
    m[2].metric(t["ratio"], "—" if c.ratio is None else f"{c.ratio:.2f}x")
    st.plotly_chart(concurrency_figure(c, t), key="capacity_chart")
    st.caption(prealloc_caption(c, r.shape, t) + " " + paging_caption(c, r.shape, t))


def prealloc_caption(c, shape: ModelShape, t: dict) -> str:
    """What preallocation reserves per request: ``max_len`` tokens, less where a sliding window
    binds (the bytes count only the window there, so the sentence says so)."""
    w = shape.sliding_window
    if w is None or not shape.num_sliding_layers or c.max_len <= w:
        key = "pre_cap"
    else:
        key = (
            "pre_cap_window"
            if shape.num_sliding_layers < shape.num_layers
            else "pre_cap_window_all"
        )
    return t[key].format(
        max_len=c.max_len,
        pre=format_bytes(c.prealloc_bytes_per_request),
        window=w or 0,
        full=shape.num_layers - shape.num_sliding_layers,
        sliding=shape.num_sliding_layers,
    )


def paging_caption(c, shape: ModelShape, t: dict) -> str:
    """What paging holds for a request of the mean length."""
    return t[_conc_key(c, shape)].format(
        max_len=c.max_len,
        pre=format_bytes(c.prealloc_bytes_per_request),
        mean=c.mean_len,
        bs=c.block_size,
        blocks=c.paged_blocks_per_request,
        paged=format_bytes(c.paged_bytes_per_request),
        tail=c.paged_blocks_per_request * c.block_size - c.mean_len,
        wblocks=c.window_blocks_per_request,
        full=shape.num_layers - shape.num_sliding_layers,
        sliding=shape.num_sliding_layers,
    )


def concurrency_figure(c, t: dict) -> go.Figure:
    """Requests that fit, preallocated beside paged. Grey and ink, told apart by their labels:
    the hues belong to the accounting categories (viz.render.style), and red against green was both a
    second meaning for the hole's red and lost on a red-green colour-blind viewer."""
    fig = go.Figure(
        go.Bar(
            x=[t["prealloc"], t["paged"]],
            y=[c.prealloc_requests, c.paged_requests],
            text=[c.prealloc_requests, c.paged_requests],
            marker_color=[MUTED, INK],
        )
    )
    fig.update_layout(height=280, margin=dict(l=10, r=10, t=10, b=10))
    return fig


def _conc_key(c, shape: ModelShape) -> str:
    """The caption for how paging holds a mean request: a sliding window may cap some layers
    (Gemma-2's every other) or all of them (Mistral's), past which they hold only the window."""
    if c.window_blocks_per_request is None:
        return "conc_cap"
    return (
        "conc_cap_window" if shape.num_sliding_layers < shape.num_layers else "conc_cap_window_all"
    )


def _essay_note(t: dict) -> None:
    # Computed, not typed in: the note stays true if the arithmetic ever changes. Only the
    # essay's own figures ("about 40", 2.5x, 0.6 GB) are written in the text: they are quotes.
    st.info(f"**{t['essay_h']}** — " + t["essay"].format(**essay_values()))


def essay_values() -> dict:
    """The essay's setting (build_report's defaults) for Llama-2-70B, as the note states it."""
    r = build_report(preset("llama-2-70b"))
    c, first = r.concurrency, r.per_request_rows()[0]
    return {
        "budget": format_bytes(c.budget_bytes),
        "max_len": c.max_len,
        "mean": c.mean_len,
        "bs": c.block_size,
        "paged": c.paged_requests,
        "pre": c.prealloc_requests,
        "ratio": c.ratio,
        "length": first["length"],
        "request": f"{r.shape.bytes_per_request(first['length']) / GiB:g} GiB",
    }
