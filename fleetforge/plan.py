"""`fleetforge plan`: what `pulumi up` would create for a spec, computed offline.

It runs the real stack program (stacks/__main__.py) under Pulumi's mocks (stacks.mocks),
records every resource with its type token, logical name and inputs, collects the stack outputs,
and judges the recorded resources with the policy rules (policy.rules), the same rules the
CrossGuard pack enforces on a real deployment. A spec that cannot be provisioned fails before
Pulumi is even imported, with the same field-path report as `fleetforge spec check`.
"""

from __future__ import annotations

import importlib
import runpy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleet.spec import FleetSpec, SpecError, load_spec
from policy.rules import Resource, Violation, check
from stacks import CONFIG_KEY, CONFIG_NAMESPACE
from stacks.prerequisites import spec_problems

EXTRA = "cloud"


class PulumiUnavailableError(RuntimeError):
    """The Pulumi SDK or the cloud's provider is not installed."""


@dataclass(frozen=True)
class PlannedResource:
    type: str
    name: str
    inputs: dict[str, Any]
    id: str
    urn: str

    def as_json(self) -> dict[str, Any]:
        return {"type": self.type, "name": self.name, "inputs": self.inputs}


@dataclass(frozen=True)
class Plan:
    spec: FleetSpec
    resources: tuple[PlannedResource, ...]
    outputs: dict[str, Any]
    violations: tuple[Violation, ...]
    warnings: tuple[str, ...]
    # Output paths (section.key...) whose values the mocks made up: ids, names and addresses the
    # cloud assigns at deploy time. Shape and wiring are real; these values are not.
    placeholders: tuple[str, ...] = ()

    def as_json(self) -> dict[str, Any]:
        return {
            "resources": [r.as_json() for r in self.resources],
            "outputs": self.outputs,
            "placeholders": list(self.placeholders),
            "violations": [
                {"rule": v.rule, "type": v.type, "name": v.name, "message": v.message}
                for v in self.violations
            ],
        }


def plan_file(path: str | Path) -> Plan:
    return plan_spec(load_spec(path), source=str(path))


def plan_spec(spec: FleetSpec, source: str = "spec") -> Plan:
    problems = spec_problems(spec)
    if problems:
        raise SpecError(source, problems)
    runtime = _runtime(spec.cloud)
    mocks = runtime.FleetMocks(region=spec.region or "", zone=spec.zone or "", vpc_id=spec.network.vpc_id)
    # Every field, None included: an explicit `checkpoints: null` differs from the default bucket.
    config = {f"{CONFIG_NAMESPACE}:{CONFIG_KEY}": spec.model_dump_json()}
    result = runtime.run(_stack_program, mocks, config)
    # Registration order depends on how the runtime's RPC threads interleave; sort for stable plans.
    resources = tuple(
        sorted(
            (PlannedResource(r.type, r.name, r.inputs, r.id, r.urn) for r in mocks.recorded),
            key=lambda r: (r.name, r.type),
        )
    )
    violations = tuple(check(Resource(r.type, r.name, r.inputs, id=r.id, urn=r.urn) for r in resources))
    placeholders = tuple(placeholder_paths(result.outputs, mocks.generated))
    return Plan(spec, resources, result.outputs, violations, tuple(result.warnings), placeholders)


def placeholder_paths(value: Any, generated: set[str], path: str = "") -> list[str]:
    """Paths of the string values that hold something the mocks made up."""
    if isinstance(value, str):
        return [path] if any(g in value for g in generated) else []
    if isinstance(value, dict):
        return [
            p for k, v in value.items() for p in placeholder_paths(v, generated, f"{path}.{k}" if path else k)
        ]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in placeholder_paths(v, generated, f"{path}[{i}]")]
    return []


def _stack_program() -> None:
    # The very module `pulumi up` runs (Pulumi.yaml: main: stacks/), executed afresh each time.
    runpy.run_module("stacks.__main__", run_name="__main__")


PROVIDERS = {"aws": "pulumi_aws", "gcp": "pulumi_gcp", "azure": "pulumi_azure_native"}


def _runtime(cloud: str) -> Any:
    """stacks.mocks, once Pulumi and the cloud's provider are known to be installed."""
    for module in ("pulumi", PROVIDERS.get(cloud, "pulumi_aws")):
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise PulumiUnavailableError(
                f"{module} is not installed: install the {EXTRA!r} extra (pip install 'fleetforge[{EXTRA}]')"
            ) from exc
    return importlib.import_module("stacks.mocks")
