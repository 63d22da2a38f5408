"""The block-size page's charts put block sizes where they are: sizes double along the axis,
so the 64 the sweep skipped shows as a gap between 32 and 128 instead of being hidden by
evenly spaced categories."""

from __future__ import annotations

import pytest

from paged.viz.app import block_size as P
from paged.viz.fold import sweep

CHARTS = (P.composition_figure, P.tradeoff_figure, P.long_table_figure, P.tail_figure)


@pytest.fixture(scope="module")
def results() -> list[sweep.SizeResult]:
    return sweep.load_results(sweep.load_spec("block-size"))


@pytest.mark.parametrize("chart", CHARTS, ids=lambda c: c.__name__)
def test_each_doubling_of_the_block_size_is_one_step_along_the_axis(results, chart):
    fig = chart(results, "en")
    axis = fig.layout.xaxis
    assert axis.type != "category"
    where = dict(zip(axis.ticktext, axis.tickvals, strict=True))
    assert list(where) == [str(r.block_size) for r in results]
    assert where["16"] - where["8"] == pytest.approx(where["32"] - where["16"])
    # 32 to 128 is two doublings, the missing 64 between them
    assert where["128"] - where["32"] == pytest.approx(2 * (where["16"] - where["8"]))
    for trace in fig.data:  # every mark sits at its size's tick
        assert [float(x) for x in trace.x] == pytest.approx(list(where.values()))


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_axis_says_it_is_log2(results, lang):
    assert "log₂" in P.composition_figure(results, lang).layout.xaxis.title.text
