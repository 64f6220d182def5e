"""The HTML and Prometheus reports draw and export only the metrics the gate reports on (those of
fleet/metrics.py and the spec's thresholds): what a node made up never adds a plot or a series."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from fleet.metrics import METRICS, Metric
from fleet.spec import ThresholdOverride
from tests.validation.gate.helpers import as_files, check_record, fleet
from validation.gate import GateResult, GateSettings, decide
from validation.reports.prometheus import render_prometheus

UNKNOWN = {f"x{i}": float(i) for i in range(60)}


def plots(page: str) -> list[str]:
    return [part.split('"', 1)[0] for part in page.split('<div class="plot" id="plot-')[1:]]


def series(text: str) -> dict[str, list[dict[str, str]]]:
    return {f.name: [s.labels for s in f.samples] for f in text_string_to_metric_families(text)}


def with_unknown(n: int = 4) -> GateResult:
    recs = fleet(n)
    for i in range(1, n + 1):
        node = f"node{i}"
        recs[node].append(
            check_record(node, "storage", metrics={f"{node}_{m}": v for m, v in UNKNOWN.items()})
        )
    return decide(as_files(recs))


def made_up_in_stats() -> GateResult:
    """A result whose statistics hold made-up names (decide's vocabulary is a parameter): the
    reports must not trust the statistics to be bounded."""
    recs = fleet(4)
    for i in range(1, 5):
        recs[f"node{i}"].append(check_record(f"node{i}", "storage", metrics=UNKNOWN))
    vocabulary = {**METRICS, **{m: Metric(m, "", True, "made up") for m in UNKNOWN}}
    result = decide(as_files(recs), vocabulary=vocabulary)
    assert set(UNKNOWN) <= result.stats.keys()
    return result


@pytest.fixture(scope="module")
def clean() -> GateResult:
    return decide(as_files(fleet(4)))


@pytest.mark.parametrize("hostile", [with_unknown, made_up_in_stats])
def test_prometheus_exports_only_known_metrics(clean: GateResult, hostile: object) -> None:
    result = hostile()  # type: ignore[operator]
    got, want = series(render_prometheus(result, 0.0)), series(render_prometheus(clean, 0.0))
    for family in ("metric", "metric_median", "metric_mad", "metric_limit", "metric_outlier_threshold"):
        name = f"fleetforge_{family}"
        assert {s["metric"] for s in got[name]} <= METRICS.keys()
        assert len(got[name]) == len(want[name]), name
    assert len(render_prometheus(result, 0.0).splitlines()) == len(render_prometheus(clean, 0.0).splitlines())


def test_prometheus_exports_a_metric_the_spec_thresholds_name() -> None:
    recs = fleet(4)
    for i in range(1, 5):
        recs[f"node{i}"].append(check_record(f"node{i}", "custom", metrics={"custom_gbps": 50.0, "x1": 1.0}))
    settings = GateSettings(thresholds={"custom_gbps": ThresholdOverride(floor=10.0)})
    got = series(render_prometheus(decide(as_files(recs), settings=settings), 0.0))
    assert sum(s["metric"] == "custom_gbps" for s in got["fleetforge_metric"]) == 4
    assert [s["metric"] for s in got["fleetforge_metric_limit"]].count("custom_gbps") == 1
    assert not any(s["metric"] == "x1" for f in got.values() for s in f if "metric" in s)


@pytest.mark.parametrize("hostile", [with_unknown, made_up_in_stats])
def test_html_draws_one_plot_per_known_metric_only(clean: GateResult, hostile: object) -> None:
    html = pytest.importorskip("validation.reports.html")
    pytest.importorskip("matplotlib")
    result = hostile()  # type: ignore[operator]
    drawn = plots(html.render_html(result))
    assert drawn == plots(html.render_html(clean))
    assert set(drawn) <= METRICS.keys() and len(drawn) == len(set(drawn))
