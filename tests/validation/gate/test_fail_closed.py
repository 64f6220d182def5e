"""Ways a node, or a whole fleet, could pass without having been measured: each one rejects.

Every case here was found by reading the gate as an attacker (or an unlucky operator) would, and
each was accepted before its fix: a node whose run lists no checks, a node that skipped the check a
floor applies to, one node's pair record lifting the whole fleet's all-reduce floor, files of hosts
no longer in the fleet moving its median and its version vote, an inventory host without results,
a rerun's `results.prev` standing in for a host the new run lost, fault counters in a pass, a
temperature below absolute zero, a record line that says `status` twice, a read that fails midway,
and of two check records the gate cannot order, the better figure.
"""

from __future__ import annotations

import errno
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fleet.metrics import FABRIC_CHECK, FABRIC_METRIC, MULTINODE_CHECK, MULTINODE_METRIC
from fleet.results import iter_result_paths, parse_line, read_results
from tests.validation.gate.helpers import as_files, check_record, fleet, node_records, run_record, write
from validation.gate import GateResult, decide


def rejected(result: GateResult) -> list[str]:
    return [v.node for v in result.nodes if not v.accepted]


def rules_of(result: GateResult, node: str) -> set[tuple[str, str | None]]:
    return {(r.rule, r.metric) for r in result.node(node).reasons}


def test_a_node_whose_run_lists_no_checks_is_missing_every_limited_metric() -> None:
    records = fleet(2)
    records["node2"] = [run_record("node2", checks=[])]
    result = decide(as_files(records))
    assert rejected(result) == ["node2"]
    assert ("missing", "gemm_bf16_tflops") in rules_of(result, "node2")
    assert ("missing", "mem_copy_gbps") in rules_of(result, "node2")


def test_a_minority_that_skipped_the_check_a_floor_applies_to_is_rejected() -> None:
    records = fleet(4)
    for node in ("node3", "node4"):
        records[node] = [r for r in records[node] if getattr(r, "check", None) != "compute"]
        records[node].append(check_record(node, "compute", "skip", reason="no GPU visible"))
    result = decide(as_files(records))
    assert rejected(result) == ["node3", "node4"]
    message = next(r.message for r in result.node("node3").reasons if r.metric == "gemm_bf16_tflops")
    assert "measured on 2 of 4 nodes but not on this one (check skip)" in message


def test_one_nodes_pair_figure_lifts_the_all_reduce_floor_for_that_node_only() -> None:
    records = fleet(5)
    for node, recs in records.items():
        recs.append(check_record(node, MULTINODE_CHECK, metrics={MULTINODE_METRIC: 12.0}))
    records["node5"].append(check_record("node5", FABRIC_CHECK, metrics={FABRIC_METRIC: 900.0}))
    result = decide(as_files(records))
    # node5 is judged on its pairs; the others have none, so the fleet's floor (320) holds them,
    # and the pair figure, measured for one host, is required of every host.
    assert rejected(result) == ["node1", "node2", "node3", "node4"]
    assert rules_of(result, "node1") == {("floor", MULTINODE_METRIC), ("missing", FABRIC_METRIC)}


def test_files_of_hosts_no_longer_in_the_fleet_move_neither_its_median_nor_its_vote() -> None:
    listed = [f"node{i}" for i in range(1, 6)]
    records = fleet(5, node3={"scale": {"gemm_bf16_tflops": 0.85}})
    for i in range(6):
        ghost = f"ghost{i}"
        records[ghost] = node_records(ghost, scale={"gemm_bf16_tflops": 0.85})
    result = decide(as_files(records), listed=listed)
    assert "node3" in rejected(result)
    assert ("outlier", "gemm_bf16_tflops") in rules_of(result, "node3")
    assert result.stats["gemm_bf16_tflops"].n == 5

    # Two listed nodes on different drivers are a tie; an unlisted file cannot break it.
    pair = {n: node_records(n, versions={"driver": d}) for n, d in (("node1", "550"), ("node2", "570"))}
    pair["ghost"] = node_records("ghost", versions={"driver": "570"})
    tied = decide(as_files(pair), listed=["node1", "node2"])
    assert {("version", "driver")} <= rules_of(tied, "node1") & rules_of(tied, "node2")


def test_an_inventory_host_without_results_is_missing_not_left_out() -> None:
    records = fleet(3)
    result = decide(as_files(records), listed=["node1", "node2", "node3", "node4"])
    assert rejected(result) == ["node4"]
    assert "which the inventory lists" in result.node("node4").reasons[0].message


