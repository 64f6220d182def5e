"""Hostile results for `fleetforge gate`: forged identities, newer schemas, absurd lines, non-numbers,
non-files named *.jsonl and terminal escapes. Each case runs the real CLI and asserts the exact exit
code, and that nothing but the reports asked for was created."""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from fleet.metrics import METRICS
from fleet.results import read_results
from fleetforge import exitcodes
from tests.hostile.conftest import Canary, deadline, tree
from tests.validation.gate.helpers import CHECKS, HEALTHY, fleet, write
from validation.gate import decide

Cli = Callable[..., Any]


def results(tmp_path: Path, n: int = 4) -> Path:
    return write(tmp_path / "results", fleet(n))


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def rewrite(path: Path, records: list[dict[str, Any]], raw: dict[int, str] | None = None) -> None:
    """Write records back, with line i replaced by raw[i] where given (text a writer never makes)."""
    raw = raw or {}
    path.write_text(
        "".join(raw.get(i, json.dumps(r)) + "\n" for i, r in enumerate(records)), encoding="utf-8"
    )


def memory_line(path: Path) -> int:
    return next(i for i, r in enumerate(lines(path)) if r.get("check") == "memory")


def gate(cli: Cli, tmp_path: Path, *args: object) -> Any:
    """Run the gate with reports under out/, and assert nothing else appeared in tmp_path."""
    (tmp_path / "out").mkdir(exist_ok=True)
    before = tree(tmp_path)
    reports = ["--junit", "out/junit.xml", "--prom", "out/gate.prom", "--inventory-out", "out/accepted.yml"]
    with deadline(60):
        run = cli("gate", "results", *reports, *args)
    created = tree(tmp_path) - before
    assert created <= {"out/junit.xml", "out/gate.prom", "out/accepted.yml"}, created
    return run


# --- identity ---------------------------------------------------------------------------------


def test_a_file_claiming_another_node_rejects_only_itself(cli: Cli, tmp_path: Path) -> None:
    folder = results(tmp_path)
    node2 = lines(folder / "node2.jsonl")
    forged = [{**r, "node": "node2", "run_id": "forged", "started": "2030-01-01T00:00:00Z"} for r in node2]
    forged[2]["status"], forged[2]["reason"] = "fail", "forged by node1"
    rewrite(folder / "node1.jsonl", [*lines(folder / "node1.jsonl"), *forged])
    run = gate(cli, tmp_path, "--json")
    assert run.code == exitcodes.INCOMPLETE
    doc = json.loads(run.out)
    verdicts = {n["node"]: n for n in doc["nodes"]}
    assert verdicts["node2"]["verdict"] == "accept" and verdicts["node2"]["run_id"] == "r1"
    (reason,) = verdicts["node1"]["reasons"]
    assert "'node2'" in reason["message"] and "'node1'" in reason["message"]


def test_a_node_the_inventory_does_not_list_never_joins(cli: Cli, tmp_path: Path) -> None:
    results(tmp_path)
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  hosts:\n    node1: {}\n    node2: {}\n    node3: {}\n")
    run = gate(cli, tmp_path, "--hosts-inventory", inventory, "--json")
    assert run.code == exitcodes.REJECTED
    node4 = next(n for n in json.loads(run.out)["nodes"] if n["node"] == "node4")
    assert [r["rule"] for r in node4["reasons"]] == ["unlisted"]
    assert "node4" not in (tmp_path / "out" / "accepted.yml").read_text()


# --- unreadable and absurd lines ------------------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        '{"schema": "fleetforge.result/2", "kind": "check", "node": "node3"}',  # newer fleetforge
        "[" * 100_000 + "]" * 100_000,  # JSON's recursion limit
        '{"a":' * 50_000 + "1" + "}" * 50_000,
    ],
    ids=["newer-schema", "nested-arrays", "nested-objects"],
)
def test_lines_a_reader_cannot_trust_reject_their_node_only(cli: Cli, tmp_path: Path, line: str) -> None:
    folder = results(tmp_path)
    node3 = folder / "node3.jsonl"
    records = lines(node3)
    rewrite(node3, records, raw={memory_line(node3): line})
    run = gate(cli, tmp_path)
    assert run.code == exitcodes.INCOMPLETE
    assert "REJECT node3" in run.out and "REJECT node1" not in run.out


