"""End to end: the replace-and-reburn loop (validation/bringup) over real SSH to local test hosts,
through run_fleet, ansible-runner, the burnin role and the gate.

Three hosts are the fleet (h0, h1, h2: the inventory), a fourth (h3) is started but not in it: the
cloud's replacement, already booted. h2 is capped at a fifth of a core for real (cgroup CPU quota)
from the moment its burn-in starts.
The test double behind the Replacer interface does what a cloud's group does when a node is marked
unhealthy: the node leaves the group (the inventory) and a fresh instance joins it.

Round 1 is the same in both scenarios, so it runs once (the `interrupted` fixture): the loop
rejects h2, replaces it with h3 and is interrupted as round 2 starts. Each scenario resumes a copy
of that record, as a user resumes after an interruption:
- h3 healthy: round 2 burns in h3 alone (h0 and h1 are judged again on their round-1 results), READY;
- h3 as slow, and so is h4, the next spare: h3 is rejected and replaced by h4 in round 2, h4 is
  rejected in round 3 for the same reason, and the slot (h2's) replaced twice for it is a pattern:
  not replaced a third time, `fleetforge bringup` exits 3 (budget spent).
"""

from __future__ import annotations

import copy
import dataclasses
import filecmp
import json
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleetforge import exitcodes
from tests.e2e.fleet import BURNIN_COMMAND, MEASURE, SLOW_CPU, VALIDATION, throttled_periods, wheelhouse_of
from tests.hosts.fixtures import HostPool
from tests.hosts.harness import TestHost, TestHosts
from validation.actions import RejectedNode
from validation.bringup import (
    RECORD_NAME,
    BringupSettings,
    Budget,
    BurnIn,
    FleetRunner,
    ReplaceOutcome,
    bring_up,
)
from validation.bringup.adapters import AnsibleFleetRunner, AnsibleInventory
from validation.fleetrun.run import FleetRunOptions
from validation.gate import FleetPlan, GateSettings

pytestmark = [pytest.mark.hosts, pytest.mark.measures]


class StandInGroup:
    """The cloud's group, played by the inventory file: a replaced node leaves it, a spare joins."""

    name = "test-group"
    keeps_names = False
    # Each machine carries an EC2-like instance id in the inventory, which the loop reads back
    # through ansible-inventory as it reads the ids of a real group.
    identity_var = "ec2_instance_id"

    def __init__(
        self,
        inventory: Path,
        machines: Mapping[str, Mapping[str, Any]],
        members: Sequence[str],
        spares: Sequence[str],
        replaced: Sequence[str] = (),
    ) -> None:
        self.inventory = inventory
        self.machines = machines  # name -> connection vars of every test host the group may hold
        self.members = list(members)
        self.spares = list(spares)
        self.replaced = list(replaced)
        self.write()

    def write(self) -> None:
        members = {h: {**self.machines[h], "ec2_instance_id": instance_id(h)} for h in self.members}
        self.inventory.write_text(yaml.safe_dump({"all": {"hosts": members}}, sort_keys=False))

    def check(self, nodes: Sequence[RejectedNode]) -> None:
        unknown = [n.name for n in nodes if n.name not in self.members]
        assert not unknown, f"asked to replace hosts outside the group: {unknown}"

    def replace(self, nodes: Sequence[RejectedNode]) -> list[ReplaceOutcome]:
        out = []
        for node in nodes:
            if not self.spares:
                out.append(ReplaceOutcome(node.name, False, "no spare left in the test bed"))
                continue
            self.members.remove(node.name)
            self.members.append(self.spares.pop(0))
            self.replaced.append(node.name)
            out.append(ReplaceOutcome(node.name, True, f"{node.name} left the group"))
        self.write()
        return out


def instance_id(host: str) -> str:
    return f"i-{int.from_bytes(host.encode()[:8].ljust(8, b'0'), 'big'):016x}"


class InterruptedOnce:
    """Stops the bring-up as round 2's burn-in starts, as a Ctrl-C or a lost controller would."""

    def __init__(self, runner: FleetRunner) -> None:
        self.runner = runner
        self.calls = 0

    def __call__(self, inventory: Path, out_dir: Path, limit: tuple[str, ...], time_left_s: float) -> BurnIn:
        self.calls += 1
        if self.calls == 2:
            raise KeyboardInterrupt
        return self.runner(inventory, out_dir, limit, time_left_s)


