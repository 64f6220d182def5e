"""How an Azure fleet's VNet is cut, and which capacity reservation ids the stack takes.

Pure Python with no Pulumi import: stacks.azure_network builds its subnets from these ranges and
stacks.prerequisites uses the same arithmetic to refuse a spec whose VNet cannot hold them before
any resource is recorded, the way stacks.gcp_layout serves the GCP stack.

Address plan: nodes take the first half of the VNet; Azure Managed Lustre (AMLFS) takes the first
block of the second half, as large as the file system's capacity needs.
"""

from __future__ import annotations

import ipaddress
import math

from fleet.spec import AZURE_CAPACITY_RESERVATION_GROUP_ID, FileSystem

AZURE_RESERVED = 5  # Azure keeps 5 addresses of every subnet
# Azure Managed Lustre sizes its subnet by storage capacity ("Network size requirements",
# https://learn.microsoft.com/en-us/azure/azure-managed-lustre/amlfs-prerequisites):
# (largest capacity in TiB, smallest prefix that holds it). The tier enters only through the
# capacities each tier sells (fleet.spec.AMLFS_STEPS_TIB, AMLFS_MAX_TIB): 4-16 TiB /27, 20-40 /26,
# 44-92 /25, 96-196 /24, 200-400 /23.
AMLFS_SOURCE = "https://learn.microsoft.com/en-us/azure/azure-managed-lustre/amlfs-prerequisites"
AMLFS_SUBNET_PREFIX: tuple[tuple[int, int], ...] = ((16, 27), (40, 26), (92, 25), (196, 24), (400, 23))
# Above the table's 400 TiB (AMLFS-Durable-Premium-40 sells up to 768 TiB) Microsoft publishes no
# figure; the table roughly doubles capacity per prefix bit, so one more bit is our extrapolation.
AMLFS_BEYOND_TABLE_PREFIX = 22
# A capacity reservation group is named by its full id (fleet.spec's grammar), never a bare name:
# the fleet's own resource group is created by this stack, so a reservation made before the fleet
# cannot already be in it.
CAPACITY_RESERVATION_GROUP_ID = AZURE_CAPACITY_RESERVATION_GROUP_ID
CAPACITY_RESERVATION_GROUP_FORM = (
    "/subscriptions/<subscription id>/resourceGroups/<group>/providers/Microsoft.Compute/"
    "capacityReservationGroups/<name>"
)


def amlfs_capacity_tib(fs: FileSystem) -> int:
    """The whole TiB the file system is created with (AMLFS takes storageCapacityTiB in TiB)."""
    tib = fs.capacity_tib if fs.capacity_tib is not None else (fs.gib or 0) / 1024
    return math.ceil(tib)


def amlfs_subnet_prefix(capacity_tib: int) -> int:
    """The longest prefix of a subnet that holds an AMLFS of `capacity_tib`."""
    for largest, prefix in AMLFS_SUBNET_PREFIX:
        if capacity_tib <= largest:
            return prefix
    return AMLFS_BEYOND_TABLE_PREFIX


def subnet_ranges(
    vnet: ipaddress.IPv4Network, lustre_prefix: int | None
) -> tuple[ipaddress.IPv4Network, ipaddress.IPv4Network | None]:
    """Nodes in the first half of the VNet; the file system (a /`lustre_prefix`, None: no file
    system) at the start of the second half. Raises ValueError when the second half is smaller."""
    first, second = vnet.subnets(prefixlen_diff=1)
    if lustre_prefix is None:
        return first, None
    if lustre_prefix < second.prefixlen:
        raise ValueError(
            f"{vnet} leaves a /{second.prefixlen} for the file system, which needs a /{lustre_prefix}"
        )
    return first, next(second.subnets(new_prefix=lustre_prefix))


def smallest_vnet_for(lustre_prefix: int) -> int:
    """The longest VNet prefix whose second half holds a /`lustre_prefix`."""
    return lustre_prefix - 1
