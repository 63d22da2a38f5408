"""The bundled model's conversion cache: a cached load is the very model the GGUF load gives, a
broken cache is rebuilt, and a cache that cannot be written only costs speed."""

from __future__ import annotations

import os

import pytest
import torch
from safetensors.torch import save

from engine import model as M
from engine import model_cache


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
    monkeypatch.setattr(M, "_load_hf", lambda *a, **k: pytest.fail("the cache was not used"))
    _same_model(first, M.load_model(device="cpu", dtype="float32", keep_hf=True, progress=False))


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