def test_a_reruns_previous_results_do_not_stand_in_for_a_host_the_new_run_lost(tmp_path: Path) -> None:
    out = tmp_path / "fleet-out"
    write(out / "results.prev", fleet(3))
    write(out / "results", {k: v for k, v in fleet(3).items() if k != "node3"})
    paths = list(iter_result_paths([out]))
    assert [p.relative_to(out).as_posix() for p in paths] == ["results/node1.jsonl", "results/node2.jsonl"]
    # Named outright, a .prev folder is read: the operator asked for it.
    assert len(list(iter_result_paths([out / "results.prev"]))) == 3
    result = decide([read_results(p) for p in paths], listed=["node1", "node2", "node3"])
    assert rejected(result) == ["node3"]


def test_fault_counters_in_a_pass_and_a_temperature_below_absolute_zero_are_implausible() -> None:
    records = fleet(4)
    records["node1"].append(check_record("node1", "dcgm_diag", metrics={"dcgm_diag_failed_tests": 3.0}))
    records["node2"] = [
        r.model_copy(update={"metrics": {**r.metrics, "gpu_fault_events": 7.0}})
        if getattr(r, "check", None) == "health"
        else r
        for r in records["node2"]
    ]
    records["node3"] = [
        r.model_copy(update={"metrics": {**r.metrics, "temperature_max_c": -300.0}})
        if getattr(r, "check", None) == "stress"
        else r
        for r in records["node3"]
    ]
    result = decide(as_files(records))
    assert ("implausible", "dcgm_diag_failed_tests") in rules_of(result, "node1")
    assert ("implausible", "gpu_fault_events") in rules_of(result, "node2")
    assert ("implausible", "temperature_max_c") in rules_of(result, "node3")
    reason = next(r for r in result.node("node3").reasons if r.rule == "implausible")
    assert reason.expected == ">= -273.15"


@pytest.mark.parametrize(
    ("said", "twice", "key"),
    [
        ('"status":"fail"', '"status":"fail","status":"pass"', "status"),  # the record's own field
        ('"gemm_bf16_tflops":100.0', '"gemm_bf16_tflops":100.0,"gemm_bf16_tflops":900.0', "gemm_bf16_tflops"),
    ],
)
def test_a_line_that_names_a_key_twice_is_no_record(said: str, twice: str, key: str) -> None:
    record = check_record("node1", "compute", "fail", reason="slow", metrics={"gemm_bf16_tflops": 100.0})
    text = record.model_dump_json()
    assert said in text
    with pytest.raises(ValueError, match=f"'{key}' appears twice"):
        parse_line(text.replace(said, twice))


def test_a_read_that_fails_midway_keeps_what_was_read_and_refuses_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fleet.results as results

    path = write(tmp_path / "results", {"node1": fleet(1)["node1"]}) / "node1.jsonl"
    whole = results._lines

    def failing(fh: Any) -> Iterator[tuple[int, bytes | None]]:
        lines = whole(fh)
        yield next(lines)
        yield next(lines)
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(results, "_lines", failing)
    got = read_results(path)
    assert len(got.runs) + len(got.checks) == 2
    assert [(b.line, b.problem, b.refuses_file) for b in got.bad_lines] == [
        (0, "cannot be read (Input/output error)", True)
    ]
    assert rejected(decide([got])) == ["node1"]


def test_of_two_records_a_check_cannot_order_the_worse_figure_counts() -> None:
    records = fleet(4)
    # A resumed run wrote compute twice at the same instant: 100, then 720 TFLOP/s.
    for value in (100.0, 720.0):
        records["node2"].append(check_record("node2", "compute", metrics={"gemm_bf16_tflops": value}))
    result = decide(as_files(records))
    assert result.node("node2").metrics["gemm_bf16_tflops"] == 100.0
    assert ("floor", "gemm_bf16_tflops") in rules_of(result, "node2")


def test_of_two_runs_the_gate_cannot_order_the_worse_figure_counts() -> None:
    records = fleet(4)
    # Two whole runs of node2 started at the same instant: r1 slow, r2 (the greater run_id) fast.
    records["node2"] = [
        *node_records("node2", run_id="r1", scale={"gemm_bf16_tflops": 0.14}),
        *node_records("node2", run_id="r2"),
    ]
    result = decide(as_files(records))
    assert result.node("node2").metrics["gemm_bf16_tflops"] < 593.4  # the slow run's figure
    assert ("floor", "gemm_bf16_tflops") in rules_of(result, "node2")
