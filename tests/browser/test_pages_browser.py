"""Every page of the app, in English and Chinese, in a real browser: it draws its title and
shows no exception, no error box and no traceback.

Starts the app with ``tests.app_server.running_app`` and drives Debian's Chromium with Playwright.
A failing page leaves a screenshot in ``test-artifacts/``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from paged.engine.trace.io import read
from paged.viz import ui_text
from paged.viz.app import capacity as capacity_page
from paged.viz.app import paper as paper_page
from paged.viz.app import stack as stack_page
from paged.viz.app import watch as watch_page
from paged.viz.export import standalone
from paged.viz.export.serve import wait_idle, wait_ready
from paged.viz.fold import sweep
from paged.viz.fold.kernel.frames import fold_kernel, load_kernel_spec
from paged.viz.fold.lesson_folder import load_spec

pytestmark = [
    pytest.mark.browser,
]
ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"

# url path -> title per language (the paper page opens from its shipped results)
PAGES = {
    "": load_spec("six-steps").title,
    "capacity": {lang: capacity_page.TEXT[lang]["title"] for lang in ("en", "zh")},
    "paper": {lang: paper_page.text(lang)["title"] for lang in ("en", "zh")},
    "block-size": sweep.load_spec("block-size").title,
    "watch": {lang: watch_page.TEXT[lang]["title"] for lang in ("en", "zh")},
}  # and the stack page, opened once per language by the test of its links (below)
STACK_TITLE = {lang: stack_page.UI[lang]["title"] for lang in ("en", "zh")}


def _open(page, url: str, timeout_ms: int = 240_000) -> None:
    """Open ``url`` and wait until its script run is over. No page reruns itself after its
    first run (watched with a MutationObserver on the run state), so idle once is settled."""
    page.goto(url, wait_until="domcontentloaded")
    wait_idle(page, timeout_ms)


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("path", list(PAGES))
def test_page_renders_without_errors(app_url, page, path, lang):
    sep = "&" if "?" in path else "?"
    page.set_viewport_size({"width": 1440, "height": 900})
    _open(page, f"{app_url}/{path}{sep}lang={lang}")
    _assert_drawn(page, PAGES[path][lang], (path.split("?")[0] or "lesson") + f"-{lang}.png")


def _assert_drawn(page, title: str, shot: str) -> None:
    """The page shows ``title`` and no exception, error box or traceback (else a screenshot
    named ``shot`` in test-artifacts/)."""
    try:
        page.get_by_text(title, exact=False).first.wait_for(timeout=30_000)
        assert page.locator('[data-testid="stException"]').count() == 0
        assert page.locator('[data-testid="stAlertContentError"]').count() == 0
        assert "Traceback" not in page.inner_text("body")
    except Exception:
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / shot), full_page=True)
        raise


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_each_stack_layer_links_to_its_lesson(app_url, page, lang):
    """The stack page renders without errors (as every page above), and following a layer's
    link opens that lesson (the lesson page reads ?lesson=)."""
    page.set_viewport_size({"width": 1440, "height": 900})
    _open(page, f"{app_url}/stack?lang={lang}")
    _assert_drawn(page, STACK_TITLE[lang], f"stack-{lang}.png")
    link = page.locator("a[href*='lesson=fp8-twice']").first
    href = link.get_attribute("href")
    assert href is not None
    _open(page, f"{app_url}/{href}")
    page.get_by_text(load_spec("fp8-twice").title[lang], exact=False).first.wait_for(timeout=30_000)


def _change_page(page, title: str, arrived: str) -> None:
    """Click the top bar's link to the page titled ``title`` and wait until the address says
    ``arrived`` (a JS predicate on ``location``) and the page's run is over."""
    page.locator("[data-testid='stTopNavLink']").filter(has_text=title).click()
    page.wait_for_function(f"() => {arrived}", timeout=60_000)
    wait_idle(page)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_page_change_is_one_history_entry_in_either_language(app_url, page, lang):
    """From the lesson (its player keeps lesson and frame in the address) to the lab (which
    keeps its scenario there) and back again: one press of Back per change returns to exactly
    the address left. In Chinese each change was two entries (the server wrote ?lang=zh back
    after Streamlit dropped it), so Back first landed on a bare `/lab?lang=zh`; in English the
    lab's own ?scenario= write did the same. (Counted by Back, not history.length: Chromium
    keeps 50 entries, which the shared tab reaches.)"""
    titles = ui_text.load("pages")[lang]
    zh = "/[?&]lang=zh(&|$)/.test(location.search)" if lang == "zh" else "true"
    _open(page, f"{app_url}/?lang={lang}" if lang == "zh" else app_url)
    page.wait_for_function(f"() => /[?&]frame=0(&|$)/.test(location.search) && {zh}")
    lesson_url = page.evaluate("location.href")
    _change_page(
        page,
        titles["lab"],
        f"location.pathname === '/lab' && {zh} && /[?&]scenario=/.test(location.search)",
    )
    lab_url = page.evaluate("location.href")
    _change_page(
        page,
        titles["lesson"],
        f"location.pathname === '/' && {zh} && /[?&]frame=0(&|$)/.test(location.search)",
    )
    page.go_back()
    assert page.evaluate("location.href") == lab_url
    # the lab drawn again (its address written) before the next Back
    record = ui_text.load("lab")[lang]["record"]
    page.get_by_role("button", name=record).wait_for(timeout=60_000)
    wait_idle(page)
    page.go_back()
    assert page.evaluate("location.href") == lesson_url