def spec(path: Path, hosts: Sequence[TestHost]) -> Path:
    validation: dict[str, Any] = copy.deepcopy(VALIDATION)
    # Every test host writes to this machine's one disk: a storage figure measures the disk's state
    # when the host's turn came, not the host. Only the floor applies to it here.
    for metric in ("storage_read_mbps", "storage_write_mbps"):
        validation["thresholds"][metric]["fleet_relative"] = False
    doc = {
        "name": "e2e-bringup",
        "cloud": "onprem",
        "sku": "cpu",
        "nodes": 3,
        "spares": 0,
        "hosts": [{"name": h.name, "address": h.address, "user": h.user} for h in hosts],
        "tags": {"owner": "fleetforge-tests", "dataset": "none"},
        "validation": validation,
    }
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def wheelhouse(base: Path) -> Path:
    """The tree's bundle as a wheelhouse, so every round installs the same bytes without building."""
    from fleetforge.install import source_root
    from validation.fleetrun.bundle import build_bundle
    from validation.fleetrun.run import default_cache

    return wheelhouse_of(
        build_bundle(base / "bundle", default_cache(), source=source_root()), base / "wheelhouse"
    )


def extravars(args: Sequence[str]) -> Mapping[str, object]:
    """MEASURE's --var KEY=VALUE pairs as role variables (the loop takes them as data)."""
    pairs = [args[i + 1] for i, a in enumerate(args) if a == "--var"]
    return {k: yaml.safe_load(v) for k, _, v in (p.partition("=") for p in pairs)}


@dataclass
class Interrupted:
    """Round 1 done, round 2 interrupted as it began; what a scenario needs to resume it."""

    hosts: TestHosts
    machines: dict[str, dict[str, Any]]
    inventory: Path
    spec: Path
    wheelhouse: Path
    settings: BringupSettings
    runner: AnsibleFleetRunner
    out: Path  # never resumed in place: each scenario resumes a copy
    members: list[str]  # the group after round 1
    replaced: list[str]
    said: list[str]
    round1_s: float

    def copy_to(self, tmp_path: Path) -> Path:
        """The interrupted bring-up's folder as the scenario's --out. The record names the kept
        hosts' round-1 results by their path in the original folder, which stays as it is."""
        out = tmp_path / "bringup"
        shutil.copytree(self.out, out)
        return out

    def group(
        self, spares: Sequence[str], more: Mapping[str, Mapping[str, Any]] | None = None
    ) -> StandInGroup:
        """The group as round 1 left it (h2 out, h3 in), with these spares left to stand in."""
        return StandInGroup(
            self.inventory, {**self.machines, **(more or {})}, self.members, spares, self.replaced
        )

    def spare(self) -> TestHost:
        """h3 as start() left it, whichever scenario burned it in before (the scenarios' order is free)."""
        h3 = self.hosts.by_name("h3")
        self.hosts.reset(h3)
        return h3


@pytest.fixture(scope="module")
def interrupted(host_pool: HostPool, tmp_path_factory: pytest.TempPathFactory) -> Interrupted:
    base = tmp_path_factory.mktemp("bringup-round-1")
    hosts = host_pool.fresh(4)
    h0, h1, h2 = (hosts.by_name(n) for n in ("h0", "h1", "h2"))
    machines = {h.name: hosts.connection_vars(h) for h in hosts}
    inventory = base / "inventory.yml"
    group = StandInGroup(inventory, machines, ["h0", "h1", "h2"], ["h3"])
    fleet_spec = spec(base / "fleet.yaml", [h0, h1, h2])
    from fleet.spec import load_spec
    from fleetforge.install import ansible_root, source_root

    loaded = load_spec(fleet_spec)
    out = base / "bringup"
    house = wheelhouse(base)
    runner = AnsibleFleetRunner(
        FleetRunOptions(
            inventory=inventory,
            out_dir=out,
            sku="cpu",
            level="quick",
            spec=fleet_spec,
            throttle=int(MEASURE[MEASURE.index("--throttle") + 1]),
            wheelhouse=house,
            extravars=extravars(MEASURE),
            source=source_root(),
            ansible_root=ansible_root(),
        )
    )
    said: list[str] = []
    settings = BringupSettings(
        out_dir=out,
        plan=FleetPlan.from_spec(loaded),
        gate=GateSettings.from_spec(loaded),
        sku="cpu",
        budget=Budget(max_rounds=2, max_wall_s=1800),
        replace_timeout_s=30,
        poll_s=1,
    )
    before = throttled_periods(h2)
    t0 = time.monotonic()
    with hosts.cpu_limit(h2, SLOW_CPU, once_running=BURNIN_COMMAND), pytest.raises(KeyboardInterrupt):
        bring_up(settings, InterruptedOnce(runner), AnsibleInventory(inventory), group, say=said.append)
    round1_s = time.monotonic() - t0
    record = json.loads((out / RECORD_NAME).read_text())
    explain = "\n".join(said) + "\n" + yaml.safe_dump(record["rounds"])
    assert throttled_periods(h2) > before, explain  # the cap really bit
    assert [r["phase"] for r in record["rounds"]] == ["done", "burn-in"], explain
    r1 = record["rounds"][0]
    assert r1["burned"] == ["h0", "h1", "h2"] and r1["rejected"] == ["h2"], explain
    measured = [r for r in r1["verdicts"]["h2"]["reasons"] if r["rule"] in ("outlier", "floor")]
    assert measured, explain
    assert [x["node"] for x in r1["replaced"]] == ["h2"] and r1["new_hosts"] == ["h3"], explain
    assert group.replaced == ["h2"] and group.members == ["h0", "h1", "h3"]
    print(f"round 1 and the interruption: {round1_s:.0f} s")
    return Interrupted(
        hosts=hosts,
        machines=machines,
        inventory=inventory,
        spec=fleet_spec,
        wheelhouse=house,
        settings=settings,
        runner=runner,
        out=out,
        members=list(group.members),
        replaced=list(group.replaced),
        said=said,
        round1_s=round1_s,
    )


