"""FleetSpec: the one document a user writes to describe a fleet.

One fleet is one SKU: the type has a single `sku` field, so a mixed fleet cannot be written.
Every rule that spans fields lives in `FleetSpec._cross_field_rules` and reports the dotted
path of the field it blames, so `fleetforge spec check` can name it.
"""

from __future__ import annotations

import base64
import binascii
import copy
import ipaddress
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    StringConstraints,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from fleet import units, yamlsafe
from fleet.catalog import Sku, UnknownSkuError, all_skus, get_sku, managed_lustre, tpu
from fleet.grammar import (
    Cidr,
    CloudId,
    HostAddress,
    IpAddress,
    LustreNids,
    MountPoint,
    NodeCount,
    Nqn,
    SpareCount,
    StrictCount,
    StrictNumber,
    StrictPort,
    Version,
)
from fleet.metrics import METRICS
from fleet.netpolicy import ssh_source_problem
from fleet.network import vpc_range_problem
from fleet.regions import location_problems
from fleet.results import Level
from fleet.text import printable

Cloud = Literal["aws", "gcp", "azure", "onprem"]
DnsName = Annotated[str, StringConstraints(pattern=r"^[a-z]([a-z0-9-]{0,38}[a-z0-9])?$")]
# projects/P/locations/L/keyRings/R/cryptoKeys/K (https://cloud.google.com/kms/docs/resource-hierarchy)
GcpKmsKey = Annotated[
    str,
    StringConstraints(
        pattern=r"^projects/[a-z][a-z0-9-]{4,28}[a-z0-9]/locations/[a-z0-9-]{1,63}"
        r"/keyRings/[A-Za-z0-9_-]{1,63}/cryptoKeys/[A-Za-z0-9_-]{1,63}$"
    ),
]
TagValue = Annotated[str, StringConstraints(min_length=1, max_length=63, pattern=r"^[a-z0-9_.@:/=+-]+$")]

FSX_THROUGHPUTS = (125, 250, 500, 1000)
# FSx for Lustre's own unit, not fleet.units: its API takes StorageCapacity in GiB and its
# documentation calls 1,200 GiB "1.2 TiB" (sizes 1.2 TiB, 2.4 TiB and multiples of 2.4 TiB are
# 1,200, 2,400, 4,800 GiB). A spec's capacity_tib for FSx therefore means AWS's TiB, so that
# "2.4" is the size AWS sells, not 2,457.6 GiB, which it refuses.
FSX_GIB_PER_TIB = 1000
# Azure Managed Lustre AMLFS-Durable-Premium-<tier>: capacity step in TiB, which is also the
# smallest size, and the largest size Azure sells without a support request (AMLFS_SOURCE).
AMLFS_SOURCE = (
    "https://learn.microsoft.com/azure/azure-managed-lustre/create-file-system-resource-manager "
    "(File system type and size options)"
)
AMLFS_STEPS_TIB = {40: 48, 125: 16, 250: 8, 500: 4}
AMLFS_MAX_TIB = {40: 768, 125: 128, 250: 128, 500: 128}
# A scale set with singlePlacementGroup=true holds at most 100 VMs, and InfiniBand connects only
# the VMs of one placement group, so one scale set is one InfiniBand domain (IB_DOMAIN_SOURCE).
IB_DOMAIN_SOURCE = (
    "https://learn.microsoft.com/azure/virtual-machine-scale-sets/virtual-machine-scale-sets-placement-groups"
)
# Azure naming rules (https://learn.microsoft.com/azure/azure-resource-manager/management/resource-name-rules):
# a resource group is 1-90 letters, digits, _ - . ( ), not ending with a period.
_AZURE_RESOURCE_GROUP = re.compile(r"[A-Za-z0-9_().-]{0,89}[A-Za-z0-9_()-]")
# Key Vault key identifier, versioned (https://learn.microsoft.com/azure/key-vault/general/about-keys-secrets-certificates)
_AZURE_KEY_URL = re.compile(
    r"https://[a-z0-9-]{3,24}\.vault\.azure\.net/keys/[A-Za-z0-9-]{1,127}/[0-9a-f]{32}"
)
_AZURE_VAULT_ID = re.compile(
    r"/subscriptions/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/resourceGroups/"
    r"[A-Za-z0-9_().-]{0,89}[A-Za-z0-9_()-]/providers/Microsoft\.KeyVault/vaults/[A-Za-z0-9-]{3,24}",
    re.IGNORECASE,
)
# An OpenSSH public key line as Azure takes it (RSA or Ed25519), with an optional plain comment.
_SSH_PUBLIC_KEY = re.compile(
    r"(ssh-rsa|ssh-ed25519) (AAAA[A-Za-z0-9+/]{16,4096}={0,2})( [A-Za-z0-9@._:+=-]{1,100})?"
)
# An image the scale set can boot: a marketplace URN publisher:offer:sku:version, or the resource
# id of a managed image / gallery image (version) in a subscription.
_AZURE_IMAGE_URN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(:[A-Za-z0-9][A-Za-z0-9._-]*){3}")
_AZURE_IMAGE_ID = re.compile(
    r"/subscriptions/[0-9a-fA-F-]{36}/resourceGroups/[A-Za-z0-9_().-]{1,90}/providers/Microsoft\.Compute/"
    r"(images/[A-Za-z0-9_.-]{1,80}|galleries/[A-Za-z0-9_.]{1,80}/images/[A-Za-z0-9_.-]{1,80}"
    r"(/versions/([0-9]+\.[0-9]+\.[0-9]+|latest))?)"
)
FILESYSTEMS_BY_CLOUD: dict[str, tuple[str, ...]] = {
    "aws": ("fsx-lustre",),
    "gcp": ("managed-lustre",),
    "azure": ("amlfs",),
    "onprem": ("lustre", "beegfs"),
}


