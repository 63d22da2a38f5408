"""UI strings live in paged/viz/text/*.toml: both languages must carry the same keys and placeholders."""

import pytest

from paged.viz import ui_text


@pytest.mark.parametrize("name", ui_text.names())
def test_every_ui_text_file_has_matching_languages(name):
    tables = ui_text.load(name)
    assert tables["en"] and tables["en"].keys() == tables["zh"].keys()


def test_a_missing_translation_is_refused():
    with pytest.raises(ui_text.UITextError, match="only in one language: gone"):
        ui_text.check({"en": {"kept": "a", "gone": "b"}, "zh": {"kept": "甲"}}, "x.toml")


def test_a_translation_that_drops_a_number_is_refused():
    with pytest.raises(ui_text.UITextError, match="different placeholders"):
        ui_text.check({"en": {"n": "{n:,} of {total}"}, "zh": {"n": "共 {total}"}}, "x.toml")


def test_a_group_of_strings_must_match_too():
    ok = ui_text.check({"en": {"r": {"a": "x {n}"}}, "zh": {"r": {"a": "甲 {n}"}}}, "x.toml")
    assert ok["zh"]["r"]["a"] == "甲 {n}"
    with pytest.raises(ui_text.UITextError, match=r"\[r\].*only in one language: b"):
        ui_text.check({"en": {"r": {"a": "x", "b": "y"}}, "zh": {"r": {"a": "甲"}}}, "x.toml")
    with pytest.raises(ui_text.UITextError, match="not a string"):
        ui_text.check(
            {"en": {"r": {"a": {"deep": "x"}}}, "zh": {"r": {"a": {"deep": "甲"}}}}, "x.toml"
        )


def _strings(table, path=""):
    if isinstance(table, dict):
        for key, value in table.items():
            yield from _strings(value, f"{path}.{key}")
    elif isinstance(table, str):
        yield path, table


@pytest.mark.parametrize("name", ui_text.names())
def test_bold_renders_in_both_languages(name):
    """Markdown emphasis must close where it is written. CommonMark (Streamlit renders it)
    refuses a closing ``**`` after punctuation when a letter follows, as "由**伙伴分配器
    （buddy allocator）**放置" did: the reader saw the asterisks. Filled placeholders are
    numbers, which never change whether a delimiter closes, so the raw strings are checked."""
    import re

    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark")
    for lang, table in ui_text.load(name).items():
        for path, text in _strings(table):
            shown = re.sub(r"<[^>]+>", "", md.render(text))
            assert "**" not in shown, f"{name}.toml [{lang}]{path}: {shown.strip()[:120]}"
