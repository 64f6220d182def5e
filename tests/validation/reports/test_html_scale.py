"""The HTML report read at fleet scale: what heads the page, where the rejects are,
numbers on the plots that never overlap, integer axes for counts, skipped checks and their reasons."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from itertools import combinations

import pytest

from tests.validation.gate.helpers import as_files, check_record, fleet
from validation.gate import FleetPlan, GateResult, decide
from validation.reports.html import Provenance, _number_lanes, render_html

_REJECTS = {f"node{i}": {"scale": {"gemm_bf16_tflops": 0.6 + i / 2000}} for i in range(3, 400, 17)}


@pytest.fixture(scope="module")
def big() -> GateResult:
    recs = fleet(400, **_REJECTS)
    recs["node2"].append(check_record("node2", "fabric", "skip", reason="no InfiniBand device"))
    recs["node9"].append(check_record("node9", "fabric", "skip", reason="no InfiniBand device"))
    return decide(as_files(recs), plan=FleetPlan("train-a", required=360, spares=10))


@pytest.fixture(scope="module")
def page(big: GateResult) -> str:
    when = datetime(2026, 12, 1, 5, 0, tzinfo=UTC)
    return render_html(big, Provenance(spec="specs/train-a.yaml", generated_at=when, fleetforge="9.9.9"))


def test_a_provenance_line_heads_the_page(page: str) -> None:
    head = page[page.index("<h1>") : page.index('class="banner')]
    assert "fleetforge 9.9.9" in head and "generated 2026-12-01 05:00:00 UTC" in head
    assert "inputs: 400 files" in head and "spec: specs/train-a.yaml" in head


def test_rejects_come_first_and_the_accepted_rows_are_folded_away(big: GateResult, page: str) -> None:
    rejected = [v.node for v in big.nodes if not v.accepted]
    assert len(rejected) == len(_REJECTS)
    every = page[page.index("<h2>Every node") :]
    folded = every[every.index("<details>") : every.index("</details>")]
    shown = every[: every.index("<details>")]
    for name in rejected:
        assert f'<td class="node">{name}</td>' in shown
    assert "<summary>376 accepted node(s)</summary>" in folded
    assert folded.count('<td class="accept">accept</td>') == 376 and "reject</td>" not in folded
    assert "td.node,td.key{white-space:nowrap}" in page  # node names never wrap
    assert page.count('class="sortable"') >= 3 and "addEventListener" in page


def test_every_column_is_explained(page: str) -> None:
    legend = page[page.index('<dl class="columns">') :]
    for column in ("#", "node", "verdict", "role", "pace", "run", "reasons"):
        assert f"<dt>{column}</dt>" in legend
    assert "fraction of the fleet median" in legend


def test_skipped_checks_are_listed_with_their_reasons(page: str) -> None:
    skipped = page[page.index("<h2>Skipped checks") : page.index("<h2>Metrics")]
    assert "<td>fabric</td><td>2: node2, node9</td><td>no InfiniBand device</td>" in skipped


def _tick_labels(page: str, metric: str) -> list[str]:
    start = page.index(f'id="plot-{metric}"')
    svg = page[start : page.index("</svg>", start)]
    return [t for t in re.findall(r">([^<>]*)</text>", svg) if re.fullmatch("[\u2212-]?[\\d.]+", t.strip())]


def test_count_metrics_get_integer_axes(page: str) -> None:
    for metric in ("fabric_ports_active", "xid_errors"):  # xid_errors: every node 0, a flat line
        ticks = _tick_labels(page, metric)
        assert ticks and all("." not in t for t in ticks), (metric, ticks)
    assert any("." in t for t in _tick_labels(page, "stress_clock_ratio"))  # a ratio keeps its decimals


def test_rejected_numbers_on_a_plot_never_overlap() -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.text import Text

    n = 400
    fig = Figure(figsize=(8.0, 4.0), layout="constrained")
    ax = fig.add_subplot()
    ax.scatter(range(n), range(n))
    # The worst case: 40 rejected nodes side by side at the worst end of the ranking.
    keyed = [(x, float(x), number) for number, x in enumerate(range(40), 1)]
    _number_lanes(ax, keyed, n)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    # The number itself, not its leader line (an Annotation's own extent includes the line).
    boxes = [Text.get_window_extent(a, renderer) for a in ax.texts]
    assert len(boxes) == 40
    overlaps = [(i, j) for (i, a), (j, b) in combinations(enumerate(boxes), 2) if a.overlaps(b)]
    assert not overlaps


def test_twelve_nodes_page_names_every_node_and_numbers_the_rejects() -> None:
    result = decide(
        as_files(fleet(12, node4={"scale": {"gemm_bf16_tflops": 0.7}})), plan=FleetPlan("t", 10, 1)
    )
    page = render_html(result)
    assert '<td class="key num">1</td><td class="node">node4</td>' in page
    assert "<details>" in page and "11 accepted node(s)" in page