class SpecProblem(ValueError):
    """A cross-field rule broken; carries every (field path, message) found at once."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        super().__init__("; ".join(f"{p}: {m}" for p, m in problems))
        self.problems = problems


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=True)


# An Azure capacity reservation group's resource id
# (https://learn.microsoft.com/en-us/azure/virtual-machines/capacity-reservation-create): the one
# reservation_id that starts with '/', which CloudId refuses.
AZURE_CAPACITY_RESERVATION_GROUP_ID = re.compile(
    r"/subscriptions/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/resourceGroups/"
    r"[A-Za-z0-9_().-]{0,89}[A-Za-z0-9_()-]/providers/Microsoft\.Compute/capacityReservationGroups/"
    r"[A-Za-z0-9][A-Za-z0-9_.-]{0,79}",
    re.IGNORECASE,
)


def _reservation_reference(value: str) -> str:
    if AZURE_CAPACITY_RESERVATION_GROUP_ID.fullmatch(value):
        return value
    return _CLOUD_ID.validate_python(value)


class Capacity(_Strict):
    type: Literal["on-demand", "reservation", "capacity-block", "spot", "queued"] = "on-demand"
    reservation_id: Annotated[str, Strict(), AfterValidator(_reservation_reference)] | None = Field(
        default=None,
        description="ODCR / Capacity Block id (AWS), reservation name (GCP), capacity reservation group id (Azure)",
    )
    # Dynamic Workload Scheduler flex-start runs a resize request for at most 7 days
    # (https://cloud.google.com/compute/docs/instance-groups/about-resize-requests-mig).
    run_duration_hours: Annotated[int, Strict()] | None = Field(
        default=None,
        ge=1,
        le=168,
        description="GCP queued (flex-start) GPU fleets: how long the fleet runs once provisioned (default 168)",
    )


class Network(_Strict):
    vpc_cidr: Cidr = ipaddress.IPv4Network("10.64.0.0/16")
    vpc_id: CloudId | None = Field(
        default=None, description="Use an existing VPC/VNet instead of creating one"
    )
    subnet_id: CloudId | None = Field(default=None, description="Existing private subnet in the spec's zone")
    ssh_cidr: Cidr | None = Field(
        default=None, description="Where SSH may come from; none means no SSH ingress at all"
    )
    bastion: CloudId | None = Field(default=None, description="Security group / host allowed to SSH instead")
    ib_domain_size: Annotated[int, Strict()] | None = Field(
        default=None,
        ge=1,
        description=(
            "Azure: VMs per InfiniBand domain (one scale set each, spares counted), at most 100; "
            "a fleet larger than one domain must name it"
        ),
    )

    @field_validator("ssh_cidr")
    @classmethod
    def _not_the_internet(cls, v: ipaddress.IPv4Network | None) -> ipaddress.IPv4Network | None:
        # One judgement with the policy pack (fleet.netpolicy): private ranges, or a small public block.
        problem = ssh_source_problem(str(v)) if v is not None else None
        if problem:
            raise ValueError(f"{problem}; or name a bastion instead")
        return v


class FileSystem(_Strict):
    kind: Literal["fsx-lustre", "managed-lustre", "amlfs", "lustre", "beegfs"]
    capacity_gib: StrictCount | None = None
    capacity_tib: StrictNumber | None = Field(default=None, gt=0)
    throughput_mbps_per_tib: StrictCount | None = None
    tier: Literal["dynamic"] | None = Field(
        default=None,
        description="managed-lustre: the Dynamic tier (no throughput_mbps_per_tib; throughput follows use)",
    )
    mount_point: MountPoint = "/lustre"
    # on-prem clients
    mgs_nids: tuple[LustreNids, ...] | None = Field(
        default=None,
        description="Lustre MGS NIDs, e.g. 10.0.0.1@tcp; one entry per failover MGS node, "
        "its NIDs joined by commas",
    )
    fsname: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_]{1,8}$")] | None = None
    mgmtd_host: HostAddress | None = Field(default=None, description="BeeGFS management host")

    @property
    def gib(self) -> float | None:
        if self.capacity_gib is not None:
            return float(self.capacity_gib)
        if self.capacity_tib is not None:
            return units.tib_to_gib(self.capacity_tib)
        return None

    @property
    def provider_gib(self) -> int | None:
        """The capacity in the GiB the provider's API takes (FSx counts a TiB as 1,000 GiB)."""
        if self.capacity_gib is not None:
            return self.capacity_gib
        if self.capacity_tib is None:
            return None
        if self.kind == "fsx-lustre":
            return round(self.capacity_tib * FSX_GIB_PER_TIB)
        return round(units.tib_to_gib(self.capacity_tib))

    @property
    def capacity_field(self) -> str:
        return "capacity_gib" if self.capacity_gib is not None else "capacity_tib"


class Checkpoints(_Strict):
    bucket: Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")] | None = None
    retention_days: StrictCount = 30
    noncurrent_retention_days: StrictCount = 7


class NvmeofTarget(_Strict):
    transport: Literal["tcp", "rdma"]
    # tcp and rdma both take an IP address as traddr (nvme-cli); a name would be resolved on each node.
    address: IpAddress = Field(description="Discovery controller or target address (traddr)")
    port: StrictPort = 4420
    nqn: Nqn | None = Field(
        default=None, description="Subsystem NQN; omit to connect everything the discovery controller offers"
    )


class Storage(_Strict):
    filesystem: FileSystem | None = None
    checkpoints: Checkpoints | None = Checkpoints()
    nvmeof: tuple[NvmeofTarget, ...] = Field(
        default=(), description="On-prem: NVMe-oF targets every node connects to (persisting across reboots)"
    )


