"""The wheel as a lecturer installs it: built from the tracked files alone, installed into an
empty folder, run from elsewhere with only that folder and the dependencies on the path. It
answers ``--help`` and builds the course from its packaged lessons, figures and a GIF included
(Chromium). Slow (a wheel build and install, then Chromium): left out of the fast gate."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.load, pytest.mark.browser]


def tracked_copy(dest: Path) -> Path:
    """The working tree's files that git knows or would add: what a clean clone has, with
    today's edits (no .venv, no caches, no build leftovers)."""
    names = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\0")
    for name in filter(None, names):
        src = ROOT / name
        if src.is_file() and not src.is_symlink():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


def pip(*args: str, cwd: Path) -> None:
    # No build isolation: it would fetch setuptools from the network; the venv has it.
    subprocess.run([sys.executable, "-m", "pip", *args], cwd=cwd, check=True, capture_output=True)


@dataclass(frozen=True)
class Install:
    wheel: Path
    target: Path  # the folder the wheel went into
    env: dict[str, str]  # PYTHONPATH: that folder, then the venv's packages for dependencies
    cwd: Path  # anywhere but the checkout


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Install:
    tmp = tmp_path_factory.mktemp("wheel")
    src = tracked_copy(tmp / "src")
    pip("wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp / "dist"), ".", cwd=src)
    (wheel,) = (tmp / "dist").glob("paged_seen-*.whl")
    target = tmp / "target"
    pip("install", "--no-deps", "--no-compile", "--target", str(target), str(wheel), cwd=tmp)
    deps = sysconfig.get_paths()["purelib"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), deps])}
    elsewhere = tmp / "elsewhere"
    elsewhere.mkdir()
    return Install(wheel, target, env, elsewhere)


def paged(installed: Install, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(installed.target / "bin" / "paged"), *args],
        cwd=installed.cwd,
        env=installed.env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_the_wheel_declares_the_command_and_carries_the_data(installed):
    with zipfile.ZipFile(installed.wheel) as z:
        names = set(z.namelist())
        entry = next(n for n in names if n.endswith("entry_points.txt"))
        assert "paged = paged.viz.cli:main" in z.read(entry).decode()
    for data in (
        "paged/lessons/six-steps/trace.jsonl",
        "paged/lessons/six-steps/lesson.toml",
        "paged/lessons/block-size/traces/b16.jsonl",
        "paged/viz/player/icon.png",
        "paged/viz/text/site.toml",
        "paged/viz/app/script.py",
        # every script, stylesheet and page of the front end and every measured figure the
        # pages quote: read at run time, not imported
        *(
            str(f.relative_to(ROOT))
            for ext in ("js", "css", "html")
            for f in (ROOT / "paged").rglob(f"*.{ext}")
        ),
        *(str(f.relative_to(ROOT)) for f in (ROOT / "paged" / "viz" / "data").glob("*.json*")),
    ):
        assert data in names
    assert not [n for n in names if n.startswith(("tests/", "bench/", "docs/"))]
    # one import name of ours, and so no file a dependency's distribution also writes
    assert {n.split("/")[0] for n in names if ".dist-info/" not in n} == {"paged"}


def test_the_installed_command_runs_from_the_folder_alone(installed):
    where = subprocess.run(
        [
            sys.executable,
            "-c",
            "import paged.viz, paged.lessons as l; print(paged.__file__, l.__file__)",
        ],
        cwd=installed.cwd,
        env=installed.env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert all(Path(w).is_relative_to(installed.target) for w in where)
    theirs = subprocess.run(
        [sys.executable, "-c", "import kernels; print(kernels.__file__)"],
        cwd=installed.cwd,
        env=installed.env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert not Path(theirs).is_relative_to(
        installed.target
    )  # Hugging Face's, as transformers needs
    done = paged(installed, "--help")
    assert done.returncode == 0 and "site" in done.stdout
    assert paged(installed, "--version").stdout.startswith("paged 0.")
    engine = paged(installed, "capacity", "--help")
    assert engine.returncode == 0 and engine.stdout.startswith("usage: paged capacity")


def test_the_installed_command_builds_the_course_from_packaged_lessons(installed, tmp_path):
    from paged.viz.export.site import course_lessons
    from paged.viz.fold.lesson_folder import LESSONS_DIR

    done = paged(installed, "site", str(tmp_path / "pages"), "--no-gif", "--no-figures")
    assert done.returncode == 0, done.stderr
    index = (tmp_path / "pages" / "index.html").read_text(encoding="utf-8")
    names = course_lessons(LESSONS_DIR)
    assert "inside-the-kernel" in names  # the kernel lesson's kernel.toml and trace ship too
    for name in names:
        assert f"lessons/{name}.html" in index
        assert (tmp_path / "pages" / "lessons" / f"{name}.html").is_file()


def test_the_installed_command_draws_figures_and_a_gif(installed, tmp_path):
    out = tmp_path / "one"
    done = paged(installed, "site", str(out), "--lesson", "six-steps", "--frames", "0:2")
    assert done.returncode == 0, done.stderr
    media = out / "media" / "six-steps"
    assert (media / "six-steps-en.gif").stat().st_size > 10_000
    assert (media / "six-steps-zh.gif").is_file()
    assert (media / "six-steps-step1-zh.png").is_file() and (
        media / "six-steps-thumb.png"
    ).is_file()
