"""How a GCP fleet's networks and TPU slices are laid out, derived from the catalog's facts.

Pure Python with no Pulumi import: the stack builds its networks from these plans, and
stacks.prerequisites uses the same arithmetic to refuse a spec whose range cannot hold them before any
resource is recorded. Nothing here names a SKU: the catalog's `fabric.attach`, `nics`,
`host_nics`, `nic_kind` and `mtu` decide the layout.

GPU fabrics (Google Cloud GPU network bandwidth docs; cluster-toolkit A3/A3-Mega/A3-Ultra/A4):
- `vpc-per-gpu-nic` (GPUDirect-TCPX / TCPXO): `host_nics` gVNIC host VPCs, then one VPC with one
  subnet per GPU NIC, every NIC a gVNIC.
- `roce-vpc-subnet-per-nic` (GPUDirect RDMA): `host_nics` gVNIC VPCs, then one RoCE VPC (created
  with the zone's RoCE network profile) holding one subnet per RDMA NIC, every RDMA NIC an MRDMA.
TPU slices (`torus-2d` / `torus-3d`): one host VPC; the slice's ICI links need no VPC.

Address plan: the spec's `network.vpc_cidr` is cut into 16 equal slots. Subnet i takes slot i in
NIC order; the last slot is the range reserved for private services access (Managed Lustre). GCP
VPCs are separate address spaces, but one VM holds a NIC in each, so their subnets must not overlap
or the VM could not route between them.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Literal

from fleet.catalog import Sku, tpu

NicType = Literal["GVNIC", "MRDMA"]
Role = Literal["host", "gpu", "rdma"]

SLOTS = 16
GCP_RESERVED = 4  # every GCP subnet keeps its first two and last two addresses
SUBNET_HEADROOM = 64  # rolling replacements run a node twice for a while
# Google's documented IAP TCP-forwarding source range: SSH through IAP when the spec names none.
IAP_RANGE = ipaddress.IPv4Network("35.235.240.0/20")
TPU_HOST_NICS = 1
# Managed Lustre takes an instance's addresses from the private-services range, which must hold a
# contiguous block for it: a /24 in one copy of Google's page (docs.cloud.google.com/managed-lustre/
# docs/vpc?hl=ja, the copy that allocates a /20 for several instances), a /23 in a newer one (the
# same page with custom-mode subnets). The API refuses the instance only after the networks exist,
# so the spec is held to the larger block up front.
LUSTRE_SERVICES_PREFIX = 23

_NIC_TYPE: dict[str, NicType] = {"gvnic": "GVNIC", "mrdma": "MRDMA"}


@dataclass(frozen=True)
class SubnetPlan:
    key: str  # stable logical suffix, e.g. "gpu-3" or "rdma-5"
    cidr: ipaddress.IPv4Network


@dataclass(frozen=True)
class NetworkPlan:
    key: str  # "host-0", "gpu-2", "rdma"
    role: Role
    subnets: tuple[SubnetPlan, ...]
    roce: bool  # created with the zone's RoCE network profile
    egress: bool  # carries the Cloud NAT and the SSH rule (the primary host VPC only)


@dataclass(frozen=True)
class NicPlan:
    index: int
    network: str  # NetworkPlan.key
    subnet: str  # SubnetPlan.key
    nic_type: NicType
    role: Role


@dataclass(frozen=True)
class FabricLayout:
    networks: tuple[NetworkPlan, ...]
    nics: tuple[NicPlan, ...]
    mtu: int | None
    services_range: ipaddress.IPv4Network  # private services access (Managed Lustre)


def slot_ranges(vpc_cidr: ipaddress.IPv4Network) -> list[ipaddress.IPv4Network]:
    return list(vpc_cidr.subnets(prefixlen_diff=4)) if vpc_cidr.prefixlen <= 28 else []


def fabric_layout(sku: Sku, vpc_cidr: ipaddress.IPv4Network) -> FabricLayout:
    """Networks, subnets and per-VM NICs for `sku`, in NIC order (nic0 is the primary)."""
    fabric = sku.fabric
    slots = iter(slot_ranges(vpc_cidr))
    networks: list[NetworkPlan] = []
    nics: list[NicPlan] = []

    def add(key: str, role: Role, subnet_keys: list[str], roce: bool, nic_type: NicType) -> None:
        subnets = tuple(SubnetPlan(k, next(slots)) for k in subnet_keys)
        networks.append(NetworkPlan(key, role, subnets, roce=roce, egress=not networks))
        for subnet in subnets:
            nics.append(NicPlan(len(nics), key, subnet.key, nic_type, role))

    host_nics = TPU_HOST_NICS if sku.is_tpu else fabric.host_nics
    for i in range(host_nics):
        add(f"host-{i}", "host", [f"host-{i}"], roce=False, nic_type="GVNIC")
    if fabric.attach == "vpc-per-gpu-nic":
        nic_type = _nic_type(sku)
        for i in range(fabric.nics):
            add(f"gpu-{i}", "gpu", [f"gpu-{i}"], roce=False, nic_type=nic_type)
    elif fabric.attach == "roce-vpc-subnet-per-nic":
        add("rdma", "rdma", [f"rdma-{i}" for i in range(fabric.nics)], roce=True, nic_type=_nic_type(sku))
    elif fabric.attach not in {"torus-2d", "torus-3d"}:
        raise ValueError(f"{sku.sku}: fabric attach layout {fabric.attach!r} is not a GCP layout")
    return FabricLayout(tuple(networks), tuple(nics), fabric.mtu, slot_ranges(vpc_cidr)[-1])


def _nic_type(sku: Sku) -> NicType:
    try:
        return _NIC_TYPE[sku.fabric.nic_kind]
    except KeyError:
        raise ValueError(f"{sku.sku}: NIC kind {sku.fabric.nic_kind!r} has no GCP nic_type") from None


def subnets_needed(sku: Sku) -> int:
    host = TPU_HOST_NICS if sku.is_tpu else sku.fabric.host_nics
    fabric = 0 if sku.fabric.attach in {"torus-2d", "torus-3d"} else sku.fabric.nics
    return host + fabric


def vpc_range_problem(
    sku: Sku, vpc_cidr: ipaddress.IPv4Network, size: int, *, with_lustre: bool = False
) -> str | None:
    """Why the fleet's subnets (one slot each, plus the services range) cannot fit `vpc_cidr`."""
    needed = subnets_needed(sku) + 1
    slots = slot_ranges(vpc_cidr)
    if len(slots) < needed:
        return f"{vpc_cidr} is too small to cut into {SLOTS} subnets; allowed: /8 to /24"
    if with_lustre and slots[-1].prefixlen > LUSTRE_SERVICES_PREFIX:
        return (
            f"{vpc_cidr} leaves Managed Lustre a /{slots[-1].prefixlen} private-services range (1/{SLOTS} "
            f"of it), and an instance needs a /{LUSTRE_SERVICES_PREFIX}; "
            f"allowed: /{LUSTRE_SERVICES_PREFIX - 4} or larger"
        )
    usable = slots[0].num_addresses - GCP_RESERVED
    if usable < size + SUBNET_HEADROOM:
        return (
            f"{vpc_cidr} gives each of the fleet's {needed - 1} subnets a /{slots[0].prefixlen} "
            f"({usable} addresses) for {size} nodes (+{SUBNET_HEADROOM} for replacements); "
            "allowed: a larger range (each subnet is 1/16 of it)"
        )
    return None


