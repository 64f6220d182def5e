"""The real world behind the loop's interfaces: run_fleet over Ansible, the inventory as Ansible
reads it (`ansible-inventory --list`, so a cloud's dynamic plugin re-reads the group), and the
cloud's replace actions (AWS set-unhealthy, GCP recreate, Azure delete-and-scale)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from validation.actions import (
    Action,
    ActionOptions,
    AwsSetUnhealthy,
    AzureReplace,
    GcpRecreate,
    RejectedNode,
    build_actions,
    hostvars_from_inventory_list,
    plan_actions,
)
from validation.bringup.interfaces import BurnIn, InventoryView, ReplaceOutcome
from validation.fleetrun.hosts import HostListError, inventory_listing, usable_hosts
from validation.fleetrun.run import FleetRunOptions, run_fleet

# The actions that replace a node through its cloud's group; the others (quarantine group, drain,
# taint) take a node out of service but bring no replacement, so the loop would wait in vain.
REPLACE_ACTIONS: dict[str, type[Action]] = {
    cls.name: cls for cls in (AwsSetUnhealthy, GcpRecreate, AzureReplace)
}
# A recreated GCE instance keeps its name; the others come back as new instances.
_KEEPS_NAMES = {GcpRecreate.name}


class AnsibleFleetRunner:
    """run_fleet with the command's options; each round only changes the folder and the hosts."""

    def __init__(self, base: FleetRunOptions, say: Callable[[str], None] = lambda _: None) -> None:
        self.base = base
        self.say = say

    def __call__(self, inventory: Path, out_dir: Path, limit: tuple[str, ...], time_left_s: float) -> BurnIn:
        opts = dataclasses.replace(
            self.base,
            inventory=inventory,
            out_dir=out_dir,
            limit=limit,
            deadline=time.monotonic() + time_left_s,
        )
        run = run_fleet(opts, say=self.say)
        return BurnIn(
            results_dir=run.results_dir,
            host_reasons=run.reasons(),
            summary=run.as_dict(),
            problem=run.problem,
        )


class AnsibleInventory:
    """The inventory as the playbook sees it; re-read on every call (the group changes under it)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> InventoryView:
        # One `ansible-inventory --list` (with a cloud plugin: one API listing) for hosts and vars.
        try:
            listing = inventory_listing(self.path)
        except HostListError as exc:
            raise HostListError(f"--inventory {self.path}: {exc}") from None
        return InventoryView(usable_hosts(listing, self.path), hostvars_from_inventory_list(listing))


class ActionReplacer:
    """One of the cloud's replace actions behind the Replacer interface."""

    def __init__(self, action: Action) -> None:
        if action.name not in REPLACE_ACTIONS:
            raise ValueError(
                f"{action.name!r} does not replace a node; allowed: {', '.join(REPLACE_ACTIONS)}"
            )
        self.action = action
        self.name = action.name
        self.keeps_names = action.name in _KEEPS_NAMES
        self.identity_var = action.identity

    @classmethod
    def named(cls, name: str, timeout_s: float = 600.0) -> ActionReplacer:
        """Build the action by name: UnknownActionError or MissingSdkError (the cloud extra) first."""
        if name not in REPLACE_ACTIONS:
            from validation.actions import UnknownActionError

            raise UnknownActionError(
                f"unknown replace action {name!r}; allowed: {', '.join(REPLACE_ACTIONS)}"
            )
        (action,) = build_actions([name], ActionOptions(timeout_s=timeout_s))
        return cls(action)

    def check(self, nodes: Sequence[RejectedNode]) -> None:
        plan_actions([self.action], nodes)  # NodeIdentifierError naming every node and host var

    def replace(self, nodes: Sequence[RejectedNode]) -> list[ReplaceOutcome]:
        steps = self.action.plan(nodes)
        return [ReplaceOutcome(r.step.node, r.ok, r.detail) for r in self.action.apply(steps)]
