"""The viewer must never load torch: it opens in seconds and a live run happens in a child."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODULES = ["viz", "viz.reducer", "viz.lesson", "viz.style", "viz.panels", "viz.figures",
           "viz.html", "viz.live", "viz.serve", "viz.pages", "viz.lesson_page"]


def test_viz_modules_import_without_torch():
    code = ("import importlib, sys\n"
            f"for m in {MODULES!r}: importlib.import_module(m)\n"
            "heavy = sorted(m for m in ('torch', 'triton', 'transformers') if m in sys.modules)\n"
            "print(','.join(heavy))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "", f"viz imported {out.stdout.strip()}"


def test_the_app_page_itself_does_not_load_torch():
    """Run the lesson page once (AppTest, in a fresh interpreter) and look at sys.modules."""
    code = ("import sys\n"
            "from streamlit.testing.v1 import AppTest\n"
            "at = AppTest.from_file('app.py', default_timeout=120); at.run()\n"
            "assert not at.exception, at.exception\n"
            "print('torch' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "False"
