"""Gate reports: JUnit XML CI tools read, Prometheus text that parses, an HTML page with its plots."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from fleet import ansible_yaml
from tests.conftest import BIN
from tests.hostile.conftest import Canary
from tests.hostile.helpers import ansible_hostvars, plain
from tests.validation.gate.helpers import CHECKS, as_files, check_record, fleet, onprem_spec_mapping
from validation.gate import FleetPlan, GateResult, decide
from validation.reports import encodable, write_text
from validation.reports.accepted_inventory import render_inventory
from validation.reports.document import render_json
from validation.reports.html import render_html
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
        if s.labels
        == {"fleet": "train-a", "sku": "p5.48xlarge", "node": "node2", "metric": "gemm_bf16_tflops"}
    ]
    assert gemm == [pytest.approx(result.node("node2").metrics["gemm_bf16_tflops"])]
    ready = families["fleetforge_fleet_ready"].samples[0]
    assert ready.value == 1 and ready.labels["fleet"] == "train-a"
    for line in text.splitlines():
        if line.startswith("# TYPE"):
            assert line.endswith(" gauge")


def test_every_prometheus_series_carries_fleet_and_sku_and_a_timestamp(result: GateResult) -> None:
    text = render_prometheus(result, generated_at=1_800_000_000.5)
    samples = [s for f in text_string_to_metric_families(text) for s in f.samples]
    assert samples and all(
        s.labels["fleet"] == "train-a" and s.labels["sku"] == "p5.48xlarge" for s in samples
    )
    stamp = [s for s in samples if s.name == "fleetforge_gate_timestamp_seconds"]
    assert [s.value for s in stamp] == [1_800_000_000.5]


def _series(text: str) -> list[tuple[str, frozenset[tuple[str, str]]]]:
    return [
        (s.name, frozenset(s.labels.items())) for f in text_string_to_metric_families(text) for s in f.samples
    ]


def test_two_fleets_prom_files_in_one_folder_parse_together_without_clashing(tmp_path: Path) -> None:
    """node_exporter's textfile collector reads every *.prom of a folder as one exposition: two
    fleets gated on the same SKU, with the same node names, must not write the same series."""
    texts = []
    for name in ("train-a", "train-b"):
        gated = decide(
            as_files(fleet(4, node2={"scale": {"gemm_bf16_tflops": 0.8}})), plan=FleetPlan(name, 3, 0)
        )
        write_text(tmp_path / f"{name}.prom", render_prometheus(gated, generated_at=1.0))
        texts.append((tmp_path / f"{name}.prom").read_text(encoding="utf-8"))
    together = _series("".join(texts))
    assert len(together) == len(_series(texts[0])) + len(_series(texts[1]))
    assert len(set(together)) == len(together), "a series is written by both fleets"
    helps: dict[str, set[str]] = {}
    for text in texts:
        for line in text.splitlines():
            if line.startswith("# HELP "):
                name, _, help_text = line[len("# HELP ") :].partition(" ")
                helps.setdefault(name, set()).add(help_text)
    assert all(len(h) == 1 for h in helps.values())  # the collector refuses differing HELP texts


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
    # One self-contained page: nothing to fetch; the one script is inline (the table sorter).
    assert page.count("<script") == 1 and "<script>" in page
    assert " src=" not in page and "<link" not in page and "@import" not in page


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
        Path(__file__).resolve().parents[3] / ".venv/bin/ansible-inventory"
    )
    if not Path(tool).exists():
        pytest.skip("ansible-inventory is not installed (the onprem extra)")
    listed = plain(
        json.loads(
            subprocess.run(
                [tool, "-i", str(path), "--list"], check=True, capture_output=True, text=True, timeout=60
            ).stdout
        )
    )
    assert sorted(listed["fleetforge_job"]["hosts"]) == sorted(result.fleet.job)
    assert listed["fleetforge_spare"]["hosts"] == list(result.fleet.spare)
    job = result.fleet.job[0]
    assert listed["_meta"]["hostvars"][job]["ansible_host"].startswith("10.0.0.")
    assert listed["_meta"]["hostvars"][job]["fleetforge_ready"] is True


# --------------------------------------------------------------------------- hostile node words

# Text as a node may write it: any code point, surrogates and control characters included.
# ('/' is left out: a node's name is its results file's name, which cannot hold one.)
ANY_TEXT = st.text(st.characters(exclude_categories=(), exclude_characters="/"), min_size=1, max_size=40)
NASTY = [
    "\x00\x01\x1b[31mred",
    "lone\ud800surrogate",
    "\ufffe\uffff",
    "]]><!--",
    'a"b\\c\nd',
    "$\\frac{1}{0}$",
    "$unclosed",
    "$\\foo$",  # mathtext cannot parse it: the old plots aborted the whole page
    "<img src=x onerror=alert(1)>",
    "{{ lookup('pipe', 'id') }}",
]


def renamed(name: str, reason: str = "ok") -> GateResult:
    """A fleet of three where node2 is called `name` and failed a check with `reason`."""
    recs = fleet(3)
    recs[name] = [r.model_copy(update={"node": name}) for r in recs.pop("node2")]
    # model_copy, as a forged file could: pydantic would refuse a lone surrogate on the way in
    recs[name].append(
        check_record("node2", "storage", "fail", reason="x").model_copy(
            update={"node": name, "reason": reason}
        )
    )
    return decide(as_files(recs))


def junit_round_trip(result: GateResult, tmp_path: Path) -> ET.Element:
    path = tmp_path / "junit.xml"
    write_text(path, render_junit(result))
    return ET.parse(path).getroot()  # the file on disk, as a CI tool reads it


@pytest.mark.parametrize("name", NASTY)
def test_junit_stays_well_formed_whatever_a_node_wrote(name: str, tmp_path: Path) -> None:
    root = junit_round_trip(renamed(name, reason=name), tmp_path)
    classnames = {c.get("classname") for c in root.iter("testcase")}
    assert len(classnames) == 3
    bad = [c for c in root.iter("testcase") if c.find("failure") is not None or c.find("error") is not None]
    assert bad, "the renamed node failed a check: its testcase must say so"
    if name.isprintable():
        assert name in classnames


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=ANY_TEXT, reason=ANY_TEXT)
def test_junit_parses_for_any_node_name_and_reason(name: str, reason: str, tmp_path: Path) -> None:
    if name in {"node1", "node3"}:
        return
    root = junit_round_trip(renamed(name, reason=reason), tmp_path)
    assert int(root.get("tests") or 0) == len(list(root.iter("testcase")))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=ANY_TEXT)
def test_prometheus_text_parses_back_to_the_node_name(name: str, tmp_path: Path) -> None:
    if name in {"node1", "node3"}:
        return
    path = tmp_path / "gate.prom"
    write_text(path, render_prometheus(renamed(name)))
    text = path.read_bytes().decode("utf-8")  # as the exporter reads it: a CR is not a line end
    samples = [s for f in text_string_to_metric_families(text) for s in f.samples]
    nodes = {s.labels["node"] for s in samples if "node" in s.labels}
    assert nodes == {"node1", "node3", encodable(name)}


@pytest.mark.parametrize("name", NASTY)
def test_html_escapes_node_words_and_draws_them_as_typed(name: str, tmp_path: Path) -> None:
    page = render_html(renamed(name, reason=f"<b>{name}</b>"))
    write_text(tmp_path / "gate.html", page)
    assert "<b>" not in page and "<img" not in page
    assert "\x00" not in page and "\x1b" not in page


def test_reports_are_readable_per_the_umask_and_replace_atomically(tmp_path: Path) -> None:
    path = tmp_path / "gate.prom"
    old = os.umask(0o022)
    try:
        write_text(path, "first\n")
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o644  # a node exporter running as another user reads it
    path.chmod(0o640)
    write_text(path, "second\n")
    assert path.read_text() == "second\n" and path.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gate.prom"]


@pytest.fixture
def canary(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Canary]:
    c = Canary(tmp_path_factory.mktemp("canary") / "pwned")
    yield c
    c.assert_untouched()


def test_accepted_inventory_values_are_never_templated(tmp_path: Path, canary: Canary) -> None:
    recs = {
        name: [r.model_copy(update={"node": name}) for r in rs]
        for name, rs in zip(["gpu1", "gpu2", "gpu3"], fleet(3).values(), strict=True)
    }
    result = decide(as_files(recs), plan=FleetPlan(canary.pipe, required=2, spares=1))
    path = tmp_path / "accepted.yml"
    write_text(path, render_inventory(result))
    rendered = ansible_hostvars(path)
    assert set(rendered) == {"gpu1", "gpu2", "gpu3"}
    assert rendered["gpu1"]["fleetforge_fleet"] == canary.pipe
    canary.assert_untouched()


@pytest.mark.parametrize("name", ["gpu[1:500]", "{{ x }}", "gpu1:2222", "a b"])
def test_an_accepted_node_that_cannot_be_a_host_fails_the_inventory_closed(name: str, tmp_path: Path) -> None:
    recs = fleet(3)
    recs[name] = [r.model_copy(update={"node": name}) for r in recs.pop("node2")]
    result = decide(as_files(recs), plan=FleetPlan("train-a", required=2, spares=0))
    assert result.fleet.ready is True and name in result.fleet.accepted
    path = tmp_path / "accepted.yml"
    write_text(path, render_inventory(result))
    listed = plain(
        json.loads(
            subprocess.run(
                [str(BIN / "ansible-inventory"), "-i", str(path), "--list"],
                check=True,
                capture_output=True,
                text=True,
                timeout=60,
            ).stdout
        )
    )
    assert listed["_meta"]["hostvars"] == {}  # no host at all: nothing for a launcher to land on
    doc = ansible_yaml.load(path.read_text())
    assert doc["all"]["children"]["fleetforge_accepted"]["vars"]["fleetforge_ready"] is False
    assert doc["all"]["children"]["fleetforge_accepted"]["vars"]["fleetforge_refused_host_names"] == [name]
