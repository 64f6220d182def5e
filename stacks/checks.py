"""What a valid FleetSpec still needs before the stack can provision it.

`fleet.spec` knows every cloud's general rules; these are the stack's own: which clouds this
program provisions today, and the AWS network facts it relies on (a subnet it can place nodes in,
a VPC range large enough for the fleet, a bastion it can reference). Pure Python with no Pulumi
import, so `fleetforge plan` reports them with field paths before it loads Pulumi or records a
resource, exactly like `fleetforge spec check` reports spec errors.
"""

from __future__ import annotations

from fleet.network import vpc_range_problem
from fleet.spec import FleetSpec

PROVISIONED_CLOUDS = ("aws",)


def spec_problems(spec: FleetSpec) -> list[tuple[str, str]]:
    """(field path, message) for each reason this stack cannot provision `spec`; empty if it can."""
    if spec.cloud == "onprem":
        return [
            (
                "cloud",
                "on-prem fleets are configured with Ansible (playbooks/site.yml), not provisioned by the "
                f"Pulumi stack; allowed here: {', '.join(PROVISIONED_CLOUDS)}",
            )
        ]
    if spec.cloud not in PROVISIONED_CLOUDS:
        return [
            (
                "cloud",
                f"{spec.cloud} fleets are not provisioned by the fleetforge stack yet; "
                f"allowed here: {', '.join(PROVISIONED_CLOUDS)}",
            )
        ]
    return list(_aws_problems(spec))


def _aws_problems(spec: FleetSpec) -> list[tuple[str, str]]:
    # Id formats, vpc_id without subnet_id and the bastion's form are spec rules (fleet.spec);
    # what is left here depends on how this stack lays out its network.
    if spec.network.subnet_id is None:
        return _vpc_range_problems(spec)
    return []


def _vpc_range_problems(spec: FleetSpec) -> list[tuple[str, str]]:
    # The spec refuses these first (fleet.network); kept so the stack never trusts a spec object
    # that was built without validation.
    problem = vpc_range_problem(spec.network.vpc_cidr, spec.size)
    return [("network.vpc_cidr", problem)] if problem else []
