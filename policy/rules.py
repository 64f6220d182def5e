"""fleetforge's policy rules as pure functions over resources (type token, name, inputs).

The same functions judge `fleetforge plan`'s recorded resources and, wrapped by policy/__main__.py,
every resource `pulumi preview`/`up` would create (CrossGuard). Properties use Pulumi's wire names
(camelCase), which is what both the mocks record and CrossGuard passes. Standard library only: the
policy pack runs in its own virtual environment, and tests call these without starting a server.

Resource rules see one resource; stack rules see them all (a bucket's encryption and versioning are
separate resources; homogeneity is a property of the whole fleet). Unknown resource types pass the
resource rules that do not concern them, except `required-tags`, which fails closed: every `aws:`
type must carry the tags unless it is listed as untaggable below.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

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
    return list(value) if isinstance(value, list | tuple) else []


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _is_internet(cidr: Any) -> bool:
    if not isinstance(cidr, str):
        return False
    try:
        return ipaddress.ip_network(cidr, strict=False).prefixlen == 0
    except ValueError:
        return False


def _covers_ssh(protocol: Any, from_port: Any, to_port: Any) -> bool:
    if str(protocol) in {"-1", "all"}:
        return True
    if str(protocol) not in {"tcp", "6"}:
        return False
    try:
        low, high = int(from_port), int(to_port)
    except (TypeError, ValueError):
        return True  # a TCP rule without ports opens all of them
    return low <= 22 <= high or (low, high) == (-1, -1)


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


def ssh_not_from_internet(type_: str, props: Mapping[str, Any]) -> Iterator[str]:
    if type_ == SG_INGRESS:
        sources = [props.get("cidrIpv4"), props.get("cidrIpv6")]
        if any(map(_is_internet, sources)) and _covers_ssh(
            props.get("ipProtocol"), props.get("fromPort"), props.get("toPort")
        ):
            yield "opens SSH (port 22) to the internet; allow a named CIDR or the bastion's group"
    elif type_ == SG_RULE and props.get("type") == "ingress":
        cidrs = _list(props.get("cidrBlocks")) + _list(props.get("ipv6CidrBlocks"))
        if any(map(_is_internet, cidrs)) and _covers_ssh(
            props.get("protocol"), props.get("fromPort"), props.get("toPort")
        ):
            yield "opens SSH (port 22) to the internet; allow a named CIDR or the bastion's group"
    elif type_ == SG:
        for rule in (_map(r) for r in _list(props.get("ingress"))):
            cidrs = _list(rule.get("cidrBlocks")) + _list(rule.get("ipv6CidrBlocks"))
            if any(map(_is_internet, cidrs)) and _covers_ssh(
                rule.get("protocol"), rule.get("fromPort"), rule.get("toPort")
            ):
                yield "an inline ingress rule opens SSH (port 22) to the internet"


def required_tags(type_: str, props: Mapping[str, Any]) -> Iterator[str]:
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


def one_instance_type(resources: Sequence[Resource]) -> Iterator[tuple[Resource | None, str]]:
    """A fleet is one SKU: every launch template, instance and group override names the same type."""
    seen: dict[str, Resource] = {}
    for r in resources:
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
    ResourceRule("required-tags", f"Taggable resources carry {', '.join(REQUIRED_TAGS)}.", required_tags),
)
STACK_RULES: tuple[StackRule, ...] = (
    StackRule(
        "bucket-protected", "Buckets are SSE-KMS encrypted, versioned and never public.", buckets_protected
    ),
    StackRule("one-instance-type", "A fleet is homogeneous: one instance type.", one_instance_type),
)


def check(resources: Iterable[Resource]) -> list[Violation]:
    """Every violation of every rule, resource rules first, in resource order."""
    resources = list(resources)
    found = [
        Violation(rule.name, r.type, r.name, message, r.urn)
        for r in resources
        for rule in RESOURCE_RULES
        for message in rule.check(r.type, r.props)
    ]
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
