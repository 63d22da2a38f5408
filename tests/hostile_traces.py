"""Valid traces with hostile text in them, built from the shipped six-step trace by renaming
(so they still fold and draw): every name a viewer could see or an id could reach carries a
script, SVG, attribute break-out or markdown payload. Shared by the browser and app tests."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SIX_TRACE = ROOT / "paged" / "lessons" / "six-steps" / "trace.jsonl"

# Any element these create, any dialog they open or any request they send is a failure. Each
# sets window.__pk_pwned, so a test can also ask the page whether any of them ran.
REMOTE = "http://127.0.0.2:9"
RUN_NAMES = {
    "max": "max'/><svg onload=\"window.__pk_pwned=1;alert(1)\"><x y='",
    "paged": '"><img src=x onerror="window.__pk_pwned=2;alert(2)">',
}
REQUEST_IDS = {
    "A": '<svg onload="window.__pk_pwned=3;alert(3)">',
    "B": f"![b]({REMOTE}/b.png)",
    "C": "<u>",  # short ids are shown as they are: in grids and panels
    "D": '\'"><img src=x onerror="window.__pk_pwned=4">',
    "E": "$x$",
}
HEADER = {
    "model": f'![m]({REMOTE}/m.png) <img src=x onerror="window.__pk_pwned=5">',
    "device": f'"><svg onload="window.__pk_pwned=6"> [l]({REMOTE}/l) :red[red]',
    "created": "<script>window.__pk_pwned=7</script>",
}
TITLE = f"![t]({REMOTE}/t.png)"


def _rename(obj: dict) -> dict:
    if "run" in obj:
        obj["run"] = RUN_NAMES[obj["run"]]
    if "req" in obj:
        obj["req"] = REQUEST_IDS[obj["req"]]
    return obj


def hostile_trace_text(src: Path = SIX_TRACE) -> str:
    """The shipped trace with every run name, request id and header field made hostile."""
    lines = src.read_text(encoding="utf-8").splitlines()
    header = json.loads(lines[0])
    header.update(HEADER)
    header["scenario"]["title"] = TITLE
    for r in header["scenario"]["requests"]:
        r["id"] = REQUEST_IDS[r["id"]]
    for r in header["requests"]:
        r["id"] = REQUEST_IDS[r["id"]]
    for run in header["runs"]:
        run["allocator"] = run.get("allocator", run["name"])
        run["name"] = RUN_NAMES[run["name"]]
    out = [json.dumps(header)]
    out += [json.dumps(_rename(json.loads(line))) for line in lines[1:]]
    return "\n".join(out) + "\n"