class AzureSettings(_Strict):
    resource_group: str | None = Field(
        default=None, description="Deploy into this existing resource group instead of creating one"
    )
    ssh_public_key: str | None = Field(
        default=None,
        description="OpenSSH public key for the nodes' admin user (a public key is not a secret)",
    )

    @field_validator("resource_group")
    @classmethod
    def _resource_group(cls, v: str | None) -> str | None:
        if v is not None and not _AZURE_RESOURCE_GROUP.fullmatch(v):
            raise ValueError(
                f"{printable(v)[:100]!r} is no Azure resource group name; allowed: 1-90 letters, digits "
                "and _ - . ( ), not ending with a period"
            )
        return v

    key_url: str | None = Field(
        default=None,
        description="Key Vault key (versioned identifier) that encrypts the Managed Lustre file system and the checkpoint account",
    )
    key_vault_id: str | None = Field(default=None, description="Resource id of the vault holding key_url")

    @field_validator("key_url")
    @classmethod
    def _key_url(cls, v: str | None) -> str | None:
        if v is not None and not _AZURE_KEY_URL.fullmatch(v):
            raise ValueError(
                f"{printable(v)[:120]!r} is no versioned Key Vault key identifier; allowed: "
                "https://<vault>.vault.azure.net/keys/<name>/<32 hex version>"
            )
        return v

    @field_validator("key_vault_id")
    @classmethod
    def _key_vault_id(cls, v: str | None) -> str | None:
        if v is not None and not _AZURE_VAULT_ID.fullmatch(v):
            raise ValueError(
                f"{printable(v)[:120]!r} is no Key Vault resource id; allowed: /subscriptions/<uuid>/"
                "resourceGroups/<group>/providers/Microsoft.KeyVault/vaults/<name>"
            )
        return v

    @model_validator(mode="after")
    def _key_and_vault_together(self) -> AzureSettings:
        if (self.key_url is None) != (self.key_vault_id is None):
            raise ValueError(
                "key_url and key_vault_id go together: the file system reads the key from that vault"
            )
        if self.key_url is not None and self.key_vault_id is not None:
            vault = self.key_url.split("/")[2].split(".")[0]
            if self.key_vault_id.rsplit("/", 1)[-1].lower() != vault:
                raise ValueError(f"key_url is in vault {vault!r}, key_vault_id names another vault")
        return self

    @field_validator("ssh_public_key")
    @classmethod
    def _public_key(cls, v: str | None) -> str | None:
        if v is not None and not _public_key_line(v):
            raise ValueError(
                "not an OpenSSH public key line; allowed: 'ssh-rsa AAAA...' or 'ssh-ed25519 AAAA...' "
                "with an optional comment (Azure accepts RSA of 2048+ bits and Ed25519)"
            )
        return v


_CLOUD_ID: TypeAdapter[str] = TypeAdapter(CloudId)


def _image_reference(value: str) -> str:
    """An Azure image resource id starts with '/', which no other cloud's image id does; the
    cloud-specific grammar is judged with the spec's cloud (_aws_id_rules, _azure_rules)."""
    if _AZURE_IMAGE_ID.fullmatch(value):
        return value
    return _CLOUD_ID.validate_python(value)


def _public_key_line(line: str) -> bool:
    """The line's grammar, and its base64 blob is a whole key of the type it names (RFC 4253
    section 6.6, RFC 8709): a truncated, pasted-together or short RSA key is refused here, not by
    Azure mid-deployment."""
    match = _SSH_PUBLIC_KEY.fullmatch(line)
    if match is None:
        return False
    try:
        blob = base64.b64decode(match.group(2), validate=True)
    except (binascii.Error, ValueError):
        return False
    fields: list[bytes] = []
    while blob:
        length = int.from_bytes(blob[:4], "big")
        if len(blob) < 4 + length:
            return False
        fields.append(blob[4 : 4 + length])
        blob = blob[4 + length :]
    kind = match.group(1)
    if not fields or fields[0] != kind.encode():
        return False
    if kind == "ssh-ed25519":
        return len(fields) == 2 and len(fields[1]) == 32
    # ssh-rsa: exponent and modulus; Azure asks for a modulus of at least 2048 bits.
    return len(fields) == 3 and int.from_bytes(fields[2], "big").bit_length() >= 2048


class Tags(_Strict):
    owner: TagValue
    fleet: TagValue | None = None
    dataset: TagValue | None = Field(default=None, description="Dataset lineage: what this fleet trains on")
    extra: dict[Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_-]{0,62}$")], TagValue] = {}


class ThresholdOverride(_Strict):
    fraction: StrictNumber | None = Field(default=None, gt=0, le=1.5)
    floor: StrictNumber | None = Field(default=None, ge=0)
    # False for a figure that is not each node's own on this fleet (the throughput of a file system
    # every node shares): only its floor applies, never the rule relative to the other nodes.
    fleet_relative: Annotated[bool, Strict()] = True


# A check's or a parameter's name, as the burn-in's registry spells them; which exist is the
# registry's to say (validation/burnin/registry.py option_problems, run by every command that loads a
# spec), not this ground floor's.
CheckName = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]{0,40}$")]
CheckParam = Annotated[int | float, Field(gt=0, allow_inf_nan=False)]


class ValidationSettings(_Strict):
    level: Level = "standard"
    thresholds: dict[str, ThresholdOverride] = {}
    checks: dict[CheckName, dict[CheckName, CheckParam]] = Field(
        default={},
        description="Measurement parameters over the level's, per check: {stress: {seconds: 600}}",
    )
    mad_k: StrictNumber = Field(
        default=4.0, gt=0, description="Outlier when below median by more than k x MAD"
    )
    min_relative_margin: StrictNumber = Field(
        default=0.05, ge=0, lt=1, description="...and by more than this fraction of the median"
    )
    pinned_versions: dict[str, Version] = Field(
        default={}, description="driver, cuda, vbios, firmware, ofed: required values"
    )

    @field_validator("thresholds")
    @classmethod
    def _known_metrics(cls, v: dict[str, ThresholdOverride]) -> dict[str, ThresholdOverride]:
        unknown = sorted(set(v) - set(METRICS))
        if unknown:
            raise ValueError(f"unknown metric(s) {unknown}; allowed: {', '.join(sorted(METRICS))}")
        return v

    @field_validator("checks", mode="before")
    @classmethod
    def _numbers_only(cls, v: Any) -> Any:
        # Before pydantic's own: a union of int and float would coerce "5" and accept true as 1.
        if isinstance(v, Mapping):
            for name, params in v.items():
                for key, value in params.items() if isinstance(params, Mapping) else ():
                    if isinstance(value, bool) or not isinstance(value, int | float):
                        raise ValueError(f"{name}.{key}: a number greater than 0, got {value!r}")
        return v

    @field_validator("pinned_versions")
    @classmethod
    def _known_components(cls, v: dict[str, Version]) -> dict[str, Version]:
        allowed = {"driver", "cuda", "vbios", "firmware", "ofed", "nccl", "kernel", "fleetforge"}
        unknown = sorted(set(v) - allowed)
        if unknown:
            raise ValueError(f"unknown component(s) {unknown}; allowed: {', '.join(sorted(allowed))}")
        return v