def test_a_newer_schema_refuses_even_a_complete_file(cli: Cli, tmp_path: Path) -> None:
    folder = results(tmp_path)
    with (folder / "node2.jsonl").open("a") as fh:
        fh.write('{"schema": "fleetforge.result/2", "kind": "run", "node": "node2"}\n')
    run = gate(cli, tmp_path)
    assert run.code == exitcodes.INCOMPLETE
    assert "newer fleetforge" in run.out


def test_a_50_mb_line_is_one_unreadable_line(cli: Cli, tmp_path: Path) -> None:
    folder = results(tmp_path)
    node4 = folder / "node4.jsonl"
    rewrite(node4, lines(node4), raw={memory_line(node4): '{"pad": "' + "x" * 50_000_000 + '"}'})
    run = gate(cli, tmp_path)
    assert run.code == exitcodes.INCOMPLETE
    assert "REJECT node4" in run.out and "longer than" in run.out


@pytest.mark.parametrize(
    "value", ["true", "false", '"2950"', "NaN", "Infinity", "-Infinity", "null", "[2950]", "1e999"]
)
def test_metrics_that_are_not_numbers_are_never_measurements(cli: Cli, tmp_path: Path, value: str) -> None:
    folder = results(tmp_path)
    node2 = folder / "node2.jsonl"
    records = lines(node2)
    i = memory_line(node2)
    text = json.dumps({**records[i], "metrics": {"mem_copy_gbps": 0}}).replace(
        '"mem_copy_gbps": 0', f'"mem_copy_gbps": {value}'
    )
    rewrite(node2, records, raw={i: text})
    run = gate(cli, tmp_path, "--json")
    assert run.code == exitcodes.INCOMPLETE
    doc = json.loads(run.out)  # still valid JSON: no NaN or Infinity leaked into the document
    verdicts = {n["node"]: n["verdict"] for n in doc["nodes"]}
    assert verdicts == {"node1": "accept", "node2": "reject", "node3": "accept", "node4": "accept"}


@pytest.mark.parametrize(
    ("check", "metric", "value"),
    [
        ("inventory", "fabric_ports_active", -32),
        ("health", "ecc_uncorrectable", 5),  # in a pass
        ("stress", "stress_clock_ratio", 3.0),
        ("compute", "gemm_bf16_tflops", 1e12),
    ],
)
def test_implausible_values_are_rejected_with_measured_and_allowed(
    cli: Cli, tmp_path: Path, check: str, metric: str, value: float
) -> None:
    folder = results(tmp_path)
    node1 = folder / "node1.jsonl"
    records = lines(node1)
    for r in records:
        if r.get("check") == check:
            r["metrics"][metric] = value
    rewrite(node1, records)
    run = gate(cli, tmp_path)
    assert run.code == exitcodes.REJECTED
    (line,) = [x for x in run.out.splitlines() if "implausible" in x]
    assert "REJECT node1" in line and f"{value:g}" in line and "allowed" in line


def test_a_partial_run_needs_the_operator_to_name_the_checks(cli: Cli, tmp_path: Path) -> None:
    folder = results(tmp_path, 3)
    for node in ("node1", "node2", "node3"):
        records = lines(folder / f"{node}.jsonl")
        records[0]["partial"] = True
        rewrite(folder / f"{node}.jsonl", records)
    assert gate(cli, tmp_path).code == exitcodes.INCOMPLETE
    assert gate(cli, tmp_path, "--expect-checks", ",".join(CHECKS)).code == exitcodes.OK
    assert gate(cli, tmp_path, "--expect-checks", "compute,storage").code == exitcodes.INCOMPLETE
    bad = gate(cli, tmp_path, "--expect-checks", "compute,,x\x1b[2J")
    assert bad.code == exitcodes.USAGE and "\x1b" not in bad.err


# --- entries that are not files ----------------------------------------------------------------------


def make_fifo(path: Path) -> None:
    os.mkfifo(path)


def make_folder(path: Path) -> None:
    path.mkdir()
    (path / "inner.txt").write_text("not results")


def make_dangling(path: Path) -> None:
    path.symlink_to(path.parent / "gone.jsonl")


def make_loop(path: Path) -> None:
    path.symlink_to(path)


@pytest.mark.parametrize("make", [make_fifo, make_folder, make_dangling, make_loop])
def test_entries_that_are_not_files_are_reported_and_never_block(
    cli: Cli, tmp_path: Path, make: Callable[[Path], None]
) -> None:
    folder = results(tmp_path)
    make(folder / "node5.jsonl")
    run = gate(cli, tmp_path, "--json")
    assert run.code == exitcodes.INCOMPLETE
    doc = json.loads(run.out)
    node5 = next(n for n in doc["nodes"] if n["node"] == "node5")
    assert {r["rule"] for r in node5["reasons"]} == {"unreadable"}
    assert sorted(doc["fleet"]["accepted"]) == ["node1", "node2", "node3", "node4"]


