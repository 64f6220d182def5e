"""The fabric stage's ib_write_bw pairs on the controller, without hosts: a fake play answers each
round as ansible-runner's events would, with the all-reduce record and the ib_write_bw record of
every host (validation/burnin/pairbw.py's), and the stage's attribution, gate reasons, notes and
appended host figures are checked, through the gate."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from fleet.metrics import FABRIC_CHECK, FABRIC_IB_CHECK, FABRIC_IB_METRIC, FABRIC_METRIC, METRICS
from fleet.results import CheckRecord, read_results
from tests.conftest import ROOT
from tests.validation.fleetrun.helpers import (
    HOSTS,
    RUN,
    empty_results,
    failed,
    flat_tasks,
    judged,
    ok,
    record,
    unreachable,
)
from validation.fabric.model import Pair
from validation.fleetrun.events import HostRun
from validation.fleetrun.fabric import (
    IB_READ_TASK,
    IB_TASKS,
    NO_TORCH,
    READ_TASK,
    AnsibleRounds,
    FabricStage,
    ib_pair_result,
    read_round,
    run_stage,
)
from validation.fleetrun.run import FleetRunOptions, _fabric_stage, fabric_ready

NO_PERFTEST = "ib_write_bw is not installed (perftest): the pair's RDMA bandwidth is not measured"


def ib_record(node: str, status: str = "pass", gbitps: float | None = None, reason: str | None = None) -> str:
    return CheckRecord.model_validate(
        {
            **RUN,
            "node": node,
            "check": FABRIC_IB_CHECK,
            "status": status,
            "metrics": {} if gbitps is None else {FABRIC_IB_METRIC: gbitps},
            "reason": reason,
            "backend": "perftest-ib_write_bw",
            "duration_s": 1.0,
        }
    ).to_json()


class IbFleet:
    """Answers a round's play: every pair's all-reduce is healthy (busbw 1.0) and, as the role does,
    runs only where the round's `allreduce` says so; its ib_write_bw runs at the slower HCA side
    (`ib`), `no_perftest` hosts make both sides skip, `ib_hung` hosts fail their wait (the side's
    hard limit passed and the role saw exit 2), `lost` hosts are unreachable after `lost_after`
    rounds."""

    def __init__(
        self,
        ib: Mapping[str, float],
        no_perftest: Sequence[str] = (),
        ib_hung: Sequence[str] = (),
        ib_off: bool = False,
        lost: Sequence[str] = (),
        lost_after: int = 0,
    ) -> None:
        self.ib = dict(ib)
        self.no_perftest = set(no_perftest)
        self.ib_hung = set(ib_hung)
        self.ib_off = ib_off
        self.lost = set(lost)
        self.lost_after = lost_after
        self.rounds: list[dict[str, dict[str, object]]] = []

    def __call__(self, extravars: Mapping[str, object], limit: Sequence[str]) -> list[dict[str, Any]]:
        mapping = extravars["burnin_fabric_round"]
        assert isinstance(mapping, dict)
        self.rounds.append(mapping)
        events: list[dict[str, Any]] = []
        for host in limit:
            partner = next(m for m in str(mapping[host]["members"]).split(",") if m != host)
            if host in self.lost and len(self.rounds) > self.lost_after:
                events.append(unreachable(host, "Create the folder for the pairs' results", "ssh: timed out"))
                continue
            if mapping[host]["allreduce"]:
                events.append(ok(host, READ_TASK, stdout=record(host, busbw=1.0)))
            if self.ib_off:
                continue
            if host in self.no_perftest:
                events.append(ok(host, IB_READ_TASK, stdout=ib_record(host, "skip", reason=NO_PERFTEST)))
            elif partner in self.no_perftest:
                why = f"partner {partner}: {NO_PERFTEST}"
                events.append(ok(host, IB_READ_TASK, stdout=ib_record(host, "skip", reason=why)))
            elif host in self.ib_hung:
                events.append(failed(host, "Wait for ib_write_bw of the pair", rc=137, msg="killed"))
            elif partner in self.ib_hung:
                why = f"client of {partner}-{host}: 1 of 8 HCA pair(s) failed: mlx5_0->mlx5_0: no result within 35 s"
                events.append(ok(host, IB_READ_TASK, stdout=ib_record(host, "error", reason=why)))
            else:
                value = min(self.ib[host], self.ib[partner])
                events.append(ok(host, IB_READ_TASK, stdout=ib_record(host, gbitps=value)))
        return events


def stage_of(fleet: IbFleet, hosts: Sequence[str] = HOSTS, no_torch: Sequence[str] = ()) -> FabricStage:
    measure = AnsibleRounds(fleet, base_port=29401, stage_id="s", no_allreduce=no_torch)
    return run_stage(hosts, measure, rounds=3)


HEALTHY_IB = {"h0": 392.3, "h1": 391.0, "h2": 393.1, "h3": 390.2}


def test_a_host_slow_on_ib_write_bw_with_every_partner_is_rejected_naming_the_pairs() -> None:
    stage = stage_of(IbFleet({**HEALTHY_IB, "h2": 98.0}))
    reasons = stage.reasons()
    assert list(reasons) == ["h2"]  # the all-reduce was healthy: the ib_write_bw pairs alone found it
    (reason,) = reasons["h2"]
    assert reason.rule == "outlier" and reason.metric == FABRIC_IB_METRIC and reason.check == FABRIC_CHECK
    assert reason.message.startswith("fabric ib_write_bw: bad with every partner (3 of 3)")
    for partner in ("h0", "h1", "h3"):
        assert f"{partner} 98 Gb/s (slow)" in reason.message
    assert "Gb/s)" in reason.message and "GB/s" not in reason.message
    assert stage.ib_attribution is not None and stage.ib_attribution.guilty_hosts == ("h2",)
    assert stage.attribution is not None and stage.attribution.clean
    assert "ib_write_bw: 6 pair(s), 6 completed" in stage.summary() and "guilty: h2" in stage.summary()


def test_a_pair_slow_only_together_is_a_suspect_link_and_nobody_is_rejected() -> None:
    class OneLink(IbFleet):
        def __call__(self, extravars: Mapping[str, object], limit: Sequence[str]) -> list[dict[str, Any]]:
            events = super().__call__(extravars, limit)
            mapping = extravars["burnin_fabric_round"]
            assert isinstance(mapping, dict)
            if mapping.get("h0", {}).get("members") == "h0,h1":
                for e in events:  # only the h0-h1 pair: the other pair of the round stays healthy
                    if e["event_data"]["task"] == IB_READ_TASK and e["event_data"]["host"] in ("h0", "h1"):
                        e["event_data"]["res"]["stdout"] = ib_record(e["event_data"]["host"], gbitps=150.0)
            return events

    stage = stage_of(OneLink(HEALTHY_IB))
    assert stage.reasons() == {}
    notes = stage.gate_notes()
    assert any(n.startswith("fabric ib_write_bw: suspect link h0-h1") for n in notes), notes


def test_hosts_without_perftest_are_a_note_never_a_reject_and_the_all_reduce_still_counts(
    tmp_path: Path,
) -> None:
    stage = stage_of(IbFleet(HEALTHY_IB, no_perftest=HOSTS))
    assert stage.status == "measured" and stage.reasons() == {}
    assert stage.ib_results == () and stage.ib_attribution is None and len(stage.ib_skipped) == 6
    (note,) = stage.gate_notes()
    assert note.startswith("fabric ib_write_bw not measured in 6 pair(s) (")
    assert note.endswith(NO_PERFTEST) and "and 3 more" in note
    assert "ib_write_bw not measured (6 pair(s) skipped)" in stage.summary()
    results = empty_results(tmp_path)
    stage.write_host_records(results)
    (fig,) = [c for c in read_results(results / "h0.jsonl").checks if c.check == FABRIC_CHECK]
    assert fig.metrics == {FABRIC_METRIC: 1.0}  # no ib figure, and nothing missing for the gate


def test_one_host_without_perftest_skips_only_its_pairs() -> None:
    stage = stage_of(IbFleet(HEALTHY_IB, no_perftest=["h3"]))
    assert stage.reasons() == {}
    assert len(stage.ib_results) == 3 and all("h3" not in r.pair for r in stage.ib_results)
    assert len(stage.ib_skipped) == 3
    assert stage.ib_attribution is not None and stage.ib_attribution.hosts == ("h0", "h1", "h2")
    assert stage.ib_attribution.inconclusive == ()  # h3 is skipped, not "never measured"


def test_a_host_whose_ib_write_bw_hangs_with_every_partner_fails_closed_and_is_rejected() -> None:
    stage = stage_of(IbFleet(HEALTHY_IB, ib_hung=["h1"]))
    reasons = stage.reasons()
    assert list(reasons) == ["h1"]
    (reason,) = reasons["h1"]
    assert reason.rule == "error" and reason.metric == FABRIC_IB_METRIC
    assert reason.message.startswith("fabric ib_write_bw: failed with every partner (3 of 3)")
    assert "Wait for ib_write_bw of the pair" in reason.message
    # The all-reduce was read back before the ib_write_bw step failed: its pairs stand.
    assert all(r.busbw_gbps == 1.0 for r in stage.results)


def test_an_all_reduce_failure_is_not_counted_again_by_the_ib_write_bw_pairs() -> None:
    seen = read_round([failed("h1", "Wait for the all-reduce of the pair", rc=2, msg="rendezvous timed out")])
    assert ib_pair_result(Pair.of("h0", "h1"), seen) == (None, None)
    seen = read_round([ok("h0", IB_READ_TASK, stdout=ib_record("h0", gbitps=390.0))])
    result, _ = ib_pair_result(Pair.of("h0", "h1"), seen, 2)
    assert result is not None and result.busbw_gbps is None and result.round == 2
    assert result.reason == "ib_write_bw: h1: no record came back"
    seen = read_round([ok("h0", IB_READ_TASK, stdout=record("h0", busbw=1.0))])
    assert "no record of the pair's ib_write_bw" in seen.ib_problems["h0"]


def test_with_the_step_off_there_is_no_ib_write_bw_at_all() -> None:
    stage = stage_of(IbFleet(HEALTHY_IB, ib_off=True))
    assert stage.ib_results == () and stage.ib_skipped == () and stage.ib_attribution is None
    assert stage.gate_notes() == [] and "ib_write_bw" not in stage.summary()


def test_ib_figures_reach_the_gate_beside_the_busbw_and_the_slow_host_is_rejected(tmp_path: Path) -> None:
    results = empty_results(tmp_path)
    stage = stage_of(IbFleet({**HEALTHY_IB, "h2": 98.0}))
    assert stage.write_host_records(results) == HOSTS
    (fig,) = [c for c in read_results(results / "h2.jsonl").checks if c.check == FABRIC_CHECK]
    assert fig.metrics == {FABRIC_METRIC: 1.0, FABRIC_IB_METRIC: 98.0}
    assert any(f.startswith("ib_write_bw: best of 3 completed pair(s)") for f in fig.findings)
    run, gate = judged(stage, results, tmp_path)
    ib = {v.node: [r for r in v.reasons if r.metric == FABRIC_IB_METRIC] for v in gate.nodes}
    assert [h for h, rs in ib.items() if rs] == ["h2"], ib
    assert {v.node: v.metrics.get(FABRIC_IB_METRIC) for v in gate.nodes}["h0"] == pytest.approx(
        392.3, rel=0.01
    )
    document = run.as_dict()["fabric"]
    assert isinstance(document, dict)
    assert document["ib_write_bw"]["unit"] == "Gb/s" and len(document["ib_write_bw"]["pairs"]) == 6
    assert document["ib_write_bw"]["attribution"]["guilty"][0]["host"] == "h2"
    assert document["ib_write_bw"]["attribution"]["host_metric"] == FABRIC_IB_METRIC


def test_names_shared_with_the_node_side_and_the_role_agree() -> None:
    # The node side (validation/burnin/pairbw.py) writes FABRIC_IB_CHECK from fleet.metrics too.
    assert METRICS[FABRIC_IB_METRIC].unit == "Gb/s"
    assert METRICS[FABRIC_IB_METRIC].higher_is_better
    tasks = {
        t["name"]: t
        for t in flat_tasks(yaml.safe_load((ROOT / "roles/burnin/tasks/fabric_round.yml").read_text()))
    }
    assert set(tasks) >= IB_TASKS
    start = tasks["Start ib_write_bw of the pair"]
    assert start["poll"] == 0 and "burnin_fabric_ib_timeout_s" in start["async"]
    wait = tasks["Wait for ib_write_bw of the pair"]
    assert "not in [0, 2]" in wait["failed_when"]


# ib_write_bw needs no PyTorch: a fleet burned in on the core dependencies still gets its RDMA pairs.


def test_a_fleet_without_pytorch_is_judged_on_ib_write_bw_alone(tmp_path: Path) -> None:
    fleet = IbFleet({**HEALTHY_IB, "h2": 98.0})
    stage = stage_of(fleet, no_torch=HOSTS)
    # The role was told to leave every pair's all-reduce out, and no pair of it is judged.
    assert [m["allreduce"] for r in fleet.rounds for m in r.values()] == [False] * 12
    assert stage.status == "measured" and stage.attribution is None and len(stage.allreduce_off) == 6
    assert list(stage.reasons()) == ["h2"]
    (reason,) = stage.reasons()["h2"]
    assert reason.metric == FABRIC_IB_METRIC and reason.message.startswith(
        "fabric ib_write_bw: bad with every"
    )
    (off,) = [n for n in stage.gate_notes() if n.startswith("fabric all-reduce not measured in 6 pair(s)")]
    assert "PyTorch is not installed" in off and "--extra-package torch" in off
    assert "ib_write_bw: 6 pair(s), 6 completed" in stage.summary()
    assert "all-reduce not measured in 6 pair(s)" in stage.summary()
    assert "on h0, h1, h2, h3: their pairs measure ib_write_bw only" in off and "and 3 more" in off
    assert stage.as_dict()["allreduce_off"][0] == {"hosts": ["h0", "h3"], "without_torch": ["h0", "h3"]}
    # Each host's figure is its ib_write_bw alone: no all-reduce figure is made up.
    results = empty_results(tmp_path)
    assert stage.write_host_records(results) == HOSTS
    (fig,) = [c for c in read_results(results / "h0.jsonl").checks if c.check == FABRIC_CHECK]
    assert fig.metrics == {FABRIC_IB_METRIC: pytest.approx(391.0)}
    # Through the gate: h2 is rejected on its HCAs, and nobody for the all-reduce figure nobody took
    # (the other rejects here are the fixture's results, which hold no burn-in checks).
    _, gate = judged(stage, results, tmp_path)
    by_metric = {m: sorted(v.node for v in gate.nodes for r in v.reasons if r.metric == m) for m in METRICS}
    assert by_metric[FABRIC_IB_METRIC] == ["h2", "h2"] and by_metric[FABRIC_METRIC] == []


def test_a_host_without_pytorch_is_paired_on_ib_write_bw_and_the_others_on_both() -> None:
    stage = stage_of(IbFleet({**HEALTHY_IB, "h3": 98.0}), no_torch=["h3"])
    assert {p for p, _ in stage.allreduce_off} == {Pair.of(h, "h3") for h in ("h0", "h1", "h2")}
    assert all(lacking == ("h3",) for _, lacking in stage.allreduce_off)
    off = [r.reason for r in stage.results if "h3" in r.pair]
    assert off == ["not measured: no PyTorch on h3 (ib_write_bw only)"] * 3
    # The all-reduce judges the three pairs it measured, over their hosts only: h3 is not "never
    # measured" there. Its slow HCAs are what rejects it.
    assert stage.attribution is not None and stage.attribution.hosts == ("h0", "h1", "h2")
    assert stage.attribution.clean
    assert list(stage.reasons()) == ["h3"] and stage.reasons()["h3"][0].metric == FABRIC_IB_METRIC
    assert len(stage.ib_results) == 6


def test_a_host_lost_in_ib_write_bw_only_pairs_fails_them_closed_as_its_own() -> None:
    stage = stage_of(IbFleet(HEALTHY_IB, lost=["h3"], lost_after=1), no_torch=HOSTS)
    # Round 1 measured h3's pair; from round 2 on h3 is unreachable: rejected as unreachable, and
    # the pairs it failed are its own, never its partners'.
    assert "h3" in stage.unreachable and stage.reasons()["h3"][0].rule == "missing"
    failed_pairs = [r for r in stage.ib_results if r.busbw_gbps is None]
    assert len(failed_pairs) == 2 and all("h3" in r.pair for r in failed_pairs)
    assert all("unreachable" in (r.reason or "") for r in failed_pairs)
    assert set(stage.reasons()) == {"h3"}


def test_without_pytorch_and_without_perftest_the_stage_is_skipped_saying_both() -> None:
    fleet = IbFleet(HEALTHY_IB, no_perftest=HOSTS)
    stage = stage_of(fleet, no_torch=HOSTS)
    assert stage.status == "skipped" and len(fleet.rounds) == 1  # no point in another round
    assert "PyTorch is not installed" in (stage.reason or "") and NO_PERFTEST in (stage.reason or "")
    assert stage.reasons() == {}


def test_where_ib_write_bw_runs_the_fleet_run_pairs_hosts_without_pytorch(tmp_path: Path) -> None:
    runs = {h: HostRun(h) for h in HOSTS}
    fetched = [tmp_path / f"{h}.jsonl" for h in HOSTS]
    without_ib = fabric_ready(HOSTS, runs, fetched, None, no_torch={"h3"}, ib_runs=False)
    assert without_ib == (["h0", "h1", "h2"], {"h3": NO_TORCH})
    ready, left_out = fabric_ready(HOSTS, runs, fetched, None, no_torch={"h3"}, ib_runs=True)
    assert ready == HOSTS and left_out == {}
    # The stage the fleet run starts tells the role which pairs leave their all-reduce out.
    fleet = IbFleet({**HEALTHY_IB, "h3": 98.0})
    opts = FleetRunOptions(
        inventory=tmp_path / "inventory.yml",
        out_dir=tmp_path,
        sku="cpu",
        extravars={"burnin_fabric_ib": True},
    )
    plays = SimpleNamespace(
        opts=opts,
        say=lambda line: None,
        rdzv_prefix="fleetforge",
        run=lambda playbook, extravars, limit, timeout, what: fleet(extravars, limit),
    )
    stage = _fabric_stage(plays, ready, left_out, {"h3"})  # type: ignore[arg-type]
    assert {p for p, _ in stage.allreduce_off} == {Pair.of(h, "h3") for h in ("h0", "h1", "h2")}
    assert list(stage.reasons()) == ["h3"]
