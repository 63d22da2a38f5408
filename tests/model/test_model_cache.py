"""The bundled model's conversion cache: a cached load is the very model the GGUF load gives, a
broken cache is rebuilt, and a cache that cannot be written only costs speed."""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path

import pytest
import torch
from safetensors.torch import save

from paged.engine.model import cache as model_cache
from paged.engine.model import loader as M
from paged.engine.model.tokenizer import Tokenizer
from paged.engine.model.weights import ModelWeights
from paged.engine.sim.workload import DEMO_PROMPTS

ROOT = Path(__file__).resolve().parents[2]
LESSONS = ROOT / "paged" / "lessons"
GOLDEN = ROOT / "tests" / "data" / "golden_hf.json"


def _same_model(a, b) -> None:
    sa, sb = a.hf_model.state_dict(), b.hf_model.state_dict()
    assert sa.keys() == sb.keys()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    text = "<|im_start|>user\nHow many legs does a spider have? 你好<|im_end|>\n"
    assert a.tokenizer.encode(text) == b.tokenizer.encode(text)
    assert a.tokenizer.chat_template == b.tokenizer.chat_template
    assert a.tokenizer.eos_token_id == b.tokenizer.eos_token_id
    assert a.weights.config == b.weights.config


def _count_gguf_loads(monkeypatch) -> list[int]:
    calls: list[int] = []
    real = M._load_hf

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(M, "_load_hf", counting)
    return calls


