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
        "aws:kms/alias:Alias",
        "aws:s3/bucketVersioning:BucketVersioning",
        BUCKET_SSE,
        BUCKET_PAB,
        "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration",
        "aws:s3/bucketPolicy:BucketPolicy",
        "aws:s3/bucketOwnershipControls:BucketOwnershipControls",
    }
)
KMS_ALGORITHMS = frozenset({"aws:kms", "aws:kms:dsse"})


@dataclass(frozen=True)
class Resource:
    type: str
    name: str
    props: Mapping[str, Any]
    id: str | None = None
    urn: str | None = None


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


def _true(value: Any) -> bool:
    """Launch templates carry booleans as strings ("true"); other resources as booleans."""
    return value is True or (isinstance(value, str) and value.lower() == "true")


def _list(value: Any) -> list[Any]:
    """A list-valued property: any Sequence (CrossGuard's proxy is one), but never a string."""
    if isinstance(value, Sequence) and not isinstance(value, str | bytes | bytearray):
        return list(value)
    return []


def _sources(value: Any) -> list[Any]:
    """Source ranges: a list of them, or one bare value, which a rule must still judge (fail closed)."""
    if value is None:
        return []
    if isinstance(value, Sequence) and not isinstance(value, str | bytes | bytearray):
        return list(value)
    return [value]


def _map(value: Any) -> Mapping[str, Any]:
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
        problem = ssh_source_problem(source)
        if problem is not None:
            yield f"{where} opens SSH (port {SSH_PORT}): {problem}"  # problem quotes the source, bounded


# --------------------------------------------------------------------------- resource rules


def no_public_ip(type_: str, props: Mapping[str, Any]) -> Iterator[str]:
    if type_ == LAUNCH_TEMPLATE:
        interfaces = [_map(i) for i in _list(props.get("networkInterfaces"))]
        if not interfaces:
            yield "declares no network interfaces, so the subnet's default decides whether nodes get a public IP"
        for ni in interfaces:
            card, dev = ni.get("networkCardIndex", 0) or 0, ni.get("deviceIndex", 0) or 0
            if _true(ni.get("associatePublicIpAddress")):
                yield f"interface card {card} device {dev} asks for a public IP"
            elif (card, dev) == (0, 0) and ni.get("associatePublicIpAddress") is None:
                yield "primary interface does not state associatePublicIpAddress=false"
    elif type_ == INSTANCE and _true(props.get("associatePublicIpAddress")):
        yield "asks for a public IP"
    elif type_ == SUBNET and _true(props.get("mapPublicIpOnLaunch")):
        yield "maps a public IP onto every instance launched in it"
    elif type_ in GCP_VM_TYPES:
        yield from _gcp_vm_external_ips(type_, props)
    elif type_ == GCP_TPU_QUEUED:
        specs = [_map(s) for s in _list(_map(props.get("tpu")).get("nodeSpecs"))]
        if not specs:
            yield "declares no tpu.nodeSpecs, so nothing states enableExternalIps=false"
        for index, spec in enumerate(specs):
            config = _map(_map(spec.get("node")).get("networkConfig"))
            yield from _tpu_external_ips(f"tpu.nodeSpecs[{index}].node.networkConfig", config)
    elif type_ == GCP_TPU_VM:
        yield from _tpu_external_ips("networkConfig", _map(props.get("networkConfig")))
    elif type_ == AZURE_VMSS:
        profile = _map(_map(props.get("virtualMachineProfile")).get("networkProfile"))
        yield from _azure_nic_configurations("virtualMachineProfile.networkProfile", profile)
    elif type_ == AZURE_VM:
        yield from _azure_nic_configurations("networkProfile", _map(props.get("networkProfile")))
    elif type_ == AZURE_NIC:
        for index, config in enumerate(_map(c) for c in _list(props.get("ipConfigurations"))):
            inner = {**_map(config.get("properties")), **config}
            if inner.get("publicIPAddress"):
                yield f"ipConfigurations[{index}] attaches a public IP address"


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
    interfaces = [_map(i) for i in _list(props.get("networkInterfaces"))]
    if not interfaces and type_ != GCP_INSTANCE_FROM_TEMPLATE:  # that one inherits its template's
        yield "declares no networkInterfaces, so they cannot be judged"
    for index, ni in enumerate(interfaces):
        if _list(ni.get("accessConfigs")):
            yield f"networkInterfaces[{index}] has accessConfigs: an external IPv4 address"
        if _list(ni.get("ipv6AccessConfigs")):
            yield f"networkInterfaces[{index}] has ipv6AccessConfigs: an external IPv6 address"


