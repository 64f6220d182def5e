"""The data every action shares: rejected nodes in, planned steps out, step results back.

A PlannedStep is the single description of what an action will do to one node: `--dry-run` prints
it and `apply` executes it, reading the very same `Call` objects, so the two cannot drift apart.
Everything here is plain data and JSON-serialisable; nothing imports a cloud SDK.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Literal

# Host variables an inventory carries for the actions (README "Acting on rejects").
# NodeIds field names ARE the host var names, so an error can name the var a node lacks.


@dataclass(frozen=True)
class NodeIds:
    """Cloud and scheduler identifiers of one node, as read from its inventory host vars."""

    ec2_instance_id: str | None = None
    aws_region: str | None = None
    ec2_availability_zone: str | None = None
    gce_project: str | None = None
    gce_zone: str | None = None
    gce_instance: str | None = None
    gce_instance_id: str | None = None
    gce_mig: str | None = None
    gce_mig_region: str | None = None
    azure_subscription_id: str | None = None
    azure_resource_group: str | None = None
    azure_vmss_name: str | None = None
    azure_vmss_instance_id: str | None = None
    slurm_node_name: str | None = None
    k8s_node_name: str | None = None

    HOST_VARS: ClassVar[tuple[str, ...]]

    def get(self, var: str) -> str | None:
        value = getattr(self, var)
        return value if isinstance(value, str) else None


NodeIds.HOST_VARS = tuple(f.name for f in fields(NodeIds))

# The host vars that together name one machine or scheduler node, which no two hosts of an
# inventory may share: an action given a copied id would act on the other host's machine.
UNIQUE_IDS: tuple[tuple[str, ...], ...] = (
    ("ec2_instance_id",),
    ("gce_instance_id",),
    ("gce_project", "gce_zone", "gce_instance"),
    ("azure_subscription_id", "azure_resource_group", "azure_vmss_name", "azure_vmss_instance_id"),
    ("slurm_node_name",),
    ("k8s_node_name",),
)

# What the gate saw of a rejected node: a figure or a failure it read ("measured"); nothing, because
# every reason is that its results were missing, unreadable or an error ("unmeasured": it may be a
# healthy machine); or no inventory lists it ("unlisted": nothing to act on).
Seen = Literal["measured", "unmeasured", "unlisted"]


@dataclass(frozen=True)
class RejectedNode:
    """A node the gate rejected: its inventory name, every reason, and where it lives."""

    name: str
    reasons: tuple[str, ...]
    ids: NodeIds = field(default_factory=NodeIds)
    seen: Seen = "measured"
    # (host var, what is wrong) for each identifier another inventory host carries too: copied
    # from another line, it may name that host's machine.
    shared: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class LeftOut:
    """A rejected node an action did not act on, and why."""

    action: str
    node: str
    why: str

    def describe(self) -> str:
        return f"left out: {self.action} {self.node}: {self.why}"

    def to_json(self) -> dict[str, str]:
        return {"action": self.action, "node": self.node, "why": self.why}


@dataclass(frozen=True)
class Call:
    """One API call or command, with its parameters exactly as they will be passed.

    `params` are the keyword arguments of the SDK method (or `argv` for a command, or the edit
    for a file). Values only known once the call runs (a node's current taints, a scale set's
    current capacity) are named in `filled_at_run_time` so the dry run says so instead of guessing.
    """

    sdk: str  # boto3 | google-cloud-compute | azure-mgmt-compute | kubernetes | exec | file
    target: str  # the client (and its scope) or the command or file the call goes to
    method: str
    params: Mapping[str, Any]
    # Which client serves the call (region, subscription): part of the plan, not an argument.
    scope: Mapping[str, str] = field(default_factory=dict)
    filled_at_run_time: tuple[str, ...] = ()

    def describe(self) -> str:
        if self.sdk == "exec":
            return shlex.join(self.params["argv"])
        args = ", ".join(f"{k}={_literal(v)}" for k, v in self.params.items())
        sep = ": " if self.sdk == "file" else "."  # a file path is not an object
        text = f"{self.target}{sep}{self.method}({args})"
        if self.filled_at_run_time:
            text += "  [at run time: " + "; ".join(self.filled_at_run_time) + "]"
        return text

    def to_json(self) -> dict[str, Any]:
        return {
            "sdk": self.sdk,
            "target": self.target,
            "method": self.method,
            "params": _plain(self.params),
            "scope": dict(self.scope),
            "filled_at_run_time": list(self.filled_at_run_time),
        }


@dataclass(frozen=True)
class PlannedStep:
    """What one action will do to one node: a sentence for people and the exact calls."""

    action: str
    node: str
    summary: str
    reasons: tuple[str, ...]
    calls: tuple[Call, ...]

    def describe(self) -> str:
        lines = [f"{self.action} {self.node}: {self.summary}"]
        lines += [f"    {call.describe()}" for call in self.calls]
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "node": self.node,
            "summary": self.summary,
            "reasons": list(self.reasons),
            "calls": [c.to_json() for c in self.calls],
        }


@dataclass(frozen=True)
class CallOutcome:
    """A call that was made, with the parameters actually sent and what came back."""

    call: Call
    result: str

    def to_json(self) -> dict[str, Any]:
        return {**self.call.to_json(), "result": self.result}


@dataclass(frozen=True)
class StepResult:
    """The outcome of one planned step. A failure keeps the calls that did succeed before it."""

    step: PlannedStep
    ok: bool
    detail: str
    done: tuple[CallOutcome, ...] = ()

    def describe(self) -> str:
        mark = "done" if self.ok else "FAILED"
        lines = [f"{mark}: {self.step.action} {self.step.node}: {self.detail}"]
        lines += [f"    {o.call.describe()} -> {o.result}" for o in self.done]
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "action": self.step.action,
            "node": self.step.node,
            "ok": self.ok,
            "detail": self.detail,
            "planned": self.step.to_json(),
            "done": [o.to_json() for o in self.done],
        }


class StepFailed(Exception):
    """A node's step went wrong in a way the SDK did not raise for (an operation still running at
    the timeout, a response without the field the next call needs). Reported like an SDK error."""


# Errors. validation never imports fleetforge, so each names the exitcodes constant the CLI maps it to.


class ActionError(Exception):
    """Base of every error raised before any action runs; nothing has been changed."""

    exit_name: str = "SOFTWARE"


class UnknownActionError(ActionError):
    exit_name = "USAGE"


class ActionConfigError(ActionError):
    """An action option is invalid or missing (taint key, inventory path, reason length)."""

    exit_name = "USAGE"


class NodeIdentifierError(ActionError):
    """Nodes lack (or carry a malformed) host var an action needs; every problem is listed."""

    exit_name = "DATA"

    def __init__(self, problems: Sequence[tuple[str, str, str]]) -> None:
        # (node, host var, what is wrong)
        self.problems = list(problems)
        super().__init__(
            "cannot act on these nodes:\n"
            + "\n".join(f"  node {node!r}: {problem} (host var {var!r})" for node, var, problem in problems)
        )


class TooManyToReplaceError(ActionError):
    """An action that replaces machines was asked to replace more of the fleet than allowed."""

    exit_name = "ACTION_FAILED"

    def __init__(self, action: str, nodes: Sequence[str], limit: int, limit_from: str) -> None:
        self.nodes = list(nodes)
        super().__init__(
            f"{action}: {len(nodes)} node(s) to replace ({', '.join(nodes)}), more than {limit_from}: "
            f"a cause the fleet shares (a driver, an image, the fabric, a check no node ran) is not "
            f"fixed by new machines. Read the reasons; to replace them all, give --max-replace "
            f"{len(nodes)}. Nothing was changed"
        )


class InventoryFileError(ActionError):
    """An inventory file cannot be read (NO_INPUT) or is not a YAML inventory (DATA)."""

    def __init__(self, path: str, problem: str, *, missing: bool = False) -> None:
        self.path = path
        self.missing = missing
        self.exit_name = "NO_INPUT" if missing else "DATA"
        super().__init__(f"{path}: {problem}")


class InventoryNeedsAnsibleError(ActionError):
    """Only Ansible reads the inventory (a folder, a plugin's configuration, INI) and it is not
    installed; the message names the extra that brings it."""

    exit_name = "UNAVAILABLE"

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        super().__init__(f"{path}: {problem}")


class MissingSdkError(ActionError):
    """The SDK an action needs is not installed; the message names the extra that brings it."""

    exit_name = "UNAVAILABLE"

    def __init__(self, action: str, module: str, extra: str) -> None:
        self.action, self.module, self.extra = action, module, extra
        super().__init__(
            f"action {action!r} needs the Python package that provides {module!r}; "
            f"install the {extra!r} extra: pip install 'fleetforge[{extra}]'"
        )


def _plain(value: Any) -> Any:
    # Mappings and tuples become dicts and lists, so json.dumps and equality in tests behave.
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _literal(value: Any) -> str:
    # Python literal syntax: the line reads as the SDK call it is.
    return repr(_plain(value))
