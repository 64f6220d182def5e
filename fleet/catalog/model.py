"""Typed shape of the accelerator catalog: every fact names where it was read."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, field_validator, model_validator

Cloud = Literal["aws", "gcp", "azure", "onprem"]
FabricKind = Literal[
    "efa", "gpudirect-tcpx", "gpudirect-tcpxo", "gpudirect-rdma", "infiniband", "ici", "ethernet"
]
NicKind = Literal["efa", "gvnic", "mrdma", "connectx7-ib", "ici", "ethernet"]
AttachLayout = Literal[
    "ena-primary-efa-only",  # AWS: ENA at card 0/dev 0, efa-only at card 0/dev 1, efa-only at dev 0 elsewhere
    "vpc-per-gpu-nic",  # GCP TCPX/TCPXO: one extra VPC (one subnet) per GPU NIC
    "roce-vpc-subnet-per-nic",  # GCP RDMA: one RoCE VPC with one subnet per NIC
    "hca-per-gpu",  # InfiniBand: one HCA per GPU, SR-IOV in the cloud
    "torus-2d",
    "torus-3d",
    "host-only",
]
# How a node reaches its NVSwitches: none; as PCI functions (NVLink 4 and earlier); or through
# NVLink 5 switch-management ports, where Fabric Manager also needs the NVLink subnet manager (Fabric
# Manager user guide, "Systems Using Fourth Generation NVSwitches": HGX B200 and later). The cloud
# SKUs' 8-GPU VMs run Fabric Manager in the guest, so they see what a bare board shows: AWS P6-B200
# (aws-parallelcluster-cookbook enables it on the ConnectX-7 bridges it counts), GCP A3 Mega, A3
# Ultra and A4 (GoogleCloudPlatform/cluster-toolkit's slurm blueprints hold the nvidia-fabricmanager
# their accelerator base image ships). A rack-scale tray (GB200 NVL72) manages no switch of its own:
# its `nvswitch` is false.
NvswitchFabric = Literal["none", "nvswitch", "nvlink5"]
NVLINK5_GENERATIONS = frozenset({"blackwell"})
PlacementStrategy = Literal[
    "cluster-placement-group",
    "compact-placement-policy",
    "reservation-block",
    "tpu-slice",
    "single-placement-group",
    "rack",
    "none",
]

# Which NIC kinds may carry each fabric; the catalog tests hold every SKU to this.
NIC_KINDS_BY_FABRIC: dict[str, frozenset[str]] = {
    "efa": frozenset({"efa"}),
    "gpudirect-tcpx": frozenset({"gvnic"}),
    "gpudirect-tcpxo": frozenset({"gvnic"}),
    "gpudirect-rdma": frozenset({"mrdma"}),
    "infiniband": frozenset({"connectx7-ib"}),
    "ici": frozenset({"ici"}),
    "ethernet": frozenset({"ethernet"}),
}

# Fabrics whose NICs expose RDMA verbs (rdma-core devices), where perftest's ib_write_bw can
# measure a pair: InfiniBand and RoCE HCAs (ConnectX), GCP's RDMA NICs on A3 Ultra / A4, and EFA
# (an rdma-core provider). GPUDirect-TCPX/TCPXO ride gVNIC (TCP), ICI is the TPU interconnect.
RDMA_FABRICS: frozenset[str] = frozenset({"infiniband", "gpudirect-rdma", "efa"})


class _Fact(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    source: str = Field(min_length=3)


class Accelerator(_Fact):
    model: str
    vendor: Literal["nvidia", "google", "none"]
    kind: Literal["gpu", "tpu", "cpu"]
    generation: str
    memory_gib: float = Field(ge=0)


class Host(_Fact):
    vcpus: PositiveInt
    memory_gib: PositiveInt


class Fabric(_Fact):
    kind: FabricKind
    nic_kind: NicKind
    nics: int = Field(ge=0, description="High-speed NICs (or ICI links per chip) per node")
    gbps_per_nic: float = Field(ge=0, description="Line rate per NIC in Gb/s (bits)")
    host_nics: int = Field(ge=0, description="NICs that carry ordinary host IP traffic")
    attach: AttachLayout
    mtu: int | None = None

    @property
    def total_gbps(self) -> float:
        return self.nics * self.gbps_per_nic

    @property
    def rdma(self) -> bool:
        """Whether the node has NICs that speak RDMA verbs (RDMA_FABRICS)."""
        return self.kind in RDMA_FABRICS and self.nics > 0


class Placement(_Fact):
    strategy: PlacementStrategy
    single_zone: bool
    max_nodes: PositiveInt | None = Field(
        default=None, description="Largest group the fabric spans (e.g. one Azure placement group)"
    )
    slice_chips: tuple[PositiveInt, ...] | None = Field(
        default=None, description="TPU: chip counts of the slice shapes that exist"
    )


class ReferenceFigure(_Fact):
    value: float = Field(gt=0)
    kind: Literal["datasheet", "threshold", "measured"]
    fraction: float = Field(gt=0, le=1, description="Absolute floor = value x fraction")

    @property
    def floor(self) -> float:
        return self.value * self.fraction


# What roles/nccl writes to /etc/nccl.conf for a fabric (its `nccl_fabric` choices).
NcclFabric = Literal["infiniband", "roce", "efa", "gpudirect-tcpx", "gpudirect-tcpxo", "gib", "tcp", "none"]
# Variables NCCL and its net plugins read: the only ones /etc/nccl.conf may carry (NCCL sets each
# key of the file in its own environment at start; libfabric reads FI_* after that, when the
# plugin opens it). LD_LIBRARY_PATH is read by the loader before main(), so it travels only in the
# process environment (the burn-in's `burnin_fabric_environment`).
NCCL_CONF_PREFIXES = ("NCCL_", "FI_")
_ENV_NAME = r"^[A-Z][A-Z0-9_]*$"


class FabricEnvironment(_Fact):
    """The NCCL/libfabric environment a fabric needs, as its vendor publishes it.

    Only values that are the same on every node of the fabric belong here. Values that depend on
    the node (interface names, CPU bindings, HCA names) are left to the node: `profile` names the
    vendor's script on the image that computes them, and `node_specific` lists what it (or the
    operator) must set, so nobody invents them here."""

    nccl_fabric: NcclFabric
    environment: dict[str, str] = Field(default_factory=dict)
    library_path: str | None = Field(
        default=None, description="Folder of the vendor's NCCL and net plugin, first on LD_LIBRARY_PATH"
    )
    profile: str | None = Field(
        default=None, description="Shell script on the node that exports the rest (sourced, never run here)"
    )
    profile_environment: dict[str, str] = Field(
        default_factory=dict, description="Variables the profile script expects when sourced"
    )
    node_specific: tuple[str, ...] = ()

    @field_validator("environment", "profile_environment")
    @classmethod
    def _names(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if not re.fullmatch(_ENV_NAME, name):
                raise ValueError(f"{name!r} is not an environment variable name ({_ENV_NAME})")
        return value

    @model_validator(mode="after")
    def _static_only(self) -> FabricEnvironment:
        clash = sorted(set(self.environment) & set(self.node_specific))
        if clash:
            raise ValueError(f"{', '.join(clash)}: node-specific, so not a fabric-wide value")
        if self.profile_environment and self.profile is None:
            raise ValueError("profile_environment without a profile script")
        return self

    def process_environment(self) -> dict[str, str]:
        """What a process that runs NCCL over this fabric starts with (the burn-in's environment)."""
        env = dict(self.environment)
        if self.library_path:
            env["LD_LIBRARY_PATH"] = self.library_path
        return env

    def nccl_conf(self) -> dict[str, str]:
        """The part of the environment /etc/nccl.conf can carry (NCCL_* and FI_* variables)."""
        return {k: v for k, v in self.environment.items() if k.startswith(NCCL_CONF_PREFIXES)}


class Sku(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    sku: str
    cloud: Cloud
    machine_type: str
    source: str = Field(min_length=3)
    accelerator: Accelerator
    # GPUs (and CPU nodes' 0): what every node of the SKU has. TPUs: the chips of the generation's
    # largest TPU VM (v5e/v6e 8, v5p 4); a VM's own count follows its slice (1, 4 or 8 on a
    # one-VM v5e/v6e slice, 4 on each VM of a larger one): fleet.catalog.tpu.chips_per_vm.
    accelerators_per_node: int = Field(ge=0)
    nvswitch: bool
    host: Host | None = None
    fabric: Fabric
    placement: Placement
    reference: dict[str, ReferenceFigure]

    @property
    def is_tpu(self) -> bool:
        return self.accelerator.kind == "tpu"

    @property
    def nvswitch_fabric(self) -> NvswitchFabric:
        if not self.nvswitch:
            return "none"
        return "nvlink5" if self.accelerator.generation in NVLINK5_GENERATIONS else "nvswitch"

    def summary(self) -> dict[str, object]:
        """The flat record `fleetforge catalog --json` prints for this SKU."""
        out = self.model_dump(mode="json")
        out["accelerator"] = self.accelerator.model
        out["accelerator_memory_gib"] = self.accelerator.memory_gib
        out["accelerator_kind"] = self.accelerator.kind
        out["accelerator_detail"] = self.accelerator.model_dump(mode="json")
        return out


class Catalog(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    sources: dict[str, str]
    fabrics: dict[FabricKind, FabricEnvironment]
    skus: tuple[Sku, ...]

    @model_validator(mode="after")
    def _every_fabric_has_an_environment(self) -> Catalog:
        missing = sorted({s.fabric.kind for s in self.skus} - set(self.fabrics))
        if missing:
            raise ValueError(f"fabrics: no entry for {', '.join(missing)}, which SKUs use")
        return self

    def fabric_environment(self, sku: Sku) -> FabricEnvironment:
        return self.fabrics[sku.fabric.kind]
