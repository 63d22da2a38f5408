"""The paper page's shipped results: the script that writes them, run on a small case, gives
exactly what the page would simulate; stale or foreign data is never used."""
from __future__ import annotations

import json

from viz import paper_data
from viz import paper_page as P


def test_the_script_writes_what_the_page_would_simulate(tmp_path):
    out = tmp_path / "results.json"
    assert paper_data.main(["--requests", "12", "--out", str(out)]) == 0
    rows = paper_data.shipped_rows(12, out)
    assert rows == [P.simulate_policy(p, 12) for p in P.POLICIES]
    assert paper_data.shipped_rows(13, out) is None      # not shipped: simulate it


def test_data_for_other_parameters_is_ignored(tmp_path):
    out = tmp_path / "results.json"
    paper_data.main(["--requests", "12", "--out", str(out)])
    doc = json.loads(out.read_text())
    doc["parameters"]["seed"] += 1
    out.write_text(json.dumps(doc))
    assert paper_data.shipped_rows(12, out) is None
    out.write_text("{not json")
    assert paper_data.shipped_rows(12, out) is None


def test_the_shipped_file_covers_the_default_view():
    rows = paper_data.shipped_rows(P.DEFAULT_REQUESTS)
    assert rows is not None, "run: python -m viz.paper_data"
    for r in rows:
        assert abs(sum(r.shares.values()) - 1) < 1e-9


def test_a_bad_request_count_is_one_line_of_error(capsys):
    assert paper_data.main(["--requests", "0", "--out", "/nonexistent/x.json"]) == 2
    assert capsys.readouterr().err.startswith("error: ")
