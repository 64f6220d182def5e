"""The JUnit report carries the gate's fleet verdict: a fleet short of the nodes its plan needs is a
failing testcase, not only a `ready=false` property CI tools ignore; --strict is mirrored too."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest
import yaml

from fleetforge import exitcodes
from fleetforge.cli import main
from tests.validation.gate.helpers import as_files, check_record, fleet, spec_mapping, write
from validation.gate import FleetPlan, GateResult, decide
from validation.reports import write_text
from validation.reports.junit import render_junit

# node2 under the floor: rejected, a measured failure; a check the gate could not see: incomplete
SLOW: Mapping[str, object] = {"scale": {"gemm_bf16_tflops": 0.8}}
MISSING: Mapping[str, object] = {"drop": ["collectives"]}


def suite_of(xml: str) -> tuple[ET.Element, ET.Element]:
    root = ET.fromstring(xml)
    (suite,) = root.findall("testsuite")
    return root, suite


def fleet_case(suite: ET.Element) -> ET.Element:
    (case,) = [c for c in suite.findall("testcase") if c.get("name") == "ready"]
    return case


def assert_counts(root: ET.Element, suite: ET.Element) -> tuple[int, int]:
    """The suite's counts are the testcases' own, on both elements; returns (failures, errors)."""
    cases = suite.findall("testcase")
    failures = sum(1 for c in cases if c.find("failure") is not None)
    errors = sum(1 for c in cases if c.find("error") is not None)
    skipped = sum(1 for c in cases if c.find("skipped") is not None)
    for element in (root, suite):
        assert element.get("tests") == str(len(cases))
        assert (element.get("failures"), element.get("errors"), element.get("skipped")) == (
            str(failures),
            str(errors),
            str(skipped),
        )
    return failures, errors


def props(suite: ET.Element) -> dict[str, str | None]:
    return {p.get("name") or "": p.get("value") for p in suite.iter("property")}


def test_a_short_fleet_of_healthy_nodes_is_a_failing_fleet_testcase() -> None:
    """Five healthy nodes, eight needed: every node passes, the gate exits 1, so must the JUnit."""
    result = decide(as_files(fleet(5)), plan=FleetPlan("train-a", required=8, spares=1))
    assert result.outcome() == "rejected" and result.fleet.ready is False
    root, suite = suite_of(render_junit(result))
    case = fleet_case(suite)
    assert case.get("classname") == "fleet train-a"
    failure = case.find("failure")
    assert failure is not None and case.find("error") is None
    assert failure.get("message") == "NOT READY: 5 accepted, 8 needed (short by 3)"
    assert failure.text and "node1" in failure.text
    assert assert_counts(root, suite) == (1, 0)  # the fleet's failure is the only one
    nodes = [c for c in suite.findall("testcase") if c is not case]
    assert nodes and all(len(c) == 0 for c in nodes)  # the per-node testcases are kept, all green
    assert props(suite)["ready"] == "false" and props(suite)["outcome"] == "rejected"


def test_a_ready_fleet_has_a_passing_fleet_testcase() -> None:
    result = decide(as_files(fleet(5)), plan=FleetPlan("train-a", required=4, spares=1))
    assert result.outcome() == "ok"
    root, suite = suite_of(render_junit(result))
    case = fleet_case(suite)
    assert case.get("classname") == "fleet train-a"
    assert case.find("failure") is None and case.find("error") is None and case.find("skipped") is None
    out = case.find("system-out")
    assert out is not None and "READY: job on 4 node(s), 1 spare(s) (4 needed)" in (out.text or "")
    assert assert_counts(root, suite) == (0, 0)


def test_strict_fails_the_fleet_testcase_when_spares_cover_a_reject() -> None:
    """Spares cover node2's reject: the gate passes, unless --strict (exit 1); the JUnit follows."""
    result = decide(as_files(fleet(6, node2=SLOW)), plan=FleetPlan("train-a", required=5, spares=1))
    assert result.fleet.ready is True
    assert (result.outcome(), result.outcome(strict=True)) == ("ok", "rejected")

    root, suite = suite_of(render_junit(result))
    assert fleet_case(suite).find("failure") is None
    assert props(suite)["outcome"] == "ok"
    nodes_failed, _ = assert_counts(root, suite)

    root, suite = suite_of(render_junit(result, strict=True))
    failure = fleet_case(suite).find("failure")
    assert failure is not None and "--strict" in (failure.get("message") or "")
    assert props(suite)["outcome"] == "rejected"
    assert assert_counts(root, suite) == (nodes_failed + 1, 0)