class TpuSettings(_Strict):
    """A TPU fleet's slices: `nodes` counts every TPU VM of every slice."""

    topology: (
        Annotated[str, StringConstraints(pattern=r"^[1-9][0-9]{0,2}(x[1-9][0-9]{0,2}){1,2}$")] | None
    ) = Field(
        default=None, description="Chips per side, e.g. 8x8 (v5e, v6e) or 4x4x8 (v5p); chips, not cores"
    )
    runtime_version: Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9._-]{0,62}$")] | None = Field(
        default=None, description="TPU software version pinned on every VM, e.g. v2-alpha-tpuv5-lite"
    )
    slices: StrictCount = Field(default=1, le=64, description="Identical slices joined by Multislice")


class Host(_Strict):
    name: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$")]
    address: HostAddress = Field(description="IP address or DNS name Ansible connects to")
    user: Annotated[str, StringConstraints(pattern=r"^[a-z_][a-z0-9_-]{0,31}$")] | None = None
    port: StrictPort = 22


class FleetSpec(_Strict):
    name: DnsName
    cloud: Cloud
    sku: str
    region: str | None = None
    zone: str | None = None
    nodes: NodeCount
    spares: SpareCount = 0
    capacity: Capacity = Capacity()
    network: Network = Network()
    storage: Storage = Storage()
    image: Annotated[str, Strict(), AfterValidator(_image_reference)] | None = Field(
        default=None,
        description="AMI / image / image reference override (Azure: URN or image resource id)",
    )
    kms_key: GcpKmsKey | None = Field(
        default=None,
        description="GCP: the Cloud KMS key (CMEK) for boot disks, the checkpoint bucket and the file system",
    )
    tags: Tags
    validation: ValidationSettings = ValidationSettings()
    hosts: tuple[Host, ...] | None = Field(default=None, description="On-prem: every node, spares included")
    tpu: TpuSettings | None = Field(default=None, description="TPU SKUs: slice topology, runtime, slices")
    azure: AzureSettings | None = Field(
        default=None, description="Azure: existing resource group, the nodes' SSH public key"
    )

    @property
    def catalog_sku(self) -> Sku:
        return get_sku(self.sku)

    @property
    def size(self) -> int:
        """Nodes to provision or configure: the job's nodes plus hot spares of the same SKU."""
        return self.nodes + self.spares

    @property
    def tpu_chips_per_vm(self) -> int | None:
        """Chips each TPU VM of the fleet has, which its slice's shape decides (fleet/catalog/tpu.py:
        v5e/v6e 1, 4 or 8 on one VM, 4 a VM beyond); None for a fleet without TPUs."""
        sku = self.catalog_sku
        if not sku.is_tpu:
            return None
        generation = sku.accelerator.generation
        settings = self.tpu
        if settings is not None and settings.topology is not None:
            return tpu.slice_of(generation, settings.topology).chips_per_vm
        per_slice = self.nodes // (settings.slices if settings is not None else 1)
        return tpu.chips_per_vm(generation, tpu.chips_for_hosts(generation, max(per_slice, 1)))

    @property
    def fleet_tag(self) -> str:
        return self.tags.fleet or self.name

    @model_validator(mode="after")
    def _cross_field_rules(self) -> FleetSpec:
        problems = list(_problems(self))
        if problems:
            raise SpecProblem(problems)
        return self


def _problems(spec: FleetSpec) -> Iterator[tuple[str, str]]:
    try:
        sku = get_sku(spec.sku)
    except UnknownSkuError:
        names = [s.sku for s in all_skus() if s.cloud == spec.cloud]
        yield "sku", f"unknown SKU {spec.sku!r}; allowed for {spec.cloud}: {', '.join(names)}"
        return
    if sku.cloud != spec.cloud:
        names = [s.sku for s in all_skus() if s.cloud == spec.cloud]
        yield "sku", f"{spec.sku} is a {sku.cloud} SKU, not {spec.cloud}; allowed: {', '.join(names)}"
        return
    yield from _location_rules(spec)
    yield from _aws_id_rules(spec)
    yield from _azure_rules(spec)
    yield from _kms_key_rules(spec)
    yield from _size_rules(spec, sku)
    yield from _capacity_rules(spec)
    yield from _storage_rules(spec)
    yield from _onprem_rules(spec)


def _location_rules(spec: FleetSpec) -> Iterator[tuple[str, str]]:
    yield from location_problems(spec.cloud, spec.region, spec.zone)


_AWS_IDS = {
    "network.vpc_id": ("vpc", re.compile(r"vpc-[0-9a-f]{8,17}")),
    "network.subnet_id": ("subnet", re.compile(r"subnet-[0-9a-f]{8,17}")),
    "image": ("AMI", re.compile(r"ami-[0-9a-f]{8,17}")),
}
_AWS_SG = re.compile(r"sg-[0-9a-f]{8,17}")


