"""fleetforge's policy rules as pure functions over resources (type token, name, inputs).

The same functions judge `fleetforge plan`'s recorded resources and, wrapped by policy/__main__.py,
every resource `pulumi preview`/`up` would create (CrossGuard). Properties use Pulumi's wire names
(camelCase), which is what both the mocks record and CrossGuard passes. CrossGuard hands nested
values through its own read-only proxies (a `Sequence` that is not a `list`, a `Mapping` that is not a
`dict`, every number a float), so the rules read any Sequence or Mapping, never only list and dict.
Standard library and `fleet.netpolicy` only (which imports nothing else): the policy pack runs in its
own virtual environment, and tests call these without starting a server.

Resource rules see one resource; stack rules see them all (a bucket's encryption and versioning are
separate resources; homogeneity is a property of the whole fleet). Unknown resource types pass the
resource rules that do not concern them, except `required-tags`, which fails closed: every `aws:`
type must carry the tags unless it is listed as untaggable below (GCP: every labellable type a fleet
creates, listed below, carries them as labels).

GCP rules judge pulumi_gcp's type tokens and wire names: no access configs on any interface and TPU
enableExternalIps stated false; onHostMaintenance TERMINATE for GPU machine families; the fleet's
own service account; one machine type (or TPU accelerator type) per fleet; GCS buckets with uniform
access, enforced public access prevention and versioning; a customer key everywhere once anywhere.
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fleet.netpolicy import ssh_source_problem

REQUIRED_TAGS = ("owner", "fleet", "dataset")

LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
INSTANCE = "aws:ec2/instance:Instance"
SUBNET = "aws:ec2/subnet:Subnet"
EBS_VOLUME = "aws:ebs/volume:Volume"
LUSTRE = "aws:fsx/lustreFileSystem:LustreFileSystem"
ASG = "aws:autoscaling/group:Group"
BUCKET = "aws:s3/bucket:Bucket"
BUCKET_SSE = "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration"
BUCKET_PAB = "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock"
BUCKET_VERSIONING = "aws:s3/bucketVersioning:BucketVersioning"
BUCKET_POLICY = "aws:s3/bucketPolicy:BucketPolicy"
# A bucket's companions: separate resources that name their bucket in `bucket` (its id).
BUCKET_COMPANIONS = frozenset({BUCKET_SSE, BUCKET_PAB, BUCKET_VERSIONING, BUCKET_POLICY})
SG = "aws:ec2/securityGroup:SecurityGroup"
SG_RULE = "aws:ec2/securityGroupRule:SecurityGroupRule"
SG_INGRESS = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
DEFAULT_SG = "aws:ec2/defaultSecurityGroup:DefaultSecurityGroup"
GCP_FIREWALL = "gcp:compute/firewall:Firewall"
# https://cloud.google.com/iap/docs/using-tcp-forwarding: IAP TCP forwarding connects from here.
GCP_IAP_RANGE = "35.235.240.0/20"
# pulumi_gcp's type tokens (checked against the installed provider package).
GCP_TEMPLATE = "gcp:compute/instanceTemplate:InstanceTemplate"
GCP_REGION_TEMPLATE = "gcp:compute/regionInstanceTemplate:RegionInstanceTemplate"
GCP_INSTANCE = "gcp:compute/instance:Instance"
GCP_INSTANCE_FROM_TEMPLATE = "gcp:compute/instanceFromTemplate:InstanceFromTemplate"
GCP_DISK = "gcp:compute/disk:Disk"
GCP_MIG = "gcp:compute/instanceGroupManager:InstanceGroupManager"
GCP_REGION_MIG = "gcp:compute/regionInstanceGroupManager:RegionInstanceGroupManager"
GCP_BUCKET = "gcp:storage/bucket:Bucket"
GCP_LUSTRE = "gcp:lustre/instance:Instance"
GCP_TPU_QUEUED = "gcp:tpu/v2QueuedResource:V2QueuedResource"
GCP_TPU_VM = "gcp:tpu/v2Vm:V2Vm"
GCP_KMS_KEY = "gcp:kms/cryptoKey:CryptoKey"
GCP_PROJECT_IAM_MEMBER = "gcp:projects/iAMMember:IAMMember"
GCP_PROJECT_IAM_BINDING = "gcp:projects/iAMBinding:IAMBinding"
# Every kind of VM definition: templates, instances and instances made from a template.
GCP_VM_TYPES = frozenset({GCP_TEMPLATE, GCP_REGION_TEMPLATE, GCP_INSTANCE, GCP_INSTANCE_FROM_TEMPLATE})
# GCP resources that take labels (a `labels` input in pulumi_gcp) and that a fleet creates; each
# must carry REQUIRED_TAGS as labels. An allow-list, unlike AWS's deny-list, because most GCP
# types (networks, firewalls, routers, groups, service accounts, queued resources) take no labels
# at all. Labels are lower case by GCP's rule; the required keys already are.
GCP_LABELLED = frozenset({*GCP_VM_TYPES, GCP_DISK, GCP_BUCKET, GCP_LUSTRE, GCP_TPU_VM, GCP_KMS_KEY})
# Accelerator-optimized GPU machine families: their VMs cannot live-migrate, so a maintenance
# event must stop them (onHostMaintenance TERMINATE); Google refuses MIGRATE for them.
GCP_GPU_MACHINE = re.compile(r"^(a2|a3|a4|a4x|g2|g4)-")
# Project roles far broader than a node needs (the default compute service account holds editor).
GCP_BROAD_ROLES = frozenset({"roles/owner", "roles/editor", "roles/iam.serviceAccountUser"})
AZURE_NSG = "azure-native:network:NetworkSecurityGroup"
AZURE_NSG_RULE = "azure-native:network:SecurityRule"
AZURE_VMSS = "azure-native:compute:VirtualMachineScaleSet"
AZURE_VM = "azure-native:compute:VirtualMachine"
AZURE_NIC = "azure-native:network:NetworkInterface"
AZURE_PUBLIC_IP = "azure-native:network:PublicIPAddress"
AZURE_NAT_GATEWAY = "azure-native:network:NatGateway"
AZURE_STORAGE_ACCOUNT = "azure-native:storage:StorageAccount"
AZURE_AMLFS = "azure-native:storagecache:AmlFilesystem"
AZURE_ROLE_ASSIGNMENT = "azure-native:authorization:RoleAssignment"
AZURE_ROLE_DEFINITION = "azure-native:authorization:RoleDefinition"
# Built-in roles no fleet identity needs (their ids are the same in every tenant):
# https://learn.microsoft.com/azure/role-based-access-control/built-in-roles/privileged
AZURE_BROAD_ROLES = {
    "8e3af657-a8ff-443c-a75c-2fe8c4bcb635": "Owner",
    "b24988ac-6180-42a0-ab88-20f7382dd24c": "Contributor",
    "18d7d88d-d35e-4fb5-a5c3-7773c20a72d9": "User Access Administrator",
}
# Scopes far wider than a fleet's resource group: a subscription, a management group, the root.
AZURE_BROAD_SCOPE = re.compile(
    r"^(/|/subscriptions/[^/]+/?|/providers/microsoft\.management/managementgroups/[^/]+/?)$", re.IGNORECASE
)
# Every Azure resource the fleet's stack creates that takes `tags` (ARM resources that support tags).
AZURE_TAGGED = frozenset(
    {
        AZURE_VMSS,
        AZURE_VM,
        AZURE_NIC,
        AZURE_PUBLIC_IP,
        AZURE_NAT_GATEWAY,
        AZURE_STORAGE_ACCOUNT,
        AZURE_AMLFS,
        AZURE_NSG,
        "azure-native:resources:ResourceGroup",
        "azure-native:network:VirtualNetwork",
        "azure-native:compute:ProximityPlacementGroup",
        "azure-native:compute:Disk",
        "azure-native:managedidentity:UserAssignedIdentity",
    }
)
# Azure Storage TLS floor: TLS1_2 (TLS1_0/TLS1_1 are retired); TLS1_3 is stricter still.
AZURE_TLS_OK = frozenset({"TLS1_2", "TLS1_3"})
ROLE = "aws:iam/role:Role"
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
ROLE_POLICY_ATTACHMENT = "aws:iam/rolePolicyAttachment:RolePolicyAttachment"
POLICY_ATTACHMENT = "aws:iam/policyAttachment:PolicyAttachment"
IAM_POLICY = "aws:iam/policy:Policy"
ROLE_POLICY_ATTACHMENTS_EXCLUSIVE = "aws:iam/rolePolicyAttachmentsExclusive:RolePolicyAttachmentsExclusive"
SSH_PORT = 22
# The SSM actions that read parameter values, lower case (IAM action names are case-insensitive).
PARAMETER_READS = (
    "ssm:getparameter",
    "ssm:getparameters",
    "ssm:getparametersbypath",
    "ssm:getparameterhistory",
)

# AWS managed policies too broad for a node: AmazonSSMManagedInstanceCore alone lets a node read
# every SSM parameter in the account (ssm:GetParameter* on "*"), the others grant more still.
BROAD_MANAGED_POLICIES = frozenset(
    {
        "AmazonSSMManagedInstanceCore",
        "AmazonEC2RoleforSSM",
        "AmazonSSMFullAccess",
        "AmazonSSMReadOnlyAccess",
        "PowerUserAccess",
        "AdministratorAccess",
    }
)

# AWS resource types that cannot carry tags; every other aws: type must carry REQUIRED_TAGS.
UNTAGGABLE = frozenset(
    {
        "aws:ec2/routeTableAssociation:RouteTableAssociation",
        "aws:ec2/route:Route",
        "aws:ec2/securityGroupRule:SecurityGroupRule",
        "aws:iam/rolePolicy:RolePolicy",
        "aws:iam/rolePolicyAttachment:RolePolicyAttachment",
        ROLE_POLICY_ATTACHMENTS_EXCLUSIVE,
        "aws:kms/alias:Alias",
        "aws:s3/bucketVersioning:BucketVersioning",
        BUCKET_SSE,
        BUCKET_PAB,
        "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration",
        BUCKET_POLICY,
        "aws:s3/bucketOwnershipControls:BucketOwnershipControls",
    }
)
KMS_ALGORITHMS = frozenset({"aws:kms", "aws:kms:dsse"})


class UnknownValue(Exception):
    """A rule read a value that is not known until its resource is created (preview)."""


class Unknown:
    """A value the engine cannot know at preview (an output of a resource not yet created).

    policy/__main__.py hands the rules CrossGuard's unknowns as UNKNOWN. Using it as a value (truth,
    comparison, hashing, text, number, iteration) raises UnknownValue, so a rule cannot mistake it
    for a real value: the part of the rule that needs it becomes undecided (see `_part`) instead of
    passing or failing on a placeholder. `is`, `isinstance` and repr stay usable."""

    def __repr__(self) -> str:
        return "<unknown until created>"

    def _unknown(self, *_: Any) -> Any:
        raise UnknownValue

    __bool__ = __eq__ = __ne__ = __hash__ = __str__ = __format__ = _unknown
    __int__ = __float__ = __index__ = __iter__ = __len__ = __getitem__ = _unknown


UNKNOWN = Unknown()


class Undecided(str):
    """A rule's message for a part it cannot judge until values are known: not a violation.

    CrossGuard reports these as its advisory "can't run during preview" (policy/__main__.py); the
    same rule judges the part once the values are known (`pulumi up` before creating a resource,
    after creating the stack for stack rules). `check` keeps them as violations: fail closed."""


@dataclass(frozen=True)
class Resource:
    type: str
    name: str
    props: Mapping[str, Any]
    id: str | None = None
    urn: str | None = None
    # Input property -> URNs of the resources its value comes from (CrossGuard's
    # property_dependencies): known at preview even while the values themselves are not.
    dependencies: Mapping[str, Sequence[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class Violation:
    rule: str
    type: str
    name: str
    message: str
    urn: str | None = None

    def __str__(self) -> str:
        return f"[{self.rule}] {self.type} {self.name}: {self.message}"


ResourceCheck = Callable[[str, Mapping[str, Any]], Iterator[str]]
StackCheck = Callable[[Sequence[Resource]], Iterator[tuple[Resource | None, str]]]


@dataclass(frozen=True)
class ResourceRule:
    name: str
    description: str
    check: ResourceCheck = field(repr=False)


@dataclass(frozen=True)
class StackRule:
    name: str
    description: str
    check: StackCheck = field(repr=False)


# --------------------------------------------------------------------------- helpers


def _known(value: Any) -> Any:
    """The value itself; UnknownValue where it is not known until created."""
    if isinstance(value, Unknown):
        raise UnknownValue
    return value


def _known_str(value: Any) -> str | None:
    """A known, non-empty string, else None: for matching by name or id, never for judging."""
    return value if isinstance(value, str) and value else None


def _part(where: str, messages: Iterable[str]) -> Iterator[str]:
    """One independently judged part of a rule (an interface, a volume, a statement, a source).

    A value unknown at preview makes this part undecided and the rule goes on to the next part,
    so one unknown value hides no violation elsewhere in the resource."""
    try:
        yield from messages
    except UnknownValue:
        yield Undecided(f"{where} cannot be judged until its values are known (after creation)")


def judge(rule: ResourceRule, type_: str, props: Mapping[str, Any]) -> Iterator[str]:
    """One resource rule on one resource: its messages, Undecided ones included, never raising."""
    yield from _part(f"{rule.name}: a value it reads", rule.check(type_, props))


def judge_stack(rule: StackRule, resources: Sequence[Resource]) -> Iterator[tuple[Resource | None, str]]:
    """One stack rule: its (culprit, message) pairs, Undecided ones included, never raising."""
    found = rule.check(resources)
    while True:
        try:
            yield next(found)
        except StopIteration:
            return
        except UnknownValue:  # the generator is finished: the rest of the rule is undecided
            yield None, Undecided(f"{rule.name}: a value it reads is not known until created")
            return


def _true(value: Any) -> bool:
    """Launch templates carry booleans as strings ("true"); other resources as booleans."""
    value = _known(value)
    return value is True or (isinstance(value, str) and value.lower() == "true")


def _false(value: Any) -> bool:
    """Stated false: False, or "false" in a launch template."""
    value = _known(value)
    return value is False or (isinstance(value, str) and value.lower() == "false")


def _list(value: Any) -> list[Any]:
    """A list-valued property: any Sequence (CrossGuard's proxy is one), but never a string."""
    value = _known(value)
    if isinstance(value, Sequence) and not isinstance(value, str | bytes | bytearray):
        return list(value)
    return []


def _sources(value: Any) -> list[Any]:
    """Source ranges: a list of them, or one bare value, which a rule must still judge (fail closed)."""
    value = _known(value)
    if value is None:
        return []
    if isinstance(value, Sequence) and not isinstance(value, str | bytes | bytearray):
        return list(value)
    return [value]


def _map(value: Any) -> Mapping[str, Any]:
    value = _known(value)
    return value if isinstance(value, Mapping) else {}


def _protocol(value: Any) -> str:
    """A protocol name or number as text: CrossGuard turns every number into a float (6 -> 6.0)."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value).strip().lower()


def _covers_ssh(protocol: Any, from_port: Any, to_port: Any) -> bool:
    proto = _protocol(protocol)
    if proto in {"-1", "all", "*"}:
        return True
    if proto not in {"tcp", "6"}:
        return False
    try:
        low, high = int(from_port), int(to_port)
    except (TypeError, ValueError, OverflowError):
        return True  # a TCP rule without readable ports opens all of them
    return low <= SSH_PORT <= high or (low, high) == (-1, -1)


def _port_ranges_cover_ssh(ranges: Iterable[Any]) -> bool:
    """GCP/Azure port lists: "22", "20-30", "*"; an empty list means every port."""
    texts = [str(r).strip() for r in ranges]
    if not texts:
        return True
    for text in texts:
        if text in {"*", ""}:
            return True
        low, _, high = text.partition("-")
        try:
            if int(low) <= SSH_PORT <= int(high or low):
                return True
        except ValueError:
            return True  # unreadable: judged as open, fail closed
    return False


def _source_problems(where: str, sources: Iterable[Any]) -> Iterator[str]:
    for source in sources:
        yield from _part(f"{where}'s SSH source", _source_problem(where, source))


def _source_problem(where: str, source: Any) -> Iterator[str]:
    problem = ssh_source_problem(_known(source))
    if problem is not None:
        yield f"{where} opens SSH (port {SSH_PORT}): {problem}"  # problem quotes the source, bounded


# --------------------------------------------------------------------------- resource rules


def no_public_ip(type_: str, props: Mapping[str, Any]) -> Iterator[str]:
    if type_ == LAUNCH_TEMPLATE:
        interfaces = _list(props.get("networkInterfaces"))
        if not interfaces:
            yield "declares no networkInterfaces, so the subnet's default decides whether nodes get a public IP"
        for index, ni in enumerate(interfaces):
            yield from _part(f"networkInterfaces[{index}]", _aws_interface(f"networkInterfaces[{index}]", ni))
    elif type_ == INSTANCE:
        yield from _aws_instance_public_ip(props)
    elif type_ == SUBNET and _true(props.get("mapPublicIpOnLaunch")):
        yield "mapPublicIpOnLaunch is true: every instance launched in it gets a public IP; allowed: false"
    elif type_ in GCP_VM_TYPES:
        yield from _gcp_vm_external_ips(type_, props)
    elif type_ == GCP_TPU_QUEUED:
        specs = _list(_map(props.get("tpu")).get("nodeSpecs"))
        if not specs:
            yield "declares no tpu.nodeSpecs, so nothing states enableExternalIps=false"
        for index, spec in enumerate(specs):
            where = f"tpu.nodeSpecs[{index}].node.networkConfig"
            yield from _part(where, _tpu_node_external_ips(where, spec))
    elif type_ == GCP_TPU_VM:
        yield from _tpu_vm_external_ips(props)
    elif type_ == AZURE_VMSS:
        profile = _map(_map(props.get("virtualMachineProfile")).get("networkProfile"))
        yield from _azure_nic_configurations("virtualMachineProfile.networkProfile", profile)
    elif type_ == AZURE_VM:
        yield from _azure_nic_configurations("networkProfile", _map(props.get("networkProfile")))
    elif type_ == AZURE_NIC:
        for index, config in enumerate(_map(c) for c in _list(props.get("ipConfigurations"))):
            inner = {**_map(config.get("properties")), **config}
            if inner.get("publicIPAddress") is not None:
                yield f"ipConfigurations[{index}].publicIPAddress attaches a public IP address; allowed: none"


def _aws_interface(where: str, interface: Any) -> Iterator[str]:
    """A launch template interface: no public IPv4, stated on the primary one, and no IPv6 addresses."""
    ni = _map(interface)
    card, dev = ni.get("networkCardIndex", 0) or 0, ni.get("deviceIndex", 0) or 0
    public = ni.get("associatePublicIpAddress")
    if _true(public):
        yield f"{where}.associatePublicIpAddress is true (card {card}, device {dev}); allowed: false"
    elif (card, dev) == (0, 0) and public is None:
        yield f"{where}.associatePublicIpAddress is not stated on the primary interface; allowed: false"
    yield from _aws_ipv6(where, ni)


def _aws_ipv6(where: str, props: Mapping[str, Any]) -> Iterator[str]:
    """IPv6 addresses on an AWS interface are globally routable: public addressing by another name
    (the GCP rule refuses ipv6AccessConfigs for the same reason). Nodes reach out through NAT."""
    count = _known(props.get("ipv6AddressCount"))
    if count is not None and float(count) > 0:
        shown = int(count) if float(count).is_integer() else count  # CrossGuard's numbers are floats
        yield f"{where}.ipv6AddressCount is {shown}: a globally routable IPv6 address; allowed: 0 or unset"
    if _list(props.get("ipv6Addresses")):
        yield f"{where}.ipv6Addresses names globally routable IPv6 addresses; allowed: none"
    for key in ("primaryIpv6", "enablePrimaryIpv6"):  # a launch template's / an instance's name
        if _true(props.get(key)):
            yield f"{where}.{key} is true: a globally routable IPv6 address; allowed: false or unset"


def _aws_instance_public_ip(props: Mapping[str, Any]) -> Iterator[str]:
    """As for a launch template's primary interface: stated false, not left to the subnet, unless
    the instance is given existing interfaces (which get no public address of their own)."""
    public = props.get("associatePublicIpAddress")
    own_interfaces = props.get("primaryNetworkInterface") is not None or _list(props.get("networkInterfaces"))
    if _true(public):
        yield "associatePublicIpAddress is true; allowed: false"
    elif public is None and not own_interfaces:
        yield "associatePublicIpAddress is not stated, so the subnet's default decides; allowed: false"
    yield from _aws_ipv6("the instance", props)


def _azure_nic_configurations(where: str, profile: Mapping[str, Any]) -> Iterator[str]:
    """A publicIPAddressConfiguration on any IP configuration gives each VM its own public IP."""
    for n, nic in enumerate(_map(c) for c in _list(profile.get("networkInterfaceConfigurations"))):
        for i, ip in enumerate(_map(c) for c in _list(nic.get("ipConfigurations"))):
            if ip.get("publicIPAddressConfiguration"):
                yield (
                    f"{where}.networkInterfaceConfigurations[{n}].ipConfigurations[{i}] "
                    "has a publicIPAddressConfiguration"
                )


def _gcp_vm_external_ips(type_: str, props: Mapping[str, Any]) -> Iterator[str]:
    """An access config on a GCE network interface is an external address (IPv4 or IPv6)."""
    interfaces = _list(props.get("networkInterfaces"))
    if not interfaces and type_ != GCP_INSTANCE_FROM_TEMPLATE:  # that one inherits its template's
        yield "declares no networkInterfaces, so they cannot be judged"
    for index, ni in enumerate(interfaces):
        yield from _part(f"networkInterfaces[{index}]", _gcp_interface(index, ni))


def _gcp_interface(index: int, interface: Any) -> Iterator[str]:
    ni = _map(interface)
    if _list(ni.get("accessConfigs")):
        yield f"networkInterfaces[{index}].accessConfigs is set: an external IPv4 address; allowed: none"
    if _list(ni.get("ipv6AccessConfigs")):
        yield f"networkInterfaces[{index}].ipv6AccessConfigs is set: an external IPv6 address; allowed: none"


def _tpu_node_external_ips(where: str, spec: Any) -> Iterator[str]:
    yield from _tpu_external_ips(where, _map(_map(_map(spec).get("node")).get("networkConfig")))


def _tpu_vm_external_ips(props: Mapping[str, Any]) -> Iterator[str]:
    """A TPU VM has a networkConfig and a list of networkConfigs (multi-NIC): every one of them is
    judged; networkConfig must state false whenever no networkConfigs replace it."""
    configs = _list(props.get("networkConfigs"))
    single = props.get("networkConfig")
    if single is not None or not configs:
        yield from _part("networkConfig", _tpu_external_ips("networkConfig", single))
    for index, config in enumerate(configs):
        where = f"networkConfigs[{index}]"
        yield from _part(where, _tpu_external_ips(where, config))


def _tpu_external_ips(where: str, network_config: Any) -> Iterator[str]:
    config = _map(network_config)
    # Stated, not defaulted: gcloud gives TPU VMs external IPs unless told otherwise, so the rule
    # asks for an explicit false as the AWS rule does for a launch template's primary interface.
    value = config.get("enableExternalIps")
    if _true(value):
        yield f"{where}.enableExternalIps is true: every TPU worker gets an external IP; allowed: false"
    elif value is None:
        yield f"{where} does not state enableExternalIps=false"


def imdsv2_required(type_: str, props: Mapping[str, Any]) -> Iterator[str]:
    if type_ not in {LAUNCH_TEMPLATE, INSTANCE}:
        return
    options = _map(props.get("metadataOptions"))
    if options.get("httpEndpoint") == "disabled":
        return  # no metadata service at all is stricter still
    if options.get("httpTokens") != "required":
        yield f"metadataOptions.httpTokens is {options.get('httpTokens')!r}; IMDSv2 needs 'required'"


def encrypted_at_rest(type_: str, props: Mapping[str, Any]) -> Iterator[str]:
    if type_ == LAUNCH_TEMPLATE:
        mappings = _list(props.get("blockDeviceMappings"))
        if not mappings:
            yield "blockDeviceMappings maps no root volume, so the image decides whether it is encrypted"
        for index, mapping in enumerate(mappings):
            where = f"blockDeviceMappings[{index}]"
            yield from _part(where, _launch_template_volume(where, mapping))
    elif type_ == INSTANCE:
        # As for a launch template: a root volume left out is the image's to encrypt or not.
        if props.get("rootBlockDevice") is None:
            yield "rootBlockDevice is not stated, so the image decides whether it is encrypted"
        volumes = [("rootBlockDevice", props.get("rootBlockDevice"))] + [
            (f"ebsBlockDevices[{i}]", v) for i, v in enumerate(_list(props.get("ebsBlockDevices")))
        ]
        for where, volume in volumes:
            yield from _part(where, _instance_volume(where, volume))
    elif type_ == EBS_VOLUME and not _true(props.get("encrypted")):
        yield "encrypted is not true; allowed: true"
    elif type_ == LUSTRE and not props.get("kmsKeyId"):
        yield "has no kmsKeyId: encrypt the file system with the fleet's KMS key"
    elif type_ in {AZURE_VMSS, AZURE_VM}:
        # Managed disks are always encrypted at rest by the platform; encryption at host also covers
        # the temp (resource) disk and the disk caches on the host, which otherwise are not.
        profile = _map(props.get("virtualMachineProfile")) if type_ == AZURE_VMSS else props
        where = "virtualMachineProfile.securityProfile" if type_ == AZURE_VMSS else "securityProfile"
        if not _true(_map(profile.get("securityProfile")).get("encryptionAtHost")):
            yield f"{where}.encryptionAtHost is not true: temp disks and caches stay unencrypted"


def _launch_template_volume(where: str, mapping: Any) -> Iterator[str]:
    ebs = _map(_map(mapping).get("ebs"))
    if ebs and not _true(ebs.get("encrypted")):
        device = _map(mapping).get("deviceName")
        yield f"{where}.ebs.encrypted is not true (device {device!r}); allowed: true"


def _instance_volume(where: str, volume: Any) -> Iterator[str]:
    v = _map(volume)
    if v and not _true(v.get("encrypted")):
        yield f"{where}.encrypted is not true (device {v.get('deviceName', 'root')!r}); allowed: true"


def _aws_inline_ingress(props: Mapping[str, Any]) -> Iterator[str]:
    for index, rule in enumerate(_list(props.get("ingress"))):
        yield from _part(f"inline ingress rule {index}", _aws_inline_rule(index, _map(rule)))


def _aws_inline_rule(index: int, rule: Mapping[str, Any]) -> Iterator[str]:
    if _covers_ssh(rule.get("protocol"), rule.get("fromPort"), rule.get("toPort")):
        label = f"inline ingress rule {index}"
        if rule.get("description"):
            label += f" ({str(rule.get('description'))[:60]!r})"
        yield from _source_problems(
            label,
            _sources(rule.get("cidrBlocks"))
            + _sources(rule.get("ipv6CidrBlocks"))
            + _sources(rule.get("prefixListIds")),
        )


def _gcp_firewall(props: Mapping[str, Any]) -> Iterator[str]:
    if str(props.get("direction") or "INGRESS").upper() != "INGRESS" or _true(props.get("disabled")):
        return
    allows = [_map(a) for a in _list(props.get("allows"))]
    if any(
        _protocol(a.get("protocol")) in {"all", "tcp", "6"} and _port_ranges_cover_ssh(_list(a.get("ports")))
        for a in allows
    ):
        sources = _sources(props.get("sourceRanges"))
        if (
            not sources
            and not _list(props.get("sourceTags"))
            and not _list(props.get("sourceServiceAccounts"))
        ):
            # GCP's documented default: an ingress rule that names no source applies to 0.0.0.0/0.
            sources = ["0.0.0.0/0"]
        # IAP's TCP forwarding range is Google's proxy, which lets through only callers with
        # IAP-secured tunnel rights: not the internet, though wider than a /24.
        yield from _source_problems("the firewall", [s for s in sources if s != GCP_IAP_RANGE])


def _azure_rule(label: str, rule: Mapping[str, Any]) -> Iterator[str]:
    if str(rule.get("direction", "")).lower() != "inbound" or str(rule.get("access", "")).lower() != "allow":
        return
    if _protocol(rule.get("protocol")) not in {"*", "tcp"}:
        return
    ports = _sources(rule.get("destinationPortRange")) + _list(rule.get("destinationPortRanges"))
    if not _port_ranges_cover_ssh(ports):
        return
    sources = _sources(rule.get("sourceAddressPrefix")) + _list(rule.get("sourceAddressPrefixes"))
    if not sources and not _list(rule.get("sourceApplicationSecurityGroups")):
        sources = ["*"]  # a rule with no readable source is judged as open to any (fail closed)
    # Azure's service tags: "*", "Internet" and "Any" are the internet; "VirtualNetwork" is not.
    named = [s for s in sources if not (isinstance(s, str) and s == "VirtualNetwork")]
    internet = [s for s in named if isinstance(s, str) and s.lower() in {"*", "internet", "any"}]
    for source in internet:
        yield f"{label} lets {source!r} (the internet) reach SSH (port {SSH_PORT})"
    yield from _source_problems(label, [s for s in named if s not in internet])


def ssh_not_from_internet(type_: str, props: Mapping[str, Any]) -> Iterator[str]:
    """SSH sources are judged by fleet.netpolicy: private ranges or small public blocks only."""
    if type_ == SG_INGRESS:
        if _covers_ssh(props.get("ipProtocol"), props.get("fromPort"), props.get("toPort")):
            # A managed prefix list is a source like a CIDR, but its entries live outside the
            # resource, so it cannot be shown to be narrow: judged as a source, it fails closed.
            yield from _source_problems(
                "the rule",
                _sources(props.get("cidrIpv4"))
                + _sources(props.get("cidrIpv6"))
                + _sources(props.get("prefixListId")),
            )
    elif type_ == SG_RULE and props.get("type") == "ingress":
        if _covers_ssh(props.get("protocol"), props.get("fromPort"), props.get("toPort")):
            yield from _source_problems(
                "the rule",
                _sources(props.get("cidrBlocks"))
                + _sources(props.get("ipv6CidrBlocks"))
                + _sources(props.get("prefixListIds")),
            )
    elif type_ in {SG, DEFAULT_SG}:
        yield from _aws_inline_ingress(props)
    elif type_ == GCP_FIREWALL:
        yield from _gcp_firewall(props)
    elif type_ == AZURE_NSG_RULE:
        yield from _azure_rule("the rule", props)
    elif type_ == AZURE_NSG:
        for index, rule in enumerate(_map(r) for r in _list(props.get("securityRules"))):
            inner = {**_map(rule.get("properties")), **rule}  # flattened or ARM-style nesting
            yield from _azure_rule(f"security rule {str(rule.get('name', index))[:60]!r}", inner)


def password_authentication_disabled(type_: str, props: Mapping[str, Any]) -> Iterator[str]:
    """Azure Linux nodes take SSH keys only: linuxConfiguration.disablePasswordAuthentication true."""
    if type_ == AZURE_VMSS:
        where, profile = "virtualMachineProfile.osProfile", _map(props.get("virtualMachineProfile"))
    elif type_ == AZURE_VM:
        where, profile = "osProfile", props
    else:
        return
    linux = _map(_map(profile.get("osProfile")).get("linuxConfiguration"))
    if not _true(linux.get("disablePasswordAuthentication")):
        yield f"{where}.linuxConfiguration.disablePasswordAuthentication is not true: passwords can log in"


def azure_storage_account_protected(type_: str, props: Mapping[str, Any]) -> Iterator[str]:
    """Stated, not defaulted (defaults moved between API versions): HTTPS only, TLS 1.2 or newer,
    no anonymous blob access, no shared-key (account key) access."""
    if type_ != AZURE_STORAGE_ACCOUNT:
        return
    # azure-native names ARM's supportsHttpsTrafficOnly `enableHttpsTrafficOnly`.
    https = props.get("enableHttpsTrafficOnly", props.get("supportsHttpsTrafficOnly"))
    if not _true(https):
        yield "enableHttpsTrafficOnly is not true: plain HTTP reaches the account"
    if props.get("minimumTlsVersion") not in AZURE_TLS_OK:
        yield f"minimumTlsVersion is {props.get('minimumTlsVersion')!r}; allowed: TLS1_2, TLS1_3"
    if not _false(props.get("allowBlobPublicAccess")):
        yield "allowBlobPublicAccess is not false: containers can be made public"
    if not _false(props.get("allowSharedKeyAccess")):
        yield "allowSharedKeyAccess is not false: account keys grant full access; use Entra ID"


def _policy_arn_name(arn: Any) -> str:
    return str(arn).rpartition("/")[2] if isinstance(arn, str) else ""


def _statements(document: Any) -> list[Any] | None:
    """A policy document's statements; None when the document cannot be read."""
    document = _known(document)
    if isinstance(document, str):
        try:
            document = json.loads(document)
        except ValueError:
            return None
    if not isinstance(document, Mapping):
        return None
    statements = _known(document.get("Statement"))
    if isinstance(statements, Mapping):
        return [statements]
    if isinstance(statements, Sequence) and not isinstance(statements, str):
        return list(statements)
    return None


def _on_every_resource(statement: Mapping[str, Any]) -> bool:
    """Resource "*" (or ARNs that end in a bare wildcard), or NotResource: every resource but some."""
    if statement.get("NotResource") is not None:
        return True
    resources = [str(r) for r in _sources(statement.get("Resource"))]
    return any(r == "*" or r.endswith((":parameter/*", ":parameter*", ":*")) for r in resources)


def _reads_every_parameter(statement: Mapping[str, Any]) -> bool:
    if statement.get("Effect") != "Allow" or statement.get("NotAction") is not None:
        return False  # NotAction is judged on its own (_allows_all_but)
    actions = [str(a).lower() for a in _sources(statement.get("Action"))]
    if not any(fnmatch.fnmatchcase(read, a) for read in PARAMETER_READS for a in actions):
        return False
    return _on_every_resource(statement)


def _allows_all_but(statement: Mapping[str, Any]) -> bool:
    """Allow + NotAction grants every action of every service except those listed."""
    return (
        statement.get("Effect") == "Allow"
        and statement.get("NotAction") is not None
        and _on_every_resource(statement)
    )


def _statement_problems(where: str, raw: Any) -> Iterator[str]:
    statement = _map(raw)
    if _allows_all_but(statement):
        yield (
            f"{where}: Effect Allow with NotAction on every resource grants every action but those listed; "
            "allowed: Action naming what the node needs"
        )
    elif _reads_every_parameter(statement):
        yield f"{where} lets the node read every SSM parameter in the account (ssm:GetParameter* on all)"


def _document_problems(where: str, document: Any) -> Iterator[str]:
    statements = _statements(document)
    if statements is None:
        yield f"{where} cannot be read as an IAM policy document, so it cannot be judged"
        return
    for index, statement in enumerate(statements):
        yield from _part(
            f"{where} Statement[{index}]", _statement_problems(f"{where} Statement[{index}]", statement)
        )


def _policy_arns(type_: str, props: Mapping[str, Any]) -> list[Any]:
    """The managed policies a resource attaches to a role."""
    if type_ in {ROLE_POLICY_ATTACHMENT, POLICY_ATTACHMENT}:
        return [props.get("policyArn")]
    if type_ == ROLE_POLICY_ATTACHMENTS_EXCLUSIVE:  # the role's whole set of managed policies
        return _sources(props.get("policyArns"))
    if type_ == ROLE:
        return _sources(props.get("managedPolicyArns"))
    return []


def node_role_least_privilege(type_: str, props: Mapping[str, Any]) -> Iterator[str]:
    """Roles (fleetforge makes only node roles) get neither broad managed policies, nor every
    parameter, nor every action but some; customer-managed policies are judged where they are
    defined (aws:iam/policy:Policy), so attaching one is judged by its document there."""
    if type_ == ROLE:
        for index, inline in enumerate(_list(props.get("inlinePolicies"))):
            yield from _part(f"inlinePolicies[{index}]", _inline_policy_problems(index, inline))
    elif type_ in {ROLE_POLICY, IAM_POLICY}:
        yield from _document_problems("the policy", props.get("policy"))
        return
    for arn in _policy_arns(type_, props):
        yield from _part("a policy ARN", _arn_problems(arn))


def _inline_policy_problems(index: int, raw: Any) -> Iterator[str]:
    inline = _map(raw)
    if inline.get("policy") is not None:
        yield from _document_problems(f"inline policy {inline.get('name', index)!r}", inline["policy"])


def _arn_problems(arn: Any) -> Iterator[str]:
    # An AWS managed policy's ARN is a literal, known at preview; an ARN not known until created
    # is a policy this stack creates, whose document is judged on that aws:iam/policy:Policy.
    name = _policy_arn_name(arn)
    if name in BROAD_MANAGED_POLICIES:
        yield (
            f"attaches {name}, which grants far more than a node needs "
            "(it reads every SSM parameter); grant Session Manager's own actions inline instead"
        )


def required_tags(type_: str, props: Mapping[str, Any]) -> Iterator[str]:
    if type_ in GCP_LABELLED:
        # `labels` is what the program set; effectiveLabels/pulumiLabels add the provider's defaults.
        labels: dict[str, Any] = {
            **_map(props.get("effectiveLabels")),
            **_map(props.get("pulumiLabels")),
            **_map(props.get("labels")),
        }
        yield from _missing(labels, "labels")
        return
    if type_ in AZURE_TAGGED:
        yield from _missing(_map(props.get("tags")), "tags")
        return
    if not type_.startswith("aws:") or type_ in UNTAGGABLE:
        return
    if type_ == ASG:
        propagated: dict[Any, Any] = {
            t.get("key"): t.get("value")
            for t in (_map(t) for t in _list(props.get("tags")))
            if _true(t.get("propagateAtLaunch"))
        }
        yield from _missing(propagated, "tags propagated at launch")
        return
    tags: dict[str, Any] = {**_map(props.get("tagsAll")), **_map(props.get("tags"))}
    yield from _missing(tags, "tags")
    if type_ == LAUNCH_TEMPLATE:
        specs = {
            _map(s).get("resourceType"): _map(_map(s).get("tags"))
            for s in _list(props.get("tagSpecifications"))
        }
        for kind in ("instance", "volume"):
            yield from _missing(specs.get(kind, {}), f"tagSpecifications for {kind}")


def _missing(tags: Mapping[Any, Any], where: str) -> Iterator[str]:
    missing = [k for k in REQUIRED_TAGS if not tags.get(k)]
    if missing:
        yield f"{where} lack {', '.join(missing)} (required: {', '.join(REQUIRED_TAGS)})"


def _machine_type(props: Mapping[str, Any]) -> str:
    """`a3-megagpu-8g`, also from a URL or a partial path (zones/z/machineTypes/a3-megagpu-8g)."""
    return str(props.get("machineType") or "").rpartition("/")[2]


def gpu_vm_terminates_on_maintenance(type_: str, props: Mapping[str, Any]) -> Iterator[str]:
    """GPU VMs cannot live-migrate: a host maintenance event must stop them (TERMINATE)."""
    if type_ not in GCP_VM_TYPES:
        return
    machine = _machine_type(props)
    if not (GCP_GPU_MACHINE.match(machine) or _list(props.get("guestAccelerators"))):
        return
    scheduling = _map(props.get("scheduling"))
    if type_ == GCP_INSTANCE_FROM_TEMPLATE and not scheduling:
        return  # inherits the template's scheduling, which this rule judges on the template
    value = scheduling.get("onHostMaintenance")
    if str(value).upper() != "TERMINATE":
        yield (
            f"{machine or 'a VM with guestAccelerators'}: scheduling.onHostMaintenance is {value!r}; "
            "GPU VMs need 'TERMINATE'"
        )


def gcp_service_account_least_privilege(type_: str, props: Mapping[str, Any]) -> Iterator[str]:
    """Nodes run as the fleet's own service account, never the default compute one (editor)."""
    if type_ in GCP_VM_TYPES:
        if type_ == GCP_INSTANCE_FROM_TEMPLATE and props.get("serviceAccount") is None:
            return  # inherits the template's
        email = str(_map(props.get("serviceAccount")).get("email") or "")
        if _default_compute_account(email):
            yield (
                f"runs as {email or 'the default compute service account'!r}, which holds the project's "
                "editor role; give nodes the fleet's own service account"
            )
    elif type_ in {GCP_PROJECT_IAM_MEMBER, GCP_PROJECT_IAM_BINDING}:
        role = str(props.get("role") or "")
        if role in GCP_BROAD_ROLES:
            yield f"grants {role} on the project, far more than a node needs"


def _default_compute_account(email: str) -> bool:
    return not email or email == "default" or email.endswith("-compute@developer.gserviceaccount.com")


def gcp_tpu_default_service_account(type_: str, props: Mapping[str, Any]) -> Iterator[str]:
    """A queued resource's TPU VMs run as the project's default compute service account.

    pulumi-gcp's queued resource node (V2QueuedResourceTpuNodeSpecNode) has no service-account
    field, so its TPU VMs always run as <project-number>-compute@developer.gserviceaccount.com,
    which Google grants the project's Editor role unless the organization policy
    iam.automaticIamGrantsForDefaultServiceAccounts is enforced
    (https://cloud.google.com/compute/docs/access/service-accounts)."""
    if type_ != GCP_TPU_QUEUED:
        return
    for i, spec in enumerate(_list(_map(props.get("tpu")).get("nodeSpecs"))):
        yield (
            f"tpu.nodeSpecs[{i}] ({_map(spec).get('nodeId') or 'a slice'}) runs as the project's default "
            "compute service account, which holds the project's Editor role unless that grant is "
            "removed: remove roles/editor from <project-number>-compute@developer.gserviceaccount.com "
            "(or enforce the organization policy iam.automaticIamGrantsForDefaultServiceAccounts) "
            "before creating the slice, or create it outside this stack with `gcloud compute tpus "
            "queued-resources create --service-account` and the fleet's own account"
        )


def gcs_bucket_protected(type_: str, props: Mapping[str, Any]) -> Iterator[str]:
    """Every GCS bucket: uniform bucket-level access, public access prevention enforced, versioned.

    A resource rule, so `pulumi up` refuses the bucket before creating it (stack rules run only
    after everything is created). Encryption is not judged here: GCS encrypts every object at rest
    with Google's keys, and a customer key (CMEK) is judged by gcp-cmek-everywhere."""
    if type_ != GCP_BUCKET:
        return
    if not _true(props.get("uniformBucketLevelAccess")):
        yield "uniformBucketLevelAccess is not true (object ACLs could make objects public); allowed: true"
    prevention = _known(props.get("publicAccessPrevention"))
    if prevention != "enforced":
        yield f"publicAccessPrevention is {prevention!r}; allowed: 'enforced'"
    if not _true(_map(props.get("versioning")).get("enabled")):
        yield "versioning.enabled is not true; allowed: true"


def _role_definition_guid(role_definition_id: Any) -> str:
    """The role's GUID, the last segment of .../providers/Microsoft.Authorization/roleDefinitions/<guid>."""
    return str(_known(role_definition_id) or "").rstrip("/").rpartition("/")[2].lower()


def azure_role_least_privilege(type_: str, props: Mapping[str, Any]) -> Iterator[str]:
    """Fleet identities get narrow roles on narrow scopes: no Owner, Contributor or User Access
    Administrator, nothing assigned on a subscription or management group, and no custom role
    whose actions or dataActions reach every provider ("*", "*/read"...). The stack's own grants
    (a custom checkpoint writer on one container, Key Vault Crypto Service Encryption User on one
    vault) are all narrower."""
    if type_ == AZURE_ROLE_ASSIGNMENT:
        yield from _part("roleDefinitionId", _assigned_role_problems(props.get("roleDefinitionId")))
        yield from _part("scope", _assignment_scope_problems(props.get("scope")))
    elif type_ == AZURE_ROLE_DEFINITION:
        for index, permission in enumerate(_list(props.get("permissions"))):
            yield from _part(f"permissions[{index}]", _permission_problems(index, permission))


def _assigned_role_problems(role_definition_id: Any) -> Iterator[str]:
    role = AZURE_BROAD_ROLES.get(_role_definition_guid(role_definition_id))
    if role is not None:
        yield (
            f"roleDefinitionId is the built-in {role} role; allowed: a role granting only what the "
            f"fleet needs (not {', '.join(AZURE_BROAD_ROLES.values())})"
        )


def _assignment_scope_problems(raw: Any) -> Iterator[str]:
    scope = str(_known(raw) or "")
    if AZURE_BROAD_SCOPE.match(scope):
        yield (
            f"scope {scope[:120]!r} is a subscription, management group or the root; allowed: a "
            "resource group or one resource"
        )


def _permission_problems(index: int, raw: Any) -> Iterator[str]:
    permission = _map(raw)
    for key in ("actions", "dataActions"):
        broad = [str(a) for a in _sources(permission.get(key)) if str(a).startswith("*")]
        if broad:
            yield (
                f"permissions[{index}].{key} has {', '.join(broad)[:120]}: every provider's operations; "
                "allowed: named operations (Microsoft.<Provider>/...)"
            )


# --------------------------------------------------------------------------- stack rules


def _bucket_companions(resources: Sequence[Resource]) -> dict[int, dict[str, Resource]]:
    """Each bucket's companions (SSE config, public access block, versioning, bucket policy), by
    the bucket's index in `resources`.

    A companion names its bucket in `bucket` (the bucket's id). On a fresh stack that id is not
    known at preview, but the property's dependency (the bucket's URN) is, so a companion is
    matched by name where it is known and by dependency where it is not."""
    buckets = [(i, r) for i, r in enumerate(resources) if r.type == BUCKET]
    by_key: dict[str, int] = {}
    by_urn: dict[str, int] = {}
    for i, b in buckets:
        for key in (_known_str(b.props.get("bucket")), b.id, b.name):
            if key is not None:
                by_key.setdefault(key, i)
        if b.urn:
            by_urn[b.urn] = i
    attached: dict[int, dict[str, Resource]] = {i: {} for i, _ in buckets}
    for r in resources:
        if r.type not in BUCKET_COMPANIONS:
            continue
        name = _known_str(r.props.get("bucket"))
        if name is not None:
            owner = by_key.get(name)
        else:  # unknown until the bucket exists: its URN says which bucket it is
            owner = next((by_urn[u] for u in r.dependencies.get("bucket", ()) if u in by_urn), None)
        if owner is not None:
            attached[owner][r.type] = r
    return attached


def _denies_plain_http(statement: Mapping[str, Any]) -> bool:
    """Deny, to everyone, every S3 action on the bucket's objects when aws:SecureTransport is false."""
    if statement.get("Effect") != "Deny":
        return False
    principal = _known(statement.get("Principal"))
    if principal != "*" and _map(principal).get("AWS") not in ("*", ["*"]):
        return False
    actions = {str(a).lower() for a in _sources(statement.get("Action"))}
    if not actions & {"*", "s3:*"}:
        return False
    if not any(str(r) == "*" or str(r).endswith("/*") for r in _sources(statement.get("Resource"))):
        return False
    secure = _map(_map(statement.get("Condition")).get("Bool")).get("aws:SecureTransport")
    return any(str(v).lower() == "false" for v in _sources(secure))


def _tls_problems(document: Any) -> Iterator[str]:
    statements = _statements(document)
    if not any(_denies_plain_http(_map(s)) for s in statements or []):
        yield (
            "its bucket policy does not deny plain HTTP; allowed: a statement with Effect Deny, "
            'Principal "*", Action "s3:*" on the objects and Condition Bool aws:SecureTransport "false"'
        )


def _bucket_problems(bucket: Resource, attached: Mapping[str, Resource]) -> Iterator[str]:
    props = bucket.props
    sse = _map(attached[BUCKET_SSE].props) if BUCKET_SSE in attached else None
    if sse is None:
        sse = _map(props.get("serverSideEncryptionConfiguration"))
    sse_rules = _list(sse.get("rules")) or ([sse["rule"]] if sse.get("rule") else [])  # inline: one rule
    algorithms = {
        _map(_map(rule).get("applyServerSideEncryptionByDefault")).get("sseAlgorithm") for rule in sse_rules
    }
    if not algorithms & KMS_ALGORITHMS:
        yield f"has no default SSE-KMS encryption; allowed sseAlgorithm: {', '.join(sorted(KMS_ALGORITHMS))}"
    pab = attached[BUCKET_PAB].props if BUCKET_PAB in attached else {}
    switches = ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls", "restrictPublicBuckets")
    off = [s for s in switches if not _true(pab.get(s))]
    if off:
        yield f"public access block misses {', '.join(off)} (each must be true)"
    versioning: Mapping[str, Any] = {}
    if BUCKET_VERSIONING in attached:
        versioning = _map(attached[BUCKET_VERSIONING].props.get("versioningConfiguration"))
    if versioning.get("status") != "Enabled" and not _true(_map(props.get("versioning")).get("enabled")):
        yield "versioning is not enabled; allowed: versioningConfiguration.status 'Enabled'"
    policy = attached[BUCKET_POLICY].props.get("policy") if BUCKET_POLICY in attached else props.get("policy")
    yield from _part("its bucket policy", _tls_problems(policy))


def buckets_protected(resources: Sequence[Resource]) -> Iterator[tuple[Resource | None, str]]:
    """Every bucket: SSE-KMS by default, every public-access switch on, versioning enabled, and a
    bucket policy that refuses plain HTTP (encryption in transit)."""
    for index, attached in _bucket_companions(resources).items():
        bucket = resources[index]
        for message in _part(f"bucket {bucket.name!r}", _bucket_problems(bucket, attached)):
            yield bucket, message


def _gcp_kms_uses(r: Resource) -> list[tuple[str, Any]]:
    """(where, KMS key or None) for every store of data this resource creates."""
    props = r.props
    if r.type in {GCP_TEMPLATE, GCP_REGION_TEMPLATE}:
        return [
            (f"disks[{i}]", _map(_map(d).get("diskEncryptionKey")).get("kmsKeySelfLink"))
            for i, d in enumerate(_list(props.get("disks")))
        ]
    if r.type in {GCP_INSTANCE, GCP_INSTANCE_FROM_TEMPLATE}:
        uses = []
        if r.type == GCP_INSTANCE or props.get("bootDisk") is not None:  # else: the template's
            uses.append(("bootDisk", _map(props.get("bootDisk")).get("kmsKeySelfLink")))
        uses += [
            (f"attachedDisks[{i}]", _map(d).get("kmsKeySelfLink"))
            for i, d in enumerate(_list(props.get("attachedDisks")))
        ]
        return uses
    if r.type == GCP_DISK:
        return [("the disk", _map(props.get("diskEncryptionKey")).get("kmsKeySelfLink"))]
    if r.type == GCP_BUCKET:
        return [("the bucket", _map(props.get("encryption")).get("defaultKmsKeyName"))]
    if r.type == GCP_LUSTRE:
        return [("the file system", props.get("kmsKey"))]
    return []


def gcp_cmek_everywhere(resources: Sequence[Resource]) -> Iterator[tuple[Resource | None, str]]:
    """Once a GCP fleet has a customer-managed key, every disk, bucket and file system uses one.

    Google encrypts every GCP disk and object at rest whatever the program says, so "unencrypted" is
    not something a resource can be. What a stack can get wrong is a customer key (the spec's
    kms_key, or a key the stack creates) used on some stores and not others: the one left on
    Google's keys is outside the key's revocation and audit. One resource cannot know whether the
    fleet has a key, so this is a stack rule: a key anywhere means a key everywhere."""
    uses = [(r, where, key) for r in resources for where, key in _gcp_kms_uses(r)]
    has_key = any(key for _, _, key in uses) or any(r.type == GCP_KMS_KEY for r in resources)
    if not has_key:
        return
    for r, where, key in uses:
        if not key:
            yield r, f"{where} is on Google-managed keys while the fleet has a customer-managed KMS key"


def azure_public_ips_only_for_nat(resources: Sequence[Resource]) -> Iterator[tuple[Resource | None, str]]:
    """A PublicIPAddress may exist only as a NAT gateway's egress address.

    A gateway's reference is matched by id where the id is known. At preview a new address's id is
    not, but the reference's dependency (the address's URN) is, and decides; a reference known by
    neither is counted against one address whose id is unknown, so it cannot clear an address
    that some other reference already accounts for."""
    addresses = [r for r in resources if r.type == AZURE_PUBLIC_IP]
    claimed_urns: set[str] = set()
    known: list[str] = []
    unknown = 0
    for nat in (r for r in resources if r.type == AZURE_NAT_GATEWAY):
        depends_on = list(nat.dependencies.get("publicIpAddresses", ()))
        claimed_urns.update(depends_on)
        for ref in _list(nat.props.get("publicIpAddresses")):
            ref_id = _known_str(_map(ref).get("id"))
            if ref_id is not None:
                known.append(ref_id)
            elif not depends_on:  # nothing says which address it is
                unknown += 1
    by_id = {a.id for a in addresses if a.id}
    # Known references no address claims by id may be an address whose own id is not known yet.
    unclaimed = len([ref for ref in known if ref not in by_id])
    for address in addresses:
        if (address.urn is not None and address.urn in claimed_urns) or (address.id and address.id in known):
            continue
        if address.id is None and unclaimed > 0:
            unclaimed -= 1
            continue
        if address.id is None and unknown > 0:
            unknown -= 1
            continue
        yield address, "a public IP address no NAT gateway uses: nodes never get public addresses"


def one_instance_type(resources: Sequence[Resource]) -> Iterator[tuple[Resource | None, str]]:
    """A fleet is one SKU: every launch template, instance and group override names the same type;
    on GCP every instance template and instance the same machine type, every TPU slice the same
    accelerator type."""
    seen: dict[str, Resource] = {}
    for r in resources:
        if r.type in GCP_VM_TYPES:
            machine = _machine_type(r.props)
            if machine:
                seen.setdefault(machine, r)
            elif r.type != GCP_INSTANCE_FROM_TEMPLATE:  # that one may take its template's
                yield r, "names no machineType"
            continue
        if r.type in {GCP_TPU_QUEUED, GCP_TPU_VM}:
            nodes = (
                [_map(_map(s).get("node")) for s in _list(_map(r.props.get("tpu")).get("nodeSpecs"))]
                if r.type == GCP_TPU_QUEUED
                else [r.props]
            )
            for node in nodes:
                accelerator = node.get("acceleratorType") or _map(node.get("acceleratorConfig")).get("type")
                if accelerator:
                    seen.setdefault(f"TPU {accelerator}", r)
                else:
                    yield r, "a TPU node names no acceleratorType or acceleratorConfig"
            continue
        if r.type in {AZURE_VMSS, AZURE_VM}:
            size = (
                _map(r.props.get("sku")).get("name")
                if r.type == AZURE_VMSS
                else _map(r.props.get("hardwareProfile")).get("vmSize")
            )
            if size:
                seen.setdefault(str(size), r)
            else:
                yield r, "names no VM size (sku.name / hardwareProfile.vmSize)"
            continue
        if r.type in {LAUNCH_TEMPLATE, INSTANCE}:
            instance_type = r.props.get("instanceType")
            if not instance_type:
                yield r, "names no instanceType (attribute-based selection makes a mixed fleet)"
                continue
            seen.setdefault(str(instance_type), r)
        elif r.type == ASG:
            policy = _map(r.props.get("mixedInstancesPolicy"))
            spec = _map(policy.get("launchTemplate"))
            for override in (_map(o) for o in _list(spec.get("overrides"))):
                if override.get("instanceType"):
                    seen.setdefault(str(override["instanceType"]), r)
                else:
                    yield r, "an override names no instanceType"
    if len(seen) > 1:
        names = ", ".join(f"{t} ({r.name})" for t, r in sorted(seen.items()))
        yield None, f"the fleet mixes instance types: {names}; a fleet is one SKU"


RESOURCE_RULES: tuple[ResourceRule, ...] = (
    ResourceRule("no-public-ip", "Nodes and their subnets never get public IP addresses.", no_public_ip),
    ResourceRule("imdsv2-required", "Instances require IMDSv2 session tokens.", imdsv2_required),
    ResourceRule(
        "encrypted-at-rest", "Root volumes are encrypted; file systems use a KMS key.", encrypted_at_rest
    ),
    ResourceRule("ssh-not-from-internet", "SSH only from a named CIDR or a bastion.", ssh_not_from_internet),
    ResourceRule(
        "node-role-least-privilege",
        "Node roles get Session Manager's own actions, never broad managed policies or every parameter.",
        node_role_least_privilege,
    ),
    ResourceRule("required-tags", f"Taggable resources carry {', '.join(REQUIRED_TAGS)}.", required_tags),
    ResourceRule(
        "gpu-terminate-on-maintenance",
        "GCP GPU VMs stop for host maintenance (onHostMaintenance TERMINATE).",
        gpu_vm_terminates_on_maintenance,
    ),
    ResourceRule(
        "password-authentication-disabled",
        "Azure Linux nodes accept SSH keys only (disablePasswordAuthentication).",
        password_authentication_disabled,
    ),
    ResourceRule(
        "azure-storage-account-protected",
        "Storage accounts: HTTPS only, TLS 1.2+, no public blob access, no shared-key access.",
        azure_storage_account_protected,
    ),
    ResourceRule(
        "gcp-service-account-least-privilege",
        "GCP nodes run as the fleet's own service account; no project owner or editor grants.",
        gcp_service_account_least_privilege,
    ),
    ResourceRule(
        "gcs-bucket-protected",
        "GCS buckets use uniform bucket-level access, enforced public access prevention and versioning.",
        gcs_bucket_protected,
    ),
    ResourceRule(
        "azure-role-least-privilege",
        "Azure identities get no Owner, Contributor or User Access Administrator, nothing on a subscription "
        "or management group, and no custom role with wildcard actions.",
        azure_role_least_privilege,
    ),
)
# Reported, never refused: every TPU fleet the stack makes today would break them (pulumi-gcp
# gives the stack no way to comply), so as mandatory rules they would refuse every TPU plan and
# `pulumi up`. CrossGuard runs them as advisory; `check` leaves them out, `advise` returns them.
ADVISORY_RULES: tuple[ResourceRule, ...] = (
    ResourceRule(
        "gcp-tpu-default-service-account",
        "TPU queued resources run as the default compute service account; restrict it or use the fleet's own.",
        gcp_tpu_default_service_account,
    ),
)
STACK_RULES: tuple[StackRule, ...] = (
    StackRule(
        "bucket-protected",
        "Buckets are SSE-KMS encrypted, versioned, never public and refuse plain HTTP.",
        buckets_protected,
    ),
    StackRule("one-instance-type", "A fleet is homogeneous: one instance type.", one_instance_type),
    StackRule(
        "azure-public-ip-only-for-nat",
        "Azure public IP addresses exist only as NAT gateway egress addresses.",
        azure_public_ips_only_for_nat,
    ),
    StackRule(
        "gcp-cmek-everywhere",
        "A GCP fleet with a customer-managed key uses it on every disk, bucket and file system.",
        gcp_cmek_everywhere,
    ),
)


def _resource_violations(resources: Sequence[Resource], rules: Sequence[ResourceRule]) -> list[Violation]:
    return [
        Violation(rule.name, r.type, r.name, message, r.urn)
        for r in resources
        for rule in rules
        for message in judge(rule, r.type, r.props)
    ]


def advise(resources: Iterable[Resource]) -> list[Violation]:
    """What the advisory rules report, in resource order: a warning, never a refusal."""
    return _resource_violations(list(resources), ADVISORY_RULES)


def check(resources: Iterable[Resource]) -> list[Violation]:
    """Every violation of every mandatory rule, resource rules first, in resource order.

    A part a rule cannot judge (an Undecided message: a value unknown until created) is kept as a
    violation: `fleetforge plan` knows every value, so one there is a defect, never a pass."""
    resources = list(resources)
    found = _resource_violations(resources, RESOURCE_RULES)
    for stack_rule in STACK_RULES:
        for culprit, message in judge_stack(stack_rule, resources):
            found.append(
                Violation(
                    stack_rule.name,
                    culprit.type if culprit else "stack",
                    culprit.name if culprit else "-",
                    message,
                    culprit.urn if culprit else None,
                )
            )
    return found
