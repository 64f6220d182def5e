"""The Pulumi program: stack config `fleetforge:fleet` -> FleetSpec -> the cloud's component -> outputs.

`pulumi up` runs it through stacks/__main__.py; `fleetforge plan` runs the same module under
Pulumi's mocks. A spec that cannot be provisioned stops the program with a RunError naming the
field, which Pulumi prints without a traceback; nothing is created.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pulumi

from fleet.spec import FleetSpec, SpecError, spec_from_mapping
from stacks import CONFIG_KEY, CONFIG_NAMESPACE
from stacks.outputs import SECTIONS
from stacks.prerequisites import spec_problems


def read_spec() -> FleetSpec:
    config = pulumi.Config(CONFIG_NAMESPACE)
    data = config.get_object(CONFIG_KEY)
    source = f"{CONFIG_NAMESPACE}:{CONFIG_KEY}"
    if data is None:
        raise pulumi.RunError(
            f"{source}: missing; set it with `pulumi config set --path {source}.name ...` or copy "
            "examples/Pulumi.aws-p5.yaml to Pulumi.<stack>.yaml"
        )
    try:
        spec = spec_from_mapping(data, source=source)
    except SpecError as exc:
        raise pulumi.RunError(exc.render()) from None
    problems = spec_problems(spec)
    if problems:
        raise pulumi.RunError(SpecError(source, problems).render())
    return spec


def main() -> None:
    spec = read_spec()
    outputs = _fleet(spec)
    for section in SECTIONS:
        pulumi.export(section, outputs[section])


def _fleet(spec: FleetSpec) -> Mapping[str, Any]:
    # Each cloud's component is imported when it is used, so a program for one cloud does not load
    # the others' providers. spec_problems has already refused every cloud not listed here.
    if spec.cloud == "gcp":
        from stacks.gcp import GcpFleet, GcpFleetArgs

        return GcpFleet(spec.name, GcpFleetArgs.from_spec(spec)).outputs
    if spec.cloud == "azure":
        from stacks.azure import AzureFleet, AzureFleetArgs

        return AzureFleet(spec.name, AzureFleetArgs.from_spec(spec)).outputs
    from stacks.aws import AwsFleet, AwsFleetArgs

    return AwsFleet(spec.name, AwsFleetArgs.from_spec(spec)).outputs
