"""Metric names the gate does not know: neither fleet/metrics.py's vocabulary nor the spec's
thresholds name them, so they have no direction and no limit. The gate ignores them with one note
(a capped list) and keeps them out of the statistics and the node's figures, whatever their
number; a record with more than a record may carry is refused by the reader (tests/fleet)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from fleet.results import read_results
from fleet.spec import ThresholdOverride
from tests.validation.gate.helpers import as_files, check_record, fleet, write
from validation.gate import GateSettings, decide

# Within the results contract (well-formed names, a record's bound), but no metric of fleetforge's.
UNKNOWN = {f"x{i}": float(i) for i in range(60)}


def unknown_notes(notes: list[str]) -> list[str]:
    return [n for n in notes if "metric name(s)" in n or "not in fleet/metrics.py" in n]


def test_unknown_metrics_are_ignored_with_one_capped_note() -> None:
    clean = decide(as_files(fleet(4)))
    recs = fleet(4)
    recs["node2"].append(check_record("node2", "storage", metrics=UNKNOWN))
    recs["node3"].append(check_record("node3", "extra", metrics={"y_gbps": 1.0, "z_gbps": 2.0}))
    result = decide(as_files(recs))

    # Known metrics are judged exactly as without the extra records; the unknown ones nowhere.
    assert result.stats == clean.stats
    for node in ("node2", "node3"):
        v, before = result.node(node), clean.node(node)
        assert v.accepted and v.metrics == before.metrics and v.metric_checks == before.metric_checks
    assert [v.reasons for v in result.nodes] == [v.reasons for v in clean.nodes]
    [note] = unknown_notes(result.notes)
    assert note.startswith("62 metric name(s)")
    assert "x0, x1, x10, x11, x12, x13, x14, x15, x16, x17 and 52 more" in note
    assert "reported by node2, node3" in note
    assert "x59" not in note and len(note) < 400


def test_the_note_stays_one_line_however_many_nodes_and_names() -> None:
    recs = fleet(40)
    for i in range(1, 41):
        node = f"node{i}"
        recs[node].append(check_record(node, "storage", metrics={f"n{i}_m{j}": 1.0 for j in range(60)}))
    result = decide(as_files(recs))
    [note] = unknown_notes(result.notes)
    assert note.startswith("2400 metric name(s)") and "and 2390 more" in note
    assert "reported by node1, node2," in note and "and 30 more" in note
    assert not any(re.fullmatch(r"n[0-9]+_m[0-9]+", m) for m in result.stats)
    assert all(v.accepted for v in result.nodes)


def test_a_metric_the_spec_thresholds_name_is_still_judged() -> None:
    """A name outside fleet/metrics.py that the thresholds name is judged on its floor, beside an
    unknown name of the same record that is ignored."""
    recs = fleet(4)
    for i in range(1, 5):
        node = f"node{i}"
        value = 5.0 if node == "node3" else 50.0
        recs[node].append(check_record(node, "custom", metrics={"custom_gbps": value, "stray_gbps": 1.0}))
    settings = GateSettings(thresholds={"custom_gbps": ThresholdOverride(floor=10.0)})
    result = decide(as_files(recs), settings=settings)
    assert "custom_gbps" in result.stats and "stray_gbps" not in result.stats
    assert result.stats["custom_gbps"].limit == 10.0
    reasons = result.node("node3").reasons
    assert ("floor", "custom_gbps") in {(r.rule, r.metric) for r in reasons}
    assert {r.metric for r in reasons} == {"custom_gbps"}
    assert "custom_gbps" in result.node("node1").metrics and "stray_gbps" not in result.node("node1").metrics
    [note] = unknown_notes(result.notes)
    assert note.startswith("1 metric name(s)") and "stray_gbps" in note and "custom_gbps" not in note


def test_a_node_with_a_record_over_the_bound_is_rejected_as_unreadable(tmp_path: Path) -> None:
    """What is not readable rejects its node, even where its run is complete without that record:
    a record no fleetforge writes puts the whole file in doubt."""
    folder = write(tmp_path / "results", fleet(4))
    hostile = check_record("node2", "storage", metrics={"storage_read_mbps": 5000.0}).model_dump(
        mode="json", by_alias=True
    )
    hostile["metrics"] = {f"x{i}": float(i) for i in range(1000)}
    with (folder / "node2.jsonl").open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(hostile) + "\n")
    result = decide([read_results(p) for p in sorted(folder.glob("*.jsonl"))])
    v = result.node("node2")
    assert not v.accepted and v.incomplete
    [reason] = v.reasons
    assert reason.rule == "unreadable"
    assert "node2.jsonl:9:" in reason.message and "'storage'" in reason.message
    assert "1000 metrics, more than the 64 a record may carry" in reason.message
    assert [n.node for n in result.nodes if n.accepted] == ["node1", "node3", "node4"]
    assert not any(re.fullmatch(r"x[0-9]+", m) for m in result.stats)