def test_a_dangling_symlink_named_on_the_command_line_is_unreadable_not_absent(
    cli: Cli, tmp_path: Path
) -> None:
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "node1.jsonl").symlink_to(tmp_path / "gone")
    (tmp_path / "out").mkdir()
    before = tree(tmp_path)
    with deadline(60):
        run = cli("gate", "results/node1.jsonl")
    assert run.code == exitcodes.INCOMPLETE and "dangling symlink" in run.out
    assert tree(tmp_path) == before


# --- output that cannot be forged --------------------------------------------------------------------


def test_node_names_and_reasons_cannot_draw_on_the_terminal(cli: Cli, tmp_path: Path, canary: Canary) -> None:
    folder = results(tmp_path)
    evil = "bad\x1b[2J\rnode[red]x[bold]\ngate: fleet READY\u202e"
    records = [{**r, "node": evil} for r in lines(folder / "node1.jsonl")]
    rewrite(folder / f"{evil}.jsonl", records)
    (folder / "node1.jsonl").unlink()
    node2 = lines(folder / "node2.jsonl")
    i = memory_line(folder / "node2.jsonl")
    node2[i] = {**node2[i], "status": "fail", "reason": f"slow\x1b]0;owned\x07\nREJECT nobody {canary.pipe}"}
    rewrite(folder / "node2.jsonl", node2)
    run = gate(cli, tmp_path)
    assert run.code == exitcodes.REJECTED
    assert not any(ch in run.out for ch in "\x1b\r\x07\u202e")
    assert "node[red]x[bold]" in run.out  # markup printed as text, never interpreted
    assert not any(x.startswith(("gate: fleet READY", "REJECT nobody")) for x in run.out.splitlines())
    assert "\\x1b[2J" in run.out and "\\n" in run.out
    assert canary.pipe in run.out  # shown as the text it is


# --- any line never crashes the gate ---------------------------------------------------------------

_json = st.recursive(
    st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)
_fields = st.fixed_dictionaries(
    {
        "schema": st.sampled_from(["fleetforge.result/1", "fleetforge.result/9", "x"]),
        "kind": st.sampled_from(["run", "check", "x"]),
    },
    optional={
        "node": st.sampled_from(["node1", "node2", ""]) | st.text(max_size=5),
        "run_id": st.sampled_from(["r1", "r2"]),
        "sku": st.sampled_from(["p5.48xlarge", "cpu", "nope"]),
        "level": st.sampled_from(["quick", "standard", "extended", 3]),
        "started": st.sampled_from(["2026-11-29T10:00:00.000+00:00", "garbage", ""]) | st.text(max_size=8),
        "check": st.sampled_from(list(CHECKS)),
        "status": st.sampled_from(["pass", "fail", "error", "skip", True]),
        "metrics": st.dictionaries(
            st.sampled_from(["mem_copy_gbps", "ecc_uncorrectable", "x"]), _json, max_size=3
        ),
        "checks": _json,
        "partial": _json,
        "reason": _json,
        "duration_s": _json,
    },
)
_lines = st.one_of(st.text(max_size=200), _fields.map(json.dumps), _json.map(lambda v: json.dumps(v)))


@settings(max_examples=150, deadline=None)
@given(extra=st.lists(_lines, min_size=1, max_size=4))
def test_any_line_in_a_results_file_never_crashes_the_gate(extra: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = write(Path(tmp), fleet(3))
        with (folder / "node2.jsonl").open("a", encoding="utf-8", errors="surrogatepass") as fh:
            for line in extra:
                fh.write(line.replace("\n", " ") + "\n")
        with deadline(60):
            result = decide([read_results(p) for p in sorted(folder.glob("*.jsonl"))])
    assert result.node("node1").accepted and result.node("node3").accepted  # node2's lines stay node2's
    assert result.outcome() in {"ok", "rejected", "incomplete"}
    json.dumps(result.as_dict(), allow_nan=False)  # whatever was read, the JSON document stays JSON


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(line=_lines)
def test_any_line_through_the_cli_exits_with_a_documented_code(cli: Cli, tmp_path: Path, line: str) -> None:
    folder = tmp_path / "results"
    shutil.rmtree(folder, ignore_errors=True)  # one fixture for every example: start each afresh
    write(folder, fleet(3))
    with (folder / "node3.jsonl").open("a", encoding="utf-8", errors="surrogatepass") as fh:
        fh.write(line.replace("\n", " ") + "\n")
    with deadline(60):
        run = cli("gate", "results")
    assert run.code in {exitcodes.OK, exitcodes.REJECTED, exitcodes.INCOMPLETE}
    assert "\x1b" not in run.out


# --- made-up metrics --------------------------------------------------------------------------


def made_up(node: Path, metrics: dict[str, float]) -> None:
    """Append to a node's file a pass record of `storage` carrying `metrics`, as a hostile node would."""
    record = {**lines(node)[-1], "check": "storage", "status": "pass", "reason": None, "metrics": metrics}
    with node.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(record) + "\n")


