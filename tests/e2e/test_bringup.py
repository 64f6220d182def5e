"""End to end: the replace-and-reburn loop (validation/bringup) over real SSH to local test hosts,
through run_fleet, ansible-runner, the burnin role and the gate.

Three hosts are the fleet (h0, h1, h2: the inventory), a fourth (h3) is started but not in it: the
cloud's replacement, already booted. h2 is capped at a tenth of a core for real (cgroup CPU quota)
for the whole bring-up. The test double behind the Replacer interface does what a cloud's group
does when a node is marked unhealthy: the node leaves the group (the inventory) and a fresh
instance joins it. The loop must reject h2 in round 1, replace it, burn in h3 alone in round 2
(h0 and h1 are judged again on their round-1 results) and end READY. The bring-up is interrupted
as round 2 starts and resumed from its record: round 1 is not redone, h2 not replaced again.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import shutil
import tarfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.fleet import MEASURE, VALIDATION, throttled_periods
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

pytestmark = pytest.mark.hosts


class StandInGroup:
    """The cloud's group, played by the inventory file: a replaced node leaves it, a spare joins."""

    name = "test-group"
    keeps_names = False

    def __init__(self, hosts: TestHosts, inventory: Path, members: Sequence[str], spares: Sequence[str]):
        self.hosts = hosts
        self.inventory = inventory
        self.members = list(members)
        self.spares = list(spares)
        self.replaced: list[str] = []
        self.write()

    def write(self) -> None:
        members = {h: self.hosts.connection_vars(self.hosts.by_name(h)) for h in self.members}
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


class InterruptedOnce:
    """Stops the bring-up as round 2's burn-in starts, as a Ctrl-C or a lost controller would."""

    def __init__(self, runner: FleetRunner) -> None:
        self.runner = runner
        self.calls = 0

    def __call__(self, inventory: Path, out_dir: Path, limit: tuple[str, ...]) -> BurnIn:
        self.calls += 1
        if self.calls == 2:
            raise KeyboardInterrupt
        return self.runner(inventory, out_dir, limit)


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
    """The tree's bundle as a wheelhouse, so both rounds install the same bytes without building."""
    from fleetforge.install import source_root
    from validation.fleetrun.bundle import build_bundle
    from validation.fleetrun.run import default_cache

    bundle = build_bundle(base / "bundle", default_cache(), source=source_root())
    house = base / "wheelhouse"
    house.mkdir()
    with tarfile.open(bundle.deps_tar) as tf:
        tf.extractall(house, filter="data")
    (house / "MANIFEST").unlink()
    shutil.copy2(bundle.wheel, house / bundle.wheel.name)
    return house


def extravars(args: Sequence[str]) -> Mapping[str, object]:
    """MEASURE's --var KEY=VALUE pairs as role variables (the loop takes them as data)."""
    pairs = [args[i + 1] for i, a in enumerate(args) if a == "--var"]
    return {k: yaml.safe_load(v) for k, _, v in (p.partition("=") for p in pairs)}


def test_a_slow_host_is_replaced_and_only_its_replacement_burned_in_ready_in_two_rounds(
    host_pool: HostPool, tmp_path: Path
) -> None:
    hosts = host_pool.fresh(4)
    h0, h1, h2 = (hosts.by_name(n) for n in ("h0", "h1", "h2"))
    inventory = tmp_path / "inventory.yml"
    group = StandInGroup(hosts, inventory, ["h0", "h1", "h2"], ["h3"])
    fleet_spec = spec(tmp_path / "fleet.yaml", [h0, h1, h2])
    from fleet.spec import load_spec
    from fleetforge.install import ansible_root, source_root

    loaded = load_spec(fleet_spec)
    out = tmp_path / "bringup"
    throttle = MEASURE[MEASURE.index("--throttle") + 1]
    runner = AnsibleFleetRunner(
        FleetRunOptions(
            inventory=inventory,
            out_dir=out,
            sku="cpu",
            level="quick",
            spec=fleet_spec,
            throttle=int(throttle),
            wheelhouse=wheelhouse(tmp_path),
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
    with hosts.cpu_limit(h2, 0.1), pytest.raises(KeyboardInterrupt):
        bring_up(settings, InterruptedOnce(runner), AnsibleInventory(inventory), group, say=said.append)
    interrupted = json.loads((out / RECORD_NAME).read_text())
    assert [r["phase"] for r in interrupted["rounds"]] == ["done", "burn-in"], "\n".join(said)
    resumed = dataclasses.replace(settings, resume=True)
    outcome = bring_up(resumed, runner, AnsibleInventory(inventory), group, say=said.append)
    wall = time.monotonic() - t0
    record = outcome.record.to_json()
    explain = (
        f"{outcome.status}: {outcome.reason}\n" + "\n".join(said) + "\n" + yaml.safe_dump(record["rounds"])
    )
    assert throttled_periods(h2) > before  # the cap really bit
    assert outcome.status == "ready", explain
    r1, r2 = record["rounds"]
    assert r1["burned"] == ["h0", "h1", "h2"] and r1["rejected"] == ["h2"], explain
    measured = [r for r in r1["verdicts"]["h2"]["reasons"] if r["rule"] in ("outlier", "floor")]
    assert measured, explain
    assert [x["node"] for x in r1["replaced"]] == ["h2"] and r1["new_hosts"] == ["h3"], explain
    assert group.replaced == ["h2"]  # once: the resumed loop did not replace it again
    # Round 2 burns in the replacement alone and judges the whole fleet.
    assert r2["burned"] == ["h3"] and r2["kept"] == ["h0", "h1"], explain
    assert r2["ready"] is True and sorted(r2["accepted"]) == ["h0", "h1", "h3"], explain
    assert r2["fleet_run"]["limited_to"] == ["h3"]
    assert sorted(p.name for p in (out / "round-2" / "results").glob("*.jsonl")) == [
        "h0.jsonl",
        "h1.jsonl",
        "h3.jsonl",
    ]
    assert (out / RECORD_NAME).is_file()
    print(
        f"bring-up wall time: {wall:.0f} s (round 1 {r1['timings_s']['total']:.0f} s, "
        f"round 2 {r2['timings_s']['total']:.0f} s)"
    )
