"""The stack page: each layer's number is recomputed here from the raw trace events (not from
the page's own fold), the page renders in both languages, a missing lesson or data file is one
line, and the FP8 accuracy file is checked like any input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from paged.engine.trace.io import RunHeader, read
from paged.viz.app.stack import layer_text
from paged.viz.data import fp8_accuracy
from paged.viz.fold import stack
from paged.viz.fold.tier_facts import mib
from paged.viz.safe import md_text

ROOT = Path(__file__).resolve().parents[2]
LESSONS = ROOT / "paged" / "lessons"


@pytest.fixture(scope="module")
def layers() -> dict[str, stack.Layer]:
    return {layer.key: layer for layer in stack.layers(LESSONS)}


def _events(lesson: str, run: str):
    return read(LESSONS / lesson / "trace.jsonl").runs[run]


def _config(lesson: str, run: str) -> RunHeader:
    return read(LESSONS / lesson / "trace.jsonl").run_header(run)


def test_every_layer_is_measured_from_its_lesson(layers):
    assert list(layers) == ["paged", "fp8", "offload", "prefix"]
    for layer in layers.values():
        assert not layer.problem, layer.problem
        assert (LESSONS / layer.lesson / "lesson.toml").is_file()


def test_prefix_caching_spares_the_tokens_its_cache_hits_say(layers):
    hits = [e for e in _events("shared-prompt", "paged") if e.kind == "cache_hit"]
    assert layers["prefix"].numbers["hit_tokens"] == sum(e.tokens_saved for e in hits) > 0
    assert layers["prefix"].numbers["hits"] == len(hits)


def test_fp8_buys_twice_the_blocks_in_the_same_bytes(layers):
    left, right = _config("fp8-twice", "bf16"), _config("fp8-twice", "fp8")
    assert right.num_blocks == 2 * left.num_blocks
    assert left.block_bytes == 2 * right.block_bytes
    assert left.num_blocks * left.block_bytes == right.num_blocks * right.block_bytes
    n = layers["fp8"].numbers
    assert (n["left_blocks"], n["right_blocks"], n["ratio"]) == (
        left.num_blocks,
        right.num_blocks,
        "2.0",
    )
    assert n["right_steps"] < n["left_steps"]
    assert float(n["right_mean"]) > float(n["left_mean"])


def test_offloading_spares_the_recompute_the_other_run_paid(layers):
    # recomputed K/V: each recompute victim's written slots, read from tokens_written events
    def recomputed(run: str) -> int:
        filled: dict[str, int] = {}
        out = 0
        swapped = set()
        for e in _events("recompute-or-swap", run):
            if e.kind == "tokens_written":
                filled[e.req] = filled.get(e.req, 0) + len(e.slots)
            elif e.kind == "swapped_out":
                swapped.add(e.req)
            elif e.kind == "preempted":
                if e.req in swapped:  # parked on the CPU tier: its K/V comes back as it was
                    swapped.discard(e.req)
                else:
                    out += filled.pop(e.req, 0)
        return out

    n = layers["offload"].numbers
    assert n["left_recomputed"] == recomputed("recompute") > 0
    assert n["right_recomputed"] == recomputed("swap")
    assert n["spared"] == n["left_recomputed"] - n["right_recomputed"] > 0
    moved = sum(
        len(e.block_map)
        for e in _events("recompute-or-swap", "swap")
        if e.kind in ("swapped_out", "swapped_in")
    )
    assert n["blocks_moved"] == moved > 0
    block_bytes = _config("recompute-or-swap", "swap").block_bytes
    assert n["bytes_moved"] == mib(moved * block_bytes)


def test_paging_runs_more_requests_at_once_than_preallocation(layers):
    def most_at_once(run: str) -> int:
        running: set[str] = set()
        peak = 0
        for e in _events("six-steps", run):
            if e.kind == "admitted":
                running.add(e.req)
            elif e.kind in ("preempted", "finished"):
                running.discard(e.req)
            elif e.kind == "step_end":
                peak = max(peak, len(running))
        return peak

    n = layers["paged"].numbers
    assert n["right_running"] == most_at_once("paged")
    assert n["left_running"] == most_at_once("max")
    assert n["right_running"] > n["left_running"]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_page_renders_each_layer_with_its_numbers_and_lesson_link(layers, lang):
    at = AppTest.from_string(
        f"from paged.viz.app.stack import render\nrender({lang!r})", default_timeout=120
    ).run()
    assert not at.exception, at.exception
    assert not at.error
    text = " ".join(m.value for m in at.markdown)
    for layer in layers.values():
        _, body = layer_text(layer, lang)
        assert body in text and "?" not in body
        assert f"lesson?lesson={layer.lesson}" in text
    assert [s.value for s in at.subheader] == [
        layer_text(layers[k], lang)[0] for k in ("prefix", "offload", "fp8", "paged")
    ]


def test_a_missing_lesson_is_one_line_on_its_layer(tmp_path, monkeypatch):
    lessons = tmp_path / "lessons"
    for name in ("six-steps", "fp8-twice", "shared-prompt"):
        shutil.copytree(LESSONS / name, lessons / name)
    monkeypatch.setenv("PAGED_KV_LESSONS", str(lessons))
    (lessons / "shared-prompt" / "trace.jsonl").write_text("garbage\n")
    at = AppTest.from_string("from paged.viz.app.stack import render\nrender('en')").run()
    assert not at.exception, at.exception
    text = " ".join(m.value for m in at.markdown)
    assert text.count("cannot be read") == 2  # no offloading lesson, a corrupt prefix trace


def test_trace_strings_reach_the_page_as_text_never_markup():
    hostile = "![x](http://evil.example/a.png) <b>**bold**</b>"
    layer = stack.Layer("fp8", "fp8-twice", {"left_dtype": hostile})
    _, body = layer_text(layer, "en")
    assert md_text(hostile) in body and "<b>**bold" not in body
    assert "\\?" in body  # the numbers it lacks show as "?"


# --- the FP8 accuracy data file ----------------------------------------------------------------

GOOD = {
    "source": "bench/fp8_accuracy.py",
    "prompts": 12,
    "new_tokens": 48,
    "scale_granularity": "per tensor",
    "results": {
        "fp8_e4m3": {"top1_agreement": 0.95, "mean_common_prefix": 17.8},
        "fp8_e5m2": {"top1_agreement": 0.91, "mean_common_prefix": 12.0},
    },
}


def test_the_shipped_accuracy_file_reads():
    d = fp8_accuracy.load()
    assert set(d.results) == set(fp8_accuracy.FORMATS)
    assert all(0 <= r.top1_agreement <= 1 for r in d.results.values())
    # each language's narration quotes the scaling in its own words
    assert d.scale_granularity["en"] != d.scale_granularity["zh"]


def test_a_single_granularity_text_stands_for_every_language():
    d = fp8_accuracy.parse(GOOD)
    assert d.scale_granularity == {"en": "per tensor", "zh": "per tensor"}


def _bad(edit) -> dict:
    doc = json.loads(json.dumps(GOOD))
    edit(doc)
    return doc


@pytest.mark.parametrize(
    "doc, words",
    [
        ([], "not a JSON object"),
        (_bad(lambda d: d.pop("prompts")), "prompts"),
        (_bad(lambda d: d.update(prompts=True)), "prompts"),
        (_bad(lambda d: d.update(new_tokens=float("nan"))), "new_tokens"),
        (_bad(lambda d: d.update(scale_granularity="x" * 500)), "scale_granularity"),
        (_bad(lambda d: d.update(scale_granularity={"en": "per tensor"})), "en, zh"),
        (_bad(lambda d: d.update(scale_granularity={"en": "a", "zh": 7})), "en, zh"),
        (_bad(lambda d: d["results"].pop("fp8_e5m2")), "fp8_e5m2"),
        (_bad(lambda d: d["results"]["fp8_e4m3"].update(top1_agreement=1.5)), "top1"),
        (_bad(lambda d: d["results"]["fp8_e4m3"].update(mean_common_prefix=49)), "prefix"),
        (_bad(lambda d: d.update(results="all good")), "results"),
    ],
)
def test_a_bad_accuracy_file_is_one_line(doc, words):
    with pytest.raises(fp8_accuracy.Fp8DataError, match=words) as info:
        fp8_accuracy.parse(doc)
    assert "\n" not in str(info.value)


def test_an_unusable_accuracy_file_leaves_question_marks_not_a_crash(tmp_path):
    assert fp8_accuracy.narration_facts(tmp_path / "none.json") is None
    big = tmp_path / "big.json"
    big.write_text(" " * (fp8_accuracy.MAX_BYTES + 1))
    with pytest.raises(fp8_accuracy.Fp8DataError, match="larger"):
        fp8_accuracy.load(big)
    (tmp_path / "bad.json").write_bytes(b"\xff\xfe{")
    assert fp8_accuracy.narration_facts(tmp_path / "bad.json") is None
    good = tmp_path / "good.json"
    good.write_text(json.dumps(GOOD))
    facts = fp8_accuracy.narration_facts(good)
    assert facts is not None and facts.e4m3_top1 == "95.0%" and facts.e5m2_prefix == "12.0"


def test_the_accuracy_file_says_its_reference_threads_and_spread():
    """The figures are measured against an fp32 arena, not the lesson's bf16 side, at a stated
    thread count; the spread over the thread counts measured holds the figure shown."""
    doc = json.loads(json.dumps(GOOD))
    doc.update(
        reference="float32",
        threads=1,
        spread_threads=[1, 2],
        spread={
            "fp8_e4m3": {"top1_agreement": [0.94, 0.95], "mean_common_prefix": [16.8, 17.8]},
            "fp8_e5m2": {"top1_agreement": [0.91, 0.92], "mean_common_prefix": [12.0, 12.0]},
        },
    )
    d = fp8_accuracy.parse(doc)
    assert d.reference == "float32" and d.threads == 1 and d.spread_threads == (1, 2)
    assert d.spread is not None and d.spread["fp8_e4m3"][0].top1_agreement == 0.94
    bad = json.loads(json.dumps(doc))
    bad["spread"]["fp8_e4m3"]["top1_agreement"] = [0.96, 0.97]  # does not hold 0.95
    with pytest.raises(fp8_accuracy.Fp8DataError, match="hold the shipped"):
        fp8_accuracy.parse(bad)
    with pytest.raises(fp8_accuracy.Fp8DataError, match="reference"):
        fp8_accuracy.parse({**doc, "reference": "<b>fp64</b>"})
    shipped = fp8_accuracy.load()
    assert shipped.reference == "float32" and shipped.threads >= 1 and shipped.spread is not None
    facts = fp8_accuracy.narration_facts()
    assert facts is not None and facts.reference == "fp32"
    lo, hi = shipped.spread["fp8_e4m3"]
    assert lo.top1_agreement <= shipped.results["fp8_e4m3"].top1_agreement <= hi.top1_agreement
