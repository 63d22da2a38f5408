"""Shared fixtures. The real model loads once per session; nothing is ever downloaded."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

#: Debian's browser, never a downloaded one (viz.export.serve drives it; kept here so that
#: collecting the tests imports no viewer module).
CHROMIUM = "/usr/bin/chromium"

# xdist workers already use every core between them: one torch (OpenMP) thread per worker and
# per model subprocess a test starts, set before anything imports torch. Two threads per
# worker on two busy cores took ~15 % more CPU for the same model tests (sync and handoffs).
_workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _workers > 1 and "OMP_NUM_THREADS" not in os.environ:
    os.environ["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // _workers))


#: A test's folder says what it needs: everything under tests/browser/ drives Chromium, everything
#: under tests/model/ loads the real model, everything under tests/peer/ needs the real vLLM
#: (`make peer`'s own virtualenv).
FOLDER_MARKS = {
    "browser": pytest.mark.browser,
    "model": pytest.mark.model,
    "peer": pytest.mark.peer,
}


def pytest_collection_modifyitems(items):
    """A test that reaches the real model or a browser through any fixture is marked so, whether
    or not its author remembered the marker: `make check` deselects by these marks, and a model
    test left unmarked once cost the fast gate minutes."""
    for item in items:
        folder = item.path.parent.name
        if folder in FOLDER_MARKS:
            item.add_marker(FOLDER_MARKS[folder])
        names = set(getattr(item, "fixturenames", ()))
        if names & {"smollm", "smollm_hf"}:
            item.add_marker(pytest.mark.model)
        if names & {"browser", "app_url"}:
            item.add_marker(pytest.mark.browser)
    items[:] = heaviest_files_first(items)


def pytest_runtest_setup(item):
    """A browser test on a machine without Debian's Chromium is skipped where a developer runs
    it, and fails under CI (``CI`` set): there a skipped browser test would hide a missing
    install step behind a green run."""
    if item.get_closest_marker("browser") and not Path(CHROMIUM).exists():
        why = f"needs Debian's chromium at {CHROMIUM} (`make browser` installs it)"
        if os.environ.get("CI"):
            pytest.fail(f"{why}; under CI a missing browser fails the run", pytrace=False)
        pytest.skip(why)


#: How long a test tends to take by its marks: the load test (half a minute of 20 tabs), then
#: browser sessions (real-engine publishers, tab waits), then real-model runs, then the rest.
WEIGHT = {"load": 3, "browser": 2, "model": 1}


def heaviest_files_first(items: list) -> list:
    """The collection reordered so that files holding long tests come first, each file's tests
    kept together and in their order. Why: xdist hands each worker a contiguous share of this
    list and idle workers steal from the end of the others' queues, so long tests left near
    the end of the list ran alone while the other core idled (a ~12 s tail of two 2-core runs);
    short ones at the end are what stealing evens out."""

    def file(item) -> str:
        return item.nodeid.split("::")[0]

    weight: dict[str, int] = {}
    for item in items:
        w = max((v for mark, v in WEIGHT.items() if item.get_closest_marker(mark)), default=0)
        weight[file(item)] = max(weight.get(file(item), 0), w)
    return sorted(items, key=lambda item: -weight[file(item)])  # stable: order kept within


# before any test module loads torch: briefly spinning, then sleeping OpenMP workers
# (paged/engine/threads.py says why); test processes and the model processes they start inherit them
from paged.engine.threads import configure_openmp  # noqa: E402

configure_openmp()


@pytest.fixture(scope="session")
def smollm():
    """SmolLM2-135M-Instruct on CPU in fp32, loaded as users load it (from the conversion
    cache, without transformers, once the cache exists). HF's outputs are stored test data
    (tests/data/golden_hf.json); ``smollm_hf`` is for the one live HF check."""
    from paged.engine.model.loader import load_model

    return load_model(device="cpu", dtype="float32", progress=False)


@pytest.fixture(scope="session")
def smollm_hf():
    """The same model through transformers, with its HF module kept (``hf_model``): for a test
    that runs HF ``generate`` on the very same weights."""
    from paged.engine.model.loader import load_model

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
def _app():
    """The app served on a free localhost port for the browser tests (log in test-artifacts/):
    its URL and its server's pid."""
    from pathlib import Path

    from tests.app_server import running_app

    artifacts = Path(__file__).resolve().parent.parent / "test-artifacts"
    artifacts.mkdir(exist_ok=True)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")  # one server per xdist worker
    info: dict = {}
    with running_app(log=artifacts / f"streamlit-browser-tests-{worker}.log", info=info) as url:
        yield url, info["pid"]


@pytest.fixture(scope="session")
def app_url(_app):
    """The shared app's base URL."""
    return _app[0]


@pytest.fixture(scope="session")
def app_pid(_app, app_url):
    """The pid of the shared app's server, for a test that watches its memory."""
    return _app[1]


@pytest.fixture(scope="session")
def playwright_driver():
    """The worker's one sync Playwright (a second one in the same process would collide with
    the first one's event loop), for tests that launch a browser of their own."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        yield p


@pytest.fixture(scope="session")
def browser(playwright_driver):
    """Debian's Chromium driven by Playwright (never a downloaded browser)."""
    from paged.viz.export.serve import launch_chromium

    b = launch_chromium(playwright_driver)
    yield b
    b.close()


@pytest.fixture(scope="session")
def _tab(browser):
    """The one tab the browser tests take turns in (per xdist worker). A new tab costs a
    renderer process and a cold parse of Streamlit's bundle, about 3 s of CPU per app page;
    navigating a tab that is already open costs about 1 s, and each navigation still opens a
    new app session (the page reads its URL afresh)."""
    ctx = browser.new_context(viewport={"width": 1600, "height": 1000})
    holder = {"page": ctx.new_page()}
    yield ctx, holder
    ctx.close()


@pytest.fixture
def page(_tab):
    """The shared tab at 1600x1000 (``set_viewport_size`` for another size). Listeners a test
    adds with ``page.on`` are removed afterwards, and the tab goes to about:blank, which ends
    the test's app session as closing a tab would."""
    ctx, holder = _tab
    if holder["page"].is_closed():
        holder["page"] = ctx.new_page()
    pg = holder["page"]
    pg.bring_to_front()  # a tab behind another gets few animation frames: waits would crawl
    pg.set_viewport_size({"width": 1600, "height": 1000})
    added: list[tuple[str, object]] = []

    def on(event, handler):
        added.append((event, handler))
        return type(pg).on(pg, event, handler)

    pg.on = on  # type: ignore[method-assign]
    yield pg
    del pg.on
    for event, handler in added:
        pg.remove_listener(event, handler)
    try:
        pg.mouse.up()  # a test that failed mid-drag leaves no button held
        pg.goto("about:blank")
    except Exception:  # a crashed or wedged tab: the next test opens a new one
        with contextlib.suppress(Exception):
            pg.close()
