"""Acting on the gate's rejects: quarantine, replace through the cloud's group, drain, taint.

The front door (`fleetforge gate --act NAME... [--dry-run]`) calls, in order:

    actions = build_actions(names, ActionOptions(...))   # names checked, options checked, SDKs present
    nodes = rejected_nodes(rejects, hostvars, seen=...)  # identifiers from inventory host vars
    report = run_actions(actions, nodes, dry_run=..., max_replace=...)  # plan, then apply
    print(report.render())  /  print_json(report.to_json())
    exit non-zero if not report.ok

`run_actions` plans first (pure, checks every node's identifiers, raises before anything changes)
and either returns the plan (dry run) or applies exactly those PlannedStep objects. No action acts
on a node no inventory lists; the actions that replace machines also leave out a node the gate saw
no measurement of (it may be healthy: rerun its burn-in) and refuse to replace more than
`max_replace` nodes at once (a fault the whole fleet shares is not fixed by new machines). Errors raised
before any change are ActionError subclasses whose `exit_name` names the fleetforge.exitcodes
constant to exit with. SDKs are imported only when an action runs; clients use the SDKs' default
credential chains and never take secrets as arguments.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from validation.actions.aws import AwsSetUnhealthy
from validation.actions.azure import AzureReplace
from validation.actions.base import Action
from validation.actions.gcp import GcpRecreate
from validation.actions.hostvars import (
    hostvars_from_inventory_list,
    ids_from_hostvars,
    load_inventory_hostvars,
    only_ansible_reads,
    rejected_nodes,
)
from validation.actions.inventory_group import InventoryGroup
from validation.actions.k8s import KubernetesTaint
from validation.actions.model import (
    ActionConfigError,
    ActionError,
    Call,
    CallOutcome,
    InventoryFileError,
    InventoryNeedsAnsibleError,
    LeftOut,
    MissingSdkError,
    NodeIdentifierError,
    NodeIds,
    PlannedStep,
    RejectedNode,
    StepFailed,
    StepResult,
    TooManyToReplaceError,
    UnknownActionError,
)
from validation.actions.slurm import SlurmDrain, slurm_reason

ACTIONS: dict[str, type[Action]] = {
    cls.name: cls
    for cls in (InventoryGroup, AwsSetUnhealthy, GcpRecreate, AzureReplace, SlurmDrain, KubernetesTaint)
}
ACTION_NAMES = tuple(ACTIONS)


@dataclass(frozen=True)
class ActionOptions:
    """Settings of the actions, from the command line. None of them is a secret."""

    inventory_path: Path | None = None  # `inventory`: the YAML file to add the group to (required)
    inventory_group: str = "rejected"
    taint_key: str = "fleetforge.io/rejected"
    taint_value: str = "true"
    taint_effect: str = "NoSchedule"
    kube_context: str | None = None  # None: current kubeconfig context, or in-cluster
    scontrol: str = "scontrol"
    slurm_reason_max: int = 200
    azure_capacity: int | None = None  # None: restore the capacity read before the delete
    timeout_s: float = 600.0  # longest wait for one cloud operation


def build_actions(names: Sequence[str], options: ActionOptions | None = None) -> list[Action]:
    """The actions named, in the order given (duplicates dropped). Raises UnknownActionError,
    ActionConfigError or MissingSdkError before anything is done."""
    opts = options or ActionOptions()
    unknown = [n for n in names if n not in ACTIONS]
    if unknown:
        raise UnknownActionError(
            f"unknown action {', '.join(map(repr, unknown))}; allowed: {', '.join(ACTION_NAMES)}"
        )
    if not names:
        raise UnknownActionError(f"no action named; allowed: {', '.join(ACTION_NAMES)}")
    actions = [_build(name, opts) for name in dict.fromkeys(names)]
    for action in actions:
        action.check_available()
    return actions


def _build(name: str, o: ActionOptions) -> Action:
    if name == InventoryGroup.name:
        if o.inventory_path is None:
            raise ActionConfigError("action 'inventory' needs the inventory file to write (inventory_path)")
        kind = only_ansible_reads(o.inventory_path)
        if kind is not None:
            raise ActionConfigError(
                f"action 'inventory' writes its group into a YAML inventory file; {o.inventory_path} is "
                f"{kind}: give it a YAML file of its own beside the inventory (Ansible merges every "
                f"file of an inventory folder)"
            )
        return InventoryGroup(o.inventory_path, o.inventory_group)
    if name == AwsSetUnhealthy.name:
        return AwsSetUnhealthy()
    if name == GcpRecreate.name:
        return GcpRecreate(timeout_s=o.timeout_s)
    if name == AzureReplace.name:
        return AzureReplace(capacity=o.azure_capacity, timeout_s=o.timeout_s)
    if name == SlurmDrain.name:
        return SlurmDrain(o.scontrol, o.slurm_reason_max)
    return KubernetesTaint(
        key=o.taint_key, value=o.taint_value, effect=o.taint_effect, context=o.kube_context
    )


def plan_actions(
    actions: Sequence[Action],
    rejects: Sequence[RejectedNode],
    targets: Mapping[str, Sequence[RejectedNode]] | None = None,
) -> list[PlannedStep]:
    """Every action's steps, action by action, over the rejects (or an action's own `targets`).
    Checks all actions before returning any step, so one NodeIdentifierError lists every node and
    host var that is missing for any action."""
    problems: list[tuple[str, str, str]] = []
    steps: list[PlannedStep] = []
    for action in actions:
        try:
            steps += action.plan(rejects if targets is None else targets[action.name])
        except NodeIdentifierError as exc:
            problems += exc.problems
    if problems:
        raise NodeIdentifierError(problems)
    return steps


def apply_actions(actions: Sequence[Action], steps: Sequence[PlannedStep]) -> list[StepResult]:
    """Run the planned steps, each action over its own steps, in the actions' order."""
    by_name = {a.name: a for a in actions}
    strays = sorted({s.action for s in steps} - set(by_name))
    if strays:
        raise ValueError(f"steps for actions not given: {strays}")
    results: list[StepResult] = []
    for action in actions:
        results += action.apply([s for s in steps if s.action == action.name])
    return results


