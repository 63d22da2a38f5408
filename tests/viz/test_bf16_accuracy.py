"""The bf16 model's measured accuracy reaches the capacity and stack pages from the file
bench/bf16_accuracy.py writes, never from their texts; a bad file is one line, and the pages
show ``?`` for what it cannot say. The blocks a bf16 arena gains over fp32 are recomputed here
from the shapes and headers, not read from the pages' code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from paged.engine.sim.capacity import GiB, preset
from paged.engine.trace.io import read
from paged.viz.data import bf16_accuracy
from paged.viz.fold import stack

LESSONS = Path(__file__).resolve().parents[2] / "paged" / "lessons"

GOOD = {
    "source": "bench/bf16_accuracy.py",
    "prompts": 12,
    "new_tokens": 48,
    "equal": 8,
    "mean_common_prefix": 36.25,
    "top1_agreement": 0.9931,
    "positions": 576,
    "threads": 1,
    "matmul": "vdpbf16ps",
    "measured": "2026-12-07",
}


def _edit(**changes) -> dict:
    doc = {**GOOD, **changes}
    return {k: v for k, v in doc.items() if v is not _GONE}


_GONE = object()


def test_the_shipped_file_reads_and_is_quoted_as_measured():
    d = bf16_accuracy.load()
    assert 0 <= d.equal <= d.prompts and 0 <= d.mean_common_prefix <= d.new_tokens
    assert d.positions <= d.prompts * d.new_tokens and d.matmul in bf16_accuracy.MATMULS
    q = bf16_accuracy.quotes()
    assert q["bf16_top1"] == f"{100 * d.top1_agreement:.2f}%"
    assert q["bf16_prefix"] == f"{d.mean_common_prefix:.1f}"
    assert (q["bf16_equal"], q["bf16_prompts"]) == (str(d.equal), str(d.prompts))


@pytest.mark.parametrize(
    "doc, words",
    [
        ([1, 2], "not a JSON object"),
        (_edit(prompts="12"), "prompts"),
        (_edit(equal=True), "equal"),
        (_edit(equal=12.5), "equal"),
        (_edit(equal=13), "equal"),  # more identical prompts than prompts
        (_edit(top1_agreement="99%"), "top1_agreement"),
        (_edit(top1_agreement=1.5), "top1_agreement"),
        (_edit(top1_agreement=float("nan")), "top1_agreement"),
        (_edit(mean_common_prefix=49), "mean_common_prefix"),
        (_edit(positions=12 * 48 + 1), "positions"),
        (_edit(threads=0), "threads"),
        (_edit(matmul="<b>fast</b>"), "matmul"),
        (_edit(measured="2026-13-40"), "measured"),
        (_edit(measured="yesterday"), "measured"),
        (_edit(source="x" * 500), "source"),
        *[(_edit(**{key: _GONE}), key) for key in GOOD],
    ],
)
def test_a_bad_file_is_one_line_naming_the_field(doc, words):
    with pytest.raises(bf16_accuracy.Bf16DataError, match=words) as info:
        bf16_accuracy.parse(doc)
    assert "\n" not in str(info.value)


def test_an_unusable_file_is_one_line_and_every_figure_a_question_mark(tmp_path):
    big = tmp_path / "big.json"
    big.write_text(" " * (bf16_accuracy.FILE.max_bytes + 1))
    (tmp_path / "bytes.json").write_bytes(b"\xff\xfe{")
    (tmp_path / "deep.json").write_text("[" * 5_000)
    for name, words in [
        ("none.json", "no bf16 accuracy data"),
        ("big.json", "larger than 64 KiB"),
        ("bytes.json", "unreadable"),
        ("deep.json", "unreadable"),
    ]:
        with pytest.raises(bf16_accuracy.Bf16DataError, match=words) as info:
            bf16_accuracy.load(tmp_path / name)
        assert "\n" not in str(info.value)
        assert set(bf16_accuracy.quotes(tmp_path / name).values()) == {"?"}


# --- the capacity page ---------------------------------------------------------------------


def _capacity_note(lang: str, dtype: str = "bf16") -> str:
    at = AppTest.from_string(
        f"from paged.viz.app.capacity import render\nrender(lang={lang!r})", default_timeout=60
    ).run()
    at.selectbox(key="capacity_dtype").set_value(dtype).run()
    assert not at.exception and not at.error
    return " ".join(i.value for i in at.info if "bf16" in i.value)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_capacity_page_says_bf16_holds_twice_fp32s_blocks_at_the_measured_accuracy(lang):
    note = _capacity_note(lang)
    # the page's defaults: Llama-2-70B, a 40 GiB budget, block 16
    half, full = preset("llama-2-70b", "bf16"), preset("llama-2-70b", "fp32")
    bf16_blocks, fp32_blocks = (
        40 * GiB // half.bytes_per_block(16),
        40 * GiB // full.bytes_per_block(16),
    )
    assert bf16_blocks == 2 * fp32_blocks
    assert "2×" in note or "2 倍" in note
    assert f"{bf16_blocks:,}" in note and f"{fp32_blocks:,}" in note
    assert "--dtype bfloat16" in note and "bench/bf16_accuracy.py" in note
    d = bf16_accuracy.load()
    for figure in (
        f"{100 * d.top1_agreement:.2f}%",
        f"{d.mean_common_prefix:.1f}",
        f"{d.equal}",
        f"{d.prompts}",
        d.measured.isoformat(),
    ):
        assert figure in note


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_capacity_page_quotes_whatever_the_file_says(lang, tmp_path, monkeypatch):
    other = tmp_path / "bf16_accuracy.json"
    other.write_text(json.dumps(_edit(equal=3, top1_agreement=0.5, mean_common_prefix=7.5)))
    monkeypatch.setattr(bf16_accuracy, "DATA", other)
    note = _capacity_note(lang)
    assert "50.00%" in note and "7.5" in note
    assert ("3 of 12 prompts" if lang == "en" else "12 个提示词中有 3 个") in note
    other.write_text(json.dumps(_edit(top1_agreement=2)))
    note = _capacity_note(lang)
    assert "?" in note and "%" not in note  # no figure from a bad file, and no traceback


def test_capacity_page_says_nothing_of_bf16_when_fp32_is_chosen():
    assert _capacity_note("en", "fp32") == ""


# --- the stack page ------------------------------------------------------------------------


def test_stack_page_says_a_bf16_arena_holds_twice_fp32s_blocks():
    run = read(LESSONS / "fp8-twice" / "trace.jsonl").run_header("bf16")
    assert run.kv_cache_dtype == "bfloat16"
    arena = run.num_slots // run.block_size * run.block_bytes
    n = {layer.key: layer for layer in stack.layers(LESSONS)}["fp8"].numbers
    assert n["bf16_blocks"] == arena // run.block_bytes
    assert n["fp32_blocks"] == arena // (2 * run.block_bytes) > 0
    assert n["bf16_ratio"] == "2.0"
    assert {k: n[k] for k in bf16_accuracy.KEYS} == bf16_accuracy.quotes()