# Every word in Latin letters that a person can see on the page, with the text it stands in.
# Left out: code (code, pre, kbd: commands, paths, identifiers), Streamlit's icon ligatures
# ("keyboard_arrow_right" is drawn as an arrow), the skip link shown only on keyboard focus,
# text under a zero-size box (the uploader's own English, drawn at size 0 on a Chinese page),
# and words inside a token that is an identifier or a name by its shape: with a digit
# (SmolLM2, bf16, top-1), an underscore, a dot or slash between letters, "://", "--", or a
# file's extension or a path (.jsonl, /metrics).
LATIN_JS = r"""() => { const out = {};
  const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n = walk.nextNode(); n; n = walk.nextNode()) {
    const el = n.parentElement;
    if (!el || el.closest('script, style, noscript, code, pre, kbd, [data-testid=stIconMaterial],'
                          + ' [data-testid=stSkipToContent]')) continue;
    if (el.closest('[hidden], [aria-hidden=true]:not(label *)')) continue;
    const cs = getComputedStyle(el);
    if (cs.display === 'none' || cs.visibility === 'hidden') continue;
    const range = document.createRange(); range.selectNodeContents(n);
    if (![...range.getClientRects()].some((r) => r.width > 1 && r.height > 1)) continue;
    const text = n.textContent;
    for (const tok of text.split(/[\s\u2e80-\uffff,;!?()\[\]"'“”‘’]+/)) {
      if (/\d|_|[A-Za-z][./][A-Za-z]|:\/\/|^--?[a-z]|^[./][a-z]+$/.test(tok)) continue;
      for (const w of tok.match(/[A-Za-z]+/g) || []) out[w] = out[w] || text.trim().slice(0, 60);
    }
  }
  return out; }"""
