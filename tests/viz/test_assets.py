"""The front end's files are files: stylesheets and scripts live in .css and .js files beside
the code that ships them (linted by Biome in `make check`, carried by the wheel), never in
Python strings; the palette they name is filled in from style.py as they are read."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from paged.viz.app.controls import upload_css
from paged.viz.export import serve
from paged.viz.player.payload import SCRIPTS
from paged.viz.render import html, kernel
from paged.viz.render.style import REQUEST_COLOURS, palette, stylesheet

PAGED = Path(__file__).resolve().parents[2] / "paged"

#: a CSS declaration opening a rule: ``{ color: red;`` (an f-string's ``{{`` too)
CSS_RULE = re.compile(r"\{\{?\s+[a-z-]+\s*:\s*[^;\n]+;")
#: what only a browser script says
SCRIPT = re.compile(
    r"=>\s*[{(]|\bfunction\s*\w*\s*\([^)]*\)\s*\{|\bdocument\.[a-z]|\bwindow\.[a-z]"
    r"|querySelector|addEventListener"
)


def test_no_stylesheet_or_script_lives_in_python_source():
    found = {
        str(p.relative_to(PAGED))
        for p in PAGED.rglob("*.py")
        if CSS_RULE.search(text := p.read_text(encoding="utf-8")) or SCRIPT.search(text)
    }
    assert found == set()


def test_the_patterns_catch_what_they_are_for():
    assert CSS_RULE.search('CSS = f"""\n.pk-x {{ color: {INK}; }}"""')
    assert SCRIPT.search('JS = "() => { document.title = 1 }"')
    assert not CSS_RULE.search('f"{x:.1f} {share:.0%}; {n}"')
    assert not SCRIPT.search('"""a sliding window. A function (or two) here."""')


def test_every_palette_name_a_stylesheet_uses_is_filled_in():
    for path in (html.CSS_FILE, kernel.CSS_FILE):
        raw, css = path.read_text(encoding="utf-8"), stylesheet(path)
        used = set(re.findall(r"var\(--pk-([a-z0-9-]+)\)", raw))
        assert used and used <= set(palette()), path.name
        assert "var(--pk-" not in css
    shown = html.css()
    for i, colour in enumerate(REQUEST_COLOURS):  # a chip of each rank has its colour
        assert re.search(rf"\.pk-c{i} \{{ background:{colour};", shown), i


def test_an_uploaders_words_stay_inside_their_css_string():
    css = upload_css("pk_up", 'a"b\\c</style><script>', "8 MB · JSON")
    assert "</style" not in css.lower() and ".st-key-pk-uploader" not in css
    assert css.count(".st-key-pk_up ") == 5
    assert 'content: "a\\"b\\\\c\\3c /style>\\3c script>";' in css
    assert 'content: "8 MB · JSON";' in css


def test_the_page_carries_every_file_of_the_player_and_mixes_them_in_last():
    on_disk = {p.name for p in (PAGED / "viz" / "player").glob("*.js")}
    assert set(SCRIPTS) == on_disk - {"address.js"}  # address.js: a component of its own
    assert SCRIPTS[-1] == "player.js"  # it mixes the others' methods into the Player as it loads


def test_each_probe_playwright_is_handed_is_one_the_file_gives_by_name():
    declared = re.findall(r"^  function (\w+)\(", serve.PROBES, re.MULTILINE)
    given = re.search(r"return \{([^}]*)\};\s*\}\)\(\)$", serve.PROBES)
    assert given and declared == [n.strip() for n in given[1].split(",") if n.strip()]
    assert serve.probe("painted").endswith(").painted")
    with pytest.raises(KeyError, match="no function 'nope'"):
        serve.probe("nope")
