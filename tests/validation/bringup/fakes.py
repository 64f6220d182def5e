"""A fake fleet behind the loop's interfaces: hosts that are healthy or slow, a runner that writes
their results as `fleetforge burnin` would (tests/validation/gate/helpers.py), an inventory the
replacer edits, a replacer that swaps a host for the next spare (or, as a GCP managed instance
group, recreates it under its name), and a clock that only moves when the loop sleeps or a step
takes time. With `identity`, every host carries its instance's id as gce_instance_id."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fleet.metrics import FABRIC_CHECK
from fleet.results import ResultsWriter, controller_record, read_results
from tests.validation.gate.helpers import node_records
from validation.actions import RejectedNode
from validation.bringup import BurnIn, InventoryView, ReplaceOutcome
from validation.gate import Reason

RUN_S = 60  # how long one burn-in takes on the fake clock
SLOW = {"gemm_bf16_tflops": 0.5, "gemm_fp16_tflops": 0.5, "gemm_fp8_tflops": 0.5}


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds


@dataclass
class FakeFleet:
    """hosts: the inventory now; slow: the hosts that measure slow; spares: what replaces a host."""

    hosts: list[str]
    slow: set[str] = field(default_factory=set)
    unreachable: set[str] = field(default_factory=set)
    late: set[str] = field(default_factory=set)  # unreachable on their first burn-in only
    spares: list[str] = field(default_factory=list)
    clock: FakeClock = field(default_factory=FakeClock)
    path: Path = Path("/fake/inventory.yml")
    runs: list[tuple[str, ...]] = field(default_factory=list)  # the hosts each burn-in ran on
    replaced: list[list[str]] = field(default_factory=list)
    fail_replace: set[str] = field(default_factory=set)
    appear: bool = True  # replacements show up in the inventory
    interrupt_run: int | None = None  # raise KeyboardInterrupt on this burn-in (1-based)
    interrupt_replace: bool = False  # raise KeyboardInterrupt once the cloud has acted
    unfinished_run: str | None = None  # the next burn-in stops as a whole with this problem
    identity: bool = False  # hosts carry gce_instance_id
    recreate_s: float | None = None  # a GCP recreate: a new instance under the name after this long
    vanish: bool = False  # a name being recreated is not listed until its new instance runs
    slow_from: dict[str, int] = field(default_factory=dict)  # host -> the burn-in it turns slow at
    reuse_names: set[str] = field(default_factory=set)  # replaced by an instance under the same name
    heal: set[str] = field(default_factory=set)  # hosts the cloud replaces on its own while replacing
    heal_during_run: dict[str, int] = field(default_factory=dict)  # host -> the burn-in it is healed in
    no_identity: set[str] = field(default_factory=set)  # hosts whose instance id is not in the inventory
    on_new_instance: Callable[[FakeFleet, str], None] | None = None  # how a new VM behaves
    # As run_fleet's fabric rounds, which pair every listed host, kept ones too: on the burn-in
    # numbered by the key, a failed pair record appended to each host's file in this round's results
    # (fabric_failed), or a reason outside them (fabric_lost: unreachable during the rounds).
    fabric_failed: dict[int, set[str]] = field(default_factory=dict)
    fabric_lost: dict[int, set[str]] = field(default_factory=dict)
    _ids: itertools.count[int] = field(default_factory=itertools.count)
    _instances: dict[str, int] = field(default_factory=dict)
    _recreating: dict[str, float] = field(default_factory=dict)  # host -> when its new instance runs

    def __post_init__(self) -> None:
        self.keeps_names = self.recreate_s is not None
        self.identity_var = "gce_instance_id" if self.identity or self.keeps_names else None
        self._next_instance = itertools.count(7_000_000_000_000_000_001)

    def instance(self, host: str) -> int:
        return self._instances.setdefault(host, next(self._next_instance))

    def new_instance(self, host: str) -> None:
        """Another VM under the name: healthy, whatever the one before it measured."""
        self._instances[host] = next(self._next_instance)
        self.slow.discard(host)
        if self.on_new_instance is not None:
            self.on_new_instance(self, host)

    # FleetRunner
    def __call__(self, inventory: Path, out_dir: Path, limit: tuple[str, ...], time_left_s: float) -> BurnIn:
        assert inventory == self.path
        listed = self.read_hosts()
        ran = limit or tuple(listed)
        assert set(ran) <= set(listed), (ran, listed)
        self.runs.append(limit)
        if self.interrupt_run == len(self.runs):
            raise KeyboardInterrupt
        if time_left_s < RUN_S:
            # As run_fleet with a deadline: cut short when it comes.
            self.clock.t += time_left_s
            self.unfinished_run = self.unfinished_run or "the run reached its deadline and was cut short"
        else:
            self.clock.t += RUN_S
        if self.unfinished_run is not None:
            # As run_fleet reports a play stopped by its time limit: hosts it left are errors.
            problem, self.unfinished_run = self.unfinished_run, None
            reasons = {
                h: [Reason("error", None, None, None, "results", f"no results: {problem}")] for h in ran
            }
            return BurnIn(
                results_dir=out_dir / "results",
                host_reasons=reasons,
                summary={"status": "timeout", "rc": 254},
                problem=problem,
            )
        results = out_dir / "results"
        results.mkdir(parents=True, exist_ok=True)
        reasons: dict[str, list[Reason]] = {}
        for host in ran:
            if host in self.unreachable or host in self.late:
                self.late.discard(host)
                reasons[host] = [Reason("missing", None, None, None, "results", "unreachable: ssh refused")]
                continue
            run_id = f"r{next(self._ids)}"
            slow = host in self.slow or len(self.runs) >= self.slow_from.get(host, len(self.runs) + 1)
            records = node_records(host, scale=SLOW if slow else None, run_id=run_id)
            with ResultsWriter(results / f"{host}.jsonl") as w:
                for r in records:
                    w.append(r)
        for host in sorted(self.fabric_failed.get(len(self.runs), set())):
            file = results / f"{host}.jsonl"
            record = controller_record(
                read_results(file),
                check=FABRIC_CHECK,
                status="fail",
                reason="fabric: failed with every partner",
                duration_s=1.0,
            )
            with ResultsWriter(file) as w:
                w.append(record)
        for host in sorted(self.fabric_lost.get(len(self.runs), set())):
            reasons.setdefault(host, []).append(
                Reason(
                    "missing",
                    None,
                    None,
                    None,
                    "results",
                    "unreachable during the fabric rounds: ssh refused",
                )
            )
        for host, run in self.heal_during_run.items():
            if run == len(self.runs):
                self.new_instance(host)  # measured, then replaced by the group before the gate
        return BurnIn(results_dir=results, host_reasons=reasons, summary={"status": "successful", "rc": 0})

    # InventoryReader
    def read_hosts(self) -> list[str]:
        for host, ready in list(self._recreating.items()):
            if self.clock.t >= ready:
                del self._recreating[host]
                self.new_instance(host)
        return [h for h in self.hosts if not (self.vanish and h in self._recreating)]

    def hostvars(self) -> Mapping[str, Mapping[str, Any]]:
        listed = self.read_hosts()
        out: dict[str, dict[str, Any]] = {h: {"ansible_host": "10.0.0.1"} for h in listed}
        if self.identity_var is not None:
            for h in listed:
                if h not in self.no_identity:
                    out[h][self.identity_var] = str(self.instance(h))  # the API's uint64, as a string
        return out

    # Replacer
    name = "fake-replace"

    def check(self, nodes: Sequence[RejectedNode]) -> None:
        assert all(n.name in self.hosts for n in nodes)

    def replace(self, nodes: Sequence[RejectedNode]) -> list[ReplaceOutcome]:
        self.replaced.append([n.name for n in nodes])
        out = []
        for n in nodes:
            if n.name in self.fail_replace:
                out.append(ReplaceOutcome(n.name, False, "ClientError: throttled"))
                continue
            self.instance(n.name)
            if self.recreate_s is not None:
                # The group accepted the recreation; until it is done the old VM is listed.
                if self.appear:
                    self._recreating[n.name] = self.clock.t + self.recreate_s
            elif n.name in self.reuse_names:
                self.new_instance(n.name)  # e.g. an EC2 replacement given the old private address
            else:
                self.hosts.remove(n.name)
                if self.appear:
                    self.hosts.append(self.spares.pop(0))
            out.append(ReplaceOutcome(n.name, True, f"{n.name} marked unhealthy"))
        for host in self.heal:
            self.new_instance(host)
        if self.interrupt_replace:
            # Ctrl-C after the cloud acted and before the call returned.
            self.interrupt_replace = False
            raise KeyboardInterrupt
        return out


class Inventory:
    """The fleet's inventory side alone, as InventoryReader."""

    def __init__(self, fleet: FakeFleet) -> None:
        self.fleet = fleet
        self.path = fleet.path

    def read(self) -> InventoryView:
        return InventoryView(self.fleet.read_hosts(), self.fleet.hostvars())
