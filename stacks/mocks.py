"""Running a Pulumi program under `pulumi.runtime.set_mocks`: no engine, no CLI, no cloud.

Everything fleetforge knows about Pulumi's mock runtime lives here, because it leans on internals
that are global to the process and must be reset between runs (`fleetforge plan` runs twice in one
test session, and the benchmark runs it many times):

- `settings.SETTINGS` holds the monitor, the RPC manager and the set of pending outputs; its fields
  are context variables. `reset_options` replaces them and clears the root stack resource (`ROOT`),
  so `set_mocks` then builds a fresh `Stack` with a fresh `MockMonitor`.
- Config is the `CONFIG` context variable, replaced whole by `set_all_config`.
- Outputs and RPCs are asyncio tasks bound to the event loop that was current when they were
  created, so each run gets its own loop, set before `set_mocks` builds the stack.

Each run happens inside a fresh `contextvars.Context`, so none of these variables leak into the
caller or the next run; the loop is drained and closed afterwards.
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import importlib
import logging
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pulumi
from pulumi.runtime import config as runtime_config
from pulumi.runtime import mocks as runtime_mocks
from pulumi.runtime import settings as runtime_settings
from pulumi.runtime import stack as runtime_stack

from stacks import azure_image

PROJECT = "fleetforge"
STACK = "plan"
MOCK_ACCOUNT = "123456789012"
MOCK_ROOT_DEVICE = "/dev/sda1"
MOCK_PROJECT = "fleetforge-plan"
MOCK_PROJECT_NUMBER = "271828182845"  # the mock project's number: service agents are named after it
# A fixed subscription and tenant, so Azure ids in a plan are stable and well formed.
MOCK_SUBSCRIPTION = "00000000-0000-4000-8000-00000000f1ee"
MOCK_TENANT = "00000000-0000-4000-8000-0000000000aa"
# What the plan's Azure image lookup answers (stacks.azure_image): a version of the shape Azure
# publishes, so the plan shows an exact pin where `pulumi up` would write the newest one.
MOCK_AZURE_IMAGE_VERSIONS = ("22.04.2024102301", "22.04.2025030701")
# Stack config a plan supplies when the spec leaves it to `pulumi config`: the Azure stack's admin
# SSH key (a public key whose private half was thrown away: a plan never logs in anywhere).
PLAN_CONFIG = {
    "fleetforge:sshPublicKey": (
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHm3Ij6DJEdqPQBHtoXuUo3hJZc7CrHD8dSv/TWedJb3 fleetforge-plan"
    ),
}
# The provider modules the AWS stack uses. Loading them warns about classes the stack never uses
# (s3.BucketV2 and friends); load them once here, quietly, instead of inside every test's output.
AWS_MODULES = ("autoscaling", "ec2", "fsx", "iam", "kms", "s3", "ssm", "vpc")

# The same for the GCP stack's modules, when the GCP provider is installed.
GCP_MODULES = (
    "compute",
    "kms",
    "lustre",
    "organizations",
    "projects",
    "serviceaccount",
    "servicenetworking",
    "storage",
    "tpu",
)

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    for _module in AWS_MODULES:
        # Reading any public attribute makes the lazily imported module load.
        getattr(importlib.import_module(f"pulumi_aws.{_module}"), "get_tags", None)
    for _module in GCP_MODULES:
        try:
            getattr(importlib.import_module(f"pulumi_gcp.{_module}"), "get_tags", None)
        except ImportError:
            break


class MockMissingError(RuntimeError):
    """The program called a provider function the mocks do not answer: a bug to fix here."""


@dataclass
class Recorded:
    type: str
    name: str
    inputs: dict[str, Any]
    id: str
    urn: str = ""  # filled in after the run: it encodes the parent chain (parent-type$type)
    # URNs of the resources this one waits for (explicit depends_on and those its inputs come
    # from), filled in after the run: the mocks' new_resource is never told them.
    dependencies: tuple[str, ...] = ()


def _plain(value: Any) -> Any:
    """Inputs cross the mock monitor as protobuf Structs, whose numbers are all doubles; give back
    the integers the program wrote, so plans read `deviceIndex: 1`, not `1.0`."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _digest(*parts: str, length: int = 17) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:length]


