"""The fabric metrics' floors: the catalog's multi-node reference where the cloud publishes one
(AWS), fleet-relative only where it does not (GCP, Azure), and never a floor that rejects every
member for a figure they all share when the pair rounds can say who is slow."""

from __future__ import annotations

from collections.abc import Mapping

from fleet.catalog import get_sku
from fleet.metrics import FABRIC_CHECK, FABRIC_METRIC, MULTINODE_CHECK, MULTINODE_METRIC
from fleet.results import Record
from fleet.spec import spec_from_mapping
from tests.validation.gate.helpers import STARTED, as_files, check_record, fleet, spec_mapping
from validation.gate import GateResult, GateSettings, decide


def _with_fabric(
    records: dict[str, list[Record]],
    whole_fleet: float | None,
    pairs: Mapping[str, float] | None = None,
    sku: str = "p5.48xlarge",
) -> dict[str, list[Record]]:
    """Append what `fleetforge fleet burnin` appends: the whole-fleet all-reduce (the same figure on
    every member) and, when given, each host's best pair."""
    for node, recs in records.items():
        if whole_fleet is not None:
            recs.append(check_record(node, MULTINODE_CHECK, metrics={MULTINODE_METRIC: whole_fleet}, sku=sku))
        if pairs is not None:
            recs.append(check_record(node, FABRIC_CHECK, metrics={FABRIC_METRIC: pairs[node]}, sku=sku))
    return records


def _rejected(result: GateResult) -> list[str]:
    return [v.node for v in result.nodes if v.verdict == "reject"]


def _reasons(result: GateResult, node: str) -> list[tuple[str, str | None]]:
    return [(r.rule, r.metric) for r in result.node(node).reasons]


def _gcp(n: int) -> dict[str, list[Record]]:
    return fleet(n, **{f"node{i}": {"sku": "a3-megagpu-8g"} for i in range(1, n + 1)})


def test_a_gpu_skus_catalog_floor_is_applied_to_the_whole_fleet_all_reduce() -> None:
    ref = get_sku("p5.48xlarge").reference[MULTINODE_METRIC]
    assert (ref.value, ref.kind, ref.fraction) == (800, "threshold", 0.4)
    healthy = decide(as_files(_with_fabric(fleet(8), 650.0)))
    stats = healthy.stats[MULTINODE_METRIC]
    assert _rejected(healthy) == []
    assert stats.limit == 320.0 and "p5.48xlarge reference 800 (threshold) x 0.4" in (
        stats.limit_source or ""
    )
    assert stats.rules[0] == "floor"

    # No pair figures: nothing tells the members apart, so every one is held to the floor.
    slow = decide(as_files(_with_fabric(fleet(8), 200.0)))
    assert _rejected(slow) == [f"node{i}" for i in range(1, 9)]
    assert _reasons(slow, "node4") == [("floor", MULTINODE_METRIC)]
    assert "below the floor 320" in slow.node("node4").reasons[0].message


def test_with_pair_figures_a_slow_whole_fleet_rejects_only_the_host_slow_in_its_pairs() -> None:
    pairs = {f"node{i}": 700.0 for i in range(1, 9)} | {"node3": 90.0}
    result = decide(as_files(_with_fabric(fleet(8), 150.0, pairs)))
    assert _rejected(result) == ["node3"]
    assert ("floor", FABRIC_METRIC) in _reasons(result, "node3")
    assert result.stats[FABRIC_METRIC].limit == 320.0
    (note,) = [n for n in result.notes if n.startswith(MULTINODE_METRIC)]
    assert "names no host" in note and FABRIC_METRIC in note and "320" in note


HUNG = "no result within 300 s: the rendezvous at node1:29400 or the all-reduce across 8 nodes did not finish"


