"""The paper's numbers page: our simulation keeps the paper's ordering, the cited values are
the paper's (not the essay's), and the page renders in both languages."""
from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from engine.accounting import CATEGORIES
from viz import paper_page as P

SMALL = 100  # enough for a queue to form: below it paging never waits


@pytest.fixture(scope="module")
def rows() -> dict[str, P.PolicyRow]:
    return {p: P.simulate_policy(p, SMALL) for p in P.POLICIES}


def test_token_state_share_rises_from_max_to_pow2_to_oracle_to_paging(rows):
    token = [rows[p].shares["token_states"] for p in P.POLICIES]
    assert token == sorted(token)
    assert token[-1] > 0.9


def test_each_policy_accounts_for_every_slot(rows):
    for row in rows.values():
        assert sum(row.shares[c] for c in CATEGORIES) == pytest.approx(1.0)


def test_paging_runs_more_requests_at_once_in_the_same_bytes(rows):
    assert rows["paged"].mean_running > 2 * rows["max"].mean_running


def test_progress_callback_counts_every_finished_request():
    seen = []
    P.simulate_policy("oracle", 12, seen.append)
    assert seen == list(range(1, 13))


def test_cited_values_are_the_papers_not_the_essays():
    assert P.PAPER_TOKEN_SHARE == {"max": 0.204, "pow2": 0.268, "oracle": 0.382, "paged": 0.963}
    assert P.PAPER_TOKEN_SHARE["pow2"] != P.ESSAY_POW2
    assert "Fig. 2" in P.PAPER_SOURCE and "SOSP 2023" in P.PAPER_SOURCE


def test_figure_puts_the_paper_beside_ours(rows):
    fig = P.fig2_figure(list(rows.values()))
    token = next(t for t in fig.data if t.name == "token states")
    assert [round(v, 1) for v in token.y[1::2]] == [20.4, 26.8, 38.2, 96.3]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_page_renders_without_exception(lang):
    at = AppTest.from_string(f"from viz.paper_page import render\nrender({lang!r})",
                             default_timeout=180)
    at.query_params["requests"] = "100"
    at.run()
    assert not at.exception, at.exception
    assert not at.error
    text = " ".join(m.value for m in at.markdown) + " ".join(i.value for i in at.info)
    assert P.PAPER_SOURCE in " ".join(c.value for c in at.caption) + text
    assert "26.8%" in text and "32.0%" in text  # the essay's figure is named, then corrected
    assert len(at.metric) == 3
