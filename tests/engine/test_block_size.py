"""The block-size lesson: its traces say what the essay says (small blocks waste little, large
blocks need few table entries), re-recording reproduces them, and the page renders."""

from __future__ import annotations

import importlib.util
import re
import shutil
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from paged.engine.trace import io as T
from paged.viz import ui_text
from paged.viz.fold import sweep

ROOT = Path(__file__).resolve().parents[2]
LESSON = ROOT / "paged" / "lessons" / "block-size"


@pytest.fixture(scope="module")
def spec() -> sweep.SweepSpec:
    return sweep.load_spec("block-size")


@pytest.fixture(scope="module")
def results(spec) -> list[sweep.SizeResult]:
    return sweep.load_results(spec)


def test_lesson_covers_the_essays_block_sizes(spec, results):
    assert spec.block_sizes == (1, 8, 16, 32, 128, 256)
    assert [r.block_size for r in results] == list(spec.block_sizes)
    assert len({r.num_slots for r in results}) == 1  # equal KV bytes at every size


def test_traces_come_from_the_real_model(results):
    assert all(r.forward == "model" and "SmolLM2" in r.model for r in results)


def test_never_used_share_grows_with_block_size(results):
    internal = [r.held_shares["internal"] for r in results]
    assert internal[0] == 0.0
    assert internal == sorted(internal) and internal[-1] > 0.3


def test_block_table_shrinks_with_block_size(results):
    entries = [r.mean_entries for r in results]
    assert entries == sorted(entries, reverse=True)
    assert results[0].mean_entries == pytest.approx(results[0].mean_kv_slots)
    assert results[-1].max_entries == 1


def test_a_finished_request_wastes_less_than_one_block(results):
    for r in results:
        tail = r.mean_entries * r.block_size - r.mean_kv_slots
        assert 0 <= tail <= r.block_size - 1


def test_a_running_requests_tail_is_smaller_than_a_finished_ones(results):
    """The tail section says so, and quotes the running figure beside the chart of the
    finished one."""
    for r in results[1:]:
        tail = r.mean_entries * r.block_size - r.mean_kv_slots
        assert 0 < r.internal_per_request < tail, r.block_size


def test_every_size_ran_without_waiting_so_only_the_cut_differs(results):
    assert {r.steps for r in results} == {results[0].steps}
    assert all(r.preemptions == 0 and r.requests == 8 for r in results)


def test_dry_rerecording_reproduces_every_event(tmp_path, spec):
    rec = _load_record_script()
    assert rec.main(["--forward", "skip", "--out", str(tmp_path)]) == 0
    for bs in spec.block_sizes:
        shipped, again = T.read(spec.trace_path(bs)), T.read(tmp_path / f"b{bs}.jsonl")
        assert [e.to_dict() for e in again.runs["paged"]] == [
            e.to_dict() for e in shipped.runs["paged"]
        ], f"block size {bs}"


def _load_record_script():
    s = importlib.util.spec_from_file_location("block_size_record", LESSON / "record.py")
    mod = importlib.util.module_from_spec(s)
    s.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_narration_quotes_only_numbers_the_traces_have(spec, results, lang):
    ctx = sweep.narration_context(results)
    for text in [spec.intro[lang]] + [s.text[lang] for s in spec.sections]:
        body, missing = sweep.fill(text, ctx, lang)
        assert not missing and "{" not in body


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_intro_quotes_the_true_length_and_the_kv_slots_apart(spec, results, lang):
    """The intro quotes a request's mean length (prompt plus output) and, apart from it, the K/V
    slots a request fills: one fewer (the last token's K/V is never computed)."""
    events = T.read(spec.trace_path(spec.block_sizes[0])).runs["paged"]
    prompt = {e.req: e.prompt_len for e in events if e.kind == "request_arrived"}
    done = [e for e in events if e.kind == "finished"]
    length = sum(prompt[e.req] + e.num_generated for e in done) / len(done)
    slots = sum(e.final_len for e in done) / len(done)
    assert slots < length
    body, _ = sweep.fill(spec.intro[lang], sweep.narration_context(results), lang)
    assert f"{length:.1f}" in body and f"{slots:.1f}" in body, body


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("n", [3, None])
def test_intro_counts_the_runs_it_draws(spec, results, lang, n):
    shown = results[:n]
    body, _ = sweep.fill(spec.intro[lang], sweep.narration_context(shown), lang)
    assert re.search(rf"(?<!\d){len(shown)} ?(times|遍)", body), body


def test_chinese_lines_join_without_gaps_but_keep_latin_words_apart():
    body, _ = sweep.fill("一个\n请求，最后一个 block\n里空着\n{n} 个", {"n": 3}, "zh")
    assert body == "一个请求，最后一个 block 里空着 3 个"


def _page(lang: str) -> AppTest:
    return AppTest.from_string(
        f"from paged.viz.app.block_size import render\nrender({lang!r})", default_timeout=60
    ).run()


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_page_renders_without_exception(lang):
    at = _page(lang)
    assert not at.exception, at.exception
    assert not at.error
    assert len(at.get("plotly_chart")) == 4
    assert any("GPU" in i.value for i in at.info)  # kernel time: not measured here


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_page_shows_a_kernel_table_where_one_was_measured(tmp_path, monkeypatch, lang):
    lessons = tmp_path / "lessons"
    shutil.copytree(LESSON, lessons / "block-size")
    table = lessons / "block-size" / "kernels" / "b16" / "kernels.csv"
    table.parent.mkdir(parents=True)
    table.write_text("batch,context,kv_mib,paged_us,contiguous_us\n8,2048,8.0,41.5,30.2\n")
    monkeypatch.setenv("PAGED_KV_LESSONS", str(lessons))
    at = _page(lang)
    assert not at.exception and not at.info
    row = at.dataframe[0].value.iloc[0]
    cols = ui_text.load("block_size_page")[lang]["kernel_cols"]  # its headers were English only
    assert (row[cols["paged"]], row[cols["contiguous"]], row[cols["bs"]]) == (41.5, 30.2, 16)


def test_missing_trace_is_one_error_line_not_a_traceback(tmp_path, monkeypatch):
    lessons = tmp_path / "lessons"
    shutil.copytree(LESSON, lessons / "block-size")
    (lessons / "block-size" / "traces" / "b32.jsonl").unlink()
    monkeypatch.setenv("PAGED_KV_LESSONS", str(lessons))
    at = _page("en")
    assert not at.exception
    assert "record.py" in at.error[0].value
