"""The replace-and-reburn loop against a fake fleet (fakes.py): which hosts each round burns in,
what the gate judges, what is replaced and why, the budget, patterns, the record and resuming."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.validation.bringup.fakes import FakeFleet, Inventory
from validation.bringup import (
    RECORD_NAME,
    BringupError,
    BringupRecord,
    BringupSettings,
    Budget,
    Outcome,
    RecordError,
    bring_up,
)
from validation.gate import FleetPlan, GateSettings

NODES = ["node1", "node2", "node3"]


def settings(out: Path, **kw: object) -> BringupSettings:
    budget = kw.pop("budget", Budget())
    return BringupSettings(
        out_dir=out,
        plan=FleetPlan("train-a", required=3, spares=0),
        gate=GateSettings(),
        sku="p5.48xlarge",
        budget=budget,  # type: ignore[arg-type]
        replace_timeout_s=600,
        poll_s=30,
        **kw,  # type: ignore[arg-type]
    )


def run(fleet: FakeFleet, out: Path, **kw: object) -> Outcome:
    return bring_up(settings(out, **kw), fleet, Inventory(fleet), fleet, clock=fleet.clock)


def on_disk(out: Path) -> Any:
    return json.loads((out / RECORD_NAME).read_text())


def test_a_healthy_fleet_is_ready_in_round_one(tmp_path: Path) -> None:
    fleet = FakeFleet(list(NODES))
    outcome = run(fleet, tmp_path)
    assert outcome.status == "ready" and outcome.result is not None
    assert fleet.runs == [()]  # no limit: every inventory host
    assert fleet.replaced == []
    doc = on_disk(tmp_path)
    assert doc["status"] == "ready"
    (r1,) = doc["rounds"]
    assert r1["round"] == 1 and r1["phase"] == "done" and r1["burned"] == NODES and r1["kept"] == []
    assert r1["ready"] is True and r1["accepted"] and r1["rejected"] == [] and r1["replaced"] == []
    assert r1["timings_s"]["burnin"] == 60 and r1["timings_s"]["total"] >= 60


def test_a_reject_is_replaced_and_only_its_replacement_burned_in(tmp_path: Path) -> None:
    fleet = FakeFleet(list(NODES), slow={"node2"}, spares=["node4"])
    outcome = run(fleet, tmp_path)
    assert outcome.status == "ready", outcome.reason
    assert fleet.runs == [(), ("node4",)]
    assert fleet.replaced == [["node2"]]
    doc = on_disk(tmp_path)
    r1, r2 = doc["rounds"]
    assert r1["rejected"] == ["node2"] and r1["ready"] is False
    (rep,) = r1["replaced"]
    assert rep["node"] == "node2" and rep["ok"] and rep["action"] == "fake-replace"
    assert "floor:gemm_bf16_tflops" in rep["keys"] and any("gemm_bf16_tflops" in m for m in rep["reasons"])
    assert r1["new_hosts"] == ["node4"] and r1["wait"]["complete"] is True
    assert r2["burned"] == ["node4"] and r2["kept"] == ["node1", "node3"] and r2["ready"] is True
    # The whole fleet is judged again: the kept nodes on their round-1 results, copied; the
    # replaced node's results never again.
    judged = sorted(p.name for p in (tmp_path / "round-2" / "results").glob("*.jsonl"))
    assert judged == ["node1.jsonl", "node3.jsonl", "node4.jsonl"]
    assert outcome.result is not None and sorted(v.node for v in outcome.result.nodes) == [
        "node1",
        "node3",
        "node4",
    ]
    assert (tmp_path / "round-2/results/node1.jsonl").read_bytes() == (
        tmp_path / "round-1/results/node1.jsonl"
    ).read_bytes()
    assert doc["slots"] == {"node1": "node1", "node2": "node2", "node3": "node3", "node4": "node2"}


def test_a_slot_replaced_twice_for_the_same_reason_is_a_pattern_and_not_replaced_again(
    tmp_path: Path,
) -> None:
    fleet = FakeFleet(list(NODES), slow={"node2", "node4", "node5"}, spares=["node4", "node5", "node6"])
    outcome = run(fleet, tmp_path, budget=Budget(max_rounds=5))
    assert outcome.status == "budget-spent"
    assert fleet.replaced == [["node2"], ["node4"]]  # never a third time
    assert fleet.runs == [(), ("node4",), ("node5",)]
    doc = on_disk(tmp_path)
    assert doc["status"] == "budget-spent" and doc["replacements"] == 2
    r3 = doc["rounds"][2]
    (pattern,) = r3["patterns"]
    assert pattern["slot"] == "node2" and pattern["node"] == "node5"
    assert pattern["replaced_before"] == ["node2", "node4"]
    assert "pattern" in pattern["message"] and "floor:gemm_bf16_tflops" in pattern["keys"]
    assert outcome.reason is not None and "slot node2" in outcome.reason
    assert r3["replaced"] == [] and r3["phase"] == "done"


def test_a_slot_rejected_for_a_different_reason_is_replaced_again(tmp_path: Path) -> None:
    fleet = FakeFleet(
        list(NODES), slow={"node2", "node4"}, unreachable={"node5"}, spares=["node4", "node5", "node6"]
    )
    # node5 never answers: one more round (a replacement may still be booting), then replaced; its
    # reason (unreachable) is not the slot's earlier one (slow), so it is no pattern.
    outcome = run(fleet, tmp_path, budget=Budget(max_rounds=5))
    assert outcome.status == "ready", outcome.reason
    assert fleet.replaced == [["node2"], ["node4"], ["node5"]]
    assert fleet.runs[-1] == ("node6",)


def test_a_replacement_that_does_not_answer_yet_is_burned_in_again_not_replaced(tmp_path: Path) -> None:
    fleet = FakeFleet(list(NODES), slow={"node2"}, late={"node4"}, spares=["node4", "node5"])
    outcome = run(fleet, tmp_path)
    assert outcome.status == "ready", outcome.reason
    assert fleet.replaced == [["node2"]]
    assert fleet.runs == [(), ("node4",), ("node4",)]
    r2 = on_disk(tmp_path)["rounds"][1]
    assert [x["node"] for x in r2["retry"]] == ["node4"] and r2["replaced"] == []


def test_a_replacement_still_unreachable_after_its_second_chance_is_replaced(tmp_path: Path) -> None:
    fleet = FakeFleet(list(NODES), slow={"node2"}, unreachable={"node4"}, spares=["node4", "node5"])
    outcome = run(fleet, tmp_path, budget=Budget(max_rounds=4))
    assert outcome.status == "ready", outcome.reason
    assert fleet.replaced == [["node2"], ["node4"]]
    assert fleet.runs == [(), ("node4",), ("node4",), ("node5",)]


def test_the_rounds_budget_leaves_a_reject_unreplaced_in_the_last_round(tmp_path: Path) -> None:
    fleet = FakeFleet(list(NODES), slow={"node2", "node4"}, spares=["node4", "node5"])
    outcome = run(fleet, tmp_path, budget=Budget(max_rounds=2))
    assert outcome.status == "budget-spent"
    assert fleet.replaced == [["node2"]]  # the last round has no round after it to burn in a replacement
    r2 = on_disk(tmp_path)["rounds"][1]
    assert r2["not_replaced"][0]["node"] == "node4" and "--max-rounds 2" in r2["not_replaced"][0]["why"]


def test_the_replacements_budget(tmp_path: Path) -> None:
    fleet = FakeFleet(list(NODES), slow={"node2"}, spares=["node4"])
    outcome = run(fleet, tmp_path, budget=Budget(max_replacements=0))
    assert outcome.status == "budget-spent" and fleet.replaced == []
    assert outcome.reason is not None and "--max-replacements 0 spent" in outcome.reason


def test_the_wall_budget_stops_before_another_round(tmp_path: Path) -> None:
    fleet = FakeFleet(list(NODES), slow={"node2"}, spares=["node4"])
    # The burn-in takes 60 s on the fake clock: round 1 ends past the budget of 50 s.
    outcome = run(fleet, tmp_path, budget=Budget(max_wall_s=50))
    assert outcome.status == "budget-spent" and fleet.replaced == []
    assert "--max-wall 50" in (outcome.reason or "")


def test_a_burn_in_cut_short_by_the_wall_budget_judges_nothing_and_resumes_with_more(tmp_path: Path) -> None:
    fleet = FakeFleet(list(NODES), slow={"node2"}, spares=["node4"])
    # Round 1 (60 s) replaces node2; round 2's burn-in gets the 40 s left and is cut short.
    outcome = run(fleet, tmp_path, budget=Budget(max_wall_s=100))
    assert outcome.status == "budget-spent"
    assert "--max-wall 100 s spent during round 2's burn-in" in (outcome.reason or "")
    assert fleet.replaced == [["node2"]] and fleet.runs == [(), ("node4",)]
    assert fleet.clock.t - 1000 == pytest.approx(100)  # not a second past the budget
    doc = on_disk(tmp_path)
    assert [r["phase"] for r in doc["rounds"]] == ["done", "burn-in"]
    # The same budget: nothing runs. A larger one: round 2 is redone and the fleet READY.
    assert run(fleet, tmp_path, resume=True, budget=Budget(max_wall_s=100)).status == "budget-spent"
    assert len(fleet.runs) == 2
    outcome = run(fleet, tmp_path, resume=True, budget=Budget(max_wall_s=1000))
    assert outcome.status == "ready" and fleet.runs == [(), ("node4",), ("node4",)]


def test_replacements_that_never_appear_time_out_on_the_injected_clock(tmp_path: Path) -> None:
    fleet = FakeFleet(list(NODES), slow={"node2"}, appear=False)
    start = fleet.clock.t
    outcome = run(fleet, tmp_path)
    # Not a spent budget: the replacement was asked for and may still join.
    assert outcome.status == "waiting" and "slot(s) node2" in (outcome.reason or "")
    doc = on_disk(tmp_path)
    r1, r2 = doc["rounds"]
    assert r1["wait"]["complete"] is False and r1["wait"]["seconds"] == 600
    assert r1["new_hosts"] == [] and doc["pending"] == ["node2"]
    # Round 2 burns nothing in and judges the two kept hosts: too few for the job.
    assert r2["burned"] == [] and r2["ready"] is False and r2["rejected"] == []
    assert fleet.clock.t - start == pytest.approx(60 + 600)


def test_a_replacement_that_joins_late_continues_its_slot_on_resume(tmp_path: Path) -> None:
    fleet = FakeFleet(list(NODES), slow={"node2", "node4"}, spares=["node4", "node5"], appear=False)
    assert run(fleet, tmp_path).status == "waiting"
    fleet.hosts.append(fleet.spares.pop(0))  # node4 joins the group after the wait gave up
    outcome = run(fleet, tmp_path, resume=True)
    doc = on_disk(tmp_path)
    assert doc["slots"]["node4"] == "node2" and doc["pending"] == []
    # node4, as slow as node2, is judged as the next of node2's slot, not a slot of its own.
    last = doc["rounds"][-1]
    assert last["burned"] == ["node4"] and last["rejected"] == ["node4"]
    assert [(x["node"], x["slot"]) for x in last["not_replaced"]] == [("node4", "node2")]
    assert outcome.status == "budget-spent"  # --max-rounds 3: no round left for another


def test_a_recreated_instance_is_waited_for_until_its_name_shows_a_new_instance(tmp_path: Path) -> None:
    # GCP recreate: the group accepts at once, the old VM stays listed, a new one comes 90 s later.
    fleet = FakeFleet(list(NODES), slow={"node2"}, recreate_s=90)
    old = str(fleet.instance("node2"))
    outcome = run(fleet, tmp_path)
    assert outcome.status == "ready", outcome.reason
    assert fleet.replaced == [["node2"]] and fleet.runs == [(), ("node2",)]
    doc = on_disk(tmp_path)
    r1, r2 = doc["rounds"]
    assert r1["replaced"][0]["instance"] == old
    assert r1["wait"]["complete"] is True and r1["wait"]["seconds"] == 90 and r1["new_hosts"] == ["node2"]
    assert r2["burned"] == ["node2"] and r2["kept"] == ["node1", "node3"]
    assert doc["instances"]["node2"] == str(fleet.instance("node2")) != old
    assert doc["retired"] == {} and doc["pending"] == [] and doc["slots"]["node2"] == "node2"


def test_a_name_still_showing_the_replaced_instance_is_never_judged_again(tmp_path: Path) -> None:
    fleet = FakeFleet(list(NODES), slow={"node2"}, recreate_s=900)  # longer than the 600 s wait
    old = str(fleet.instance("node2"))
    outcome = run(fleet, tmp_path)
    assert outcome.status == "waiting" and "slot(s) node2" in (outcome.reason or "")
    assert fleet.replaced == [["node2"]] and fleet.runs == [()]  # not replaced twice, not burned in
    doc = on_disk(tmp_path)
    r2 = doc["rounds"][1]
    assert r2["left_out"] == [
        {"node": "node2", "instance": old, "why": "still the instance replaced earlier"}
    ]
    assert r2["inventory"] == NODES and r2["burned"] == [] and r2["rejected"] == []
    assert doc["retired"] == {"node2": old} and doc["pending"] == ["node2"]
    fleet.clock.t += 300  # the recreation finishes
    outcome = run(fleet, tmp_path, resume=True)
    assert outcome.status == "ready", outcome.reason
    assert fleet.runs == [(), ("node2",)]
    doc = on_disk(tmp_path)
    assert doc["retired"] == {} and doc["pending"] == [] and doc["rounds"][-1]["left_out"] == []


def test_a_name_left_out_is_not_burned_in_when_no_host_is_kept(tmp_path: Path) -> None:
    # node2's recreation outlasts the wait, and the group healed node1 and node3 meanwhile: nothing
    # is kept, and node2's old VM must still stay out of the burn-in (its pairs, its results).
    fleet = FakeFleet(list(NODES), slow={"node2"}, recreate_s=900, heal={"node1", "node3"})
    outcome = run(fleet, tmp_path)
    assert outcome.status == "waiting", outcome.reason
    assert fleet.runs == [(), ("node1", "node3")]
    r2 = on_disk(tmp_path)["rounds"][1]
    assert [x["node"] for x in r2["left_out"]] == ["node2"] and r2["kept"] == []


def test_a_recreated_name_back_during_another_wait_returns_to_its_own_slot(tmp_path: Path) -> None:
    # node2 is recreated in round 1 and unlisted until 900 s later; meanwhile the group healed node3,
    # whose new VM measures slow in round 2 and is recreated too. node2 comes back during node3's
    # wait: it returns to its own slot, never node3's.
    fleet = FakeFleet(
        list(NODES), slow={"node2"}, slow_from={"node3": 2}, heal={"node3"}, recreate_s=900, vanish=True
    )
    outcome = run(fleet, tmp_path)
    assert outcome.status == "waiting", outcome.reason
    assert fleet.replaced == [["node2"], ["node3"]]
    doc = on_disk(tmp_path)
    r2, r3 = doc["rounds"][1:]
    assert r2["new_hosts"] == [] and r2["wait"]["complete"] is False
    assert doc["slots"]["node2"] == "node2" and doc["pending"] == ["node3"]
    assert r3["inventory"] == ["node1", "node2"] and r3["burned"] == ["node2"]  # node3 unlisted
    assert doc["history"]["node3"] == [
        {"round": 2, "node": "node3", "keys": doc["history"]["node3"][0]["keys"]}
    ]


def test_a_kept_host_whose_instance_changed_is_burned_in_again(tmp_path: Path) -> None:
    # While node2 is recreated, the group also heals node1 on its own: same name, another VM.
    fleet = FakeFleet(list(NODES), slow={"node2"}, recreate_s=30, heal={"node1"})
    outcome = run(fleet, tmp_path)
    assert outcome.status == "ready", outcome.reason
    assert fleet.runs == [(), ("node1", "node2")]
    r2 = on_disk(tmp_path)["rounds"][1]
    assert r2["kept"] == ["node3"] and r2["instance_changed"] == ["node1"]


def test_a_replacement_under_the_replaced_hosts_name_is_its_replacement(tmp_path: Path) -> None:
    # An EC2 replacement given the private address (the inventory name) of the one it replaces.
    fleet = FakeFleet(list(NODES), slow={"node2"}, identity=True, reuse_names={"node2"})
    outcome = run(fleet, tmp_path)
    assert outcome.status == "ready", outcome.reason
    assert fleet.runs == [(), ("node2",)]
    doc = on_disk(tmp_path)
    r1 = doc["rounds"][0]
    assert r1["wait"]["complete"] is True and r1["wait"]["seconds"] == 0 and r1["new_hosts"] == ["node2"]
    assert doc["pending"] == [] and doc["retired"] == {}


def test_a_reject_whose_name_shows_another_instance_is_burned_in_again_not_replaced(tmp_path: Path) -> None:
    # node2 measures slow; before the gate the group heals it on its own (same name, another VM).
    fleet = FakeFleet(
        list(NODES), slow={"node2"}, identity=True, reuse_names={"node2"}, heal_during_run={"node2": 1}
    )
    measured = fleet.instance("node2")
    outcome = run(fleet, tmp_path)
    assert outcome.status == "ready", outcome.reason
    # The machine now under the name was never judged: it is burned in, not handed to the cloud.
    assert fleet.replaced == [] and fleet.runs == [(), ("node2",)]
    r1 = on_disk(tmp_path)["rounds"][0]
    assert r1["replaced"] == [] and [(x["node"], x["instance"]) for x in r1["retry"]] == [
        ("node2", str(measured))
    ]
    assert "another instance" in r1["retry"][0]["why"]


def test_more_rejects_in_a_round_than_a_quarter_of_the_fleet_replaces_none(tmp_path: Path) -> None:
    # Every node below the floor: a bad image or driver, not eight bad machines.
    eight = [f"node{i}" for i in range(1, 9)]
    fleet = FakeFleet(eight, slow={"node1", "node2", "node5"}, spares=["node9", "node10", "node11"])
    outcome = run(fleet, tmp_path, strict=True)  # READY only with no node rejected
    assert outcome.status == "budget-spent" and fleet.replaced == []
    assert "3 rejects in one round, more than a quarter of the 8 host(s)" in (outcome.reason or "")
    (r1,) = on_disk(tmp_path)["rounds"]
    assert [x["node"] for x in r1["not_replaced"]] == ["node1", "node2", "node5"]
    # Asked for, they are replaced.
    fleet = FakeFleet(eight, slow={"node1", "node2", "node5"}, spares=["node9", "node10", "node11"])
    outcome = run(fleet, tmp_path / "again", strict=True, budget=Budget(max_per_round=3))
    assert outcome.status == "ready", outcome.reason
    assert fleet.replaced == [["node1", "node2", "node5"]]


def test_a_node_without_its_instance_id_is_not_replaced(tmp_path: Path) -> None:
    fleet = FakeFleet(list(NODES), slow={"node2"}, recreate_s=30, no_identity={"node2"})
    with pytest.raises(BringupError) as err:
        run(fleet, tmp_path)
    assert err.value.exit_name == "DATA"
    assert "gce_instance_id" in str(err.value) and "node2" in str(err.value)
    # Refused before the first burn-in, not after it at the first replacement.
    assert fleet.runs == [] and fleet.replaced == []


def test_a_retry_for_not_answering_yet_is_per_instance_not_per_name(tmp_path: Path) -> None:
    recreated: list[str] = []

    def boots(fleet: FakeFleet, host: str) -> None:
        recreated.append(host)
        fleet.late.add(host)  # every new VM misses its first burn-in
        if len(recreated) == 1:
            fleet.slow.add(host)  # and the first one measures slow once it answers

    fleet = FakeFleet(list(NODES), slow={"node2"}, recreate_s=30, on_new_instance=boots)
    outcome = run(fleet, tmp_path, budget=Budget(max_rounds=5))
    assert outcome.status == "ready", outcome.reason
    # node2's second instance got its retry although its first one had one under the same name.
    assert fleet.replaced == [["node2"], ["node2"]]
    rounds = on_disk(tmp_path)["rounds"]
    retried = [(r["round"], x["instance"]) for r in rounds for x in r["retry"]]
    assert [n for n, _ in retried] == [2, 4] and retried[0][1] != retried[1][1]


def test_a_fleet_run_that_did_not_finish_replaces_nothing_and_resumes_at_its_burn_in(
    tmp_path: Path,
) -> None:
    fleet = FakeFleet(list(NODES), unfinished_run="the play hit its time limit (3600 s)")
    with pytest.raises(BringupError) as err:
        run(fleet, tmp_path)
    assert err.value.exit_name == "INCOMPLETE" and "time limit" in str(err.value)
    assert fleet.replaced == []  # every host lacked results; none was replaced for it
    doc = on_disk(tmp_path)
    assert [r["phase"] for r in doc["rounds"]] == ["burn-in"] and doc["replacements"] == 0
    outcome = run(fleet, tmp_path, resume=True)
    assert outcome.status == "ready" and fleet.replaced == []


def test_an_interruption_inside_the_replace_call_never_replaces_twice(tmp_path: Path) -> None:
    fleet = FakeFleet(list(NODES), slow={"node2"}, spares=["node4"], interrupt_replace=True)
    with pytest.raises(KeyboardInterrupt):
        run(fleet, tmp_path)
    doc = on_disk(tmp_path)
    assert doc["rounds"][0]["phase"] == "replacing"
    assert [x["node"] for x in doc["rounds"][0]["replacing"]] == ["node2"]
    outcome = run(fleet, tmp_path, resume=True)
    assert outcome.status == "ready"
    assert fleet.replaced == [["node2"]]  # asked once, before the interruption
    doc = on_disk(tmp_path)
    r1, r2 = doc["rounds"]
    assert [x["node"] for x in r1["replaced"]] == ["node2"] and "interrupted" in r1["replaced"][0]["detail"]
    assert doc["replacements"] == 1 and doc["slots"]["node4"] == "node2"
    # The kept hosts were judged on their round-1 results, not burned in again.
    assert r2["burned"] == ["node4"] and r2["kept"] == ["node1", "node3"]


def test_a_failed_replacement_stops_the_loop_naming_the_node(tmp_path: Path) -> None:
    fleet = FakeFleet(list(NODES), slow={"node2"}, spares=["node4"], fail_replace={"node2"})
    outcome = run(fleet, tmp_path)
    assert outcome.status == "action-failed" and "node2" in (outcome.reason or "")
    rep = on_disk(tmp_path)["rounds"][0]["replaced"][0]
    assert rep["ok"] is False and "throttled" in rep["detail"]


def test_an_interrupted_round_is_redone_and_finished_rounds_are_not(tmp_path: Path) -> None:
    fleet = FakeFleet(list(NODES), slow={"node2"}, spares=["node4"], interrupt_run=2)
    with pytest.raises(KeyboardInterrupt):
        run(fleet, tmp_path)
    doc = on_disk(tmp_path)
    assert [r["phase"] for r in doc["rounds"]] == ["done", "burn-in"]
    fleet.interrupt_run = None
    fleet.runs.clear()
    outcome = run(fleet, tmp_path, resume=True)
    assert outcome.status == "ready"
    assert fleet.runs == [("node4",)]  # round 1 is not burned in again
    assert fleet.replaced == [["node2"]]  # nor is anything replaced twice
    assert [r["round"] for r in on_disk(tmp_path)["rounds"]] == [1, 2]


def test_an_interruption_after_a_finished_burn_in_judges_it_on_resume_without_running_it_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from validation.bringup import loop

    fleet = FakeFleet(list(NODES), slow={"node2"}, spares=["node4"], unreachable={"node3"})
    judge = loop.decide

    def interrupted(*args: Any, **kw: Any) -> Any:
        raise KeyboardInterrupt  # Ctrl-C, or a CI job cancelled, right after the burn-in

    monkeypatch.setattr(loop, "decide", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run(fleet, tmp_path)
    monkeypatch.setattr(loop, "decide", judge)
    outcome = run(fleet, tmp_path, resume=True)
    # One burn-in for round 1, not two: the measurements of the interrupted attempt were judged,
    # node3's unreachable reason with them.
    assert fleet.runs[0] == () and fleet.runs.count(()) == 1, fleet.runs
    r1 = on_disk(tmp_path)["rounds"][0]
    assert set(r1["rejected"]) == {"node2", "node3"}
    assert "unreachable" in r1["verdicts"]["node3"]["reasons"][0]["message"]
    assert outcome.status in ("ready", "budget-spent", "waiting"), outcome.reason


def _kept_node1_failed_then_interrupted_at_round_twos_gate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> FakeFleet:
    """Round 2 burns in node4 alone (node2 was slow); its fabric rounds find kept node1 failing
    with every partner, appended to node1's copy; the run is interrupted at round 2's gate."""
    from validation.bringup import loop

    fleet = FakeFleet(list(NODES), slow={"node2"}, spares=["node4", "node5"], fabric_failed={2: {"node1"}})
    judge = loop.decide
    calls: list[int] = []

    def interrupted_at_round_two(*args: Any, **kw: Any) -> Any:
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return judge(*args, **kw)

    monkeypatch.setattr(loop, "decide", interrupted_at_round_two)
    with pytest.raises(KeyboardInterrupt):
        run(fleet, tmp_path)
    monkeypatch.setattr(loop, "decide", judge)
    return fleet


def test_what_a_round_found_on_a_kept_host_survives_a_resume_at_its_gate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Round 2 burns in node4 alone; its fabric rounds find kept node1 failing with every partner.
    fleet = _kept_node1_failed_then_interrupted_at_round_twos_gate(tmp_path, monkeypatch)
    outcome = run(fleet, tmp_path, resume=True)
    assert fleet.runs[:2] == [(), ("node4",)] and ("node4",) not in fleet.runs[2:]  # judged, not redone
    r2 = on_disk(tmp_path)["rounds"][1]
    assert r2["kept"] == ["node1", "node3"] and r2["rejected"] == ["node1"], r2["verdicts"]
    assert outcome.status == "ready" and "node1" not in outcome.result.fleet.accepted  # type: ignore[union-attr]


def test_a_resume_that_burns_the_round_again_starts_every_kept_copy_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The interrupted round 2 appended a failed pair to kept node1's copy; before the resume, kept
    # node3's results are gone (copy and source): the round is burned in again, and node1 is judged
    # on its clean round-1 file plus what the new run adds, not on the discarded run's record.
    fleet = _kept_node1_failed_then_interrupted_at_round_twos_gate(tmp_path, monkeypatch)
    (tmp_path / "round-2" / "results" / "node3.jsonl").unlink()
    (tmp_path / "round-1" / "results" / "node3.jsonl").unlink()
    run(fleet, tmp_path, resume=True)
    assert fleet.runs[:2] == [(), ("node4",)] and len(fleet.runs) >= 3  # round 2 burned in again
    r2 = on_disk(tmp_path)["rounds"][1]
    assert "node1" in r2["kept"] and "node1" not in r2["rejected"], r2["verdicts"]


def test_what_a_round_found_on_a_kept_host_is_judged_then_and_in_the_rounds_after(tmp_path: Path) -> None:
    # Round 2: node4 is as slow as node2 was, and the fabric rounds lose kept node1. Two rejects in
    # a fleet of three are a pattern, not replaced: round 3 keeps both and must judge node1 on what
    # round 2 found, not on its clean round-1 file.
    fleet = FakeFleet(
        list(NODES), slow={"node2", "node4"}, spares=["node4", "node5", "node6"], fabric_lost={2: {"node1"}}
    )
    run(fleet, tmp_path)
    run(fleet, tmp_path, resume=True)
    rounds = on_disk(tmp_path)["rounds"]
    assert rounds[1]["kept"] == ["node1", "node3"] and rounds[1]["rejected"] == ["node1", "node4"]
    assert any(
        "unreachable during the fabric rounds" in x["message"]
        for x in rounds[1]["verdicts"]["node1"]["reasons"]
    )
    later = rounds[2:]
    assert later and all("node1" in r["rejected"] for r in later if "node1" in r.get("kept", [])), later
    record = BringupRecord.load(tmp_path / RECORD_NAME)
    # The record points at the last round's copy, which holds what every round added to it.
    assert record.results["node1"].endswith(f"round-{len(rounds)}/results/node1.jsonl")


def test_a_resume_after_the_machines_changed_burns_the_round_in_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from validation.bringup import loop

    fleet = FakeFleet(list(NODES), slow={"node2"}, identity=True, spares=["node4"])
    judge = loop.decide

    def interrupted(*args: Any, **kw: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(loop, "decide", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run(fleet, tmp_path)
    monkeypatch.setattr(loop, "decide", judge)
    fleet.new_instance("node1")  # the group healed node1 while nobody watched
    run(fleet, tmp_path, resume=True)
    assert fleet.runs[:2] == [(), ()]  # what was measured is not node1's machine any more


def test_an_interruption_while_waiting_resumes_at_the_wait_without_replacing_again(tmp_path: Path) -> None:
    fleet = FakeFleet(list(NODES), slow={"node2"}, spares=["node4"], appear=False)

    def interrupt(_: float) -> None:
        raise KeyboardInterrupt

    fleet.clock.sleep = interrupt  # type: ignore[method-assign,assignment]
    with pytest.raises(KeyboardInterrupt):
        run(fleet, tmp_path)
    assert on_disk(tmp_path)["rounds"][0]["phase"] == "replaced"
    del fleet.clock.sleep
    fleet.hosts.append("node4")  # the group brought the replacement up meanwhile
    outcome = run(fleet, tmp_path, resume=True)
    assert outcome.status == "ready"
    assert fleet.replaced == [["node2"]] and fleet.runs == [(), ("node4",)]


def test_resume_of_a_ready_fleet_does_nothing(tmp_path: Path) -> None:
    fleet = FakeFleet(list(NODES))
    run(fleet, tmp_path)
    outcome = run(fleet, tmp_path, resume=True)
    assert outcome.status == "ready" and fleet.runs == [()]


def test_a_record_in_out_needs_resume_and_resume_needs_a_record(tmp_path: Path) -> None:
    fleet = FakeFleet(list(NODES))
    with pytest.raises(RecordError, match="no record to resume from"):
        run(fleet, tmp_path / "none", resume=True)
    run(fleet, tmp_path)
    with pytest.raises(BringupError, match="--resume") as caught:
        run(fleet, tmp_path)
    assert caught.value.exit_name == "USAGE"


def test_resume_refuses_another_fleets_record(tmp_path: Path) -> None:
    fleet = FakeFleet(list(NODES))
    run(fleet, tmp_path)
    (tmp_path / RECORD_NAME).write_text(
        (tmp_path / RECORD_NAME).read_text().replace('"fleet": "train-a"', '"fleet": "other"')
    )
    with pytest.raises(RecordError, match="'other'"):
        run(fleet, tmp_path, resume=True)
    (tmp_path / RECORD_NAME).write_text("{not json")
    with pytest.raises(RecordError, match="not JSON"):
        run(fleet, tmp_path, resume=True)


def test_a_record_naming_results_in_another_folder_is_judged_on_its_own_folders(tmp_path: Path) -> None:
    fleet = FakeFleet(list(NODES), slow={"node2"}, spares=["node4"], appear=False)
    out = tmp_path / "out"
    assert run(fleet, out).status == "waiting"
    # node1's results pointed at a planted file of the same shape elsewhere: a healthy-looking run.
    planted = tmp_path / "elsewhere" / "round-1" / "results" / "node1.jsonl"
    planted.parent.mkdir(parents=True)
    planted.write_text("planted\n")
    doc = on_disk(out)
    doc["results"]["node1"] = str(planted)
    (out / RECORD_NAME).write_text(json.dumps(doc))
    loaded = BringupRecord.load(out / RECORD_NAME)
    assert loaded.results["node1"] == str(out / "round-1" / "results" / "node1.jsonl")


@pytest.mark.parametrize(
    ("kw", "word"),
    [
        ({"max_rounds": 0}, "max_rounds"),
        ({"max_wall_s": 0}, "max_wall_s"),
        ({"max_replacements": -1}, "max_rep"),
        ({"max_per_round": 0}, "max_per_round"),
    ],
)
def test_a_budget_out_of_range_is_refused(kw: dict[str, float], word: str) -> None:
    with pytest.raises(ValueError, match=word):
        Budget(**kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda d: d.update(elapsed_s=float("nan")), "elapsed_s"),  # would switch --max-wall off
        (lambda d: d.update(elapsed_s=-1e9), "elapsed_s"),
        (lambda d: d.update(replacements=-3), "replacements"),
        (lambda d: d.update(rounds="round one"), "rounds"),  # would start over, deleting results
        (lambda d: d["rounds"][0].pop("round"), "rounds.0.round"),
        (lambda d: d["rounds"][0].update(round=2), "rounds.0.round"),
        (lambda d: d["rounds"][0]["replaced"][0].pop("ok"), "rounds.0.replaced.0.ok"),
        (lambda d: d["rounds"][0].update(phase="replacing"), "phase replacing"),
        (lambda d: d["results"].update(node1="/etc/hostname"), "results.node1"),  # judged on any file
        (lambda d: d["results"].update(node1="/tmp/round-1/results/node2.jsonl"), "results.node1"),
        (lambda d: d["history"]["node2"][0].update(keys="slow"), "history.node2.0.keys"),
        (lambda d: d.update(pending=[1]), "pending.0"),
        (lambda d: d.update(retired={"node2": 7}), "retired.node2"),
        (lambda d: d["rounds"][0].update(left_out="x"), "rounds.0.left_out"),
        (lambda d: d["rounds"][0].update(timings_s=[]), "rounds.0.timings_s"),
        (lambda d: d["rounds"][0].update(instances={"node1": 7}), "rounds.0.instances.node1"),
        (lambda d: d["rounds"][0].update(host_reasons={"node3": ["slow"]}), "rounds.0.host_reasons.node3"),
    ],
    ids=lambda x: x if isinstance(x, str) else "",
)
def test_a_damaged_record_is_refused_naming_the_field(tmp_path: Path, edit: Any, field: str) -> None:
    fleet = FakeFleet(list(NODES), slow={"node2"}, spares=["node4"], appear=False)
    assert run(fleet, tmp_path).status == "waiting"
    doc = on_disk(tmp_path)
    edit(doc)
    (tmp_path / RECORD_NAME).write_text(json.dumps(doc))
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    with pytest.raises(RecordError) as err:
        run(fleet, tmp_path, resume=True)
    assert field in str(err.value) and "\n" not in str(err.value)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before  # nothing deleted
