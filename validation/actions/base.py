"""The Action contract: a pure `plan` and an `apply` that executes exactly what was planned.

`plan` checks every node first and raises one error listing every node and host var that is
missing or malformed, so a bad inventory changes nothing. `apply` runs the steps one node at a
time; a step that fails is recorded with the SDK's own error and the calls that had already
succeeded, and the remaining nodes are still acted on.
"""

from __future__ import annotations

import importlib.util
import re
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import ClassVar

from validation.actions.model import (
    CallOutcome,
    MissingSdkError,
    NodeIdentifierError,
    PlannedStep,
    RejectedNode,
    StepFailed,
    StepResult,
)

# What a well-formed identifier looks like. Checked at plan time so a typo in an inventory is an
# input error naming the node and var, not a 404 half-way through a fleet.
_DNS_LABEL = r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?"
ID_FORMATS: dict[str, tuple[re.Pattern[str], str]] = {
    "ec2_instance_id": (re.compile(r"i-[0-9a-f]{8,17}"), "an EC2 instance id like i-0123456789abcdef0"),
    "aws_region": (re.compile(r"[a-z]{2}(-[a-z]+)+-\d+"), "an AWS region like us-east-1"),
    "ec2_availability_zone": (re.compile(r"[a-z]{2}(-[a-z]+)+-\d+[a-z]"), "an AZ name like us-east-1a"),
    "gce_project": (re.compile(r"([a-z0-9.-]+:)?[a-z][-a-z0-9]{4,28}[a-z0-9]"), "a GCP project id"),
    "gce_zone": (re.compile(r"[a-z]+-[a-z]+\d+-[a-z]"), "a GCP zone like us-central1-a"),
    "gce_mig_region": (re.compile(r"[a-z]+-[a-z]+\d+"), "a GCP region like us-central1"),
    "gce_instance": (re.compile(_DNS_LABEL), "a GCE instance name (RFC 1035 label)"),
    "gce_instance_id": (re.compile(r"[0-9]{1,20}"), "a GCE instance id (an unsigned 64-bit number)"),
    "gce_mig": (re.compile(_DNS_LABEL), "a managed instance group name (RFC 1035 label)"),
    "azure_subscription_id": (
        re.compile(r"[0-9a-fA-F]{8}-([0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}"),
        "an Azure subscription id (a UUID)",
    ),
    "azure_resource_group": (re.compile(r"[-\w.()]{0,89}[-\w()]"), "an Azure resource group name"),
    "azure_vmss_name": (re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,79}"), "an Azure scale set name"),
    "azure_vmss_instance_id": (
        re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,79}"),
        "a scale set instance id like 3",
    ),
    "slurm_node_name": (re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}"), "one Slurm node name (no hostlist)"),
    "k8s_node_name": (
        re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?"),
        "a Kubernetes node name (DNS subdomain)",
    ),
}


def id_problem(node: RejectedNode, var: str) -> tuple[str, str, str] | None:
    """None when `var` is present and well formed, else (node, var, what is wrong)."""
    value = node.ids.get(var)
    if value is None or value == "":
        return (node.name, var, "missing")
    pattern, what = ID_FORMATS[var]
    if not pattern.fullmatch(value):
        return (node.name, var, f"{value!r} is not {what}")
    return None


class Action(ABC):
    """One way of acting on rejected nodes. Subclasses set the class vars and the three hooks."""

    name: ClassVar[str]
    description: ClassVar[str]
    # The import the action needs and the pip extra that brings it (None: standard library only).
    sdk_module: ClassVar[str | None] = None
    extra: ClassVar[str] = "cloud"
    # Host vars every node must carry for this action.
    needs: ClassVar[tuple[str, ...]] = ()
    # The host var that names the machine itself, which no replacement shares even where it comes
    # back under the same inventory name (a recreated GCE instance, a reused private address).
    identity: ClassVar[str | None] = None

    @property
    def replaces(self) -> bool:
        """Whether the action gives the machine back to the cloud: it is gone, another comes."""
        return self.identity is not None

    def check_available(self) -> None:
        """Raise MissingSdkError if the SDK is absent (a cheap lookup: nothing is imported)."""
        if self.sdk_module is None:
            return
        try:
            found = importlib.util.find_spec(self.sdk_module) is not None
        except ModuleNotFoundError:  # a missing parent package of a dotted name
            found = False
        if not found:
            raise MissingSdkError(self.name, self.sdk_module, self.extra)

    def node_problems(self, node: RejectedNode) -> list[tuple[str, str, str]]:
        problems = [p for var in self.needs if (p := id_problem(node, var)) is not None]
        mine = {*self.needs, self.identity}
        return problems + [(node.name, var, why) for var, why in node.shared if var in mine]

    def plan(self, rejects: Sequence[RejectedNode]) -> list[PlannedStep]:
        """Pure: the exact steps `apply` would run, one per node, or an error naming every bad node."""
        problems = [p for node in rejects for p in self.node_problems(node)]
        if problems:
            raise NodeIdentifierError([(n, v, f"{self.name}: {what}") for n, v, what in problems])
        return [self._plan_node(node) for node in rejects]

    def apply(self, steps: Sequence[PlannedStep]) -> list[StepResult]:
        """Run every step; a failed step is recorded and the others still run."""
        for step in steps:
            if step.action != self.name:
                raise ValueError(f"step for action {step.action!r} given to {self.name!r}")
        failures: tuple[type[BaseException], ...] = (StepFailed, *self._failures())
        results: list[StepResult] = []
        for step in steps:
            done: list[CallOutcome] = []
            try:
                detail = self._execute(step, done)
            except failures as exc:
                where = f" (after {len(done)} of {len(step.calls)} calls succeeded)" if done else ""
                said = " ".join(str(exc).split())  # SDK messages span lines; a result is one
                results.append(StepResult(step, False, f"{type(exc).__name__}: {said}{where}", tuple(done)))
            else:
                results.append(StepResult(step, True, detail, tuple(done)))
        return results

    @abstractmethod
    def _plan_node(self, node: RejectedNode) -> PlannedStep:
        """The step for one node whose identifiers have been checked."""

    @abstractmethod
    def _execute(self, step: PlannedStep, done: list[CallOutcome]) -> str:
        """Make the step's calls in order, appending each to `done`; return a one-line summary."""

    @abstractmethod
    def _failures(self) -> tuple[type[BaseException], ...]:
        """The exception types that mean 'this node's call failed' (the SDK's, not bugs of ours)."""