def test_a_slow_host_is_replaced_and_only_its_replacement_burned_in_ready_in_two_rounds(
    interrupted: Interrupted, tmp_path: Path
) -> None:
    interrupted.spare()
    out = interrupted.copy_to(tmp_path)
    # No spare left: a replacement the loop should not ask for fails the bring-up.
    group = interrupted.group(spares=[])
    said = list(interrupted.said)
    resumed = dataclasses.replace(interrupted.settings, out_dir=out, resume=True)
    t0 = time.monotonic()
    outcome = bring_up(
        resumed, interrupted.runner, AnsibleInventory(interrupted.inventory), group, say=said.append
    )
    wall = time.monotonic() - t0
    record = outcome.record.to_json()
    explain = (
        f"{outcome.status}: {outcome.reason}\n" + "\n".join(said) + "\n" + yaml.safe_dump(record["rounds"])
    )
    assert outcome.status == "ready", explain
    r1, r2 = record["rounds"]
    assert r1["rejected"] == ["h2"] and r1["new_hosts"] == ["h3"], explain  # round 1 not redone
    assert group.replaced == ["h2"]  # once: the resumed loop did not replace it again
    # Each host's results are known to be its instance's; h2's instance is gone with it.
    assert record["instances"] == {h: instance_id(h) for h in ("h0", "h1", "h3")}, explain
    assert r1["replaced"][0]["instance"] == instance_id("h2"), explain
    # Round 2 burns in the replacement alone and judges the whole fleet.
    assert r2["burned"] == ["h3"] and r2["kept"] == ["h0", "h1"], explain
    assert r2["ready"] is True and sorted(r2["accepted"]) == ["h0", "h1", "h3"], explain
    assert r2["fleet_run"]["limited_to"] == ["h3"]
    assert sorted(p.name for p in (out / "round-2" / "results").glob("*.jsonl")) == [
        "h0.jsonl",
        "h1.jsonl",
        "h3.jsonl",
    ]
    assert json.loads((out / RECORD_NAME).read_text())["status"] == "ready"
    print(
        f"bring-up wall time: round 1 {r1['timings_s']['total']:.0f} s "
        f"({interrupted.round1_s:.0f} s with the interruption), resumed round 2 {wall:.0f} s"
    )


