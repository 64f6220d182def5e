"""The whole fleet's all-reduce after a rerun of some hosts (`--limit`), without hosts: a fake play
answers as ansible-runner's events would, and what each host's results get is judged by the gate."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from fleet.metrics import MULTINODE_CHECK, MULTINODE_METRIC
from fleet.results import CheckRecord, read_results
from tests.validation.fleetrun.helpers import HOSTS, RUN, empty_results, ok, record, unreachable
from validation.fleetrun.fabric import READ_TASK, START_TASK
from validation.fleetrun.rerun import measure_fleet_collective
from validation.gate import decide


def results_of(tmp_path: Path, joined: Sequence[str] = ("h0", "h1", "h3")) -> Path:
    """Each host's run; the kept ones (`joined`) with the earlier run's all-reduce, h2 rerun with the
    skip the role records when it is the only host its play reaches."""
    results = empty_results(tmp_path)
    for h in HOSTS:
        line = record(h, busbw=0.09) if h in joined else record(h, "skip", reason="only 1 node ready")
        (results / f"{h}.jsonl").open("a").write(line + "\n")
    return results


def measured(node: str) -> str:
    """The node's record of the group's all-reduce: later than anything its results hold, and of the
    run its own file ends with, which a node burned in since into another --out no longer shares."""
    rec = CheckRecord.model_validate(json.loads(record(node, busbw=0.085)))
    return rec.model_copy(update={"started": "2026-12-01T09:00:00.000+00:00", "run_id": "later"}).to_json()


class Group:
    """One play: every host answers with its node's record of the group's all-reduce."""

    def __init__(self, dead: Sequence[str] = (), answer_as: Mapping[str, str] | None = None) -> None:
        self.dead = set(dead)
        self.answer_as = dict(answer_as or {})
        self.calls: list[tuple[dict[str, Any], list[str]]] = []

    def __call__(self, extravars: Mapping[str, object], limit: Sequence[str]) -> list[dict[str, Any]]:
        mapping = extravars["burnin_fabric_round"]
        assert isinstance(mapping, dict)
        self.calls.append((mapping, list(limit)))
        return [
            unreachable(h, START_TASK, "Failed to connect to the host via ssh")
            if h in self.dead
            else ok(h, READ_TASK, stdout=measured(self.answer_as.get(h, h)))
            for h in limit
        ]


def latest_collective(results: Path, host: str) -> Any:
    return [c for c in read_results(results / f"{host}.jsonl").checks if c.check == MULTINODE_CHECK][-1]


def collective_reasons(results: Path) -> dict[str, list[str]]:
    gate = decide([read_results(p) for p in sorted(results.glob("*.jsonl"))], sku="cpu", expected=HOSTS)
    return {
        v.node: [r.message for r in v.reasons if r.check == MULTINODE_CHECK or r.metric == MULTINODE_METRIC]
        for v in gate.nodes
    }


def test_the_rerun_host_joins_the_whole_fleets_all_reduce_and_is_judged_on_it(tmp_path: Path) -> None:
    results = results_of(tmp_path)
    # Without it, the rerun host is missing the figure the kept hosts have: a reject.
    assert collective_reasons(results)["h2"], "the gate no longer rejects a missing all-reduce"
    play = Group()
    # As the fleet run has them: the kept hosts, then the rerun one; the group goes in inventory order.
    got = measure_fleet_collective(
        play, ["h0", "h1", "h3", "h2"], ["h2"], results, port=29400, rdzv_id="run-fleet"
    )
    assert got.status == "measured" and got.written == tuple(HOSTS) and not got.failed
    ((mapping, limit),) = play.calls
    assert limit == HOSTS
    assert {h: v["members"] for h, v in mapping.items()} == dict.fromkeys(HOSTS, "h0,h1,h2,h3")
    assert {(v["endpoint_host"], v["port"], v["rdzv_id"]) for v in mapping.values()} == {
        ("h0", 29400, "run-fleet")
    }
    for h in HOSTS:
        latest = latest_collective(results, h)
        assert latest.status == "pass" and latest.metrics[MULTINODE_METRIC] == pytest.approx(0.085)
        assert latest.run_id == RUN["run_id"]  # joined to the run the gate judges
    assert collective_reasons(results) == {h: [] for h in HOSTS}


def test_a_host_that_does_not_answer_gets_an_error_never_its_earlier_figure(tmp_path: Path) -> None:
    results = results_of(tmp_path)
    got = measure_fleet_collective(
        Group(dead=["h1"], answer_as={"h3": "h0"}), HOSTS, ["h2"], results, port=29400, rdzv_id="x"
    )
    assert got.written == ("h0", "h2") and set(got.failed) == {"h1", "h3"}
    assert "unreachable" in got.failed["h1"] and "names node h0" in got.failed["h3"]
    for h in ("h1", "h3"):
        latest = latest_collective(results, h)
        assert latest.status == "error" and latest.node == h
    reasons = collective_reasons(results)
    assert reasons["h1"] and reasons["h3"] and not reasons["h0"] and not reasons["h2"]


def test_kept_hosts_that_never_joined_an_all_reduce_are_left_out(tmp_path: Path) -> None:
    results = results_of(tmp_path, joined=("h0", "h1"))
    play = Group()
    got = measure_fleet_collective(play, HOSTS, ["h2"], results, port=29400, rdzv_id="x")
    assert got.hosts == ("h0", "h1", "h2") and play.calls[0][1] == ["h0", "h1", "h2"]
    assert latest_collective(results, "h3").status == "skip"


def test_without_a_rerun_host_ready_nothing_runs_and_nothing_changes(tmp_path: Path) -> None:
    results = results_of(tmp_path)
    before = {p.name: p.read_bytes() for p in results.iterdir()}
    play = Group()
    got = measure_fleet_collective(play, ["h0", "h1", "h3"], ["h2"], results, port=29400, rdzv_id="x")
    assert got.status == "skipped" and "burned in again" in (got.reason or "")
    assert play.calls == [] and {p.name: p.read_bytes() for p in results.iterdir()} == before


def test_an_error_record_is_the_latest_even_where_the_nodes_clock_runs_ahead(tmp_path: Path) -> None:
    results = results_of(tmp_path)
    ahead = CheckRecord.model_validate(json.loads(record("h1", busbw=0.09)))
    ahead = ahead.model_copy(update={"started": "2999-01-01T00:00:00.000+00:00"})
    (results / "h1.jsonl").open("a").write(ahead.to_json() + "\n")
    measure_fleet_collective(Group(dead=["h1"]), HOSTS, ["h2"], results, port=29400, rdzv_id="x")
    assert latest_collective(results, "h1").started.startswith("2999-01-01T00:00:00.001")
    assert collective_reasons(results)["h1"]


def test_a_record_from_a_node_whose_clock_runs_behind_is_still_the_latest(tmp_path: Path) -> None:
    results = results_of(tmp_path)

    class Behind(Group):
        def __call__(self, extravars: Mapping[str, object], limit: Sequence[str]) -> list[dict[str, Any]]:
            events = super().__call__(extravars, limit)
            for e in events:
                rec = CheckRecord.model_validate(json.loads(e["event_data"]["res"]["stdout"]))
                behind = rec.model_copy(update={"started": "2026-11-30T00:00:00.000+00:00"})
                e["event_data"]["res"]["stdout"] = behind.to_json()
            return events

    measure_fleet_collective(Behind(), HOSTS, ["h2"], results, port=29400, rdzv_id="x")
    for h in HOSTS:
        latest = latest_collective(results, h)
        assert latest.status == "pass" and latest.started > RUN["started"]
    assert collective_reasons(results) == {h: [] for h in HOSTS}


def test_an_all_reduce_the_rerun_host_hangs_keeps_the_kept_hosts_records(tmp_path: Path) -> None:
    results = results_of(tmp_path)  # h0, h1, h3 kept with a passing all-reduce; h2 rerun
    why = "no result within 300 s: the rendezvous at h0:29400 or the all-reduce across 4 nodes did not finish"

    # h2's NIC hangs NCCL: every member's launcher times out and records an error (multinode.launch).
    def hung(extravars: Mapping[str, object], limit: Sequence[str]) -> list[dict[str, Any]]:
        return [ok(h, READ_TASK, stdout=record(h, "error", reason=why)) for h in limit]

    kept_before = {h: (results / f"{h}.jsonl").read_bytes() for h in ("h0", "h1", "h3")}
    got = measure_fleet_collective(hung, HOSTS, ["h2"], results, port=29400, rdzv_id="x")
    # Nobody passed: the error names no host, so only the rerun host's own file gets it.
    assert got.status == "measured" and got.hosts == tuple(HOSTS) and got.written == ("h2",)
    assert set(got.kept) == {"h0", "h1", "h3"} and all(why in r for r in got.kept.values())
    assert {h: (results / f"{h}.jsonl").read_bytes() for h in kept_before} == kept_before
    assert latest_collective(results, "h2").status == "error"
    reasons = collective_reasons(results)
    assert reasons["h2"] and not reasons["h0"] and not reasons["h1"] and not reasons["h3"]
    # h2 fixed, rerun again: the kept hosts join the all-reduce again and every host passes.
    play = Group()
    got = measure_fleet_collective(play, HOSTS, ["h2"], results, port=29400, rdzv_id="y")
    assert got.status == "measured" and got.written == tuple(HOSTS) and play.calls[0][1] == HOSTS
    assert collective_reasons(results) == {h: [] for h in HOSTS}
