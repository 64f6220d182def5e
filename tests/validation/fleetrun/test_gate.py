"""The gate takes a fleet run's reasons (decide(host_reasons=...)): an unreachable host or a failed
task is a reject with that reason, never a silent omission, and the fleet verdict counts it."""

from __future__ import annotations

from fleet.spec import spec_from_mapping
from tests.validation.gate.helpers import as_files, fleet, spec_mapping
from validation.fleetrun.events import HostRun, TaskFailure
from validation.gate import FleetPlan, GateSettings, decide
from validation.reports.junit import render_junit
from validation.reports.prometheus import render_prometheus

UNREACHABLE = (
    "Failed to connect to the host via ssh: ssh: connect to host 10.0.0.5 port 22: Connection refused"
)


def test_unreachable_host_without_results_is_rejected_with_only_that_reason() -> None:
    files = as_files(fleet(4))
    reasons = {"node5": HostRun("node5", unreachable=UNREACHABLE).reasons()}
    result = decide(files, expected=[f"node{i}" for i in range(1, 6)], host_reasons=reasons)
    assert [v.node for v in result.nodes if not v.accepted] == ["node5"]
    v = result.node("node5")
    assert [(r.rule, r.message) for r in v.reasons] == [("missing", f"unreachable: {UNREACHABLE}")]
    assert v.incomplete and result.outcome() == "incomplete"
    # The other four keep their fleet statistics.
    assert result.stats["gemm_bf16_tflops"].n == 4


def test_without_a_reason_an_expected_host_is_still_rejected_as_missing() -> None:
    result = decide(as_files(fleet(3)), expected=["node1", "node2", "node3", "node4"])
    (reason,) = result.node("node4").reasons
    assert reason.rule == "missing" and "expected" in reason.message


def test_failed_task_on_a_host_with_results_adds_to_what_its_results_say() -> None:
    files = as_files(fleet(4))
    failure = TaskFailure("Wait for the all-reduce across nodes", "non-zero return code (rc 3)")
    reasons = {"node2": HostRun("node2", failures=[failure]).reasons()}
    result = decide(files, expected=["node1", "node2", "node3", "node4"], host_reasons=reasons)
    v = result.node("node2")
    assert not v.accepted and v.run_id is not None  # judged on its results as well
    assert [r.message for r in v.reasons] == [
        "task failed: Wait for the all-reduce across nodes: non-zero return code (rc 3)"
    ]
    assert [x.node for x in result.nodes if not x.accepted] == ["node2"]


def test_empty_reasons_change_nothing() -> None:
    result = decide(as_files(fleet(3)), host_reasons={"node1": []})
    assert all(v.accepted for v in result.nodes)


def test_spares_cover_an_unreachable_host_and_reports_carry_the_reason() -> None:
    spec = spec_from_mapping(spec_mapping(nodes=4, spares=1))
    names = [f"node{i}" for i in range(1, 6)]
    result = decide(
        as_files(fleet(4)),
        settings=GateSettings.from_spec(spec),
        plan=FleetPlan.from_spec(spec),
        expected=names,
        host_reasons={"node5": HostRun("node5", unreachable=UNREACHABLE).reasons()},
    )
    assert result.fleet.ready is True and result.outcome() == "ok"
    assert result.outcome(strict=True) == "incomplete"
    assert result.fleet.rejected == ("node5",)
    junit = render_junit(result)
    assert 'classname="node5" name="results"' in junit and "unreachable: Failed to connect" in junit
    assert 'fleetforge_node_accepted{fleet="train-a",sku="p5.48xlarge",node="node5"} 0' in render_prometheus(
        result
    )
