"""The README and docs/ stay true to the tree and to the command lines they document: every link
and image resolves, the README stays short and shows the product, and every flag the docs give
``python -m paged <command>`` or ``python -m paged export`` is one that command's parser accepts.

No model, no browser: the parsers are built in-process, as ``python -m ...`` builds them."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from paged.engine.cli.main import COMMANDS, build_parser
from paged.viz.export import lecture

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [README, *DOCS]
MAX_README_LINES = 150
#: A picture that makes a README slow to open on a phone is worse than none.
MAX_IMAGE_BYTES = 1_500_000
IMAGE_SUFFIXES = {".gif", ".png", ".jpg", ".jpeg", ".svg", ".webp"}
EXPORT = "python -m paged export"
#: Flags of other programs that the docs name on purpose (vLLM's server option that points it at
#: the watch page); never to be read as ours.
FOREIGN_FLAGS = {"--kv-events-config"}
#: Pages wholly about ``python -m paged``: any flag on them belongs to one of its commands.
ENGINE_PAGES = {"engine.md"}

FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
LINK = re.compile(r"(!?)\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HTML_IMG = re.compile(r"<img\b[^>]*\bsrc=[\"']([^\"']+)[\"']", re.IGNORECASE)
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9]*(?:-[a-z0-9]+)*")
COMMAND_LINE = re.compile(
    rf"(?:^|[\s/])python -m paged (?:(?P<export>export)|(?P<cmd>{'|'.join(COMMANDS)}))\b(?P<rest>.*)"
)
BARE_COMMAND = re.compile(r"^(?P<cmd>[a-z]+) (?P<rest>--.*)")


# --- the parsers ---------------------------------------------------------------------------


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {o for action in parser._actions for o in action.option_strings}


class _Built(Exception):
    def __init__(self, parser: argparse.ArgumentParser) -> None:
        self.parser = parser


def _export_parser(monkeypatch: pytest.MonkeyPatch) -> argparse.ArgumentParser:
    """viz.export builds its parser inside ``main``: stop it at ``parse_args``, before any work."""

    def caught(self, *args, **kwargs):
        raise _Built(self)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", caught)
    with pytest.raises(_Built) as built:
        lecture.main(["--out", "unused"])
    return built.value.parser


@pytest.fixture(scope="module")
def accepted() -> dict[str, set[str]]:
    """Each documented command's option strings: ``generate`` ... and ``python -m paged export``."""
    top = build_parser()
    (sub,) = (a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    flags = {name: _options(sub.choices[name]) for name in COMMANDS}
    with pytest.MonkeyPatch.context() as mp:
        flags[EXPORT] = _options(_export_parser(mp))
    return flags


# --- reading markdown ------------------------------------------------------------------------


@dataclass(frozen=True)
class Line:
    page: Path
    number: int
    text: str
    in_code: bool  # inside a fenced block
    owner: str | None  # the command whose section this line is in, if any


def _owner_of(heading: str) -> str | None:
    """The command a heading names in a code span (`generate`, `python -m paged export`)."""
    for span in (m.group(2).strip() for m in CODE_SPAN.finditer(heading)):
        if span in COMMANDS:
            return span
        m = COMMAND_LINE.search(span)
        if m and not m.group("rest").strip():
            return EXPORT if m.group("export") else m.group("cmd")
    return None


def lines(page: Path) -> Iterator[Line]:
    in_code = False
    owners: list[tuple[int, str | None]] = []  # open headings: (level, owner)
    for number, text in enumerate(page.read_text(encoding="utf-8").splitlines(), start=1):
        if FENCE.match(text):
            in_code = not in_code
            continue
        heading = None if in_code else HEADING.match(text)
        if heading:
            level = len(heading.group(1))
            while owners and owners[-1][0] >= level:
                owners.pop()
            inherited = next((o for _, o in reversed(owners) if o), None)
            owners.append((level, _owner_of(heading.group(2)) or inherited))
        owner = next((o for _, o in reversed(owners) if o), None)
        yield Line(page, number, text, in_code, owner)


def _prose(text: str) -> str:
    return CODE_SPAN.sub("", text)


def targets(page: Path) -> Iterator[tuple[Line, str, bool]]:
    """Every link and image target outside code: (line, target, is_image)."""
    for line in lines(page):
        if line.in_code:
            continue
        prose = _prose(line.text)
        for m in LINK.finditer(prose):
            yield line, m.group(2), m.group(1) == "!"
        for m in HTML_IMG.finditer(prose):
            yield line, m.group(1), True


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.replace("`", "").strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    for line in lines(page):
        m = None if line.in_code else HEADING.match(line.text)
        if m:
            base = slug(m.group(2))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


def _is_external(target: str) -> bool:
    return re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE) is not None


def _local(page: Path, target: str) -> tuple[Path, str]:
    path, _, anchor = target.partition("#")
    return (page if not path else (page.parent / path).resolve()), anchor


# --- links and images ----------------------------------------------------------------------


