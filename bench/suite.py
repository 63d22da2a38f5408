"""Test-suite wall time against the suite at BASE, in the same run.

The goal: the suite takes at most half of BASE's time ("4 min of pytest on a fresh clone"). The
suite has grown by hundreds of tests since BASE, so this runs, back to back on this machine:

1. ``base``: the suite at BASE (default ``1d46bd3``, the commit that 4 min was measured on) in a
   temporary git worktree, in one process, as its Makefile ran it;
2. ``same files``: BASE's test files as they are today (each of BASE's tests or the test that
   replaced it, plus whatever was added to those files since), run the way ``make test`` runs;
3. ``whole``: the whole suite today, run the way ``make test`` runs (``--skip-whole``: not).

It prints each run's wall time, its pytest summary line and its ratio to ``base``. All three use
this checkout's venv and model cache (build them first: ``make test``). About 8 min on 2 cores.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASE = "1d46bd3"


def make_test_flags() -> list[str]:
    """The xdist flags ``make test`` passes (the Makefile's XDIST), so both stay in step."""
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    found = re.search(r"^XDIST\s*\?=\s*(.+)$", text, re.M)
    if found is None:
        sys.exit("bench/suite.py: no `XDIST ?=` line in the Makefile")
    return found.group(1).split()


def git(*args: str, cwd: Path = ROOT) -> str:
    run = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"bench/suite.py: git {' '.join(args)}: {run.stderr.strip()}")
    return run.stdout


def pytest(python: Path, cwd: Path, args: list[str]) -> tuple[float, str]:
    """Wall time and summary line of one pytest run (its output goes to a log beside it)."""
    t0 = time.perf_counter()
    run = subprocess.run(
        [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - t0
    lines = [ln for ln in run.stdout.splitlines() if ln.strip()]
    summary = lines[-1].strip("= ") if lines else f"no output (exit {run.returncode})"
    return wall, summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", default=BASE, help=f"the commit to compare with (default {BASE})")
    ap.add_argument("--skip-whole", action="store_true", help="leave out today's whole suite")
    args = ap.parse_args()
    python = ROOT / ".venv" / "bin" / "python"
    if not python.exists():
        sys.exit("bench/suite.py: no .venv here; run `make test` once first")
    base_files = [
        f
        for f in git("ls-tree", "--name-only", f"{args.base}:tests").split()
        if f.startswith("test_") and f.endswith(".py")
    ]
    # Test files now live in sub-folders of tests/; a file keeps its name when it moves.
    where = {p.name: p.relative_to(ROOT).as_posix() for p in (ROOT / "tests").rglob("test_*.py")}
    today = [where[f] for f in base_files if f in where]
    gone = sorted(set(base_files) - {Path(f).name for f in today})
    xdist = make_test_flags()
    rows: list[tuple[str, float, str]] = []
    with tempfile.TemporaryDirectory(prefix="suite-base-") as tmp:
        tree = Path(tmp) / "tree"
        git("worktree", "add", "--detach", str(tree), args.base)
        try:
            (tree / ".venv").symlink_to(ROOT / ".venv")
            print(f"base: {args.base}, its whole suite in one process ...", flush=True)
            rows.append(("base", *pytest(python, tree, [])))
        finally:
            git("worktree", "remove", "--force", str(tree))
    print(f"same files: {len(today)} of the base's {len(base_files)} test files ...", flush=True)
    rows.append(("same files", *pytest(python, ROOT, [*xdist, *today])))
    if not args.skip_whole:
        print("whole: today's suite ...", flush=True)
        rows.append(("whole", *pytest(python, ROOT, xdist)))
    base_wall = rows[0][1]
    print(f"\n{'run':<11} {'wall s':>7} {'/ base':>7}  pytest says")
    for name, wall, summary in rows:
        print(f"{name:<11} {wall:7.1f} {wall / base_wall:7.2f}  {summary}")
    if gone:
        print(f"(base test files no longer present: {', '.join(gone)})")
    print(f"xdist flags (make test's): {' '.join(xdist)}; {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