def _kms_key_rules(spec: FleetSpec) -> Iterator[tuple[str, str]]:
    """A customer key encrypts only resources in its own location: the bucket, disks and file
    system live in the spec's region (https://cloud.google.com/storage/docs/encryption/customer-managed-keys,
    https://cloud.google.com/compute/docs/disks/customer-managed-encryption)."""
    if spec.kms_key is None:
        return
    if spec.cloud != "gcp":
        yield "kms_key", f"a Cloud KMS key for GCP fleets; {spec.cloud} fleets get the stack's own key"
        return
    location = spec.kms_key.split("/")[3]
    if spec.region and location != spec.region:
        yield "kms_key", f"the key is in {location!r}; allowed: a key in the fleet's region {spec.region!r}"


def _aws_id_rules(spec: FleetSpec) -> Iterator[tuple[str, str]]:
    """AWS resource ids the spec names must look like AWS resource ids."""
    if spec.cloud != "aws":
        return
    net = spec.network
    values = {"network.vpc_id": net.vpc_id, "network.subnet_id": net.subnet_id, "image": spec.image}
    for path, value in values.items():
        kind, pattern = _AWS_IDS[path]
        if value is not None and not pattern.fullmatch(value):
            prefix = pattern.pattern.split("-")[0]
            yield path, f"{value!r} is not an {kind} id; allowed: {prefix}-<8 to 17 hex digits>"
    if net.subnet_id is None:
        # The stack creates the VPC in this range (fleet.network): the same rule as `fleetforge plan`.
        problem = vpc_range_problem(net.vpc_cidr, spec.size)
        if problem:
            yield "network.vpc_cidr", problem
    if net.vpc_id is not None and net.subnet_id is None:
        yield (
            "network.subnet_id",
            "required with network.vpc_id: the stack creates subnets only in a VPC it creates; "
            f"name a private subnet in {spec.zone}",
        )
    if net.bastion is not None and not _AWS_SG.fullmatch(net.bastion):
        try:
            ipaddress.IPv4Address(net.bastion)
        except ValueError:
            yield (
                "network.bastion",
                f"{net.bastion!r}: on aws, allowed: a security group id (sg-<hex>) or an IPv4 address",
            )


def _azure_rules(spec: FleetSpec) -> Iterator[tuple[str, str]]:
    """Azure-only fields, and the grammar of the image an Azure fleet boots."""
    if spec.cloud != "azure":
        if spec.azure is not None:
            yield "azure", f"the azure section is for azure fleets, not {spec.cloud}"
        if spec.network.ib_domain_size is not None:
            yield "network.ib_domain_size", f"Azure InfiniBand domains; not allowed on {spec.cloud}"
        return
    if spec.image is not None and not (
        _AZURE_IMAGE_URN.fullmatch(spec.image) or _AZURE_IMAGE_ID.fullmatch(spec.image)
    ):
        yield (
            "image",
            f"{printable(spec.image)[:100]!r} is no Azure image; allowed: a marketplace URN "
            "publisher:offer:sku:version, or /subscriptions/<id>/resourceGroups/<rg>/providers/"
            "Microsoft.Compute/images/<name> or .../galleries/<g>/images/<i>[/versions/<x.y.z>]",
        )