def _tpu_external_ips(where: str, config: Mapping[str, Any]) -> Iterator[str]:
    # Stated, not defaulted: gcloud gives TPU VMs external IPs unless told otherwise, so the rule
    # asks for an explicit false as the AWS rule does for a launch template's primary interface.
    value = config.get("enableExternalIps")
    if _true(value):
        yield f"{where}.enableExternalIps is true: every TPU worker gets an external IP"
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
        mappings = [_map(m) for m in _list(props.get("blockDeviceMappings"))]
        if not mappings:
            yield "maps no root volume, so the image decides whether it is encrypted"
        for m in mappings:
            ebs = _map(m.get("ebs"))
            if ebs and not _true(ebs.get("encrypted")):
                yield f"volume {m.get('deviceName')} is not encrypted"
    elif type_ == INSTANCE:
        volumes = [
            _map(props.get("rootBlockDevice")),
            *(_map(v) for v in _list(props.get("ebsBlockDevices"))),
        ]
        for v in volumes:
            if v and not _true(v.get("encrypted")):
                yield f"volume {v.get('deviceName', 'root')} is not encrypted"
    elif type_ == EBS_VOLUME and not _true(props.get("encrypted")):
        yield "volume is not encrypted"
    elif type_ == LUSTRE and not props.get("kmsKeyId"):
        yield "has no kmsKeyId: encrypt the file system with the fleet's KMS key"
    elif type_ in {AZURE_VMSS, AZURE_VM}:
        # Managed disks are always encrypted at rest by the platform; encryption at host also covers
        # the temp (resource) disk and the disk caches on the host, which otherwise are not.
        profile = _map(props.get("virtualMachineProfile")) if type_ == AZURE_VMSS else props
        where = "virtualMachineProfile.securityProfile" if type_ == AZURE_VMSS else "securityProfile"
        if not _true(_map(profile.get("securityProfile")).get("encryptionAtHost")):
            yield f"{where}.encryptionAtHost is not true: temp disks and caches stay unencrypted"