def default_max_replace(fleet: int) -> int:
    """How many of a fleet of `fleet` nodes one act replaces unless told otherwise: a quarter, at
    least 1. A rolling replacement's usual bound: most of the fleet keeps running, and a cause every
    node shares (a fleet-wide reason rejects them all) cannot pass unnoticed."""
    return max(1, fleet // 4)


def left_out_why(action: Action, node: RejectedNode) -> str | None:
    """None when `action` may act on `node`, else why it leaves the node alone."""
    if node.seen == "unlisted":
        return "no inventory lists it: nothing to act on"
    if node.seen == "unmeasured" and action.replaces:
        return (
            "the gate saw no measurement of it (missing, unreadable or an error): a machine that may "
            "be healthy is not replaced; rerun its burn-in"
        )
    return None


@dataclass(frozen=True)
class ActionsReport:
    dry_run: bool
    steps: tuple[PlannedStep, ...]
    results: tuple[StepResult, ...] = field(default=())
    left_out: tuple[LeftOut, ...] = field(default=())

    @property
    def ok(self) -> bool:
        """True when every step succeeded (a dry run always is)."""
        return all(r.ok for r in self.results)

    @property
    def failed(self) -> tuple[StepResult, ...]:
        return tuple(r for r in self.results if not r.ok)

    def render(self) -> str:
        left = [x.describe() for x in self.left_out]
        if self.dry_run:
            head = f"dry run: {len(self.steps)} step(s) would run; nothing was changed"
            return "\n".join([head, *(s.describe() for s in self.steps), *left])
        head = f"{len(self.results) - len(self.failed)} of {len(self.results)} step(s) done"
        if self.failed:
            head += f", {len(self.failed)} FAILED"
        return "\n".join([head, *(r.describe() for r in self.results), *left])

    def to_json(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "ok": self.ok,
            "steps": [s.to_json() for s in self.steps],
            "results": [r.to_json() for r in self.results],
            "left_out": [x.to_json() for x in self.left_out],
        }


def run_actions(
    actions: Sequence[Action],
    rejects: Sequence[RejectedNode],
    *,
    dry_run: bool,
    max_replace: int | None = None,
    max_replace_from: str = "--max-replace",
) -> ActionsReport:
    """Plan, then (unless a dry run) apply those same steps. Each action gets the rejects it may
    act on (left_out_why); one that replaces machines refuses more than `max_replace` of them
    (None: no limit) with TooManyToReplaceError, before anything changes. `max_replace_from` says
    where the limit came from, for that message."""
    left: list[LeftOut] = []
    targets: dict[str, list[RejectedNode]] = {}
    for action in actions:
        mine = targets.setdefault(action.name, [])
        for node in rejects:
            why = left_out_why(action, node)
            if why is None:
                mine.append(node)
            else:
                left.append(LeftOut(action.name, node.name, why))
        if action.replaces and max_replace is not None and len(mine) > max_replace:
            raise TooManyToReplaceError(action.name, [n.name for n in mine], max_replace, max_replace_from)
    steps = tuple(plan_actions(actions, rejects, targets))
    if dry_run:
        return ActionsReport(dry_run=True, steps=steps, left_out=tuple(left))
    results = tuple(apply_actions(actions, steps))
    return ActionsReport(dry_run=False, steps=steps, results=results, left_out=tuple(left))


__all__ = [
    "ACTIONS",
    "ACTION_NAMES",
    "Action",
    "ActionConfigError",
    "ActionError",
    "ActionOptions",
    "ActionsReport",
    "AwsSetUnhealthy",
    "AzureReplace",
    "Call",
    "CallOutcome",
    "GcpRecreate",
    "InventoryFileError",
    "InventoryGroup",
    "InventoryNeedsAnsibleError",
    "KubernetesTaint",
    "LeftOut",
    "MissingSdkError",
    "NodeIdentifierError",
    "NodeIds",
    "PlannedStep",
    "RejectedNode",
    "SlurmDrain",
    "StepFailed",
    "StepResult",
    "TooManyToReplaceError",
    "UnknownActionError",
    "apply_actions",
    "build_actions",
    "default_max_replace",
    "hostvars_from_inventory_list",
    "ids_from_hostvars",
    "left_out_why",
    "load_inventory_hostvars",
    "only_ansible_reads",
    "plan_actions",
    "rejected_nodes",
    "run_actions",
    "slurm_reason",
]