def azure_ib_domains(spec: FleetSpec) -> tuple[int, ...]:
    """VMs in each InfiniBand domain (one scale set each), spares counted: as few domains as
    `network.ib_domain_size` (default: the SKU's placement-group limit) allows, sizes balanced to
    differ by at most one, larger first. 250 VMs in domains of 100 -> (84, 83, 83)."""
    limit = spec.network.ib_domain_size or spec.catalog_sku.placement.max_nodes or spec.size
    count = -(-spec.size // limit)
    base, extra = divmod(spec.size, count)
    return tuple(base + 1 if i < extra else base for i in range(count))


def _size_rules(spec: FleetSpec, sku: Sku) -> Iterator[tuple[str, str]]:
    if spec.spares >= spec.nodes:
        yield "spares", f"{spec.spares} spares for {spec.nodes} nodes; allowed: fewer spares than nodes"
    limit = sku.placement.max_nodes
    domain = spec.network.ib_domain_size
    if spec.cloud == "azure" and limit is not None and domain is not None:
        # One scale set per InfiniBand domain: each stays within one placement group.
        if domain > limit:
            yield (
                "network.ib_domain_size",
                f"{domain} VMs; a scale set in a single placement group holds at most {limit} "
                f"({IB_DOMAIN_SOURCE}); allowed: 1 to {limit}",
            )
    elif limit is not None and spec.size > limit:
        split = (
            f"; or set network.ib_domain_size (<= {limit}) to split the fleet into several "
            "InfiniBand domains, one scale set each, whose VMs share no InfiniBand fabric"
            if spec.cloud == "azure"
            else ""
        )
        yield (
            "nodes",
            f"nodes + spares = {spec.size}, but {sku.sku}'s {sku.fabric.kind} fabric spans one "
            f"placement group of at most {limit} VMs; allowed: nodes + spares <= {limit}{split}",
        )
    yield from _tpu_rules(spec, sku)


def _tpu_rules(spec: FleetSpec, sku: Sku) -> Iterator[tuple[str, str]]:
    """Slice shapes per generation (fleet/catalog/tpu.py cites Google's pages); nodes = every VM."""
    settings = spec.tpu
    if not sku.is_tpu:
        if settings is not None:
            yield "tpu", f"{sku.sku} has no TPUs; the tpu section is for tpu-v5e, tpu-v5p and tpu-v6e"
        return
    if spec.spares:
        yield "spares", "a TPU slice is provisioned whole; allowed: 0 (request a second slice instead)"
    generation = sku.accelerator.generation
    slices = settings.slices if settings else 1
    if settings is not None and settings.topology is not None:
        try:
            shape = tpu.slice_of(generation, settings.topology)
        except tpu.ShapeError as exc:
            yield "tpu.topology", str(exc)
            return
        limit = tpu.MULTISLICE_MAX_CHIPS.get(generation)
        if limit is not None and shape.chips * slices > limit:
            yield (
                "tpu.slices",
                f"{slices} x {shape.chips} chips = {shape.chips * slices:,}; Multislice on {generation} "
                f"reaches {limit:,} chips ({tpu.SOURCES[generation]})",
            )
        if spec.nodes != shape.hosts * slices:
            yield (
                "nodes",
                f"{spec.nodes} TPU VMs, but {slices} slice(s) of {shape.topology} ({shape.chips} chips, "
                f"{shape.hosts} VM(s) each) have {shape.hosts * slices}; allowed: nodes = {shape.hosts * slices}",
            )
        return
    # No topology: each slice is `nodes / slices` TPU VMs, whose chips must make a slice size (one
    # VM: the generation's largest; several: multi-host VMs of 4 chips, fleet/catalog/tpu.py).
    sizes = sku.placement.slice_chips or ()
    per_slice, leftover = divmod(spec.nodes, slices)
    chips = tpu.chips_for_hosts(generation, per_slice) if per_slice else 0
    if leftover or chips not in sizes or tpu.hosts_for(generation, chips) != per_slice:
        nodes = sorted({tpu.hosts_for(generation, c) * slices for c in sizes})
        yield (
            "nodes",
            f"{spec.nodes} TPU VMs in {slices} slice(s) make no {sku.sku} slice shape; allowed slice "
            f"sizes (chips): {', '.join(map(str, sizes))} (nodes: {', '.join(map(str, nodes))}); or "
            f"name the shape in tpu.topology ({tpu.SOURCES.get(generation, '')})",
        )
        return
    if per_slice > 1 and len(tpu.VM_CHIPS[generation]) > 1:
        # Earlier fleetforge counted 8-chip hosts here, so the same `nodes` meant twice the chips:
        # a spec that names no shape would silently ask for half the slice it was written for.
        named = tpu.two_d_shape(chips)
        yield (
            "tpu.topology",
            f"required for a {sku.sku} slice of more than one TPU VM: nodes counts 4-chip VMs there, "
            f"so {per_slice} VMs a slice are {named} ({chips} chips); name the shape to confirm it "
            f"({tpu.SOURCES.get(generation, '')})",
        )


def _capacity_rules(spec: FleetSpec) -> Iterator[tuple[str, str]]:
    cap = spec.capacity
    if cap.type in {"reservation", "capacity-block"} and not cap.reservation_id:
        yield "capacity.reservation_id", f"required when capacity.type is {cap.type}"
    if cap.type in {"on-demand", "spot"} and cap.reservation_id:
        yield "capacity.reservation_id", f"not allowed with capacity.type {cap.type}"
    if cap.type == "capacity-block" and spec.cloud != "aws":
        yield "capacity.type", "capacity-block is an AWS Capacity Block for ML; allowed on aws only"
    if cap.type == "queued" and spec.cloud != "gcp":
        yield "capacity.type", "queued (queued resources / DWS) is allowed on gcp only"
    if cap.run_duration_hours is not None and (cap.type != "queued" or spec.catalog_sku.is_tpu):
        yield "capacity.run_duration_hours", "only for a queued (flex-start) GPU fleet on gcp"
    if (
        spec.cloud == "aws"
        and cap.type in {"reservation", "capacity-block"}
        and cap.reservation_id
        and not re.fullmatch(r"cr-[0-9a-f]{8,17}", cap.reservation_id)
    ):
        yield "capacity.reservation_id", f"{cap.reservation_id!r} is not an EC2 reservation id (cr-<hex>)"
    if (
        spec.cloud == "gcp"
        and cap.reservation_id
        and AZURE_CAPACITY_RESERVATION_GROUP_ID.fullmatch(cap.reservation_id)
    ):
        yield (
            "capacity.reservation_id",
            "an Azure capacity reservation group id; allowed on gcp: a reservation name",
        )
    if spec.cloud == "onprem" and cap.type != "on-demand":
        yield "capacity.type", "on-prem fleets own their hardware; allowed: on-demand"


def _bucket_name_problem(cloud: str, name: str) -> str | None:
    """What the cloud refuses in a bucket name the spec's grammar lets through, or None.

    Both: no dots. Google creates a dotted name only for a verified domain owner, and on S3 a dot
    breaks TLS for the virtual-hosted address the nodes use (the certificate is *.s3...);
    https://cloud.google.com/storage/docs/buckets#naming,
    https://docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html."""
    if "." in name:
        return (
            f"{name!r}: dots are refused (GCS asks domain verification, S3 TLS breaks); allowed: a-z, 0-9, -"
        )
    if cloud == "gcp" and (name.startswith("goog") or "google" in name):
        return f"{name!r}: Cloud Storage refuses names starting with 'goog' or containing 'google'"
    if cloud == "aws" and (
        name.startswith(("xn--", "sthree-", "amzn-s3-demo-"))
        or name.endswith(("-s3alias", "--ol-s3", "--x-s3"))
    ):
        return f"{name!r}: S3 reserves that prefix or suffix (xn--, sthree-, amzn-s3-demo-, -s3alias, --ol-s3, --x-s3)"
    return None


def _storage_rules(spec: FleetSpec) -> Iterator[tuple[str, str]]:
    fs = spec.storage.filesystem
    ckpt = spec.storage.checkpoints
    if ckpt is not None and ckpt.noncurrent_retention_days > ckpt.retention_days:
        yield (
            "storage.checkpoints.noncurrent_retention_days",
            f"{ckpt.noncurrent_retention_days} exceeds retention_days {ckpt.retention_days}",
        )
    if (
        ckpt is not None
        and ckpt.bucket
        and spec.cloud == "azure"
        and not re.fullmatch(r"[a-z0-9]{3,24}", ckpt.bucket)
    ):
        yield "storage.checkpoints.bucket", "an Azure storage account name: 3-24 lowercase letters and digits"
    if ckpt is not None and ckpt.bucket and spec.cloud in ("aws", "gcp"):
        problem = _bucket_name_problem(spec.cloud, ckpt.bucket)
        if problem is not None:
            yield "storage.checkpoints.bucket", problem
    if fs is None:
        return
    allowed = FILESYSTEMS_BY_CLOUD[spec.cloud]
    if fs.kind not in allowed:
        yield (
            "storage.filesystem.kind",
            f"{fs.kind} is not offered on {spec.cloud}; allowed: {', '.join(allowed)}",
        )
        return
    if fs.capacity_gib is not None and fs.capacity_tib is not None:
        yield "storage.filesystem.capacity_tib", "give capacity_gib or capacity_tib, not both"
        return
    if fs.tier is not None and fs.kind != "managed-lustre":
        yield "storage.filesystem.tier", f"the Dynamic tier is Managed Lustre's; {fs.kind} has none"
        return
    where = f"storage.filesystem.{fs.capacity_field}"
    tput = fs.throughput_mbps_per_tib
    if fs.kind in {"lustre", "beegfs"}:
        yield from _onprem_filesystem_rules(fs)
        return
    if fs.gib is None:
        yield "storage.filesystem.capacity_gib", f"required for {fs.kind}"
        return
    if fs.kind == "fsx-lustre":
        if tput not in FSX_THROUGHPUTS:
            yield (
                "storage.filesystem.throughput_mbps_per_tib",
                f"{tput} is no FSx for Lustre PERSISTENT_2 tier; allowed: {', '.join(map(str, FSX_THROUGHPUTS))}",
            )
        gib = fs.provider_gib or 0
        exact = fs.capacity_tib is None or abs((fs.capacity_tib * FSX_GIB_PER_TIB) - gib) < 1e-6
        if not exact or not (gib == 1200 or gib % 2400 == 0):
            yield (
                where,
                f"{_shown(fs)} is not an FSx PERSISTENT_2 size; allowed: 1.2 TiB or a multiple of 2.4 TiB",
            )
    elif fs.kind == "managed-lustre":
        yield from _managed_lustre_rules(fs, where)
    elif fs.kind == "amlfs":
        if tput not in AMLFS_STEPS_TIB:
            yield (
                "storage.filesystem.throughput_mbps_per_tib",
                f"{tput} is no AMLFS-Durable-Premium tier; allowed: {', '.join(map(str, AMLFS_STEPS_TIB))}",
            )
            return
        step, largest = AMLFS_STEPS_TIB[tput], AMLFS_MAX_TIB[tput]
        tib = units.gib_to_tib(fs.gib)
        if tib % step:
            yield (
                where,
                f"{_shown(fs)} is not a multiple of {step} TiB, the AMLFS-Durable-Premium-{tput} step "
                f"({AMLFS_SOURCE})",
            )
        elif tib > largest:
            yield (
                where,
                f"{_shown(fs)} exceeds {largest} TiB, the largest AMLFS-Durable-Premium-{tput} file system "
                f"Azure creates without a support request ({AMLFS_SOURCE}); allowed: {step} to {largest} TiB "
                f"in steps of {step}",
            )


def _managed_lustre_rules(fs: FileSystem, where: str) -> Iterator[tuple[str, str]]:
    """Capacity per performance tier, both step sizes, and the Dynamic tier (managed_lustre.SOURCE)."""
    tput = fs.throughput_mbps_per_tib
    if fs.tier == managed_lustre.DYNAMIC:
        if tput is not None:
            yield (
                "storage.filesystem.throughput_mbps_per_tib",
                "not allowed with tier: dynamic (its throughput follows the access pattern)",
            )
            return
        tier = managed_lustre.DYNAMIC_TIER
    elif tput not in managed_lustre.TIERS:
        yield (
            "storage.filesystem.throughput_mbps_per_tib",
            f"{tput} is no Managed Lustre tier; allowed: "
            f"{', '.join(map(str, sorted(managed_lustre.TIERS)))}, or tier: dynamic ({managed_lustre.SOURCE})",
        )
        return
    else:
        tier = managed_lustre.TIERS[tput]
    gib = fs.gib or 0.0
    if not tier.fits(gib):
        yield (
            where,
            f"{_shown(fs)} does not fit the Managed Lustre {tier.name} tier; allowed: {tier.allowed()} "
            f"({managed_lustre.SOURCE})",
        )


def _onprem_filesystem_rules(fs: FileSystem) -> Iterator[tuple[str, str]]:
    if fs.kind == "lustre":
        if not fs.mgs_nids:
            yield "storage.filesystem.mgs_nids", "required for an on-prem Lustre client (e.g. 10.0.0.1@o2ib)"
        if not fs.fsname:
            yield "storage.filesystem.fsname", "required for an on-prem Lustre client"
    if fs.kind == "beegfs" and not fs.mgmtd_host:
        yield "storage.filesystem.mgmtd_host", "required for a BeeGFS client"


def _onprem_rules(spec: FleetSpec) -> Iterator[tuple[str, str]]:
    if spec.cloud != "onprem" and spec.storage.nvmeof:
        yield (
            "storage.nvmeof",
            f"NVMe-oF targets are configured on on-prem nodes; {spec.cloud} uses its file system",
        )
    if spec.cloud != "onprem":
        if spec.hosts is not None:
            yield "hosts", f"only on-prem fleets list hosts; {spec.cloud} nodes come from the stack"
        return
    if not spec.hosts:
        yield "hosts", f"an on-prem fleet names its hosts: {spec.size} (nodes + spares) entries"
        return
    if len(spec.hosts) != spec.size:
        yield "hosts", f"{len(spec.hosts)} hosts listed; nodes + spares = {spec.size}"
    names = [h.name for h in spec.hosts]
    for i, name in enumerate(names):
        if names.index(name) != i:
            yield f"hosts.{i}.name", f"duplicate host name {name!r}"


def _shown(fs: FileSystem) -> str:
    return f"{fs.capacity_gib} GiB" if fs.capacity_gib is not None else f"{fs.capacity_tib} TiB"


# --------------------------------------------------------------------------- loading


class SpecError(Exception):
    """A spec that cannot be used; `problems` lists (field path, message) pairs."""

    def __init__(self, source: str, problems: list[tuple[str, str]], *, unreadable: bool = False) -> None:
        self.source = source
        self.problems = problems
        self.unreadable = unreadable
        super().__init__(self.render())

    @property
    def missing(self) -> bool:
        """The file itself does not exist (as opposed to holding a bad spec)."""
        return self.problems == [("", "no such file")]

    @property
    def no_input(self) -> bool:
        """Exit 66, not 65: there is no file to judge (missing, a directory, a FIFO, a loop, no access)."""
        return self.missing or self.unreadable

    def render(self) -> str:
        # One problem is one line, so a log line or a CI annotation carries the whole reason.
        # Keys, paths and values come from the file: escaped, they cannot add lines or move the cursor.
        source = printable(self.source)
        if len(self.problems) == 1:
            path, msg = (printable(p) for p in self.problems[0])
            return f"{source}: {path + ': ' if path else ''}{msg}"
        lines = [f"{source}: {len(self.problems)} problem(s)"]
        lines += [f"  {printable(path) or '(top level)'}: {printable(msg)}" for path, msg in self.problems]
        return "\n".join(lines)


def load_spec(path: str | Path) -> FleetSpec:
    """The spec in a file: the one loading path every command uses (see fleet.yamlsafe)."""
    source = str(path)
    try:
        text = yamlsafe.read_text(Path(path))
    except yamlsafe.UnreadableError as exc:
        raise SpecError(source, [("", exc.reason)], unreadable=not exc.missing) from None
    except yamlsafe.RefusedYamlError as exc:
        raise SpecError(source, [("", str(exc))]) from None
    try:
        data = yamlsafe.loads(text)
    except yamlsafe.RefusedYamlError as exc:
        raise SpecError(source, [("", str(exc))]) from None
    return spec_from_mapping(data, source=source)


def spec_from_mapping(data: Any, source: str = "fleetforge:fleet") -> FleetSpec:
    """Validate a plain mapping (a YAML document or Pulumi's `fleetforge:fleet` config object)."""
    if not isinstance(data, Mapping):
        raise SpecError(source, [("", f"a fleet spec is a mapping of fields, got {type(data).__name__}")])
    try:
        return FleetSpec.model_validate(dict(data))
    except ValidationError as exc:
        problems = list(_explain(exc))
        problems += [p for p in _cross_field_despite_type_errors(data, exc) if p not in problems]
        raise SpecError(source, problems) from None


def _cross_field_despite_type_errors(data: Mapping[str, Any], exc: ValidationError) -> list[tuple[str, str]]:
    """The cross-field problems of a spec that also has type errors, so one run names them all.

    Pydantic runs the cross-field rules only on a spec whose every field is valid. The spec is
    validated again without the fields that failed (each removed with the object that holds it, so
    a default never stands in beside its siblings and breaks a rule of its own); a cross-field
    problem is reported only where it does not touch a removed field (its default would speak for
    it). A spec that still cannot be built (a required field was the one that failed) gets only
    its type errors."""
    failed = [e for e in exc.errors(include_url=False) if not _is_cross_field(e)]
    if not failed:
        return []
    pruned: Any = copy.deepcopy(dict(data))
    removed = [_prune(pruned, tuple(e["loc"]), whole_key=e["type"] == "extra_forbidden") for e in failed]
    try:
        FleetSpec.model_validate(pruned)
    except ValidationError as again:
        if any(not _is_cross_field(e) for e in again.errors(include_url=False)):
            return []
        return [
            (path, msg) for path, msg in _explain(again) if not any(_related(path, gone) for gone in removed)
        ]
    return []


def _is_cross_field(error: Any) -> bool:
    return isinstance((error.get("ctx") or {}).get("error"), SpecProblem)


def _prune(data: Any, loc: tuple[Any, ...], *, whole_key: bool) -> str:
    """Remove the object holding the failed field at `loc` (or the unknown key itself) from
    `data`; a list is removed whole. Returns the dotted path removed."""
    target = loc if whole_key or len(loc) < 2 else loc[:-1]
    node, walked = data, []
    for part in target:
        if not isinstance(node, dict) or part not in node:
            break
        if isinstance(node[part], list) or part == target[-1]:
            del node[part]
            walked.append(str(part))
            return ".".join(walked)
        node = node[part]
        walked.append(str(part))
    return ".".join(walked)


def _related(path: str, removed: str) -> bool:
    """One dotted path is the other or lies inside it."""
    if not removed:
        return True  # the whole document was at fault
    return path == removed or path.startswith(removed + ".") or removed.startswith(path + ".")


def _explain(exc: ValidationError) -> Iterator[tuple[str, str]]:
    for err in exc.errors(include_url=False):
        loc = tuple(err["loc"])
        path = ".".join(str(p) for p in loc)
        cause = (err.get("ctx") or {}).get("error")
        if isinstance(cause, SpecProblem):
            for sub, msg in cause.problems:
                yield ".".join(p for p in (path, sub) if p), msg
        elif err["type"] == "extra_forbidden":
            allowed = _allowed_keys(loc[:-1])
            yield path, f"unknown key; allowed here: {', '.join(allowed)}" if allowed else "unknown key"
        elif err["type"] == "missing":
            yield path, "required"
        else:
            msg = err["msg"]
            if msg.startswith("Value error, "):
                msg = msg[len("Value error, ") :]
            yield path, f"{msg} (got {_short(err.get('input'))})"


def _allowed_keys(loc: tuple[Any, ...]) -> list[str]:
    """The field names of the model found at `loc`, walking FleetSpec's annotations."""
    model: Any = FleetSpec
    for part in loc:
        if isinstance(part, int) or model is None:
            continue
        field = model.model_fields.get(part)
        model = _model_in(field.annotation) if field else None
    return sorted(model.model_fields) if model else []


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def json_schema() -> dict[str, Any]:
    return FleetSpec.model_json_schema()