def test_a_slot_whose_replacements_are_as_slow_is_a_pattern_and_the_budget_is_spent(
    interrupted: Interrupted,
    test_hosts: Callable[..., TestHosts],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from fleetforge.cli import main
    from fleetforge.commands import bringup as command

    h3 = interrupted.spare()
    # A pattern takes two replacements of the slot (validation/bringup/loop.py, PATTERN_AFTER), so
    # a second spare: the pool's 4 hosts are all taken, h4 is a test host of its own.
    extra = test_hosts(1, names=["h4"])
    h4 = extra.by_name("h4")
    group = interrupted.group(spares=["h4"], more={"h4": extra.connection_vars(h4)})
    out = interrupted.copy_to(tmp_path)
    # The command builds the real runner and inventory reader; the group stands in for the action.
    monkeypatch.setattr(command, "_replacer", lambda name, timeout_s: group)
    argv = [
        "bringup",
        "--spec",
        interrupted.spec,
        "-i",
        interrupted.inventory,
        "--out",
        out,
        "--resume",
        "--replace",
        "aws-unhealthy",
        "--level",
        "quick",
        *MEASURE,
        "--wheelhouse",
        interrupted.wheelhouse,
        # A round to spare: the loop stops for the pattern, not because the rounds ran out.
        "--max-rounds",
        "4",
        "--replace-timeout",
        "30",
        "--poll",
        "1",
        "--json",
    ]
    before = {h.name: throttled_periods(h) for h in (h3, h4)}
    t0 = time.monotonic()
    # Both slow from the moment their burn-in starts.
    with (
        interrupted.hosts.cpu_limit(h3, SLOW_CPU, once_running=BURNIN_COMMAND),
        extra.cpu_limit(h4, SLOW_CPU, once_running=BURNIN_COMMAND),
    ):
        code = main([str(a) for a in argv])
    wall = time.monotonic() - t0
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    record = json.loads((out / RECORD_NAME).read_text())
    explain = f"exit {code}\n{captured.err[-6000:]}\n" + yaml.safe_dump(record["rounds"])
    assert throttled_periods(h3) > before["h3"] and throttled_periods(h4) > before["h4"], explain
    assert code == exitcodes.BUDGET_SPENT == 3, explain
    doc = json.loads(captured.out)
    assert doc["status"] == record["status"] == "budget-spent", explain
    assert doc["gate"]["fleet"]["ready"] is False
    r1, r2, r3 = record["rounds"]
    replaced_h2 = r1["replaced"][0]
    assert replaced_h2["node"] == "h2" and r1["new_hosts"] == ["h3"], explain  # round 1 not redone
    # Round 2: h3 alone burned in, rejected, replaced by h4 in the same slot.
    assert r2["burned"] == ["h3"] and r2["kept"] == ["h0", "h1"], explain
    assert r2["fleet_run"]["limited_to"] == ["h3"] and r2["rejected"] == ["h3"], explain
    [replaced_h3] = r2["replaced"]
    assert replaced_h3["node"] == "h3" and replaced_h3["slot"] == "h2" and replaced_h3["ok"], explain
    assert r2["new_hosts"] == ["h4"], explain
    # Round 3: h4 alone burned in, rejected for the same reason, and not replaced: a pattern.
    assert r3["burned"] == ["h4"] and r3["kept"] == ["h0", "h1"], explain
    assert r3["fleet_run"]["limited_to"] == ["h4"] and r3["rejected"] == ["h4"], explain
    assert r3["replaced"] == [] and r3["not_replaced"] == [], explain
    [pattern] = r3["patterns"]
    assert pattern["slot"] == "h2" and pattern["node"] == "h4", explain
    assert pattern["replaced_before"] == ["h2", "h3"], explain
    # The reason: measured metrics (rule:metric) that every instance of the slot was rejected for.
    assert pattern["keys"], explain
    for key in pattern["keys"]:
        rule, _, metric = key.partition(":")
        assert rule in ("outlier", "floor") and metric, explain
        assert key in replaced_h2["keys"] and key in replaced_h3["keys"], explain
        assert metric in pattern["message"], explain
    assert "pattern" in record["stop_reason"] and "slot h2" in record["stop_reason"], explain
    assert "PATTERN" in captured.err
    assert record["replacements"] == 2 and record["history"]["h2"] == [
        {"round": 1, "node": "h2", "keys": replaced_h2["keys"]},
        {"round": 2, "node": "h3", "keys": replaced_h3["keys"]},
    ]
    assert record["slots"]["h3"] == record["slots"]["h4"] == "h2"
    assert group.replaced == ["h2", "h3"] and group.members == ["h0", "h1", "h4"]
    # h0 and h1 were judged in rounds 2 and 3 on their round-1 results, byte for byte.
    for n in (2, 3):
        for host in ("h0", "h1"):
            first = interrupted.out / "round-1" / "results" / f"{host}.jsonl"
            assert filecmp.cmp(first, out / f"round-{n}" / "results" / f"{host}.jsonl", shallow=False)
    assert "h4" in (out / "gate.xml").read_text()  # the last gate's JUnit, for CI
    print(
        f"bring-up wall time: round 1 {r1['timings_s']['total']:.0f} s, resumed rounds 2-3 {wall:.0f} s "
        f"(round 2 {r2['timings_s']['total']:.0f} s, round 3 {r3['timings_s']['total']:.0f} s)"
    )
