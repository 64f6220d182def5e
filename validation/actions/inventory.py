"""Action `inventory`: put rejected hosts in a `rejected` group of a YAML inventory, reasons as host vars.

The group is a quarantine list: hosts are added or updated, never removed, because releasing a node
from quarantine is a person's decision. Every step of one run lands in a single atomic write (temp
file in the same folder, fsync, rename), so a crash leaves either the old file or the new one.
Rewriting drops YAML comments, and `!vault` values cannot be parsed: point the action at a file of
its own inside an inventory folder (Ansible merges every file there).
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from validation.actions.base import Action
from validation.actions.model import (
    ActionConfigError,
    Call,
    CallOutcome,
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
        # One write for the whole run: either every host is in the file or none is.
        for step in steps:
            if step.action != self.name:
                raise ValueError(f"step for action {step.action!r} given to {self.name!r}")
        if not steps:
            return []
        try:
            data = _load(self.path)
            for step in steps:
                for call in step.calls:
                    _add_host(data, call.params)
            _atomic_write(self.path, yaml.safe_dump(data, sort_keys=False, default_flow_style=False))
        except (OSError, yaml.YAMLError, InventoryFormatError) as exc:
            detail = f"{type(exc).__name__}: {exc} ({self.path} unchanged)"
            return [StepResult(step, False, detail) for step in steps]
        return [
            StepResult(
                step,
                True,
                f"host in group {self.group!r} of {self.path}",
                tuple(CallOutcome(call, "written") for call in step.calls),
            )
            for step in steps
        ]

    def _execute(self, step: PlannedStep, done: list[CallOutcome]) -> str:  # pragma: no cover
        raise NotImplementedError("InventoryGroup.apply writes all steps at once")

    def _failures(self) -> tuple[type[BaseException], ...]:
        return (OSError, yaml.YAMLError, InventoryFormatError)


def _load(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {"all": {"children": {}}}
    data = yaml.safe_load(text)
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
    entry.update({k: list(v) if isinstance(v, list | tuple) else v for k, v in params["vars"].items()})


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode = path.stat().st_mode & 0o777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    # The rename is durable only once the folder's entry is on disk.
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
