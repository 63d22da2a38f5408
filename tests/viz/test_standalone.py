"""The lesson as one HTML file (paged/viz/export/standalone.py, ``python -m paged export --format html``):
self-contained, the app's own player, and offline in Chromium from file:// with every other
request refused."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import pytest

from paged.engine.trace import io as T
from paged.viz.export import lecture as export
from paged.viz.export import standalone
from paged.viz.fold import captions
from paged.viz.fold.lesson import build
from paged.viz.fold.lesson_folder import load_spec
from paged.viz.player import payload as player

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "paged" / "lessons" / "six-steps" / "trace.jsonl"
MAX_BYTES = 3_000_000


@pytest.fixture(scope="module")
def lesson():
    return build(load_spec("six-steps"), T.read(TRACE))


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("html")
    assert export.main(["--lesson", "six-steps", "--out", str(out), "--format", "html"]) == 0
    return out / "six-steps.html"


def test_the_file_reuses_the_players_own_code_and_carries_both_languages(exported):
    text = exported.read_text(encoding="utf-8")
    assert exported.stat().st_size <= MAX_BYTES
    for asset in (*player.SCRIPTS, *player.STYLES, "player.html"):
        assert player.asset(asset) in text, asset  # one player: the same files, verbatim
    data = json.loads(
        re.search(
            r"<script type='application/json' id='pk-data'>(.*?)</script>", text, re.DOTALL
        ).group(1)
    )
    assert set(data["payloads"]) == {"en", "zh"}
    assert data["payloads"]["en"]["num_frames"] == data["payloads"]["zh"]["num_frames"] > 5


def test_nothing_in_the_file_points_outside_it(exported):
    text = exported.read_text(encoding="utf-8")
    refs = re.findall(r"""(?:src|href)\s*=\s*['"]([^'"]*)""", text)
    assert refs and all(r.startswith(("data:", "#")) for r in refs), refs
    assert "@import" not in text and "@font-face" not in text
    urls = re.findall(r"url\(([^)]*)", text)
    # data: URLs, or a fragment naming an element of this very page (an arrowhead's marker)
    assert all(u.startswith(("data:", "'data:", '"data:', "#")) for u in urls)


def test_a_hostile_title_cannot_close_the_script(lesson):
    from dataclasses import replace

    evil = "</script><script>alert(1)</script>"
    spec = replace(lesson.spec, title={"en": evil, "zh": evil})
    text = standalone.page(replace(lesson, spec=spec), langs=("en",))
    assert text.count("</script>") == 2  # the data block and the module, nothing else
    assert "<script>alert(1)" not in text


