"""Action `inventory`: put rejected hosts in a `rejected` group of a YAML inventory, reasons as host vars.

The group is a quarantine list: hosts are added or updated, never removed, because releasing a node
from quarantine is a person's decision. Every step of one run lands in a single atomic write
(fleet.atomic), so a crash leaves either the old file or the new one. Rewriting drops YAML
comments, and `!vault` values cannot be parsed: point the action at a file of its own inside an
inventory folder (Ansible merges every file there).

What a node wrote is data: reasons are tagged `!unsafe` so Ansible never templates them, and the
action only moves hosts somebody already listed, in this file or in another YAML inventory file
of its folder. A node name nobody listed (or one that is not a plain host name) fails its step
and never becomes a new host.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from fleet import ansible_yaml
from fleet.atomic import write_atomic
from validation.actions.base import Action
from validation.actions.hostvars import inventory_hosts
from validation.actions.model import (
    ActionConfigError,
    Call,
    CallOutcome,
    InventoryFileError,
    PlannedStep,
    RejectedNode,
    StepResult,
)

REASONS_VAR = "fleetforge_reject_reasons"
_GROUP_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # Ansible's valid group names


class InventoryFormatError(ValueError):
    """The existing file is YAML but not an inventory this action can safely update."""


class InventoryGroup(Action):
    name = "inventory"
    description = "add rejected hosts to an inventory group, reasons as host vars"
    sdk_module = None

    def __init__(self, path: Path, group: str = "rejected") -> None:
        if not _GROUP_NAME.fullmatch(group) or group == "all":
            raise ActionConfigError(
                f"inventory group {group!r} is not allowed: letters, digits and _ (not starting with a digit), not 'all'"
            )
        self.path = path
        self.group = group

    def _plan_node(self, node: RejectedNode) -> PlannedStep:
        call = Call(
            sdk="file",
            target=str(self.path),
            method="add_host_to_group",
            params={"group": self.group, "host": node.name, "vars": {REASONS_VAR: list(node.reasons)}},
        )
        return PlannedStep(
            action=self.name,
            node=node.name,
            summary=f"add host to group {self.group!r} of {self.path} with its reasons",
            reasons=node.reasons,
            calls=(call,),
        )

    def apply(self, steps: Sequence[PlannedStep]) -> list[StepResult]:
        # One write for the whole run: every host that may move lands in it, or none does.
        for step in steps:
            if step.action != self.name:
                raise ValueError(f"step for action {step.action!r} given to {self.name!r}")
        if not steps:
            return []
        try:
            data = _load(self.path)
            listed = inventory_hosts(data, str(self.path)) | _sibling_hosts(self.path)
            refused = {step.node: self._refusal(step.node, listed) for step in steps}
            moving = [step for step in steps if refused[step.node] is None]
            for step in moving:
                for call in step.calls:
                    _add_host(data, call.params)
            if moving:
                write_atomic(self.path, ansible_yaml.dump(data))
        except (OSError, UnicodeDecodeError, yaml.YAMLError, InventoryFormatError, InventoryFileError) as exc:
            detail = f"{type(exc).__name__}: {exc} ({self.path} unchanged)"
            return [StepResult(step, False, detail) for step in steps]
        return [
            StepResult(step, False, reason)
            if (reason := refused[step.node]) is not None
            else StepResult(
                step,
                True,
                f"host in group {self.group!r} of {self.path}",
                tuple(CallOutcome(call, "written") for call in step.calls),
            )
            for step in steps
        ]

    def _refusal(self, node: str, listed: set[str]) -> str | None:
        """Why this node may not be moved, or None: only hosts somebody listed are moved."""
        if not ansible_yaml.is_host_name(node):
            return (
                f"node name {node!r} is not an inventory host name ({ansible_yaml.HOST_NAME_RULE}); "
                f"not added to {self.path}"
            )
        if node not in listed:
            return (
                f"node {node!r} is not a host of {self.path} or of another inventory file in "
                f"{self.path.parent}; a node nobody listed is never added"
            )
        return None

    def _execute(self, step: PlannedStep, done: list[CallOutcome]) -> str:  # pragma: no cover
        raise NotImplementedError("InventoryGroup.apply writes all steps at once")

    def _failures(self) -> tuple[type[BaseException], ...]:
        return (OSError, yaml.YAMLError, InventoryFormatError)


def _load(path: Path) -> dict[str, Any]:
    if path.exists() and not path.is_file():
        raise InventoryFormatError(f"{path} is not a regular file")  # a FIFO would block the read
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {"all": {"children": {}}}
    data = ansible_yaml.load(text)
    if data is None:
        return {"all": {"children": {}}}
    if not isinstance(data, dict):
        raise InventoryFormatError(f"{path} is not a YAML inventory (a mapping of groups)")
    return data


def _group_body(data: dict[str, Any], group: str) -> dict[str, Any]:
    # The group may already exist at the top level or under all.children; otherwise it is created
    # under all.children, where `fleetforge inventory` puts its groups.
    if group in data:
        holder: dict[str, Any] = data
    else:
        root = data.setdefault("all", {})
        if root is None:
            root = data["all"] = {}
        if not isinstance(root, dict):
            raise InventoryFormatError("group 'all' must be a mapping")
        children = root.setdefault("children", {})
        if children is None:
            children = root["children"] = {}
        if not isinstance(children, dict):
            raise InventoryFormatError("all.children must be a mapping")
        holder = children
    body = holder.get(group)
    if body is None:
        body = holder[group] = {}
    if not isinstance(body, dict):
        raise InventoryFormatError(f"group {group!r} must be a mapping")
    return body


def _add_host(data: dict[str, Any], params: Mapping[str, Any]) -> None:
    body = _group_body(data, params["group"])
    hosts = body.get("hosts")
    if hosts is None:
        hosts = body["hosts"] = {}
    if not isinstance(hosts, dict):
        raise InventoryFormatError(f"group {params['group']!r} hosts must be a mapping")
    entry = hosts.get(params["host"])
    if entry is None:
        entry = hosts[params["host"]] = {}
    if not isinstance(entry, dict):
        raise InventoryFormatError(f"host {params['host']!r} vars must be a mapping")
    # What a node wrote (its reasons) is data: Ansible must never render it as a template.
    entry.update({k: ansible_yaml.unsafe_values(v) for k, v in params["vars"].items()})


def _sibling_hosts(path: Path) -> set[str]:
    """Hosts of the other YAML inventory files in the folder (Ansible merges a folder's files).
    A file that is not a readable YAML inventory lists nobody."""
    hosts: set[str] = set()
    try:
        siblings = sorted(p for p in path.parent.iterdir() if p.suffix in (".yml", ".yaml") and p != path)
    except OSError:
        return hosts
    for sibling in siblings:
        try:
            if not sibling.is_file():
                continue
            hosts |= inventory_hosts(ansible_yaml.load(sibling.read_text(encoding="utf-8")), str(sibling))
        except (OSError, UnicodeDecodeError, yaml.YAMLError, InventoryFileError):
            continue
    return hosts
