"""Gate reports: JUnit XML CI tools read, Prometheus text that parses, an HTML page with its plots."""

from __future__ import annotations

import json
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.validation.gate_fixtures import CHECKS, as_files, check_record, fleet, onprem_spec_mapping
from validation.gate import FleetPlan, GateResult, decide
from validation.reports.document import render_json
from validation.reports.html import render_html
from validation.reports.inventory import render_inventory
from validation.reports.junit import render_junit
from validation.reports.prometheus import render_prometheus


@pytest.fixture(scope="module")
def result() -> GateResult:
    recs = fleet(
        6,
        node2={"scale": {"gemm_bf16_tflops": 0.8}},
        node5={"drop": ["collectives"], "versions": {"driver": "535", "cuda": "12.4"}},
    )
    recs["node3"].append(check_record("node3", "fabric", "skip", reason='no "InfiniBand" <here>'))
    recs["node6"].append(check_record("node6", "storage", "fail", reason="read <900> MB/s & falling"))
    return decide(as_files(recs), plan=FleetPlan("train-a", required=3, spares=1))


def test_junit_has_a_testcase_per_node_and_check_and_fails_the_rejected(result: GateResult) -> None:
    root = ET.fromstring(render_junit(result))
    assert root.tag == "testsuites"
    (suite,) = root.findall("testsuite")
    cases = suite.findall("testcase")
    keys = {(c.get("classname"), c.get("name")) for c in cases}
    for node in (f"node{i}" for i in range(1, 7)):
        for check in (*CHECKS, "versions", "results"):
            assert (node, check) in keys, (node, check)
    assert len(keys) == len(cases)  # one testcase per node x check, no duplicates

    def outcome(node: str, check: str) -> str:
        case = next(c for c in cases if c.get("classname") == node and c.get("name") == check)
        children = [e.tag for e in case]
        assert len(children) <= 1
        return children[0] if children else "pass"

    compute = next(c for c in cases if c.get("classname") == "node2" and c.get("name") == "compute")
    failure = compute.find("failure")
    assert failure is not None and "floor" in (failure.get("type") or "")
    assert "gemm_bf16_tflops" in (failure.get("message") or "") and failure.text
    assert outcome("node5", "collectives") == "error"  # missing: the gate could not see it
    assert outcome("node5", "versions") == "failure"
    assert outcome("node3", "fabric") == "skipped"
    assert all(outcome("node1", c) == "pass" for c in (*CHECKS, "versions", "results"))
    failed = sum(1 for c in cases if c.find("failure") is not None)
    errored = sum(1 for c in cases if c.find("error") is not None)
    skipped = sum(1 for c in cases if c.find("skipped") is not None)
    for element in (root, suite):
        assert element.get("tests") == str(len(cases))
        assert (element.get("failures"), element.get("errors"), element.get("skipped")) == tuple(
            map(str, (failed, errored, skipped))
        )
        float(element.get("time") or "x")


def test_prometheus_text_parses_and_carries_the_verdicts(result: GateResult) -> None:
    text = render_prometheus(result)
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert {
        "fleetforge_node_accepted",
        "fleetforge_node_reject_reasons",
        "fleetforge_metric",
        "fleetforge_metric_median",
        "fleetforge_metric_limit",
        "fleetforge_metric_outlier_threshold",
        "fleetforge_fleet_nodes",
        "fleetforge_fleet_ready",
    } <= set(families)
    accepted = {s.labels["node"]: s.value for s in families["fleetforge_node_accepted"].samples}
    assert accepted == {"node1": 1, "node2": 0, "node3": 1, "node4": 1, "node5": 0, "node6": 0}
    reasons = {
        (s.labels["node"], s.labels["rule"]) for s in families["fleetforge_node_reject_reasons"].samples
    }
    assert (
        ("node2", "floor") in reasons and ("node5", "missing") in reasons and ("node5", "version") in reasons
    )
    gemm = [
        s.value
        for s in families["fleetforge_metric"].samples
        if s.labels == {"node": "node2", "metric": "gemm_bf16_tflops"}
    ]
    assert gemm == [pytest.approx(result.node("node2").metrics["gemm_bf16_tflops"])]
    ready = families["fleetforge_fleet_ready"].samples[0]
    assert ready.value == 1 and ready.labels["fleet"] == "train-a"
    for line in text.splitlines():
        if line.startswith("# TYPE"):
            assert line.endswith(" gauge")


def test_prometheus_escapes_label_values() -> None:
    recs = fleet(1)
    odd = 'we"ird\\node'
    recs = {odd: [r.model_copy(update={"node": odd}) for r in recs["node1"]]}
    text = render_prometheus(decide(as_files(recs)))
    samples = [s for f in text_string_to_metric_families(text) for s in f.samples]
    assert {s.labels["node"] for s in samples if "node" in s.labels} == {odd}


def test_html_has_one_plot_per_metric_with_thresholds_and_the_verdicts(result: GateResult) -> None:
    page = render_html(result)
    measured = [m for m, s in result.stats.items() if s.n > 0]
    assert page.count("<svg") == len(measured) >= 8
    for metric in measured:
        assert f'id="plot-{metric}"' in page
    assert "median" in page and "floor 593.4" in page and "outlier threshold" in page
    assert "READY" in page and "node2" in page and "rejected on gemm_bf16_tflops" in page
    assert "read &lt;900&gt; MB/s &amp; falling" in page and "<900>" not in page  # record text is escaped
    assert "<script" not in page  # one self-contained page, nothing to fetch or run


def test_json_document_round_trips(result: GateResult) -> None:
    doc = json.loads(render_json(result))
    assert doc["fleet"]["job"] and doc["fleet"]["required"] == 3
    assert doc["rules"]["mad_scale"] == 1.4826
    assert doc["outcome"] == result.outcome()


def test_inventory_is_a_valid_ansible_inventory(tmp_path: Path) -> None:
    from fleet.spec import spec_from_mapping

    names = ["gpu1", "gpu2", "gpu3"]
    spec = spec_from_mapping(onprem_spec_mapping(names, nodes=2, spares=1))
    recs = fleet(3)
    recs = {
        new: [r.model_copy(update={"node": new, "sku": spec.sku}) for r in recs[old]]
        for new, old in zip(names, recs, strict=True)
    }
    result = decide(as_files(recs), plan=FleetPlan.from_spec(spec))
    text = render_inventory(result, spec.hosts or ())
    path = tmp_path / "inventory.yml"
    path.write_text(text)
    tool = shutil.which("ansible-inventory") or str(
        Path(__file__).resolve().parents[2] / ".venv/bin/ansible-inventory"
    )
    if not Path(tool).exists():
        pytest.skip("ansible-inventory is not installed (the onprem extra)")
    listed = json.loads(
        subprocess.run(
            [tool, "-i", str(path), "--list"], check=True, capture_output=True, text=True, timeout=60
        ).stdout
    )
    assert sorted(listed["fleetforge_job"]["hosts"]) == sorted(result.fleet.job)
    assert listed["fleetforge_spare"]["hosts"] == list(result.fleet.spare)
    job = result.fleet.job[0]
    assert listed["_meta"]["hostvars"][job]["ansible_host"].startswith("10.0.0.")
    assert listed["_meta"]["hostvars"][job]["fleetforge_ready"] is True