def test_a_whole_fleet_all_reduce_error_rejects_only_hosts_without_passing_pairs_measured_after_it() -> None:
    """One host hangs the whole-fleet all-reduce: every member's launcher times out with an error
    record. The pair rounds that follow tell the hosts apart; a host without that evidence is not
    let off (fail closed)."""
    errored, later, earlier = "2026-11-29T11:00:00.000+00:00", "2026-11-29T11:05:00.000+00:00", STARTED
    records = fleet(8)
    for node, recs in records.items():
        recs.append(check_record(node, MULTINODE_CHECK, "error", error=HUNG, started=errored))
        if node == "node3":  # the host that hung it: the rounds found it slow with every partner
            pairs = check_record(
                node,
                FABRIC_CHECK,
                "fail",
                reason="fabric: bad with every partner",
                metrics={FABRIC_METRIC: 90.0},
                started=later,
            )
        elif node == "node6":  # pairs that passed, but before the all-reduce: no word on the hang
            pairs = check_record(node, FABRIC_CHECK, metrics={FABRIC_METRIC: 700.0}, started=earlier)
        else:
            pairs = check_record(node, FABRIC_CHECK, metrics={FABRIC_METRIC: 700.0}, started=later)
        if node != "node5":  # no pairs measured at all
            recs.append(pairs)
    result = decide(as_files(records))
    assert _rejected(result) == ["node3", "node5", "node6"]
    for node in ("node3", "node5", "node6"):
        assert any(
            r.rule == "error" and r.check == MULTINODE_CHECK and HUNG in r.message
            for r in result.node(node).reasons
        )
    assert result.node("node1").checks[MULTINODE_CHECK].state == "error"  # shown as it was, not a pass
    (note,) = [n for n in result.notes if n.startswith(MULTINODE_CHECK)]
    assert "node1, node2, node4, node7, node8" in note and HUNG[:40] in note
    assert "names no host" in note and FABRIC_CHECK in note


def test_a_single_node_burn_in_is_not_rejected_for_the_fleet_runs_metrics() -> None:
    result = decide(as_files(fleet(4)))
    assert _rejected(result) == []
    assert MULTINODE_METRIC not in result.stats and FABRIC_METRIC not in result.stats
    notes = [n for n in result.notes if n.startswith((MULTINODE_METRIC, FABRIC_METRIC))]
    assert len(notes) == 2 and all("was not applied" in n for n in notes)


def test_a_floor_the_spec_sets_still_rejects_a_fleet_that_never_measured_it() -> None:
    spec = spec_from_mapping(spec_mapping(4, thresholds={MULTINODE_METRIC: {"floor": 100}}))
    result = decide(as_files(fleet(4)), settings=GateSettings.from_spec(spec))
    assert _rejected(result) == ["node1", "node2", "node3", "node4"]
    assert _reasons(result, "node1") == [("missing", MULTINODE_METRIC)]


def test_the_specs_threshold_overrides_the_catalogs_floor() -> None:
    spec = spec_from_mapping(spec_mapping(8, thresholds={MULTINODE_METRIC: {"floor": 100}}))
    result = decide(as_files(_with_fabric(fleet(8), 200.0)), settings=GateSettings.from_spec(spec))
    assert _rejected(result) == []
    assert result.stats[MULTINODE_METRIC].limit == 100.0


def test_a_sku_without_a_published_multinode_figure_is_judged_fleet_relative_only() -> None:
    sku = get_sku("a3-megagpu-8g")
    assert MULTINODE_METRIC not in sku.reference and FABRIC_METRIC not in sku.reference
    pairs = {f"node{i}": 180.0 + i for i in range(1, 9)} | {"node6": 40.0}
    result = decide(as_files(_with_fabric(_gcp(8), 150.0, pairs, sku="a3-megagpu-8g")))
    assert _rejected(result) == ["node6"]
    assert _reasons(result, "node6") == [("outlier", FABRIC_METRIC)]
    for metric in (MULTINODE_METRIC, FABRIC_METRIC):
        stats = result.stats[metric]
        assert stats.limit is None and stats.rules == ("outlier",)
        assert (stats.note or "").startswith("fleet-relative only: no floor (a3-megagpu-8g has no catalog")
        (note,) = [n for n in result.notes if n.startswith(metric)]
        assert "judged fleet-relative only" in note and "a3-megagpu-8g" in note
    assert result.as_dict()["stats"][FABRIC_METRIC]["note"] == result.stats[FABRIC_METRIC].note


def test_a_gpu_metric_with_a_floor_carries_no_fleet_relative_only_note() -> None:
    result = decide(as_files(fleet(8)))
    assert result.stats["mem_copy_gbps"].note is None
    assert result.stats["temperature_max_c"].note is not None  # no reference: fleet-relative only