# Names a Chinese page writes in Latin letters: products, models, data sets, formats, the papers,
# their authors and venues, methods (GQA, StreamingLLM, Flash-Decoding), hardware (CUDA, TLB),
# a formula's name (softmax, log), units, letters naming requests
# (A, B; K and V), and the few terms the Chinese
# text keeps as the essay it teaches from does (token, block, block table, KV cache, trace,
# prefill, kernel), a device's and a host's name (cpu, localhost). "English" is the language
# switch's own name.
_NAMES = """
vLLM PagedAttention SmolLM Llama OPT ShareGPT Alpaca Orca Max Oracle Pow ZeroMQ SOSP Kwon
GGUF JSON JSONL TOML HTML PNG SVG PDF GIF MP HTTP IPv GPU CPU KV English Triton FP bf fp
GQA StreamingLLM Flash Decoding MMU CUDA TLB vAttention FlashAttention FlashInfer ASPLOS
Prabhu Dao PyTorch softmax log
B KB MB GB KiB MiB GiB TiB ms s
token tokens block Block table cache Cache trace prefill kernel cpu localhost
"""
NAMES = frozenset(_NAMES.split())


def _latin(page) -> dict[str, str]:
    got = page.evaluate(LATIN_JS)
    return {w: ctx for w, ctx in got.items() if w not in NAMES and not re.fullmatch("[A-Z]", w)}


def test_a_chinese_page_has_no_english_word_outside_names(app_url, page):
    """The Chinese pages kept English: the paper page's "exact arithmetic (engine.capacity)",
    its sources ("Kwon et al., ... Fig. 2") and option buttons; the capacity page's "80 x 8 KV
    heads x 128, 2 B"; the uploaders' "Upload / 8MB per file"; a dry run's source line. Every
    page, with its uploaders shown, is read for words in Latin letters that are not names."""
    page.set_viewport_size({"width": 1440, "height": 900})
    found = {}
    for path, click in [
        ("", "打开 trace 文件"),
        ("capacity", "config.json"),
        ("paper", None),
        ("block-size", None),
        ("stack", None),
        ("lab", None),
        ("watch", "录制文件"),
    ]:
        _open(page, f"{app_url}/{path}?lang=zh")
        if click:
            page.get_by_text(click, exact=True).first.click()
            wait_idle(page, 120_000)
            page.locator("[data-testid=stFileUploader]").first.wait_for(timeout=60_000)
            box = page.locator("[data-testid=stFileUploaderDropzone]").first
            words = box.evaluate(
                "(b) => [...b.querySelectorAll('p, span')].map((e) =>"
                " getComputedStyle(e, '::after').content).join(' ')"
            )
            assert "上传" in words and "每个文件最多" in words, (path, words)
        left = _latin(page)
        if left:
            found[path or "lesson"] = left
            page.screenshot(
                path=str(ARTIFACTS / f"latin-{path or 'lesson'}-zh.png"), full_page=True
            )
    assert not found, json.dumps(found, ensure_ascii=False)


# The kernel lesson writes its formulas as a lecturer does: exp(score − m), softmax over all
# scores, and a running max m, sum l, position p (one letter each).
MATH = frozenset({"softmax", "exp"})


def test_the_kernel_lesson_in_chinese_has_no_english_word_outside_names(page, tmp_path):
    """The kernel lesson's Chinese narration, captions and labels kept English terms (head,
    tile, decode, online softmax, program, attention sink). Its offline page, in Chinese, is
    read on every frame, at a desk and in presenter mode, for words in Latin letters that
    are not names."""
    spec = load_kernel_spec("inside-the-kernel")
    lesson = fold_kernel(spec, read(spec.folder / spec.trace_file))
    path = tmp_path / "inside-the-kernel.html"
    path.write_text(standalone.page(lesson), encoding="utf-8")
    page.set_viewport_size({"width": 1280, "height": 720})
    found: dict[str, str] = {}
    for present in ("0", "1"):
        page.goto(path.as_uri() + f"#frame=0&lang=zh&present={present}")
        wait_ready(page)
        for i in range(lesson.num_frames):
            page.evaluate(f"() => window.pkPlayer.go({i})")
            for w, ctx in _latin(page).items():
                if w not in MATH and len(w) > 1:  # m, l, p: the formulas' own letters
                    found.setdefault(w, f"{i}: {ctx}")
    assert not found, json.dumps(found, ensure_ascii=False)
