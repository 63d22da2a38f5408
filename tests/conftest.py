"""Shared fixtures. The real model loads once per session; nothing is ever downloaded."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def pytest_collection_modifyitems(items):
    """A test that reaches the real model or a browser through any fixture is marked so, whether
    or not its author remembered the marker: `make check` deselects by these marks, and a model
    test left unmarked once cost the fast gate minutes."""
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if "smollm" in names:
            item.add_marker(pytest.mark.model)
        if names & {"browser", "app_url"}:
            item.add_marker(pytest.mark.browser)


# before any test module loads torch: sleeping OpenMP workers (engine/__init__.py says why)
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


@pytest.fixture(scope="session")
def smollm():
    """SmolLM2-135M-Instruct on CPU in fp32, with its HF module kept so tests can compare
    against HF ``generate`` on the very same weights."""
    from engine.model import load_model

    return load_model(device="cpu", dtype="float32", keep_hf=True, progress=False)


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory, smollm):
    """A randomly initialised two-layer Llama saved as a local HF directory (with SmolLM2's
    tokenizer): exercises ``--model PATH`` and GQA shapes the real model does not have."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(smollm.tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=8,
        num_key_value_heads=2,
        max_position_embeddings=256,
        rope_theta=500.0,
        tie_word_embeddings=True,
        eos_token_id=smollm.config.eos_token_id,
        initializer_range=0.2,
    )
    path = tmp_path_factory.mktemp("tiny-llama")
    LlamaForCausalLM(config).save_pretrained(path)
    smollm.tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def app_url():
    """The app served on a free localhost port for the browser tests (log in test-artifacts/)."""
    from pathlib import Path

    from viz.serve import running_app

    artifacts = Path(__file__).resolve().parent.parent / "test-artifacts"
    artifacts.mkdir(exist_ok=True)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")  # one server per xdist worker
    with running_app(log=artifacts / f"streamlit-browser-tests-{worker}.log") as url:
        yield url


@pytest.fixture(scope="session")
def browser():
    """Debian's Chromium driven by Playwright (never a downloaded browser)."""
    from playwright.sync_api import sync_playwright

    from viz.serve import launch_chromium

    with sync_playwright() as p:
        b = launch_chromium(p)
        yield b
        b.close()


@pytest.fixture
def page(browser):
    """A fresh 1600x1000 page of the suite's one Chromium, closed after the test."""
    ctx = browser.new_context(viewport={"width": 1600, "height": 1000})
    pg = ctx.new_page()
    yield pg
    ctx.close()
