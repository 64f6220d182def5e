"""Typed shape of the accelerator catalog: every fact names where it was read."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt

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


class Sku(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    sku: str
    cloud: Cloud
    machine_type: str
    source: str = Field(min_length=3)
    accelerator: Accelerator
    accelerators_per_node: int = Field(ge=0)
    nvswitch: bool
    host: Host | None = None
    fabric: Fabric
    placement: Placement
    reference: dict[str, ReferenceFigure]

    @property
    def is_tpu(self) -> bool:
        return self.accelerator.kind == "tpu"

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
    skus: tuple[Sku, ...]