def test_strict_with_an_unseen_node_is_an_error_as_the_gate_exits_incomplete() -> None:
    result = decide(as_files(fleet(6, node5=MISSING)), plan=FleetPlan("train-a", required=5, spares=1))
    assert result.fleet.ready is True and result.outcome(strict=True) == "incomplete"
    root, suite = suite_of(render_junit(result, strict=True))
    case = fleet_case(suite)
    error = case.find("error")
    assert error is not None and case.find("failure") is None
    assert "--strict" in (error.get("message") or "")
    assert props(suite)["outcome"] == "incomplete"
    _, errors = assert_counts(root, suite)
    assert errors >= 2  # node5's unseen check and the fleet


def no_plan(**per_node: Mapping[str, object]) -> GateResult:
    return decide(as_files(fleet(4, **per_node)))


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: no_plan(), id="no plan, healthy"),
        pytest.param(lambda: no_plan(node2=SLOW), id="no plan, rejected"),
        pytest.param(lambda: no_plan(node2=MISSING), id="no plan, incomplete"),
        pytest.param(lambda: decide(as_files(fleet(5)), plan=FleetPlan("a", 8, 0)), id="short"),
        pytest.param(lambda: decide(as_files(fleet(5)), plan=FleetPlan("a", 5, 0)), id="ready"),
    ],
)
def test_the_junit_fails_exactly_when_the_gate_does(make: Callable[[], GateResult]) -> None:
    """Without a plan readiness is unknown and the gate's outcome is the nodes': no fleet testcase,
    the per-node ones say it. With one, the fleet testcase does. Either way red iff exit != 0."""
    result = make()
    root, suite = suite_of(render_junit(result))
    failures, errors = assert_counts(root, suite)
    assert (failures + errors > 0) == (result.outcome() != "ok")
    assert (errors > 0) == (result.outcome() == "incomplete")
    has_fleet_case = any(c.get("name") == "ready" for c in suite.findall("testcase"))
    assert has_fleet_case == (result.fleet.ready is not None)


def test_node_words_in_the_fleet_testcase_stay_well_formed(tmp_path: Path) -> None:
    """The fleet testcase lists the nodes by name; a name XML cannot hold is written escaped."""
    name = "bad\x01\ud800\ufffe<&>"
    recs = fleet(3)
    recs[name] = [r.model_copy(update={"node": name}) for r in recs.pop("node2")]
    recs[name].append(check_record("node2", "storage", "fail", reason="x").model_copy(update={"node": name}))
    result = decide(as_files(recs), plan=FleetPlan("train-a", required=8, spares=0))
    path = tmp_path / "junit.xml"
    write_text(path, render_junit(result))
    root = ET.parse(path).getroot()  # the file on disk, as a CI tool reads it
    (suite,) = root.findall("testsuite")
    failure = fleet_case(suite).find("failure")
    assert failure is not None and failure.get("message") == "NOT READY: 2 accepted, 8 needed (short by 6)"
    assert "bad\\x01\\ud800\\ufffe<&>" in (failure.text or "")
    assert_counts(root, suite)


def test_gate_cli_short_fleet_writes_a_failing_junit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The reproduction: `fleetforge gate res --spec spec8.yaml --junit ready.xml`, 5 healthy nodes."""
    folder = write(tmp_path / "res", fleet(5))
    spec = tmp_path / "spec8.yaml"
    spec.write_text(yaml.safe_dump(spec_mapping(8, 1)))
    code = main(["gate", str(folder), "--spec", str(spec), "--junit", str(tmp_path / "ready.xml")])
    capsys.readouterr()
    assert code == exitcodes.REJECTED
    root = ET.parse(tmp_path / "ready.xml").getroot()
    (suite,) = root.findall("testsuite")
    failure = fleet_case(suite).find("failure")
    assert failure is not None and failure.get("message") == "NOT READY: 5 accepted, 8 needed (short by 3)"
    assert assert_counts(root, suite) == (1, 0)
