"""A fleet run in which one host hangs the whole-fleet all-reduce: every member's launcher times out
and records an error, and the fabric stage's pair rounds that follow find the one host guilty. The
gate rejects that host alone (the others' own pairs passed) instead of the whole fleet."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from fleet.metrics import FABRIC_CHECK, MULTINODE_CHECK
from tests.validation.fleetrun.helpers import HOSTS, empty_results, judged, ok, record
from validation.fleetrun.fabric import READ_TASK, AnsibleRounds, run_stage

HUNG = "no result within 300 s: the rendezvous at h0:29400 or the all-reduce across 4 nodes did not finish"


def pairs_at(rate: Mapping[str, float]) -> Callable[..., list[dict[str, Any]]]:
    """A round's play: each pair measures the slower side's rate."""

    def play(extravars: Mapping[str, object], limit: Sequence[str]) -> list[dict[str, Any]]:
        mapping = extravars["burnin_fabric_round"]
        assert isinstance(mapping, dict)
        out = []
        for h in limit:
            a, b = str(mapping[h]["members"]).split(",")
            out.append(ok(h, READ_TASK, stdout=record(h, busbw=min(rate[a], rate[b]))))
        return out

    return play


def test_a_host_that_hangs_the_whole_fleet_all_reduce_is_rejected_alone(tmp_path: Path) -> None:
    results = empty_results(tmp_path)
    for h in HOSTS:  # collectives.yml: h3's NIC hangs the all-reduce, every member records an error
        (results / f"{h}.jsonl").open("a").write(record(h, "error", reason=HUNG) + "\n")
    rounds = AnsibleRounds(pairs_at({"h0": 10, "h1": 10, "h2": 10, "h3": 1}), base_port=29401, stage_id="x")
    stage = run_stage(HOSTS, rounds, rounds=3)
    stage.write_host_records(results)
    _, gate = judged(stage, results, tmp_path)
    # The hosts carry no burn-in checks here, so the cpu SKU's own metrics are missing on every host;
    # what matters is who the all-reduce's error and the pairs reject.
    fabric = {
        v.node: sorted({str(r.check) for r in v.reasons if r.check in (MULTINODE_CHECK, FABRIC_CHECK)})
        for v in gate.nodes
    }
    assert fabric == {"h0": [], "h1": [], "h2": [], "h3": [FABRIC_CHECK, MULTINODE_CHECK]}
    (note,) = [n for n in gate.notes if n.startswith(MULTINODE_CHECK)]
    assert "h0, h1, h2" in note and "h3" not in note and "names no host" in note