def test_docs_exist_beside_the_readme():
    names = {p.name for p in DOCS}
    for name in ("engine.md", "trace-format.md", "app.md", "classroom.md", "kernels.md"):
        assert name in names, f"docs/{name} is missing"
    assert "benchmarks.md" in names


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_and_image_points_at_a_file_that_exists(page: Path):
    broken = []
    for line, target, _ in targets(page):
        if _is_external(target):
            continue
        path, anchor = _local(page, target)
        where = f"{page.name}:{line.number}: {target}"
        if not path.exists():
            broken.append(f"{where} (no such file)")
        elif not path.resolve().is_relative_to(ROOT):
            broken.append(f"{where} (outside the repository)")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            broken.append(f"{where} (no heading #{anchor} in {path.name})")
    assert not broken, "\n".join(broken)


def test_the_readme_is_short():
    n = len(README.read_text(encoding="utf-8").splitlines())
    assert n <= MAX_README_LINES, f"README.md has {n} lines; reference belongs in docs/"


def test_the_readme_shows_the_product_in_a_picture_that_exists_and_is_small():
    images = [
        _local(README, target)[0]
        for _, target, is_image in targets(README)
        if is_image and not _is_external(target)
    ]
    assert images, "README.md shows no image"
    for path in images:
        assert path.is_file(), f"README.md shows {path}, which does not exist"
        assert path.suffix.lower() in IMAGE_SUFFIXES, f"{path.name} is not an image"
        assert path.stat().st_size <= MAX_IMAGE_BYTES, (
            f"{path.name} is {path.stat().st_size:,} bytes, over {MAX_IMAGE_BYTES:,}"
        )


def test_the_readme_gives_the_two_make_targets_that_exist():
    text = README.read_text(encoding="utf-8")
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    for target in ("run", "test"):
        assert f"make {target}" in text, f"README.md does not give `make {target}`"
        assert re.search(rf"^{target}:", makefile, re.MULTILINE), f"Makefile has no {target}:"


# --- flags -----------------------------------------------------------------------------------


def _commands_in(code: str) -> Iterator[tuple[str, str]]:
    """(command, its arguments) for each command line in a piece of code."""
    m = COMMAND_LINE.search(code)
    if m:
        rest = m.group("rest").split(" #")[0]
        yield (EXPORT if m.group("export") else m.group("cmd")), rest
    else:
        bare = BARE_COMMAND.match(code.strip())
        if bare and bare.group("cmd") in COMMANDS:
            yield bare.group("cmd"), bare.group("rest")


def _code_pieces(page: Path) -> Iterator[tuple[Line, str]]:
    """Code as commands are written: fenced lines joined across ``\\`` continuations, and
    inline code spans."""
    pending: tuple[Line, str] | None = None
    for line in lines(page):
        if line.in_code:
            text = line.text if pending is None else pending[1] + " " + line.text.strip()
            first = line if pending is None else pending[0]
            if text.rstrip().endswith("\\"):
                pending = (first, text.rstrip()[:-1])
                continue
            pending = None
            yield first, text
        else:
            for m in CODE_SPAN.finditer(line.text):
                yield line, m.group(2)


def documented_flags(page: Path) -> Iterator[tuple[str, set[str], str]]:
    """(flag, the commands it must belong to one of, where the docs say it)."""
    engine = set(COMMANDS)
    for line, code in _code_pieces(page):
        for cmd, rest in _commands_in(code):
            for flag in FLAG.findall(rest):
                yield flag, {cmd}, f"{page.name}:{line.number} `{code.strip()}`"
    for line in lines(page):
        if line.in_code:
            continue
        for flag in FLAG.findall(line.text):
            where = f"{page.name}:{line.number}"
            if line.owner is not None:
                yield flag, {line.owner}, f"{where} (in the {line.owner} section)"
            elif page.name in ENGINE_PAGES:
                yield flag, engine, f"{where} (on the engine's page)"


def test_every_documented_flag_exists_in_its_commands_parser(accepted):
    wrong, checked = [], {}
    for page in PAGES:
        for flag, commands, where in documented_flags(page):
            if flag in FOREIGN_FLAGS:
                continue
            owners = sorted(c for c in commands if flag in accepted[c])
            if not owners:
                wrong.append(f"{where}: {flag} is not an option of {' or '.join(sorted(commands))}")
            for c in owners:
                checked.setdefault(c, set()).add(flag)
    assert not wrong, "\n".join(wrong)
    # the docs must really be read as documenting each command, or this test checks nothing
    assert set(checked) == {*COMMANDS, EXPORT}, f"flags checked per command: {checked}"


def test_a_flag_no_parser_has_is_caught(accepted, tmp_path):
    page = tmp_path / "engine.md"
    page.write_text(
        "### `simulate`: a section\n\n| `--no-such-flag` | x |\n\n"
        "```bash\npython -m paged export --out x \\\n    --frame 0:2\n```\n",
        encoding="utf-8",
    )
    found = {(flag, frozenset(cmds)) for flag, cmds, _ in documented_flags(page)}
    assert ("--no-such-flag", frozenset({"simulate"})) in found
    assert ("--frame", frozenset({EXPORT})) in found
    assert "--frame" not in accepted[EXPORT] and "--no-such-flag" not in accepted["simulate"]


def test_the_slug_matches_githubs_anchor_rules():
    assert slug("The README's GIF") == "the-readmes-gif"
    assert slug("Exports: `python -m viz.export`") == "exports-python--m-vizexport"
    assert slug("Scheduler (the paper's §4.5)") == "scheduler-the-papers-45"