@pytest.mark.model
def test_a_cached_load_is_the_gguf_load_bit_for_bit_and_a_broken_cache_is_rebuilt(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("PAGED_MODEL_CACHE", str(tmp_path))
    folder = model_cache.cache_dir(M.default_model_dir() / M.DEFAULT_GGUF)
    assert folder is not None and folder.parent == tmp_path
    # a broken cache where this model's belongs: a truncated safetensors file (its header
    # promises tensors the file does not hold) beside a config that names this model
    folder.mkdir()
    whole = save({"t": torch.zeros(1000)})
    (folder / model_cache.WEIGHTS).write_bytes(whole[: len(whole) // 2])
    (folder / "config.json").write_text('{"model_type": "llama"}')
    calls = _count_gguf_loads(monkeypatch)
    first = M.load_model(device="cpu", dtype="float32", keep_hf=True, progress=False)
    assert "unreadable" in capsys.readouterr().err
    assert len(calls) == 1  # the broken cache fell back to the GGUF file,
    assert list(tmp_path.iterdir()) == [folder]  # and was written whole in its place, no temp
    assert (folder / model_cache.WEIGHTS).stat().st_size > len(whole)
    source = json.loads((folder / model_cache.SOURCE).read_text())  # names the file it converts
    assert source["path"] == str((M.default_model_dir() / M.DEFAULT_GGUF).resolve())
    monkeypatch.setattr(M, "_load_hf", lambda *a, **k: pytest.fail("the cache was not used"))
    _same_model(first, M.load_model(device="cpu", dtype="float32", keep_hf=True, progress=False))
    # without the HF module, a load reads the cache's own files and never goes through
    # transformers: the same weights, bit for bit
    assert (folder / model_cache.FACTS).is_file()
    monkeypatch.setattr(model_cache, "load_cached", lambda *a: pytest.fail("not the light load"))
    light = M.load_model(device="cpu", dtype="float32", progress=False)
    assert light.hf_model is None and isinstance(light.tokenizer, Tokenizer)
    _same_weights(first.weights, light.weights)
    # a cache whose facts are damaged is loaded through transformers and gets them again
    (folder / model_cache.FACTS).write_text("{")
    assert model_cache.load_light(folder, torch.float32) is None
    monkeypatch.undo()
    monkeypatch.setenv("PAGED_MODEL_CACHE", str(tmp_path))
    again = M.load_model(device="cpu", dtype="float32", progress=False)
    _same_weights(first.weights, again.weights)
    assert model_cache.load_light(folder, torch.float32) is not None


def _same_weights(a: ModelWeights, b: ModelWeights) -> None:
    assert a.config == b.config and a.rope_scaling == b.rope_scaling
    pairs = [(a.embed, b.embed), (a.final_norm, b.final_norm), (a.lm_head, b.lm_head)]
    pairs += [(a.inv_freq, b.inv_freq)]
    for la, lb in zip(a.layers, b.layers, strict=True):
        pairs += [(getattr(la, f), getattr(lb, f)) for f in vars(la)]
    assert all(x.dtype == y.dtype and torch.equal(x, y) for x, y in pairs)
    assert a.tied == b.tied  # tied stays tied: one tensor, as the forward's memory assumes


def test_the_light_tokenizer_gives_transformers_ids_and_text(smollm, tmp_path):
    """engine.model.tokenizer against transformers' own tokenizer over the same cached files: the
    same ids for every lesson prompt, the demo prompts and awkward text, the same chat
    prompts, and the same text back for the stored HF outputs and for ids around the
    special tokens."""
    from transformers import AutoTokenizer

    ours = smollm.tokenizer
    if not isinstance(ours, Tokenizer):  # PAGED_MODEL_CACHE=off: transformers' own, saved
        ours.save_pretrained(tmp_path)
        ours = Tokenizer.from_folder(tmp_path)
    hf = AutoTokenizer.from_pretrained(ours.folder)
    texts = [*DEMO_PROMPTS, *_lesson_prompts()]
    texts += [
        "",
        " ",
        "  leading and trailing  ",
        "tabs\tand\nnew\r\nlines",
        "你好，世界！",
        "emoji 🙂🚀 and ümlauts",
        "<|im_start|>user\nhi<|im_end|>",
        "a" * 300,
    ]
    for text in texts:
        assert ours.encode(text) == hf.encode(text), text
        assert ours.encode(text, add_special_tokens=False) == hf.encode(
            text, add_special_tokens=False
        )
    chats = [[{"role": "user", "content": t}] for t in texts[:6]]
    chats.append([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}])
    for msgs in chats:
        for gen in (True, False):
            want = hf.apply_chat_template(msgs, add_generation_prompt=gen, tokenize=False)
            assert ours.apply_chat_template(msgs, add_generation_prompt=gen, tokenize=False) == want
            assert ours.apply_chat_template(msgs, add_generation_prompt=gen) == hf.encode(
                want, add_special_tokens=False
            )
    golden = json.loads(GOLDEN.read_text(encoding="utf-8"))
    outputs = [
        ids for case in ("exact", "preemption", "prefix") for ids in golden[case]["hf_token_ids"]
    ]
    outputs += [list(range(0, 20)), [1, 2, 3, 49151, 0, 198, 2]]
    for ids in outputs:
        for skip in (True, False):
            assert ours.decode(ids, skip_special_tokens=skip) == hf.decode(
                ids, skip_special_tokens=skip
            )
    assert ours.eos_token_id == hf.eos_token_id and len(ours) == len(hf)


def _lesson_prompts() -> list[str]:
    out = []
    for f in sorted(LESSONS.glob("*/scenario.toml")):
        out += [
            r["prompt"]
            for r in tomllib.loads(f.read_text("utf-8")).get("requests", [])
            if "prompt" in r
        ]
    assert len(out) >= 10
    return out


def test_the_cache_key_follows_the_source_file_and_can_be_switched_off(tmp_path, monkeypatch):
    src = tmp_path / "m.gguf"
    src.write_bytes(b"one")
    monkeypatch.setenv("PAGED_MODEL_CACHE", str(tmp_path / "cache"))
    a = model_cache.cache_dir(src)
    src.write_bytes(b"two!")
    os.utime(src, ns=(1, 1))
    b = model_cache.cache_dir(src)
    assert a is not None and b is not None and a != b and a.parent == b.parent
    monkeypatch.setenv("PAGED_MODEL_CACHE", "off")
    assert model_cache.cache_dir(src) is None


def test_an_unwritable_cache_costs_one_line_and_nothing_else(tmp_path, capsys):
    class Config:
        def to_dict(self):
            raise AssertionError("never reached: the folder cannot be made")

    class Model:
        dtype = torch.float32
        config = Config()

    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    model_cache.store(blocker / "cache", tokenizer=None, hf=Model())
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "model cache not written" in err
    assert blocker.read_text() == "not a folder"


@pytest.mark.parametrize("error", [MemoryError(), PermissionError(13, "Permission denied")])
def test_a_load_that_fails_for_the_machines_reasons_keeps_the_cache(
    tmp_path, monkeypatch, capsys, error
):
    """Only a cache whose content is broken is removed: running out of memory or lacking
    permission says nothing about the files, and a shared cache is too costly to lose for it."""
    import transformers

    folder = tmp_path / "m-0123456789abcdef"
    folder.mkdir()
    (folder / model_cache.WEIGHTS).write_bytes(b"whatever the weights are")

    def fail(*a, **k):
        raise error

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", fail)
    if isinstance(error, MemoryError):
        with pytest.raises(MemoryError):
            model_cache.load_cached(folder, torch.float32)
    else:
        assert model_cache.load_cached(folder, torch.float32) is None
        assert "not readable" in capsys.readouterr().err
    assert (folder / model_cache.WEIGHTS).read_bytes() == b"whatever the weights are"
    # content that is broken is still removed, to be rebuilt
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: 1 / 0)
    assert model_cache.load_cached(folder, torch.float32) is None
    assert not folder.exists()


def test_caches_whose_source_file_is_gone_or_changed_are_pruned(tmp_path):
    """Each cache is about 520 MB and every clone or upgrade left one behind (8 here, 4 GB)."""
    root = tmp_path / "cache"
    kept, moved, edited = tmp_path / "a.gguf", tmp_path / "b.gguf", tmp_path / "c.gguf"
    for f in (kept, moved, edited):
        f.write_bytes(b"gguf")
    stamps = {f: model_cache._stamp(f) for f in (kept, moved, edited)}
    for name, f in (("a-1", kept), ("b-2", moved), ("c-3", edited)):
        (root / name).mkdir(parents=True)
        (root / name / model_cache.SOURCE).write_text(json.dumps(stamps[f]))
    (root / "old-4").mkdir()  # written before source.json existed: left alone
    (root / "odd-5").mkdir()
    (root / "odd-5" / model_cache.SOURCE).write_text("{not json")  # not ours to judge
    moved.unlink()
    edited.write_bytes(b"gguf, another version")
    assert sorted(p.name for p in model_cache.prune(root)) == ["b-2", "c-3"]
    assert sorted(p.name for p in root.iterdir()) == ["a-1", "odd-5", "old-4"]
