"""The gate's rules on generated result sets: each test changes one thing and expects exactly that."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from fleet.results import read_results
from fleet.spec import spec_from_mapping
from tests.validation.gate.helpers import (
    HEALTHY,
    SKU,
    VERSIONS,
    as_files,
    check_record,
    fleet,
    node_records,
    run_record,
    spec_mapping,
    write,
)
from validation.gate import FleetPlan, GateInputError, GateResult, GateSettings, decide
from validation.gate.versions import meets_pin


def rules_of(result: GateResult, node: str) -> list[tuple[str, str | None, str | None]]:
    return [(r.rule, r.check, r.metric) for r in result.node(node).reasons]


def rejected(result: GateResult) -> list[str]:
    return [v.node for v in result.nodes if not v.accepted]


def test_healthy_fleet_is_accepted_with_robust_stats() -> None:
    result = decide(as_files(fleet(8)))
    assert rejected(result) == []
    assert result.outcome() == "ok"
    gemm = result.stats["gemm_bf16_tflops"]
    assert gemm.n == 8 and gemm.median is not None and abs(gemm.median - 720) < 720 * 0.01
    assert gemm.limit == pytest.approx(989 * 0.6)  # p5.48xlarge: datasheet x fraction
    assert gemm.outlier_threshold is not None and gemm.outlier_threshold < gemm.median * 0.95 + 1e-9
    assert result.settings.as_dict()["mad_scale"] == 1.4826


def test_absolute_floor_rejects_with_measured_and_expected() -> None:
    # 720 x 0.8 = 576 < floor 593.4; also far below its peers.
    result = decide(as_files(fleet(6, node4={"scale": {"gemm_bf16_tflops": 0.8}})))
    assert rejected(result) == ["node4"]
    floor = next(r for r in result.node("node4").reasons if r.rule == "floor")
    assert (floor.check, floor.metric) == ("compute", "gemm_bf16_tflops")
    assert isinstance(floor.measured, float) and floor.measured < 593.4
    assert floor.expected == pytest.approx(593.4)
    assert "outlier" in {r.rule for r in result.node("node4").reasons}
    assert result.outcome() == "rejected"


def test_whole_fleet_below_floor_is_rejected_even_though_no_one_is_an_outlier() -> None:
    scale = {"scale": {"mem_copy_gbps": 0.8}}  # 2950 x 0.8 = 2360 < 2512.5
    result = decide(as_files(fleet(5, **{f"node{i}": scale for i in range(1, 6)})))
    assert rejected(result) == [f"node{i}" for i in range(1, 6)]
    assert {r.rule for v in result.nodes for r in v.reasons} == {"floor"}


def test_spec_thresholds_override_fraction_or_floor() -> None:
    files = as_files(fleet(4))
    raised = GateSettings(thresholds=spec_from_mapping(spec_mapping(3, 1, thresholds={
        "gemm_bf16_tflops": {"fraction": 0.8},  # 989 x 0.8 = 791 > 720: everyone fails
        "temperature_max_c": {"floor": 60},  # lower is better: a ceiling of 60 C
    })).validation.thresholds)  # fmt: skip
    result = decide(files, settings=raised)
    for v in result.nodes:
        assert {(r.rule, r.metric) for r in v.reasons} == {
            ("floor", "gemm_bf16_tflops"),
            ("floor", "temperature_max_c"),
        }
    assert result.stats["temperature_max_c"].as_dict()["ceiling"] == 60
    no_reference = spec_from_mapping(spec_mapping(3, 1, thresholds={"stress_clock_ratio": {"fraction": 0.9}}))
    with pytest.raises(GateInputError, match=r"thresholds\.stress_clock_ratio\.fraction.*give a floor"):
        decide(files, settings=GateSettings.from_spec(no_reference))


def test_relative_outlier_below_median() -> None:
    # 9 % slow: far above every floor, but a synchronized job would run at its pace.
    result = decide(as_files(fleet(10, node7={"scale": {"gemm_fp16_tflops": 0.91}})))
    assert rules_of(result, "node7") == [("outlier", "compute", "gemm_fp16_tflops")]
    reason = result.node("node7").reasons[0]
    assert isinstance(reason.expected, float) and reason.measured is not None
    assert reason.expected == pytest.approx(result.stats["gemm_fp16_tflops"].outlier_threshold)


def test_tight_fleet_does_not_reject_noise_but_margin_alone_decides() -> None:
    # 0.05 % noise: k x MAD is tiny, so only the 5 % margin stands between noise and a reject.
    noisy = {f"node{i}": {"noise": 0.0005} for i in range(1, 13)}
    noisy["node3"] = {"noise": 0.0005, "scale": {"allreduce_busbw_gbps": 0.97}}
    noisy["node9"] = {"noise": 0.0005, "scale": {"allreduce_busbw_gbps": 0.94}}
    result = decide(as_files(fleet(12, **noisy)))
    assert rejected(result) == ["node9"]  # 6 % low is out, 3 % low is noise
    # MAD = 0 exactly: identical nodes, the margin rule alone decides.
    same = {f"node{i}": {"noise": 0.0} for i in range(1, 6)}
    same["node2"] = {"noise": 0.0, "scale": {"mem_copy_gbps": 0.96}}
    same["node5"] = {"noise": 0.0, "scale": {"mem_copy_gbps": 0.94}}
    result = decide(as_files(fleet(5, **same)))
    assert result.stats["mem_copy_gbps"].mad == 0
    assert rejected(result) == ["node5"]


def test_lower_is_better_outlier_is_above_the_median() -> None:
    per = {"node2": {"scale": {"temperature_max_c": 1.25}}, "node5": {"scale": {"temperature_max_c": 0.8}}}
    result = decide(as_files(fleet(8, **per)))
    assert rules_of(result, "node2") == [("outlier", "stress", "temperature_max_c")]
    assert result.node("node5").accepted  # running cooler is not a fault
    stats = result.stats["temperature_max_c"].as_dict()
    assert stats["outlier_below"] is None and stats["outlier_above"] is not None


def test_whole_degree_temperatures_need_more_than_a_percentage_of_celsius_to_be_outliers() -> None:
    # NVML's whole degrees: six nodes at exactly 70 C give a MAD of 0, and 5 % of 70 C (3.5 C)
    # alone would reject nodes 4 and 5 C warmer. The temperature's least margin is 5 C.
    temps = [70, 70, 70, 70, 70, 70, 74, 75, 76, 82]
    per = {
        f"node{i}": {"noise": 0.0, "scale": {"temperature_max_c": t / 71.0}} for i, t in enumerate(temps, 1)
    }
    result = decide(as_files(fleet(10, **per)))
    assert result.stats["temperature_max_c"].outlier_threshold == pytest.approx(75.0)
    assert rejected(result) == ["node9", "node10"], [r.message for n in result.nodes for r in n.reasons]
    (reason,) = result.node("node10").reasons
    assert reason.message.endswith("more than 5 C"), reason.message


def test_version_mismatch_against_pin() -> None:
    settings = GateSettings(pinned_versions={"driver": "550.54.15", "firmware": "1.2"})
    result = decide(
        as_files(fleet(4, node2={"versions": {**VERSIONS, "driver": "535.161.08"}})), settings=settings
    )
    assert ("version", None, "driver") in rules_of(result, "node2")
    # firmware is pinned but nobody reports it: fail closed on every node.
    for v in result.nodes:
        firmware = next(r for r in v.reasons if r.metric == "firmware")
        assert firmware.measured is None and firmware.expected == "1.2"


def test_version_mismatch_against_majority_and_a_tie() -> None:
    result = decide(as_files(fleet(5, node4={"versions": {**VERSIONS, "cuda": "12.2"}})))
    assert rejected(result) == ["node4"]
    reason = result.node("node4").reasons[0]
    assert (reason.measured, reason.expected) == ("12.2", "12.4")
    other = {**VERSIONS, "vbios": "96.00.99.00.01"}
    tie = decide(as_files(fleet(4, node1={"versions": other}, node2={"versions": other})))
    assert rejected(tie) == ["node1", "node2", "node3", "node4"]
    assert any("vbios: no majority" in n and "pinned_versions.vbios" in n for n in tie.notes)


def test_version_not_reported_where_most_nodes_report_it() -> None:
    without_ofed = {k: v for k, v in VERSIONS.items() if k != "ofed"}
    result = decide(as_files(fleet(4, node3={"versions": without_ofed})))
    assert rules_of(result, "node3") == [("version", None, "ofed")]


def test_missing_check_rejects_as_incomplete() -> None:
    result = decide(as_files(fleet(4, node2={"drop": ["collectives"]})))
    assert rules_of(result, "node2") == [("missing", "collectives", None)]
    assert result.node("node2").checks["collectives"].state == "missing"
    assert result.outcome() == "incomplete"


def test_errored_failed_and_skipped_checks() -> None:
    recs = fleet(4)
    recs["node1"].append(check_record("node1", "fabric", "error", error="timeout after 300 s"))
    recs["node2"].append(
        check_record("node2", "storage", "fail", reason="read 900 MB/s < 2000", findings=["slow"])
    )
    recs["node3"].append(check_record("node3", "fabric", "skip", reason="no InfiniBand on this SKU"))
    result = decide(as_files(recs))
    error = result.node("node1").reasons
    assert [(r.rule, r.check, r.measured) for r in error] == [("error", "fabric", "timeout after 300 s")]
    fail = result.node("node2").reasons[0]
    assert (
        (fail.rule, fail.check) == ("fail", "storage")
        and "900 MB/s" in fail.message
        and "slow" in fail.message
    )
    assert result.node("node3").accepted
    assert result.outcome() == "incomplete"  # an error outranks a fail without a spec


def test_truncated_jsonl_rejects_the_node_and_names_the_line(tmp_path: Path) -> None:
    folder = write(tmp_path / "results", fleet(4))
    path = folder / "node2.jsonl"
    text = path.read_text()
    path.write_text(text[: len(text) - 40])  # the runner died while writing the last check
    result = decide([read_results(p) for p in sorted(folder.glob("*.jsonl"))])
    assert rejected(result) == ["node2"]
    rules = rules_of(result, "node2")
    assert ("missing", "stress", None) in rules and ("unreadable", None, None) in rules
    assert any(str(path) in n and "first at line 8" in n for n in result.notes)  # run + 7 checks
    assert result.outcome() == "incomplete"


def test_file_of_garbage_is_rejected_as_unreadable_by_its_name(tmp_path: Path) -> None:
    folder = write(tmp_path / "results", fleet(3))
    (folder / "node9.jsonl").write_bytes(b"\x00\xff garbage\n{not json\n")
    result = decide([read_results(p) for p in sorted(folder.glob("*.jsonl"))])
    assert rejected(result) == ["node9"]
    assert {r.rule for r in result.node("node9").reasons} == {"unreadable"}
    assert [f.bad_lines[0][0] for f in result.files if f.bad_lines] == [1]


def test_check_records_without_a_run_record_are_unreadable() -> None:
    recs = fleet(4)
    recs["node4"] = recs["node4"][1:]  # the run record is gone: which checks were expected?
    result = decide(as_files(recs))
    assert rules_of(result, "node4") == [("unreadable", None, None)]
    assert "no run record" in result.node("node4").reasons[0].message


def test_a_resume_past_a_damaged_line_is_judged_on_its_records(tmp_path: Path) -> None:
    recs = fleet(3)
    folder = tmp_path / "results"
    folder.mkdir()
    lines = [r.to_json() for r in recs["node1"]]
    # The runner crashed mid-write after 3 records, and a resume re-ran the rest.
    (folder / "node1.jsonl").write_text("\n".join([*lines[:3], lines[3][:25], *lines[3:]]) + "\n")
    write(folder, {k: v for k, v in recs.items() if k != "node1"})
    result = decide([read_results(p) for p in sorted(folder.glob("*.jsonl"))])
    assert result.node("node1").accepted
    assert any("node1.jsonl: 1 unreadable line(s), first at line 4" in n for n in result.notes)


def test_latest_run_wins() -> None:
    recs = fleet(4)
    later = "2026-11-30T08:00:00Z"  # a different spelling of UTC than the first run: compared as instants
    recs["node1"] += node_records("node1", run_id="r2", started=later, scale={"gemm_bf16_tflops": 0.5})
    recs["node2"] = (
        node_records("node2", run_id="r0", started="2026-11-28T08:00:00+00:00", drop=["memory"])
        + recs["node2"]
    )
    result = decide(as_files(recs))
    assert result.node("node1").run_id == "r2" and not result.node("node1").accepted
    assert result.node("node2").run_id == "r1" and result.node("node2").accepted


def test_a_run_dated_ahead_by_the_nodes_clock_does_not_hide_the_run_appended_after_it() -> None:
    # node3's clock ran ahead for its first burn-in; the run appended after it is dated earlier and
    # failed. The runner only appends, so the later line is a newer run whatever its date says.
    recs = fleet(6)
    ahead = node_records("node3", run_id="r-ahead", started="2027-06-01T00:00:00+00:00")
    now = node_records(
        "node3", run_id="r-now", started="2026-11-29T10:00:00+00:00", scale={"gemm_bf16_tflops": 0.1}
    )
    recs["node3"] = ahead + now
    result = decide(as_files(recs))
    assert result.node("node3").run_id == "r-now" and not result.node("node3").accepted
    assert ("floor", "compute", "gemm_bf16_tflops") in rules_of(result, "node3")


def test_results_a_day_older_than_the_fleets_newest_are_said_to_be_old() -> None:
    recs = fleet(4)
    recs["node3"] = node_records("node3", run_id="r-old", started="2025-01-01T00:00:00+00:00")
    result = decide(as_files(recs))
    assert result.node("node3").accepted  # still judged on them, as an operator's rerun of one host is
    (note,) = [n for n in result.notes if "older than the fleet's newest burn-in" in n]
    assert "node3 (oldest 2025-01-01T00:00:00+00:00)" in note and "node1" not in note
    recent = decide(as_files(fleet(4)))
    assert not [n for n in recent.notes if "older than" in n]


@pytest.mark.parametrize("order", ["results-first", "stray-first"])
def test_two_files_of_one_node_name_are_each_judged_on_their_latest_run(order: str) -> None:
    # Two machines left node2.jsonl in two folders (the same default host name); the other one's
    # run is a minute older and failed. Which file is read first must not decide the verdict.
    recs = fleet(4)
    other = node_records(
        "node2", run_id="other", started="2026-11-29T09:59:00+00:00", scale={"gemm_bf16_tflops": 0.1}
    )
    stray = as_files({"node2": other})[0]
    stray.path = Path("/results/rack2/node2.jsonl")
    files = [*as_files(recs), stray] if order == "results-first" else [stray, *as_files(recs)]
    result = decide(files)
    assert ("floor", "compute", "gemm_bf16_tflops") in rules_of(result, "node2")
    (note,) = [n for n in result.notes if n.startswith("node2: results in 2 files")]
    assert "/results/rack2/node2.jsonl" in note


def test_a_fleet_of_one_and_of_two_uses_absolute_rules_only() -> None:
    one = decide(as_files(fleet(1, node1={"scale": {"gemm_bf16_tflops": 0.8}})))
    assert rules_of(one, "node1") == [("floor", "compute", "gemm_bf16_tflops")]
    assert any("fleet of 1 node" in n and "only the absolute rules" in n for n in one.notes)
    two = decide(as_files(fleet(2, node2={"scale": {"gemm_fp16_tflops": 0.91}})))  # an outlier at 10 nodes
    assert rejected(two) == []
    assert all(s.outlier_threshold is None for s in two.stats.values())
    assert any("fleet of 2 node" in n for n in two.notes)
    assert decide(as_files(fleet(2)), settings=GateSettings(min_fleet=2)).stats["h2d_gbps"].outlier_threshold


def test_fleet_verdict_spares_fill_in_and_the_slowest_are_spares() -> None:
    plan = FleetPlan("train-a", required=8, spares=2)
    per = {"node4": {"scale": {"gemm_bf16_tflops": 0.85}}, "node6": {"scale": {"d2h_gbps": 0.97}}}
    result = decide(as_files(fleet(10, **per)), plan=plan)
    assert rejected(result) == ["node4"]
    assert result.fleet.ready is True and result.outcome() == "ok"
    assert len(result.fleet.job) == 8 and len(result.fleet.spare) == 1
    assert result.fleet.spare == ("node6",)  # 3 % slow: accepted, but it would pace the job
    assert result.node("node6").role == "spare" and result.outcome(strict=True) == "rejected"
    short = {f"node{i}": {"drop": ["memory"]} for i in (1, 2, 3)}
    not_ready = decide(as_files(fleet(10, **short)), plan=plan)
    assert not_ready.fleet.ready is False and not_ready.fleet.job == ()
    assert not_ready.as_dict()["fleet"]["shortfall"] == 1  # type: ignore[index]
    assert not_ready.outcome() == "rejected" and not_ready.outcome(strict=True) == "incomplete"


def test_spec_hosts_without_results_are_rejected_not_omitted() -> None:
    from tests.validation.gate.helpers import onprem_spec_mapping

    spec = spec_from_mapping(onprem_spec_mapping(["node1", "node2", "node3", "node4"], nodes=3, spares=1))
    recs = {n: node_records(n, random.Random(n), sku="hgx-h100-8") for n in ("node1", "node2", "node3")}
    result = decide(as_files(recs), sku=spec.sku, plan=FleetPlan.from_spec(spec))
    assert rules_of(result, "node4") == [("missing", None, None)]
    assert "unreachable" in result.node("node4").reasons[0].message
    assert result.fleet.ready is True and sorted(result.fleet.job) == ["node1", "node2", "node3"]


def test_mixed_skus_are_an_input_error_naming_the_nodes() -> None:
    recs = fleet(3)
    recs["node9"] = node_records("node9", sku="p5e.48xlarge")
    with pytest.raises(
        GateInputError, match=r"mix SKUs: p5\.48xlarge on node1, node2, node3; p5e\.48xlarge on node9"
    ):
        decide(as_files(recs))
    with pytest.raises(
        GateInputError, match=r"not all for SKU p5e\.48xlarge \(from --sku\): p5\.48xlarge on node1"
    ):
        decide(as_files(fleet(3)), sku="p5e.48xlarge")


def test_a_metric_the_fleet_measured_but_one_node_did_not() -> None:
    recs = fleet(5)
    recs["node3"] = [
        r
        if getattr(r, "check", None) != "memory"
        else check_record("node3", "memory", "skip", reason="no device")
        for r in recs["node3"]
    ]
    result = decide(as_files(recs))
    reason = result.node("node3").reasons[0]
    assert (reason.rule, reason.check, reason.metric) == ("missing", "memory", "mem_copy_gbps")
    assert "measured on 4 of 5 nodes" in reason.message


def test_a_run_below_the_specs_level_misses_its_checks() -> None:
    recs = fleet(3)
    recs["node2"][0] = run_record("node2", level="quick")
    settings = GateSettings(level="standard")
    result = decide(as_files(recs), settings=settings)
    assert rules_of(result, "node2") == [("missing", None, None)]
    assert result.node("node2").reasons[0].measured == "quick"
    assert any("levels differ" in n for n in result.notes)


def test_every_check_of_the_fixture_lands_in_the_outcomes() -> None:
    result = decide(as_files(fleet(3)))
    assert list(result.node("node1").checks) == ["inventory", "health", *HEALTHY]
    assert result.fleet.sku == SKU


def test_nan_and_infinity_are_errors_not_measurements() -> None:
    # Files cannot carry them any more (records.py refuses the line); records built in memory by a
    # caller still can, and the gate must not measure with them.
    recs = fleet(4)
    for node, x in (("node1", float("nan")), ("node2", float("inf"))):
        record = check_record(node, "storage", metrics={"storage_read_mbps": 1.0})
        recs[node].append(record.model_copy(update={"metrics": {"storage_read_mbps": x}}))
    recs["node3"].append(check_record("node3", "storage", metrics={"storage_read_mbps": 5000.0}))
    recs["node4"].append(check_record("node4", "storage", metrics={"storage_read_mbps": 5100.0}))
    result = decide(as_files(recs))
    assert rules_of(result, "node1") == [("error", "storage", "storage_read_mbps")]
    assert rules_of(result, "node2") == [("error", "storage", "storage_read_mbps")]
    assert result.stats["storage_read_mbps"].n == 2
    assert "storage_read_mbps" not in result.node("node1").metrics  # the JSON document stays valid JSON


def test_expected_nodes_without_results_are_rejected() -> None:
    result = decide(as_files(fleet(3)), expected=["node1", "node2", "node3", "node4"])
    assert rejected(result) == ["node4"]
    assert rules_of(result, "node4") == [("missing", None, None)]
    assert "expected" in result.node("node4").reasons[0].message
    assert result.outcome() == "incomplete"


def test_a_metric_marked_floor_only_is_held_to_its_floor_but_never_to_its_peers() -> None:
    """A shared file system's throughput is not each node's own: a node below the others (here 70%
    of them) is not an outlier when the spec marks the metric `fleet_relative: false`, but a node
    below the floor is still rejected, and the stats say how each metric was judged."""
    records = fleet(8, node3={"scale": {"mem_copy_gbps": 0.9}}, node5={"scale": {"mem_copy_gbps": 0.7}})
    relative = decide(as_files(records))
    assert set(rejected(relative)) == {"node3", "node5"}
    assert relative.stats["mem_copy_gbps"].rules == ("floor", "outlier")

    marked = spec_from_mapping(spec_mapping(8, thresholds={"mem_copy_gbps": {"fleet_relative": False}}))
    result = decide(as_files(records), settings=GateSettings.from_spec(marked))
    stats = result.stats["mem_copy_gbps"]
    assert stats.rules == ("floor",) and stats.outlier_threshold is None
    assert "fleet_relative: false" in (stats.note or "")
    assert result.stats["gemm_bf16_tflops"].rules == ("floor", "outlier")
    # node3 (0.9 x 2950 = 2655) clears the floor of 2512.5; node5 (0.7 x 2950) does not.
    assert rejected(result) == ["node5"]
    assert rules_of(result, "node5") == [("floor", "memory", "mem_copy_gbps")]
    assert result.stats["mem_copy_gbps"].as_dict()["rules"] == ["floor"]


def test_fleet_relative_must_be_a_boolean() -> None:
    from fleet.spec import SpecError

    with pytest.raises(SpecError, match="fleet_relative"):
        spec_from_mapping(spec_mapping(8, thresholds={"mem_copy_gbps": {"fleet_relative": "no"}}))


@pytest.mark.parametrize(
    ("reported", "pinned", "met"),
    [
        ("570.133.20", "570.133.20", True),
        ("570.133.20", "570", True),  # a branch pin: fleetforge inventory pins the branch alone
        ("570.133.20", "570.133", True),
        ("5701.1", "570", False),
        ("575.51.03", "570", False),
        ("2.26.2", "2.26.2-1+cuda12.8", True),  # NCCL's package: revision and CUDA build
        ("2.26.2", "2.26.2-1", True),
        ("2.26.3", "2.26.2-1+cuda12.8", False),
        ("2.26.2-1", "2.26.2", False),
        (None, "570", False),
        ("96.00.89.00.01", "96.00.89.00.01", True),
        ("96.00.89.00.02", "96.00.89.00", True),
        ("1.2", "1.2.3", False),  # a longer pin than the node reports is not met
    ],
)
def test_a_pin_is_met_by_its_release_line_and_a_package_pin_by_its_version(
    reported: str | None, pinned: str, met: bool
) -> None:
    assert meets_pin(reported, pinned) is met


def test_a_branch_and_a_package_pin_accept_the_fleet_that_runs_them() -> None:
    # What fleetforge inventory hands the roles: a driver branch, NCCL's package with its CUDA build.
    versions = {**VERSIONS, "driver": "570.133.20", "nccl": "2.26.2"}
    settings = GateSettings(pinned_versions={"driver": "570", "nccl": "2.26.2-1+cuda12.8"})
    result = decide(
        as_files(fleet(3, **{f"node{i}": {"versions": versions} for i in (1, 2, 3)})), settings=settings
    )
    assert not [r for v in result.nodes for r in v.reasons if r.rule == "version"]
    other = {**versions, "nccl": "2.27.3"}
    result = decide(
        as_files(fleet(3, **{f"node{i}": {"versions": versions} for i in (1, 2)}, node3={"versions": other})),
        settings=settings,
    )
    assert ("version", None, "nccl") in rules_of(result, "node3")