def test_bad_formats_are_one_line_errors(tmp_path, capsys):
    assert export.main(["--lesson", "six-steps", "--out", str(tmp_path), "--format", "webm"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: unknown format 'webm'") and "\n" not in err
    assert not list(tmp_path.iterdir())


# --- in Chromium, from file:// ---------------------------------------------------------------


def _browser_ok() -> bool:
    from paged.viz.export.serve import CHROMIUM

    return Path(CHROMIUM).exists()


@pytest.fixture(scope="module")
def _offline_tab(browser):
    """One context for the offline tests (a new one costs a renderer): every request that is
    not a file is refused, and all are recorded (routing also turns the cache off)."""
    ctx = browser.new_context(viewport={"width": 1280, "height": 720})
    seen: dict[str, list[str]] = {"file": [], "aborted": [], "errors": []}

    def route(r):
        url = r.request.url
        if url.startswith("file:"):
            seen["file"].append(url)
            r.continue_()
        else:
            seen["aborted"].append(url)
            r.abort()

    ctx.route("**/*", route)
    page = ctx.new_page()
    page.on("pageerror", lambda e: seen["errors"].append(str(e)))
    yield page, seen
    ctx.close()


@pytest.fixture
def offline_page(_offline_tab):
    """The offline tab on a blank page with nothing recorded yet: each test loads the file
    afresh and sees only its own requests."""
    page, seen = _offline_tab
    page.goto("about:blank")
    for urls in seen.values():
        urls.clear()
    return page, seen


def _hash(page) -> str:
    return page.evaluate(
        "() => new Promise(r => requestAnimationFrame(() => "
        "requestAnimationFrame(() => r(location.hash))))"
    )


@pytest.mark.browser
@pytest.mark.skipif(not _browser_ok(), reason="needs Debian's chromium")
def test_offline_from_file_steps_switches_language_and_presents(offline_page, exported):
    from paged.viz.export.serve import shown_frame, wait_painted, wait_ready

    page, seen = offline_page
    assert exported.stat().st_size <= MAX_BYTES
    page.goto(exported.as_uri())
    assert wait_ready(page) == 0
    for n in range(1, 6):
        page.keyboard.press("ArrowRight")
        wait_painted(page, n)
    assert _hash(page) == "#frame=5"
    en_caption = page.locator("#pk-cap-l").inner_text()
    page.click(".pk-sa-lang button[data-lang='zh']")
    page.wait_for_function("() => document.querySelector('#pk-player').dataset.lang === 'zh'")
    wait_painted(page, 5)
    assert shown_frame(page) == 5  # the language switch keeps the frame
    assert _hash(page) == "#frame=5&lang=zh"
    zh_caption = page.locator("#pk-cap-l").inner_text()
    assert zh_caption != en_caption and re.search(r"[\u4e00-\u9fff]", zh_caption)
    assert re.search(r"[\u4e00-\u9fff]", page.locator("#pk-chapter").inner_text())
    page.keyboard.press("f")
    assert page.evaluate("() => document.querySelector('#pk-player').dataset.present") == "1"
    assert _hash(page) == "#frame=5&lang=zh&present=1"
    assert not page.locator("#pk-tl-box").is_visible()
    page.keyboard.press("ArrowRight")
    wait_painted(page, 6)
    (ROOT / "test-artifacts").mkdir(exist_ok=True)
    page.screenshot(path=str(ROOT / "test-artifacts" / "standalone-present-zh.png"))
    assert seen["aborted"] == [], seen["aborted"]
    assert seen["file"] == [exported.as_uri()]  # the file itself, once: nothing else
    assert not seen.get("errors")


@pytest.mark.browser
@pytest.mark.skipif(not _browser_ok(), reason="needs Debian's chromium")
def test_a_hash_opens_that_frame_language_and_mode(offline_page, exported):
    from paged.viz.export.serve import shown_frame, wait_painted, wait_ready

    page, seen = offline_page
    page.goto(exported.as_uri() + "#frame=40&lang=zh&present=1")
    assert wait_ready(page) == 40
    root = page.evaluate("() => ({...document.querySelector('#pk-player').dataset})")
    assert root["lang"] == "zh" and root["present"] == "1"
    page.evaluate("() => { location.hash = '#frame=12&lang=zh&present=1'; }")
    wait_painted(page, 12)
    assert shown_frame(page) == 12
    # the player writes the hash on the next animation frame after a step: let that land
    # first, or it overwrites the bad hash below and the reload opens frame 12
    page.wait_for_function("() => location.hash === '#frame=12&lang=zh&present=1'")
    page.goto(exported.as_uri() + "#frame=banana&lang=xx")  # same document: nothing moves
    assert shown_frame(page) == 12
    for odd in ("1e3", "3.9", "-2", "0x10"):  # not frame numbers, as the app reads them
        page.goto(exported.as_uri() + f"#frame={odd}")  # parseInt would go to frame 1, 3, 0
        assert shown_frame(page) == 12, odd
    # a hash without lang means the file's first language: English unpacks asynchronously, keeps
    # frame 12 and then writes its own hash, which can land after any of the gotos above (the
    # reload below would then open frame 12). Let it land, then name a bad frame again.
    page.wait_for_function(
        "() => window.pkPlayer.data.lang === 'en' && !window.pkPlayer.urlPending"
    )
    page.goto(exported.as_uri() + "#frame=0x10")
    assert shown_frame(page) == 12
    page.reload()  # opened afresh: frame 0, English
    assert wait_ready(page) == 0
    assert page.evaluate("() => document.querySelector('#pk-player').dataset.lang") == "en"
    # names every JavaScript object answers to are no language (taken as one, they would blank
    # the player and break every key), and a frame past 2**31 is the last one, not wrapped round
    # to frame 5
    page.evaluate("() => { location.hash = '#frame=3&lang=constructor'; }")
    wait_painted(page, 3)
    page.wait_for_function("() => location.hash === '#frame=3'")  # the player's own, landed
    page.goto(exported.as_uri() + "#frame=4294967301&lang=__proto__")
    page.reload()
    page.wait_for_function("() => window.pkPlayer && window.pkPlayer.frames")  # inflated
    last = page.evaluate("() => window.pkPlayer.frames.length - 1")
    assert wait_ready(page) == last
    assert page.evaluate("() => document.querySelector('#pk-player').dataset.lang") == "en"
    # frame, language and mode in one hash change: the language loads asynchronously, and must
    # land on the frame the hash names (not the one shown before it), with the mode it names
    root_js = "() => ({...document.querySelector('#pk-player').dataset})"
    for want in ({"frame": 3, "lang": "zh", "present": "1"}, {"frame": 7, "lang": "en"}):
        mode = "&present=1" if want.get("present") else ""
        page.evaluate(
            f"() => {{ location.hash = '#frame={want['frame']}&lang={want['lang']}{mode}'; }}"
        )
        page.wait_for_function(
            f"() => document.querySelector('#pk-player').dataset.lang === '{want['lang']}'"
        )
        wait_painted(page, want["frame"])
        root = page.evaluate(root_js)
        assert shown_frame(page) == want["frame"] and root["present"] == want.get("present", "0")
        page.wait_for_function(f"() => location.hash.startsWith('#frame={want['frame']}')")
    assert seen["aborted"] == [] and not seen.get("errors"), seen


@pytest.mark.browser
@pytest.mark.skipif(not _browser_ok(), reason="needs Debian's chromium")
def test_a_file_that_opens_in_chinese_keeps_english_in_its_links(offline_page, tmp_path):
    """`--lang zh` writes a file that opens in Chinese: a hash without lang means Chinese
    there, so English must be written out (its link opened in Chinese)."""
    from paged.viz.export.serve import shown_frame, wait_painted, wait_ready

    page, seen = offline_page
    args = ["--lesson", "six-steps", "--out", str(tmp_path), "--format", "html", "--lang", "zh"]
    assert export.main(args) == 0
    uri = (tmp_path / "six-steps.html").as_uri()
    page.goto(uri)
    assert wait_ready(page) == 0
    lang_js = "() => document.querySelector('#pk-player').dataset.lang"
    assert page.evaluate(lang_js) == "zh"
    page.click(".pk-sa-lang button[data-lang='en']")
    page.wait_for_function(f"() => ({lang_js})() === 'en'")
    for n in (1, 2, 3):
        page.keyboard.press("ArrowRight")
        wait_painted(page, n)
    link = _hash(page)
    assert link == "#frame=3&lang=en"
    page.goto("about:blank")
    page.goto(uri + link)  # the link, opened afresh: English, frame 3
    assert wait_ready(page) == 3 and page.evaluate(lang_js) == "en"
    page.click(".pk-sa-lang button[data-lang='zh']")
    page.wait_for_function(f"() => ({lang_js})() === 'zh'")
    wait_painted(page, 3)
    assert _hash(page) == "#frame=3" and shown_frame(page) == 3  # its own language: no lang
    assert seen["aborted"] == [] and not seen.get("errors"), seen


@pytest.mark.parametrize(
    "name, stem",
    [
        ("trace.jsonl", "trace"),
        ("../../etc/passwd", "passwd"),
        ("a b;c.jsonl", "a-b-c"),
        ("<script>.jsonl", "script"),
        ("", "lesson"),
        ("练习 1.jsonl", "1"),
    ],
)
def test_download_names_from_uploads_are_tame(name, stem):
    from pathlib import PurePath

    from paged.viz.app.lesson import safe_file_stem

    got = safe_file_stem(PurePath(name).stem if name else name)
    assert got == stem and "/" not in got and len(got) <= 60


@pytest.mark.browser
@pytest.mark.skipif(not _browser_ok(), reason="needs Debian's chromium")
def test_the_lesson_page_downloads_the_trace_on_screen_as_one_file(page, app_url, tmp_path):
    """The app's button hands out the same standalone player, which then opens offline."""
    from paged.viz.export.serve import wait_ready

    page.set_viewport_size({"width": 1400, "height": 1000})
    page.goto(f"{app_url}/?frame=3")
    wait_ready(page)
    button = page.get_by_role("button", name="Download as one HTML file")
    button.scroll_into_view_if_needed()
    with page.expect_download(timeout=60_000) as dl:
        button.click()
    path = tmp_path / dl.value.suggested_filename
    dl.value.save_as(path)
    assert path.name == "six-steps.html"
    text = path.read_text(encoding="utf-8")
    assert player.asset("player.js") in text and path.stat().st_size <= MAX_BYTES
    page.goto(path.as_uri() + "#frame=7")
    assert wait_ready(page) == 7


@pytest.mark.browser
@pytest.mark.skipif(not _browser_ok(), reason="needs Debian's chromium")
@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("size", [(1280, 720), (1920, 1080)])
def test_presenter_mode_fits_the_screen_with_system_fonts(page, exported, lang, size):
    """The animations photograph this view: with the file's system fonts (not the app's) every
    label still lies inside the screen, none cut short, at the keyframes and the last frame."""
    from paged.viz.export.serve import wait_painted, wait_ready
    from tests.browser.test_player_browser import LABELS_JS

    page.set_viewport_size({"width": size[0], "height": size[1]})
    page.goto(f"{exported.as_uri()}#frame=0&lang={lang}&present=1")
    wait_ready(page)
    frames = [
        c["start"]
        for c in page.evaluate("() => window.pkPlayer.data.chapters")
        if c["step"] is not None
    ]
    for f in frames:
        page.evaluate(f"() => window.pkPlayer.go({f})")
        wait_painted(page, f)
        labels = page.evaluate(LABELS_JS)
        bad = [lb for lb in labels if not lb["inside"] or lb["ellipsis"]]
        assert labels and not bad, (f, bad[:5])


@pytest.mark.parametrize(
    "value",
    [
        "0→#6, 1→#7",
        "*evil* <b>x</b>",
        "http://x.y/`z`",
        "a\\b",
        "\ue0000\ue001",
        "[link](http://e.vil)",
    ],
)
def test_quoted_values_show_literally_never_as_markup(value):
    """Narration quotes trace values escaped for markdown (viz.safe.md_text); the player shows
    them as the very text, with no stray backslash and no markup of their own."""
    import html as h

    from paged.viz.safe import md_text

    out = player.markdown(f"**Left:** {md_text(value)} and *this*")
    shown = re.sub(r"<[^>]+>", "", out)
    assert (
        h.unescape(shown) == f"Left: {value.replace(chr(0xE000), '').replace(chr(0xE001), '')}"
        " and this"
    )
    assert out.count("<b>") == 1 and out.count("<i>") == 1 and "<a" not in out


# --- frames that cannot be unpacked ------------------------------------------------------------


def _unpackable(lesson, lang: str) -> dict:
    """``lang``'s payload with frames no browser can inflate (valid base64, not deflate)."""
    return {**player.payload(lesson, lang), "z": base64.b64encode(b"not deflate").decode()}


@pytest.mark.browser
@pytest.mark.skipif(not _browser_ok(), reason="needs Debian's chromium")
def test_frames_that_cannot_be_unpacked_say_so_and_drop_the_keys_kept_for_them(
    offline_page, lesson, tmp_path
):
    """The first unpacking failed and the player stayed blank and silent, still keeping every
    key pressed for frames that were never coming. Now one line says so, in the payload's
    language, and the kept keys are dropped; later keys are left to the page."""
    from paged.viz.export import serve

    file = tmp_path / "broken.html"
    file.write_text(
        standalone.page(lesson, langs=("zh",), payloads={"zh": _unpackable(lesson, "zh")}),
        encoding="utf-8",
    )
    page = offline_page[0].context.new_page()  # the gate stays with this tab: its own
    try:
        serve.hold_first_unpacking(page)
        page.goto(file.as_uri())
        serve.wait_unpacking_held(page)
        for key in ("ArrowRight", "ArrowRight", "?"):
            page.keyboard.press(key)
        assert page.evaluate("() => window.pkPlayer.early.length") == 3  # kept meanwhile
        serve.release_unpacking(page)
        line = page.locator("#pk-error")
        line.wait_for(state="visible", timeout=10_000)
        assert line.inner_text() == captions.text("zh")["unpack_failed"]
        assert line.bounding_box()["height"] < 60  # one line at this width
        page.keyboard.press("ArrowRight")
        p = page.evaluate(
            "() => ({early: window.pkPlayer.early.length, frames: !!window.pkPlayer.frames,"
            " error: document.querySelector('#pk-player').dataset.error})"
        )
        assert p == {"early": 0, "frames": False, "error": "unpack"}
    finally:
        page.close()


@pytest.mark.browser
@pytest.mark.skipif(not _browser_ok(), reason="needs Debian's chromium")
def test_a_language_that_cannot_be_unpacked_leaves_the_frames_shown_steppable(
    offline_page, lesson, tmp_path
):
    from paged.viz.export.serve import shown_frame, wait_painted, wait_ready

    page, seen = offline_page
    file = tmp_path / "half.html"
    file.write_text(
        standalone.page(lesson, payloads={"zh": _unpackable(lesson, "zh")}), encoding="utf-8"
    )
    page.goto(file.as_uri())
    assert wait_ready(page) == 0
    page.keyboard.press("ArrowRight")
    wait_painted(page, 1)
    page.click(".pk-sa-lang button[data-lang='zh']")
    line = page.locator("#pk-error")
    line.wait_for(state="visible", timeout=10_000)
    assert line.inner_text() == captions.text("zh")["unpack_failed"]
    page.evaluate("() => document.activeElement.blur()")
    page.keyboard.press("ArrowRight")  # the English frames on screen still step
    wait_painted(page, 2)
    assert shown_frame(page) == 2 and _hash(page) == "#frame=2"  # and the link says English
    assert not seen.get("errors"), seen