def measured_metrics() -> set[str]:
    """What the helpers' healthy fleet measures: the plots and series a clean run makes."""
    return {m for ms in HEALTHY.values() for m in ms} | {"fabric_ports_active", "xid_errors"}


def test_a_node_with_hundreds_of_made_up_metrics_is_rejected_and_the_reports_stay_bounded(
    cli: Cli, tmp_path: Path
) -> None:
    pytest.importorskip("matplotlib")
    folder = results(tmp_path)
    made_up(folder / "node2.jsonl", {f"x{i}": float(i) for i in range(200)})
    (tmp_path / "out").mkdir()
    with deadline(120):
        run = cli("gate", "results", "--html", "out/gate.html", "--prom", "out/gate.prom")
    # Not readable, so a reject (exit 2), though node2's run is complete without the record.
    assert run.code == exitcodes.INCOMPLETE
    assert "REJECT node2" in run.out and "200 metrics, more than" in run.out
    assert "REJECT node1" not in run.out
    page = (tmp_path / "out" / "gate.html").read_text(encoding="utf-8")
    plots = [part.split('"', 1)[0] for part in page.split('<div class="plot" id="plot-')[1:]]
    assert sorted(plots) == sorted(measured_metrics())
    families = {
        f.name: f.samples
        for f in text_string_to_metric_families((tmp_path / "out" / "gate.prom").read_text(encoding="utf-8"))
    }
    assert len(families["fleetforge_metric"]) == 4 * len(measured_metrics())
    assert {
        s.labels["metric"] for f in families.values() for s in f if "metric" in s.labels
    } <= METRICS.keys()


def test_made_up_metrics_within_a_record_s_bound_are_ignored_with_one_note(cli: Cli, tmp_path: Path) -> None:
    folder = results(tmp_path)
    made_up(folder / "node2.jsonl", {f"x{i}": float(i) for i in range(60)})
    run = gate(cli, tmp_path)
    assert run.code == exitcodes.OK
    (note,) = [x for x in run.out.splitlines() if "metric name(s)" in x]
    assert "60 metric name(s)" in note and "and 50 more" in note and "x59" not in run.out
    prom = (tmp_path / "out" / "gate.prom").read_text(encoding="utf-8")
    assert not re.search(r'metric="x[0-9]+"', prom)


@pytest.mark.parametrize(
    "name",
    [
        "x\x1b[2J\x1b[32mACCEPT",
        "[bold green]ACCEPT node2[/]",
        "<script>alert(1)</script>",
        "m" * 5000,
        "x\ny",
    ],
    ids=lambda name: ascii(name)[:40],
)
def test_a_metric_name_with_escapes_markup_or_no_end_rejects_its_node(
    cli: Cli, tmp_path: Path, name: str
) -> None:
    folder = results(tmp_path)
    made_up(folder / "node2.jsonl", {name: 1.0, "storage_read_mbps": 5000.0})
    run = gate(cli, tmp_path, "--json")
    assert run.code == exitcodes.INCOMPLETE
    verdicts = {n["node"]: n for n in json.loads(run.out)["nodes"]}
    assert [v for v, n in verdicts.items() if n["verdict"] == "reject"] == ["node2"]
    (reason,) = verdicts["node2"]["reasons"]
    assert reason["rule"] == "unreadable" and "is not a metric name" in reason["message"]
    # The reason quotes the name escaped and clipped: data in every report, never a terminal's command.
    assert not {"\x1b", "\n"} & set(reason["message"]) and len(reason["message"]) < 400
    assert "\x1b" not in run.out and "m" * 100 not in run.out
    assert 'metric="' + name not in (tmp_path / "out" / "gate.prom").read_text(encoding="utf-8")