# Id prefixes EC2 and friends use, so a plan reads like the real thing.
_ID_PREFIX = {
    "aws:ec2/vpc:Vpc": "vpc",
    "aws:ec2/subnet:Subnet": "subnet",
    "aws:ec2/internetGateway:InternetGateway": "igw",
    "aws:ec2/eip:Eip": "eipalloc",
    "aws:ec2/natGateway:NatGateway": "nat",
    "aws:ec2/routeTable:RouteTable": "rtb",
    "aws:ec2/routeTableAssociation:RouteTableAssociation": "rtbassoc",
    "aws:ec2/vpcEndpoint:VpcEndpoint": "vpce",
    "aws:ec2/securityGroup:SecurityGroup": "sg",
    "aws:ec2/defaultSecurityGroup:DefaultSecurityGroup": "sg",
    "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule": "sgr",
    "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule": "sgr",
    "aws:ec2/launchTemplate:LaunchTemplate": "lt",
    "aws:fsx/lustreFileSystem:LustreFileSystem": "fs",
    "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation": "dra",
}


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list | tuple):
        return [s for v in value for s in _strings(v)]
    return []


@dataclass
class FleetMocks(pulumi.runtime.Mocks):
    """Records every resource the program registers and answers the provider functions it calls
    with deterministic, plausible values. Mocks do not auto-name, so names, ids and ARNs are made
    here the way AWS would shape them."""

    region: str
    zone: str
    vpc_id: str | None = None
    recorded: list[Recorded] = field(default_factory=list)
    # Every string the mocks made up (ids, physical names, ARNs, addresses, image names): a plan
    # marks outputs built from them as placeholders the cloud assigns at deploy time.
    generated: set[str] = field(default_factory=set)

    def azure_image_versions(
        self, subscription_id: str, location: str, image: azure_image.MarketplaceImage
    ) -> list[str]:
        versions = list(MOCK_AZURE_IMAGE_VERSIONS)
        self.generated.update(versions)
        return versions

    def new_resource(self, args: runtime_mocks.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        rid, state = self._new_resource(args)
        self._remember(state, _plain(dict(args.inputs)))
        return rid, state

    def call(self, args: runtime_mocks.MockCallArgs) -> tuple[dict[str, Any], list[tuple[str, str]] | None]:
        result, failures = self._call(args)
        self._remember(result, _plain(dict(args.args)))
        return result, failures

    def _remember(self, made: Any, given: Any) -> None:
        known = set(_strings(given)) | {self.region, self.zone}
        self.generated.update(v for v in _strings(made) if len(v) >= 6 and v not in known)

    def _new_resource(self, args: runtime_mocks.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        if args.typ.startswith("gcp:"):
            return self._new_gcp_resource(args)
        if args.typ.startswith("azure-native:"):
            return self._new_azure_resource(args)
        inputs = _plain(dict(args.inputs))
        typ, logical = args.typ, args.name
        name = self._physical_name(typ, logical, inputs)
        rid = self._id(typ, logical, name, inputs)
        self.recorded.append(Recorded(typ, logical, inputs, rid))
        state: dict[str, Any] = {**inputs, "id": rid, "name": name, "arn": self._arn(typ, name, rid)}
        if typ == "aws:ec2/launchTemplate:LaunchTemplate":
            state.update(latestVersion=1, defaultVersion=1)
        elif typ == "aws:fsx/lustreFileSystem:LustreFileSystem":
            state.update(dnsName=f"{rid}.fsx.{self.region}.amazonaws.com", mountName=_digest(rid, length=8))
        elif typ == "aws:s3/bucket:Bucket":
            state.update(bucket=name, bucketDomainName=f"{name}.s3.amazonaws.com")
        elif typ == "aws:kms/key:Key":
            state.update(keyId=rid)
        elif typ == "aws:ec2/eip:Eip":
            state.update(allocationId=rid, publicIp="192.0.2.10")  # documentation range
        return rid, state

    def _new_gcp_resource(self, args: runtime_mocks.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        """GCP resources: ids are the API's relative resource names, self links the v1 URLs of them."""
        inputs = _plain(dict(args.inputs))
        typ, logical = args.typ, args.name
        name = self._physical_name(typ, logical, inputs)
        if typ == "gcp:compute/instanceTemplate:InstanceTemplate" and isinstance(
            inputs.get("namePrefix"), str
        ):
            name = f"{inputs['namePrefix']}{_digest(typ, logical, length=12)}"
        rid = _gcp_id(typ, name, self.region, self.zone, inputs)
        state: dict[str, Any] = {**inputs, "id": rid, "name": name, "project": MOCK_PROJECT}
        if typ.startswith("gcp:compute/"):
            state["selfLink"] = f"{GCP_COMPUTE_API}/{rid}"
        if typ == "gcp:compute/instanceTemplate:InstanceTemplate":
            state["selfLinkUnique"] = f"{GCP_COMPUTE_API}/{rid}?uniqueId={_digest(rid, length=19)}"
        elif typ == "gcp:compute/instanceGroupManager:InstanceGroupManager":
            state["instanceGroup"] = (
                f"{GCP_COMPUTE_API}/projects/{MOCK_PROJECT}/zones/{self.zone}/instanceGroups/{name}"
            )
        elif typ == "gcp:serviceaccount/account:Account":
            email = f"{inputs.get('accountId')}@{MOCK_PROJECT}.iam.gserviceaccount.com"
            state.update(email=email, member=f"serviceAccount:{email}", uniqueId=_digest(email, length=21))
        elif typ == "gcp:storage/bucket:Bucket":
            state.update(url=f"gs://{name}", selfLink=f"https://www.googleapis.com/storage/v1/b/{name}")
        elif typ == "gcp:lustre/instance:Instance":
            # A documentation-range address: the mount source's shape, not a real server.
            state["mountPoint"] = f"192.0.2.20@tcp:/{inputs.get('filesystem')}"
        elif typ == "gcp:projects/serviceIdentity:ServiceIdentity":
            # The API's primary service agent: service-<number>@gcp-sa-<api>.iam.gserviceaccount.com
            email = _gcp_agent(f"gcp-sa-{str(inputs.get('service')).split('.')[0]}")
            state.update(email=email, member=f"serviceAccount:{email}")
        self.recorded.append(Recorded(typ, logical, inputs, rid))
        return rid, state

    def _new_azure_resource(self, args: runtime_mocks.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        """Azure resources: ids are ARM resource ids under the mock subscription."""
        inputs = _plain(dict(args.inputs))
        typ, logical = args.typ, args.name
        name = _azure_name(typ, logical, inputs)
        rid = _azure_id(typ, name, inputs)
        state: dict[str, Any] = {**inputs, "id": rid, "name": name}
        identity = inputs.get("identity")
        if isinstance(identity, dict) and isinstance(identity.get("userAssignedIdentities"), list):
            # Azure takes the identities as a list of ids and answers with a map id -> details.
            ids = identity["userAssignedIdentities"]
            state["identity"] = {**identity, "userAssignedIdentities": {i: {} for i in ids}}
        if typ == "azure-native:managedidentity:UserAssignedIdentity":
            state.update(
                principalId=_uuid(rid, "principal"), clientId=_uuid(rid, "client"), tenantId=MOCK_TENANT
            )
        elif typ == "azure-native:storagecache:AmlFilesystem":
            # A documentation-range address: the mount source's shape, not a real server.
            state["clientInfo"] = {"mgsAddress": "192.0.2.30", "mountCommand": ""}
        elif typ == "azure-native:storage:StorageAccount":
            state["primaryEndpoints"] = {"blob": f"https://{name}.blob.core.windows.net/"}
        self.recorded.append(Recorded(typ, logical, inputs, rid))
        return rid, state

    def _call(self, args: runtime_mocks.MockCallArgs) -> tuple[dict[str, Any], list[tuple[str, str]] | None]:
        a = args.args
        if args.token == "gcp:organizations/getClientConfig:getClientConfig":
            return {
                "id": MOCK_PROJECT,
                "project": MOCK_PROJECT,
                "region": self.region,
                "zone": self.zone,
                "accessToken": "",
            }, []
        if args.token == "gcp:organizations/getProject:getProject":
            project = str(a.get("projectId") or MOCK_PROJECT)
            return {
                "id": f"projects/{project}",
                "projectId": project,
                "name": project,
                "number": MOCK_PROJECT_NUMBER,
                "labels": {},
            }, []
        if args.token == "gcp:storage/getProjectServiceAccount:getProjectServiceAccount":
            email = _gcp_agent("gs-project-accounts")
            return {
                "id": email,
                "emailAddress": email,
                "member": f"serviceAccount:{email}",
                "project": str(a.get("project") or MOCK_PROJECT),
            }, []
        if args.token == "gcp:compute/getImage:getImage":
            project = str(a.get("project") or MOCK_PROJECT)
            family = str(a.get("family") or a.get("name") or "image")
            image = f"{family}-v{_digest(project, family, length=8)}"
            rid = f"projects/{project}/global/images/{image}"
            return {
                "id": rid,
                "name": image,
                "family": family,
                "project": project,
                "selfLink": f"{GCP_COMPUTE_API}/{rid}",
                "status": "READY",
            }, []
        if args.token == "azure-native:authorization:getClientConfig":
            return {
                "clientId": _uuid("plan", "client"),
                "objectId": _uuid("plan", "object"),
                "subscriptionId": MOCK_SUBSCRIPTION,
                "tenantId": MOCK_TENANT,
            }, []
        if args.token == "aws:index/getPartition:getPartition":
            return {
                "id": "aws",
                "partition": "aws",
                "dnsSuffix": "amazonaws.com",
                "reverseDnsPrefix": "com.amazonaws",
            }, []
        if args.token == "aws:index/getCallerIdentity:getCallerIdentity":
            arn = f"arn:aws:iam::{MOCK_ACCOUNT}:user/fleetforge-plan"
            return {
                "id": MOCK_ACCOUNT,
                "accountId": MOCK_ACCOUNT,
                "arn": arn,
                "userId": "AIDAFLEETFORGEPLAN",
            }, []
        if args.token == "aws:ssm/getParameter:getParameter":
            name = str(a.get("name"))
            ami = f"ami-{_digest(name)}"
            arn = f"arn:aws:ssm:{self.region}::parameter{name}"
            return {
                "id": name,
                "name": name,
                "arn": arn,
                "type": "String",
                "value": ami,
                "insecureValue": ami,
                "version": 1,
                "withDecryption": False,
            }, []
        if args.token == "aws:ec2/getAmi:getAmi":
            ids = [
                v for f in a.get("filters", []) if f.get("name") == "image-id" for v in f.get("values", [])
            ]
            image = ids[0] if ids else f"ami-{_digest('latest')}"
            return {
                "id": image,
                "imageId": image,
                "architecture": "x86_64",
                "rootDeviceName": MOCK_ROOT_DEVICE,
                "rootDeviceType": "ebs",
            }, []
        if args.token == "aws:ec2/getSubnet:getSubnet":
            subnet = str(a.get("id"))
            vpc = self.vpc_id or f"vpc-{_digest(subnet)}"
            return {
                "id": subnet,
                "vpcId": vpc,
                "availabilityZone": self.zone,
                "mapPublicIpOnLaunch": False,
            }, []
        raise MockMissingError(f"fleetforge plan has no mock for provider function {args.token}")

    def _physical_name(self, typ: str, logical: str, inputs: Mapping[str, Any]) -> str:
        if typ == "aws:s3/bucket:Bucket":
            explicit = inputs.get("bucket")
            prefix = inputs.get("bucketPrefix")
        else:
            explicit = inputs.get("name")
            prefix = inputs.get("namePrefix")
        if isinstance(explicit, str) and explicit:
            return explicit
        if isinstance(prefix, str) and prefix:
            return f"{prefix}{_digest(typ, logical, length=12)}"
        # Pulumi's auto-naming: the logical name plus a random suffix (here: a stable one).
        return f"{logical}-{_digest(typ, logical, length=7)}"

    def _id(self, typ: str, logical: str, name: str, inputs: Mapping[str, Any]) -> str:
        if typ in _ID_PREFIX:
            return f"{_ID_PREFIX[typ]}-{_digest(typ, logical)}"
        if typ == "aws:kms/key:Key":
            h = _digest(typ, logical, length=32)
            return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
        if (
            typ.startswith("aws:s3/")
            and typ != "aws:s3/bucket:Bucket"
            and isinstance(inputs.get("bucket"), str)
        ):
            return str(inputs["bucket"])
        return name

    def _arn(self, typ: str, name: str, rid: str) -> str:
        service = typ.split(":")[1].split("/")[0] if typ.startswith("aws:") else "pulumi"
        if service == "iam":
            kind = "instance-profile" if "instanceProfile" in typ else "role"
            return f"arn:aws:iam::{MOCK_ACCOUNT}:{kind}/{name}"
        if typ == "aws:s3/bucket:Bucket":
            return f"arn:aws:s3:::{name}"
        if service == "kms":
            return f"arn:aws:kms:{self.region}:{MOCK_ACCOUNT}:key/{rid}"
        kind = typ.rsplit(":", 1)[-1].lower()
        return f"arn:aws:{service}:{self.region}:{MOCK_ACCOUNT}:{kind}/{rid}"


GCP_COMPUTE_API = "https://www.googleapis.com/compute/v1"
# Where each GCP resource type lives, to shape its id like the API's relative resource name.
_GCP_SCOPE = {
    "gcp:compute/network:Network": "global/networks",
    "gcp:compute/globalAddress:GlobalAddress": "global/addresses",
    "gcp:compute/firewall:Firewall": "global/firewalls",
    "gcp:compute/instanceTemplate:InstanceTemplate": "global/instanceTemplates",
    "gcp:compute/subnetwork:Subnetwork": "regions/{region}/subnetworks",
    "gcp:compute/router:Router": "regions/{region}/routers",
    "gcp:compute/resourcePolicy:ResourcePolicy": "regions/{region}/resourcePolicies",
    "gcp:compute/instanceGroupManager:InstanceGroupManager": "zones/{zone}/instanceGroupManagers",
    "gcp:compute/resizeRequest:ResizeRequest": "zones/{zone}/resizeRequests",
    "gcp:tpu/v2QueuedResource:V2QueuedResource": "locations/{zone}/queuedResources",
    "gcp:lustre/instance:Instance": "locations/{zone}/instances",
    "gcp:serviceaccount/account:Account": "serviceAccounts",
}


def _gcp_agent(domain: str) -> str:
    """A Google service agent of the mock project, e.g. domain gs-project-accounts for Cloud Storage."""
    return f"service-{MOCK_PROJECT_NUMBER}@{domain}.iam.gserviceaccount.com"


def _gcp_id(typ: str, name: str, region: str, zone: str, inputs: Mapping[str, Any]) -> str:
    if typ == "gcp:projects/serviceIdentity:ServiceIdentity":
        return f"projects/{MOCK_PROJECT}/services/{inputs.get('service')}"
    if typ == "gcp:serviceaccount/account:Account":
        return f"projects/{MOCK_PROJECT}/serviceAccounts/{inputs.get('accountId')}@{MOCK_PROJECT}.iam.gserviceaccount.com"
    if typ == "gcp:lustre/instance:Instance" and isinstance(inputs.get("instanceId"), str):
        name = inputs["instanceId"]
    scope = _GCP_SCOPE.get(typ)
    if scope is None:
        return name
    return f"projects/{MOCK_PROJECT}/{scope.format(region=region, zone=zone)}/{name}"


# Each azure-native type's explicit-name input and ARM provider path (relative to its resource group).
_AZURE_TYPES: dict[str, tuple[str, str]] = {
    "azure-native:resources:ResourceGroup": ("resourceGroupName", ""),
    "azure-native:network:VirtualNetwork": ("virtualNetworkName", "Microsoft.Network/virtualNetworks"),
    "azure-native:network:NetworkSecurityGroup": (
        "networkSecurityGroupName",
        "Microsoft.Network/networkSecurityGroups",
    ),
    "azure-native:network:PublicIPAddress": ("publicIpAddressName", "Microsoft.Network/publicIPAddresses"),
    "azure-native:network:NatGateway": ("natGatewayName", "Microsoft.Network/natGateways"),
    "azure-native:compute:ProximityPlacementGroup": (
        "proximityPlacementGroupName",
        "Microsoft.Compute/proximityPlacementGroups",
    ),
    "azure-native:compute:VirtualMachineScaleSet": (
        "vmScaleSetName",
        "Microsoft.Compute/virtualMachineScaleSets",
    ),
    "azure-native:managedidentity:UserAssignedIdentity": (
        "resourceName",
        "Microsoft.ManagedIdentity/userAssignedIdentities",
    ),
    "azure-native:storage:StorageAccount": ("accountName", "Microsoft.Storage/storageAccounts"),
    "azure-native:storagecache:AmlFilesystem": ("amlFilesystemName", "Microsoft.StorageCache/amlFilesystems"),
}


def _azure_name(typ: str, logical: str, inputs: Mapping[str, Any]) -> str:
    key = _AZURE_TYPES.get(typ, ("name", ""))[0]
    explicit = inputs.get(key)
    if isinstance(explicit, str) and explicit:
        return explicit
    # azure-native auto-names from the logical name plus a random suffix (here: a stable one).
    return f"{logical}{_digest(typ, logical, length=8)}"


def _azure_id(typ: str, name: str, inputs: Mapping[str, Any]) -> str:
    sub = f"/subscriptions/{MOCK_SUBSCRIPTION}"
    if typ == "azure-native:resources:ResourceGroup":
        return f"{sub}/resourceGroups/{name}"
    if typ == "azure-native:authorization:RoleAssignment":
        return f"{inputs.get('scope', sub)}/providers/Microsoft.Authorization/roleAssignments/{_uuid(name)}"
    if typ == "azure-native:authorization:RoleDefinition":
        return f"{inputs.get('scope', sub)}/providers/Microsoft.Authorization/roleDefinitions/{_uuid(name)}"
    rg = f"{sub}/resourceGroups/{inputs.get('resourceGroupName', 'rg')}"
    if typ == "azure-native:network:Subnet":
        return f"{rg}/providers/Microsoft.Network/virtualNetworks/{inputs.get('virtualNetworkName')}/subnets/{name}"
    account = f"{rg}/providers/Microsoft.Storage/storageAccounts/{inputs.get('accountName')}"
    if typ == "azure-native:storage:BlobContainer":
        return f"{account}/blobServices/default/containers/{inputs.get('containerName', name)}"
    if typ == "azure-native:storage:BlobServiceProperties":
        return f"{account}/blobServices/default"
    if typ == "azure-native:storage:ManagementPolicy":
        return f"{account}/managementPolicies/default"
    path = _AZURE_TYPES.get(typ, ("", f"Microsoft.Fleetforge/{typ.rsplit(':', 1)[-1]}"))[1]
    return f"{rg}/providers/{path}/{name}"


def _uuid(*parts: str) -> str:
    h = _digest(*parts, length=32)
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


class _Monitor(runtime_mocks.MockMonitor):
    """Pulumi's mock monitor, keeping each registration's dependencies by URN."""

    def __init__(self, mocks: pulumi.runtime.Mocks) -> None:
        super().__init__(mocks)
        self.dependencies: dict[str, tuple[str, ...]] = {}

    def RegisterResource(self, request: Any) -> Any:
        urn = self.make_urn(request.parent, request.type, request.name)
        self.dependencies[urn] = tuple(request.dependencies)
        return super().RegisterResource(request)  # type: ignore[no-untyped-call]  # Pulumi's is unannotated


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@dataclass(frozen=True)
class Run:
    outputs: dict[str, Any]
    warnings: list[str]


def run(program: Callable[[], None], mocks: FleetMocks, config: Mapping[str, str]) -> Run:
    """Run `program` as a Pulumi stack under `mocks` with `config`; return the stack outputs."""
    return contextvars.Context().run(_run_isolated, program, mocks, {**PLAN_CONFIG, **config})


def _run_isolated(program: Callable[[], None], mocks: FleetMocks, config: dict[str, str]) -> Run:
    logger = logging.getLogger(f"fleetforge.plan.pulumi.{id(mocks)}")
    logger.propagate = False  # Pulumi's warnings are returned to the caller, not printed here
    collect = _Collect()
    logger.addHandler(collect)
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        azure_image.LOOKUP.set(mocks.azure_image_versions)
        runtime_settings.reset_options(project=PROJECT, stack=STACK, preview=False)
        runtime_config.set_all_config(config, [])
        monitor = _Monitor(mocks)
        runtime_mocks.set_mocks(
            mocks, project=PROJECT, stack=STACK, preview=False, logger=logger, monitor=monitor
        )
        root = runtime_settings.get_root_resource()
        if not isinstance(root, runtime_stack.Stack):
            raise RuntimeError("pulumi.runtime.set_mocks did not create a root stack")

        async def program_then_outputs() -> dict[str, Any]:
            program()
            await runtime_stack.wait_for_rpcs()
            resolved = await pulumi.Output.from_input(dict(root.outputs)).future()
            return dict(resolved or {})

        outputs = loop.run_until_complete(program_then_outputs())
        _attach_urns(mocks.recorded, monitor.get_registered_resources(), monitor.dependencies)
        return Run(outputs=outputs, warnings=list(collect.messages))
    finally:
        _drain(loop)
        loop.close()
        asyncio.set_event_loop(None)
        logger.removeHandler(collect)


def _attach_urns(
    recorded: list[Recorded], registered: Mapping[str, Any], dependencies: Mapping[str, tuple[str, ...]]
) -> None:
    by_key = {}
    for urn in registered:
        qualified_type, name = urn.split("::")[-2:]
        by_key[(qualified_type.split("$")[-1], name)] = urn
    for r in recorded:
        r.urn = by_key.get((r.type, r.name), "")
        r.dependencies = dependencies.get(r.urn, ())


def _drain(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel what a failed program left pending, and let it finish, so nothing outlives the run."""
    pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for task in pending:
        task.cancel()
    if pending:
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