# --------------------------------------------------------------------------- TPU slices

# fleet.catalog.tpu owns which shapes exist (and cites Google's pages); a spec without
# `tpu.topology` gets the shape below for its chip count: the 2D shapes are one per chip count,
# and for v5p the cube-like shape Google's v5p page lists first for that many chips.
V5P_DEFAULT_TOPOLOGIES = {
    4: "2x2x1",
    8: "2x2x2",
    16: "2x2x4",
    32: "2x4x4",
    64: "4x4x4",
    128: "4x4x8",
    256: "4x8x8",
    512: "8x8x8",
    1024: "8x8x16",
    2048: "8x16x16",
    4096: "16x16x16",
    6144: "16x16x24",
}
# The TPU VM software versions Google documents per generation for JAX and PyTorch/XLA, used when
# the spec pins none (tpu.runtime_version); pinned so a re-queued slice boots what the fleet was
# burnt in on.
TPU_RUNTIME_VERSIONS = {"v5e": "v2-alpha-tpuv5-lite", "v5p": "v2-alpha-tpuv5", "v6e": "v2-alpha-tpuv6e"}


@dataclass(frozen=True)
class TpuSlice:
    accelerator_type: str
    topology: str
    chips: int
    hosts: int
    runtime_version: str
    chips_per_vm: int  # what each TPU VM of the slice has: the burn-in's expected chip count


def default_topology(generation: str, chips: int) -> str | None:
    if generation == "v5p":
        return V5P_DEFAULT_TOPOLOGIES.get(chips)
    return tpu.two_d_shape(chips)


def tpu_slice(
    sku: Sku, hosts: int, topology: str | None = None, runtime_version: str | None = None
) -> TpuSlice:
    """One slice of `hosts` TPU VMs of `sku` (in `topology` when given), or ValueError saying why
    there is none."""
    if not sku.is_tpu:
        raise ValueError(f"{sku.sku} is not a TPU SKU")
    generation = sku.accelerator.generation
    # One VM: the generation's largest; several: multi-host VMs of 4 chips (fleet/catalog/tpu.py).
    chips = tpu.chips_for_hosts(generation, hosts)
    shape_name = topology or default_topology(generation, chips)
    if shape_name is None:
        per_vm = tpu.chips_per_vm(generation, chips)
        raise ValueError(f"{hosts} TPU VM(s) x {per_vm} chips = {chips} chips is no {sku.sku} slice")
    shape = tpu.slice_of(generation, shape_name)  # tpu.ShapeError is a ValueError
    if shape.hosts != hosts:
        raise ValueError(f"a {shape.topology} slice has {shape.hosts} TPU VM(s), not {hosts}")
    version = runtime_version or TPU_RUNTIME_VERSIONS.get(generation)
    if version is None:
        raise ValueError(f"{sku.sku}: no TPU runtime version known for generation {generation!r}")
    return TpuSlice(
        shape.accelerator_type, shape.topology, shape.chips, shape.hosts, version, shape.chips_per_vm
    )
