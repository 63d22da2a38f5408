"""The kernel cache loads a library only when it is the very file this user built there: a file
planted at its names, a symlink, a stranger's or a world-writable file, a truncated or empty one
is rebuilt, never loaded (its constructor never runs); the folder is private whatever the
umask; and the CPU kernels fall back to torch with ``why()`` set, never an exception.

A library of one function stands in for cpu.c here (built in milliseconds); two child
processes hold ``cpu.load()`` itself to the same promises."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from paged.kernels import build_cache as B

ROOT = Path(__file__).resolve().parents[2]
CC = shutil.which("gcc") or shutil.which("cc")
pytestmark = pytest.mark.skipif(CC is None, reason="no C compiler")

GOOD = "int answer(void) { return 7; }\n"
PLANTED = """\
#include <stdio.h>
#include <stdlib.h>
__attribute__((constructor)) static void planted(void) {
    const char *p = getenv("PLANTED_RAN");
    FILE *f = p ? fopen(p, "w") : NULL;
    if (f) { fputs("ran", f); fclose(f); }
}
int answer(void) { return 666; }
"""


def compile_c(tmp: Path, text: str, name: str) -> Path:
    src, out = tmp / f"{name}.c", tmp / f"{name}.so"
    src.write_text(text)
    subprocess.run([CC, "-shared", "-fPIC", str(src), "-o", str(out)], check=True)
    return out


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A cache folder, the command that builds the good library, and a planted library whose
    constructor would leave a mark."""
    src = tmp_path / "good.c"
    src.write_text(GOOD)
    mark = tmp_path / "planted-ran"
    monkeypatch.setenv("PLANTED_RAN", str(mark))
    planted = compile_c(tmp_path, PLANTED, "planted")
    folder = tmp_path / "cache"
    command = [CC, "-shared", "-fPIC", str(src), "-o", "{out}"]
    return folder, command, planted, mark


def load(folder: Path, command: list[str]) -> int:
    return B.library("k-0123", command, folder).answer()


def the_library(folder: Path) -> Path:
    (lib,) = folder.glob("k-0123-*.so")
    return lib


def test_a_first_load_builds_and_a_second_loads_what_was_built(cache):
    folder, command, _, _ = cache
    assert load(folder, command) == 7
    built = the_library(folder)
    before = built.stat().st_mtime_ns
    assert load(folder, ["false"]) == 7  # no build: "false" would fail it
    assert built.stat().st_mtime_ns == before


def plant_in_place(lib: Path, planted: Path) -> None:
    lib.write_bytes(planted.read_bytes())


def plant_symlink(lib: Path, planted: Path) -> None:
    lib.unlink()
    lib.symlink_to(planted)


def plant_empty(lib: Path, planted: Path) -> None:
    lib.write_bytes(b"")


def world_writable(lib: Path, planted: Path) -> None:
    plant_in_place(lib, planted)
    lib.chmod(0o777)


def strangers(lib: Path, planted: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("only root can give a file to another user")
    os.chown(lib, 12345, 12345)


@pytest.mark.parametrize(
    "plant", [plant_in_place, plant_symlink, plant_empty, world_writable, strangers]
)
def test_a_library_that_is_not_the_one_built_is_rebuilt_never_loaded(cache, plant):
    folder, command, planted, mark = cache
    load(folder, command)
    lib = the_library(folder)
    plant(lib, planted)
    assert load(folder, command) == 7
    assert not mark.exists(), "the planted library's constructor ran"
    st = os.lstat(lib)
    assert stat.S_ISREG(st.st_mode) and st.st_mode & 0o077 == 0 and st.st_uid == os.geteuid()


def test_a_library_planted_at_the_name_with_no_record_is_never_loaded(cache):
    folder, command, planted, mark = cache
    folder.mkdir(mode=0o700)
    shutil.copy(planted, folder / "k-0123.so")
    shutil.copy(planted, folder / f"k-0123-{'0' * 16}.so")
    (folder / "k-0123.sha256").symlink_to(planted)  # a record through a symlink: no record
    assert load(folder, command) == 7
    assert not mark.exists()


def test_the_cache_folders_are_private_under_umask_0(cache):
    folder, command, _, _ = cache
    nested = folder / "a" / "b"
    old = os.umask(0)
    try:
        load(nested, command)
    finally:
        os.umask(old)
    for f in (folder, folder / "a", nested):
        assert stat.S_IMODE(f.stat().st_mode) == 0o700, f
    assert stat.S_IMODE(the_library(nested).stat().st_mode) == 0o700
    assert stat.S_IMODE((nested / "k-0123.sha256").stat().st_mode) == 0o600


def test_a_cache_others_can_change_is_refused_in_one_line(cache, tmp_path):
    folder, command, _, _ = cache
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # anyone may rename what lies in it, and no sticky bit
    with pytest.raises(B.CacheError, match="others may change") as e:
        load(shared / "cache", command)
    assert "\n" not in str(e.value)
    link = tmp_path / "link"
    link.symlink_to(tmp_path)
    with pytest.raises(B.CacheError, match="not a folder"):
        load(link, command)


def _cpu_load(tmp_path: Path, cc: str, umask: int = 0o022) -> list[str]:
    code = (
        f"import os; os.umask({umask})\n"
        "from paged.kernels import cpu\n"
        "print(cpu.load() is None); print(cpu.why())\n"
    )
    env = {**os.environ, "CC": cc, "PAGED_KERNEL_CACHE": str(tmp_path / "c" / "k")}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.splitlines()


def fake_compiler(tmp_path: Path, makes: str) -> str:
    """A "C compiler" that builds ``makes`` (an empty file for "") whatever it is asked."""
    src = tmp_path / "other.c"
    src.write_text(makes)
    build = f'exec {CC} -shared -fPIC "{src}" -o "$out"' if makes else ': > "$out"'
    script = tmp_path / "fake-cc"
    script.write_text(
        '#!/bin/sh\nwhile [ $# -gt 0 ]; do [ "$1" = -o ] && out="$2"; shift; done\n' + build + "\n"
    )
    script.chmod(0o700)
    return str(script)


@pytest.mark.parametrize(("makes", "says"), [(GOOD, "paged_decode_f32"), ("", "wrote no library")])
def test_cpu_falls_back_to_torch_and_says_why_when_the_library_is_unusable(tmp_path, makes, says):
    is_none, why = _cpu_load(tmp_path, fake_compiler(tmp_path, makes), umask=0)
    assert is_none == "True" and says in why
    for f in (tmp_path / "c", tmp_path / "c" / "k"):
        assert stat.S_IMODE(f.stat().st_mode) == 0o700, f
