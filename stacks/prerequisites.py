"""What a valid FleetSpec still needs before the stack can provision it.

`fleet.spec` knows every cloud's general rules; these are the stack's own: which clouds this
program provisions today, the AWS network facts it relies on (a subnet it can place nodes in,
a VPC range large enough for the fleet, a bastion it can reference), and the GCP ones (a range
that holds one subnet per NIC network, no existing network, capacity a TPU queued resource can
express), and the Azure ones (its own VNet, SSH by address, capacity it can ask for, a pinned
image, a VNet whose node half holds the fleet and whose second half holds the file system's
subnet). Pure Python with no Pulumi import, so `fleetforge plan` reports them with field paths
before it loads Pulumi or records a resource, exactly like `fleetforge spec check` reports spec
errors.
"""

from __future__ import annotations

import ipaddress

from fleet.network import vpc_range_problem
from fleet.spec import FleetSpec
from stacks import azure_layout, gcp_layout

PROVISIONED_CLOUDS = ("aws", "gcp", "azure")


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
    if spec.cloud == "gcp":
        return list(_gcp_problems(spec))
    if spec.cloud == "azure":
        return list(_azure_problems(spec))
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


def _gcp_problems(spec: FleetSpec) -> list[tuple[str, str]]:
    # The GCP stack lays out one VPC per catalog network (stacks.gcp_layout), so it cannot reuse
    # one existing network, and its firewall names sources by address.
    problems: list[tuple[str, str]] = []
    sku = spec.catalog_sku
    net = spec.network
    for path, value in (("network.vpc_id", net.vpc_id), ("network.subnet_id", net.subnet_id)):
        if value is not None:
            problems.append(
                (
                    path,
                    f"the gcp stack creates its own VPCs ({gcp_layout.subnets_needed(sku)} subnets, "
                    "one per NIC network, from network.vpc_cidr); allowed: omit it",
                )
            )
    if net.bastion is not None and not _is_ipv4(net.bastion):
        problems.append(("network.bastion", f"{net.bastion!r}: on gcp, allowed: an IPv4 address"))
    if net.subnet_id is None and net.vpc_id is None:
        fs = spec.storage.filesystem
        with_lustre = fs is not None and fs.kind == "managed-lustre"
        problem = gcp_layout.vpc_range_problem(sku, net.vpc_cidr, spec.size, with_lustre=with_lustre)
        if problem:
            problems.append(("network.vpc_cidr", problem))
    if sku.is_tpu:
        if spec.capacity.type not in {"on-demand", "queued"}:
            problems.append(
                (
                    "capacity.type",
                    f"{spec.capacity.type} TPU slices are not provisioned by the stack (its queued "
                    "resource takes no spot or reservation setting); allowed: on-demand, queued",
                )
            )
        # fleet.spec refuses shapes that do not exist; this catches a chip count with no default
        # topology here, before Pulumi runs.
        settings = spec.tpu
        slices = settings.slices if settings is not None else 1
        try:
            gcp_layout.tpu_slice(
                sku,
                spec.nodes // slices,
                settings.topology if settings is not None else None,
                settings.runtime_version if settings is not None else None,
            )
        except ValueError as exc:
            problems.append(("tpu.topology", f"{exc}; name the slice's shape here"))
    return problems


def _azure_problems(spec: FleetSpec) -> list[tuple[str, str]]:
    # The Azure stack creates its own VNet (stacks.azure_network) and names SSH sources by
    # address in its NSG; an image must be pinned, never "latest".
    problems: list[tuple[str, str]] = []
    net = spec.network
    for path, value in (("network.vpc_id", net.vpc_id), ("network.subnet_id", net.subnet_id)):
        if value is not None:
            problems.append((path, "the azure stack creates its own VNet and subnets; allowed: omit it"))
    if net.bastion is not None:
        problems.append(("network.bastion", "on azure, allowed: omit it and name network.ssh_cidr"))
    if spec.capacity.type not in {"on-demand", "spot", "reservation"}:
        problems.append(
            (
                "capacity.type",
                f"{spec.capacity.type} is not offered on azure; allowed: on-demand, spot, reservation",
            )
        )
    problems += _azure_reservation_problems(spec)
    image = spec.image
    if image is not None and not image.startswith("/subscriptions/"):
        parts = image.split(":")
        if len(parts) != 4 or not all(parts) or parts[3].lower() == "latest":
            problems.append(
                (
                    "image",
                    f"{image!r}; allowed on azure: publisher:offer:sku:version with a pinned version, "
                    "or an image resource id (/subscriptions/...)",
                )
            )
    if net.subnet_id is None:
        # Nodes live in the first half of the VNet (stacks.azure_layout); Azure keeps 5 addresses.
        half = max(0, net.vpc_cidr.num_addresses // 2 - azure_layout.AZURE_RESERVED)
        if half < spec.size:
            problems.append(
                (
                    "network.vpc_cidr",
                    f"{net.vpc_cidr} leaves {half} node addresses (half the VNet, less Azure's 5) for "
                    f"{spec.size} nodes; allowed: a larger range",
                )
            )
        problems += _amlfs_subnet_problems(spec)
    return problems


def _azure_reservation_problems(spec: FleetSpec) -> list[tuple[str, str]]:
    if spec.capacity.type != "reservation":
        return []
    sku = spec.catalog_sku
    if sku.fabric.kind == "infiniband":
        # A Uniform scale set takes a capacity reservation group only with singlePlacementGroup
        # false, and InfiniBand connects only the VMs of one placement group, so the stack keeps
        # it true on every InfiniBand SKU:
        # https://learn.microsoft.com/en-us/azure/virtual-machines/capacity-reservation-associate-virtual-machine-scale-set
        return [
            (
                "capacity.type",
                f"reservation: Azure attaches a capacity reservation group only to a scale set with "
                f"singlePlacementGroup false, and {sku.sku}'s InfiniBand needs it true; "
                "allowed on azure InfiniBand SKUs: on-demand, spot",
            )
        ]
    reservation = spec.capacity.reservation_id
    if reservation is not None and not azure_layout.CAPACITY_RESERVATION_GROUP_ID.fullmatch(reservation):
        return [
            (
                "capacity.reservation_id",
                f"{reservation!r}: a bare name would be looked up in the resource group this stack "
                "creates, which holds no reservation made before the fleet; allowed: the group's full "
                f"id, {azure_layout.CAPACITY_RESERVATION_GROUP_FORM}",
            )
        ]
    return []


def _amlfs_subnet_problems(spec: FleetSpec) -> list[tuple[str, str]]:
    fs = spec.storage.filesystem
    if fs is None or fs.kind != "amlfs":
        return []
    tib = azure_layout.amlfs_capacity_tib(fs)
    prefix = azure_layout.amlfs_subnet_prefix(tib)
    vnet = spec.network.vpc_cidr
    try:
        azure_layout.subnet_ranges(vnet, prefix)
    except ValueError:
        return [
            (
                "network.vpc_cidr",
                f"{vnet} leaves a /{vnet.prefixlen + 1} (the VNet's second half) for Azure Managed "
                f"Lustre, and {tib} TiB needs a /{prefix} ({azure_layout.AMLFS_SOURCE}); allowed: a "
                f"/{azure_layout.smallest_vnet_for(prefix)} or larger range",
            )
        ]
    return []


def _is_ipv4(value: str) -> bool:
    try:
        ipaddress.IPv4Address(value)
    except ValueError:
        return False
    return True