def _aws_inline_ingress(props: Mapping[str, Any]) -> Iterator[str]:
    for index, rule in enumerate(_map(r) for r in _list(props.get("ingress"))):
        if _covers_ssh(rule.get("protocol"), rule.get("fromPort"), rule.get("toPort")):
            label = f"inline ingress rule {index}"
            if rule.get("description"):
                label += f" ({str(rule.get('description'))[:60]!r})"
            yield from _source_problems(
                label, _sources(rule.get("cidrBlocks")) + _sources(rule.get("ipv6CidrBlocks"))
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
            yield from _source_problems(
                "the rule", _sources(props.get("cidrIpv4")) + _sources(props.get("cidrIpv6"))
            )
    elif type_ == SG_RULE and props.get("type") == "ingress":
        if _covers_ssh(props.get("protocol"), props.get("fromPort"), props.get("toPort")):
            yield from _source_problems(
                "the rule", _sources(props.get("cidrBlocks")) + _sources(props.get("ipv6CidrBlocks"))
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
    if props.get("allowBlobPublicAccess") is not False:
        yield "allowBlobPublicAccess is not false: containers can be made public"
    if props.get("allowSharedKeyAccess") is not False:
        yield "allowSharedKeyAccess is not false: account keys grant full access; use Entra ID"


def _policy_arn_name(arn: Any) -> str:
    return str(arn).rpartition("/")[2] if isinstance(arn, str) else ""


def _statements(document: Any) -> list[Mapping[str, Any]] | None:
    """A policy document's statements; None when the document cannot be read."""
    if isinstance(document, str):
        try:
            document = json.loads(document)
        except ValueError:
            return None
    if not isinstance(document, Mapping):
        return None
    statements = document.get("Statement")
    if isinstance(statements, Mapping):
        return [statements]
    if isinstance(statements, Sequence) and not isinstance(statements, str):
        return [_map(s) for s in statements]
    return None


def _reads_every_parameter(statement: Mapping[str, Any]) -> bool:
    if statement.get("Effect") != "Allow":
        return False
    actions = [str(a).lower() for a in _sources(statement.get("Action"))]
    if not any(fnmatch.fnmatchcase(read, a) for read in PARAMETER_READS for a in actions):
        return False
    resources = [str(r) for r in _sources(statement.get("Resource"))]
    return any(r == "*" or r.endswith((":parameter/*", ":parameter*", ":*")) for r in resources)


def _document_problems(where: str, document: Any) -> Iterator[str]:
    statements = _statements(document)
    if statements is None:
        yield f"{where} cannot be read as an IAM policy document, so it cannot be judged"
    elif any(_reads_every_parameter(s) for s in statements):
        yield f"{where} lets the node read every SSM parameter in the account (ssm:GetParameter* on all)"


def node_role_least_privilege(type_: str, props: Mapping[str, Any]) -> Iterator[str]:
    """Roles (fleetforge makes only node roles) get neither broad managed policies nor every parameter."""
    if type_ in {ROLE_POLICY_ATTACHMENT, POLICY_ATTACHMENT}:
        arns = [props.get("policyArn")]
    elif type_ == ROLE:
        arns = _sources(props.get("managedPolicyArns"))
        for index, inline in enumerate(_map(p) for p in _list(props.get("inlinePolicies"))):
            if inline.get("policy") is not None:
                yield from _document_problems(
                    f"inline policy {inline.get('name', index)!r}", inline["policy"]
                )
    elif type_ == ROLE_POLICY:
        yield from _document_problems("the policy", props.get("policy"))
        return
    else:
        return
    for arn in arns:
        if _policy_arn_name(arn) in BROAD_MANAGED_POLICIES:
            yield (
                f"attaches {_policy_arn_name(arn)}, which grants far more than a node needs "
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

    pulumi-gcp's queued resource node has no service-account field, so its TPU VMs run as
    <project-number>-compute@developer.gserviceaccount.com, which Google grants the project's
    Editor role unless the organization policy iam.automaticIamGrantsForDefaultServiceAccounts is
    enforced (https://cloud.google.com/compute/docs/access/service-accounts). A node that one day
    names its own account is judged by that account."""
    if type_ != GCP_TPU_QUEUED:
        return
    for i, spec in enumerate(_list(_map(props.get("tpu")).get("nodeSpecs"))):
        node = _map(_map(spec).get("node"))
        email = str(_map(node.get("serviceAccount")).get("email") or "")
        if _default_compute_account(email):
            yield (
                f"tpu.nodeSpecs[{i}] ({_map(spec).get('nodeId') or 'a slice'}) runs as the project's default "
                "compute service account, which holds the project's Editor role unless that grant is "
                "removed: remove roles/editor from <project-number>-compute@developer.gserviceaccount.com "
                "(or enforce the organization policy iam.automaticIamGrantsForDefaultServiceAccounts) "
                "before creating the slice, or create it outside this stack with `gcloud compute tpus "
                "queued-resources create --service-account` and the fleet's own account"
            )


# --------------------------------------------------------------------------- stack rules


def buckets_protected(resources: Sequence[Resource]) -> Iterator[tuple[Resource | None, str]]:
    """Every bucket: SSE-KMS by default, every public-access switch on, versioning enabled."""
    by_bucket: dict[str, dict[str, Mapping[str, Any]]] = {}
    for r in resources:
        if r.type in {BUCKET_SSE, BUCKET_PAB, BUCKET_VERSIONING} and isinstance(r.props.get("bucket"), str):
            by_bucket.setdefault(r.props["bucket"], {})[r.type] = r.props
    for r in resources:
        if r.type != BUCKET:
            continue
        key = r.props.get("bucket") or r.id or r.name
        attached = by_bucket.get(str(key), {})
        sse = attached.get(BUCKET_SSE) or _map(r.props.get("serverSideEncryptionConfiguration"))
        sse_rules = _list(sse.get("rules")) or ([sse["rule"]] if sse.get("rule") else [])  # inline: one rule
        algorithms = {
            _map(_map(rule).get("applyServerSideEncryptionByDefault")).get("sseAlgorithm")
            for rule in sse_rules
        }
        if not algorithms & KMS_ALGORITHMS:
            yield r, "has no default SSE-KMS encryption"
        pab = attached.get(BUCKET_PAB, {})
        switches = ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls", "restrictPublicBuckets")
        off = [s for s in switches if not _true(pab.get(s))]
        if off:
            yield r, f"public access block misses {', '.join(off)}"
        versioning = _map(attached.get(BUCKET_VERSIONING, {}).get("versioningConfiguration"))
        inline = _map(r.props.get("versioning"))
        if versioning.get("status") != "Enabled" and not _true(inline.get("enabled")):
            yield r, "versioning is not enabled"


def gcp_buckets_protected(resources: Sequence[Resource]) -> Iterator[tuple[Resource | None, str]]:
    """Every GCS bucket: uniform bucket-level access, public access prevention enforced, versioned.

    Encryption is not judged here: GCS encrypts every object at rest with Google's keys, and a
    customer key (CMEK) is judged with the fleet's other stores by gcp-cmek-everywhere."""
    for r in resources:
        if r.type != GCP_BUCKET:
            continue
        if not _true(r.props.get("uniformBucketLevelAccess")):
            yield r, "uniformBucketLevelAccess is not true (object ACLs could make objects public)"
        if r.props.get("publicAccessPrevention") != "enforced":
            yield r, f"publicAccessPrevention is {r.props.get('publicAccessPrevention')!r}; needs 'enforced'"
        if not _true(_map(r.props.get("versioning")).get("enabled")):
            yield r, "versioning.enabled is not true"


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


def _azure_ids(value: Any) -> list[Any]:
    return [_map(ref).get("id") for ref in _list(value)]


def azure_public_ips_only_for_nat(resources: Sequence[Resource]) -> Iterator[tuple[Resource | None, str]]:
    """A PublicIPAddress may exist only as a NAT gateway's egress address. Matched by id where the
    ids are known; at preview they are not, so then each NAT gateway reference covers one address."""
    addresses = [r for r in resources if r.type == AZURE_PUBLIC_IP]
    refs = [
        ref
        for r in resources
        if r.type == AZURE_NAT_GATEWAY
        for ref in _azure_ids(r.props.get("publicIpAddresses"))
    ]
    known = [ref for ref in refs if isinstance(ref, str) and ref]
    unknown = len(refs) - len(known)
    by_id = {a.id for a in addresses if a.id}
    # Known references no address claims by id may be an address whose own id is not known yet.
    unclaimed = len([ref for ref in known if ref not in by_id])
    for address in addresses:
        if address.id and address.id in known:
            continue
        if address.id is None and unclaimed > 0:
            unclaimed -= 1
            continue
        if unknown > 0:
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
        "bucket-protected", "Buckets are SSE-KMS encrypted, versioned and never public.", buckets_protected
    ),
    StackRule("one-instance-type", "A fleet is homogeneous: one instance type.", one_instance_type),
    StackRule(
        "gcs-bucket-protected",
        "GCS buckets use uniform bucket-level access, enforced public access prevention and versioning.",
        gcp_buckets_protected,
    ),
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
        for message in rule.check(r.type, r.props)
    ]


def advise(resources: Iterable[Resource]) -> list[Violation]:
    """What the advisory rules report, in resource order: a warning, never a refusal."""
    return _resource_violations(list(resources), ADVISORY_RULES)


def check(resources: Iterable[Resource]) -> list[Violation]:
    """Every violation of every mandatory rule, resource rules first, in resource order."""
    resources = list(resources)
    found = _resource_violations(resources, RESOURCE_RULES)
    for stack_rule in STACK_RULES:
        for culprit, message in stack_rule.check(resources):
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
