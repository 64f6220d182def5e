"""GPU nodes: a service account, one instance template, and one managed instance group.

One zonal MIG holds every node and spare, so 8 and 1,024 nodes make the same resources, and
replacing a rejected node is the group's job (`recreateInstances` keeps its name). Choices:

- Identity: a dedicated service account per fleet with logging and monitoring writer roles on
  the project and the checkpoint bucket's object roles (stacks.gcp_storage); never the Compute
  Engine default account (Editor). Its scopes name those APIs only, not `cloud-platform`.
- Image: `spec.image`, or the newest image of Ubuntu's accelerator family with NVIDIA's driver,
  read at deploy time with `compute.get_image` and pinned into the template by its self link, so
  a replacement node boots what the fleet was burnt in on; an image change is an explicit
  `pulumi up` with a visible diff. The family is never put in the template itself.
- GPU VMs cannot live-migrate: `on_host_maintenance = TERMINATE`, no automatic restart for spot,
  flex-start and reservation-bound VMs (the group recreates them).
- Shielded VM (secure boot, vTPM, integrity monitoring): the accelerator images' drivers are signed.
- Boot disk: Hyperdisk Balanced (the disk A3 Ultra and A4 take, and A3 High/Mega accept), encrypted
  with the fleet's KMS key when the spec gives one, once the Compute Engine service agent may use
  it (stacks.gcp_keys).
- NICs one per catalog slot (stacks.gcp_layout), no access config anywhere: no external IPs.
- Capacity: a named reservation by specific affinity, which A3 Ultra and A4 (the catalog's
  `reservation-block` SKUs) consume as RESERVATION_BOUND VMs deleted at the reservation's end, and
  other SKUs as STANDARD VMs; spot as SPOT with DELETE on preemption;
  queued as Dynamic Workload Scheduler flex-start: FLEX_START VMs, no reservation, a group created
  empty and one resize request for the whole fleet, which GCP fulfils all at once or not at all.
- Placement: a compact placement policy when the catalog says the SKU uses one and the capacity is
  on-demand or spot; reservations (A3 Ultra / A4 blocks) carry their own placement and
  flex-start places a request's VMs itself.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from stacks import gcp_keys
from stacks.gcp_context import GROUP_LABEL, Context
from stacks.gcp_layout import NicPlan
from stacks.gcp_network import Networks

# Google's Cluster Toolkit blueprint catalog runs A3 Ultra and A4 on this family of this project
# (docs.cloud.google.com/cluster-toolkit/docs/setup/cluster-blueprint-catalog); the 550 and 580
# branches are published the same way.
IMAGE_PROJECT = "ubuntu-os-accelerator-images"
IMAGE_FAMILY = "ubuntu-accelerator-2204-amd64-with-nvidia-570"
BOOT_DISK_GIB = 512  # image plus container images and logs; data lives on Lustre
BOOT_DISK_TYPE = "hyperdisk-balanced"
NODE_ROLES = ("roles/logging.logWriter", "roles/monitoring.metricWriter")
NODE_SCOPES = (
    "https://www.googleapis.com/auth/devstorage.read_write",
    "https://www.googleapis.com/auth/logging.write",
    "https://www.googleapis.com/auth/monitoring.write",
)
RESERVATION_KEY = "compute.googleapis.com/reservation-name"
# The catalog's placement for SKUs whose reserved capacity comes in reservation blocks (A3 Ultra, A4).
RESERVATION_BLOCK = "reservation-block"
ACCOUNT_ID_MAX = 30  # IAM's limit on a service account id
ACCOUNT_SUFFIX = "-nodes"
ACCOUNT_DIGEST = 8  # hex characters of the fleet name's SHA-256 in a long name's id


@dataclass(frozen=True)
class Identity:
    account: gcp.serviceaccount.Account
    member: pulumi.Output[str]


@dataclass(frozen=True)
class Compute:
    group: gcp.compute.InstanceGroupManager
    template: gcp.compute.InstanceTemplate
    placement: gcp.compute.ResourcePolicy | None
    resize: gcp.compute.ResizeRequest | None
    min_size: int
    max_size: int
    desired: int


def account_id(fleet: str) -> str:
    """The nodes' service account id, unique per fleet name.

    IAM takes 6 to 30 characters matching `[a-z]([-a-z0-9]*[a-z0-9])` and answers 409 for an id
    the project already holds
    (https://cloud.google.com/iam/docs/reference/rest/v1/projects.serviceAccounts/create). A fleet
    name (1 to 40 characters, fleet.spec) of up to 24 keeps `<name>-nodes`, the id it has always
    had, so an existing fleet's account is not replaced. A longer name is cut to 21 characters and
    given 8 hex characters of its full name's SHA-256, so two fleets sharing a prefix get two
    accounts. The two forms never meet: one ends in `-nodes`, the other in hex digits.
    """
    if len(fleet) <= ACCOUNT_ID_MAX - len(ACCOUNT_SUFFIX):
        return f"{fleet}{ACCOUNT_SUFFIX}"
    digest = hashlib.sha256(fleet.encode()).hexdigest()[:ACCOUNT_DIGEST]
    return f"{fleet[: ACCOUNT_ID_MAX - ACCOUNT_DIGEST - 1].rstrip('-')}-{digest}"


def identity(ctx: Context) -> Identity:
    account = gcp.serviceaccount.Account(
        ctx.name("nodes-sa"),
        gcp.serviceaccount.AccountArgs(
            account_id=account_id(ctx.args.name),
            display_name=f"fleetforge {ctx.args.name} nodes",
            description="Fleet nodes: write logs and metrics, read and write checkpoints; nothing else",
        ),
        ctx.opts(),
    )
    member = account.email.apply(lambda e: f"serviceAccount:{e}")
    for role in NODE_ROLES:
        gcp.projects.IAMMember(
            ctx.name(f"nodes-{role.split('/')[-1].replace('.', '-').lower()}"),
            gcp.projects.IAMMemberArgs(project=ctx.project, role=role, member=member),
            ctx.opts(),
        )
    return Identity(account, member)


def nodes(ctx: Context, net: Networks, who: Identity) -> Compute:
    args = ctx.args
    image = (
        args.image
        if args.image is not None
        else gcp.compute.get_image_output(
            family=IMAGE_FAMILY, project=IMAGE_PROJECT, opts=ctx.invoke_opts()
        ).self_link
    )
    placement = _placement(ctx)
    # The group's VMs fail to start while the Compute Engine service agent cannot use the boot
    # disks' key: the template and the group wait for its grant.
    key_grant = gcp_keys.compute_grant(ctx)
    waits_for: list[pulumi.Resource] | None = [key_grant] if key_grant is not None else None
    template = gcp.compute.InstanceTemplate(
        ctx.name("template"),
        gcp.compute.InstanceTemplateArgs(
            name_prefix=f"{args.name[:36]}-",
            description=f"fleetforge {args.name}: {args.sku.sku} nodes",
            machine_type=args.sku.machine_type,
            region=args.region,
            disks=[
                gcp.compute.InstanceTemplateDiskArgs(
                    boot=True,
                    auto_delete=True,
                    source_image=image,
                    disk_type=BOOT_DISK_TYPE,
                    disk_size_gb=BOOT_DISK_GIB,
                    disk_encryption_key=(
                        gcp.compute.InstanceTemplateDiskDiskEncryptionKeyArgs(kms_key_self_link=args.kms_key)
                        if args.kms_key
                        else None
                    ),
                    labels=ctx.labels("node"),
                )
            ],
            network_interfaces=[_interface(ctx, net, nic) for nic in net.layout.nics],
            scheduling=_scheduling(ctx),
            reservation_affinity=_reservation(ctx),
            resource_policies=placement.name if placement is not None else None,  # one policy at most
            shielded_instance_config=gcp.compute.InstanceTemplateShieldedInstanceConfigArgs(
                enable_secure_boot=True, enable_vtpm=True, enable_integrity_monitoring=True
            ),
            service_account=gcp.compute.InstanceTemplateServiceAccountArgs(
                email=who.account.email, scopes=list(NODE_SCOPES)
            ),
            metadata={"enable-oslogin": "TRUE", "block-project-ssh-keys": "TRUE"},
            can_ip_forward=False,
            labels={**ctx.labels("node"), GROUP_LABEL: args.group_label},
        ),
        ctx.opts(depends_on=waits_for),
    )
    queued = args.capacity == "queued"
    group = gcp.compute.InstanceGroupManager(
        ctx.name("nodes"),
        gcp.compute.InstanceGroupManagerArgs(
            base_instance_name=args.name,
            zone=args.zone,
            description=f"fleetforge {args.name}: the fleet's nodes and hot spares",
            versions=[
                gcp.compute.InstanceGroupManagerVersionArgs(
                    name="fleet", instance_template=template.self_link
                )
            ],
            # Flex-start: the group starts empty and its resize request brings the whole fleet.
            target_size=0 if queued else args.size,
            update_policy=gcp.compute.InstanceGroupManagerUpdatePolicyArgs(
                # A template change never rolls a training fleet by itself; a replaced node keeps
                # its name and never needs surge capacity the reservation may not have.
                type="OPPORTUNISTIC",
                minimal_action="REPLACE",
                replacement_method="RECREATE",
                max_surge_fixed=0,
                max_unavailable_fixed=1,
            ),
            instance_lifecycle_policy=(
                gcp.compute.InstanceGroupManagerInstanceLifecyclePolicyArgs(
                    default_action_on_failure="DO_NOTHING"
                )
                if queued
                else None
            ),
            wait_for_instances=False,  # burn-in, not `pulumi up`, proves the fleet is whole
        ),
        # The resize request, not Pulumi, raises a queued group's size once capacity arrives.
        ctx.opts(depends_on=waits_for, ignore_changes=["targetSize"] if queued else None),
    )
    resize = None
    if queued:
        resize = gcp.compute.ResizeRequest(
            ctx.name("flex-start"),
            gcp.compute.ResizeRequestArgs(
                instance_group_manager=group.name,
                zone=args.zone,
                resize_by=args.size,
                requested_run_duration=gcp.compute.ResizeRequestRequestedRunDurationArgs(
                    seconds=str(args.run_duration_s)
                ),
                description=f"fleetforge {args.name}: the whole fleet at once",
            ),
            ctx.opts(),
        )
    return Compute(group, template, placement, resize, args.nodes, args.size, args.size)


def _interface(ctx: Context, net: Networks, nic: NicPlan) -> gcp.compute.InstanceTemplateNetworkInterfaceArgs:
    return gcp.compute.InstanceTemplateNetworkInterfaceArgs(
        network=net.networks[nic.network].id,
        subnetwork=net.subnets[nic.subnet].id,
        nic_type=nic.nic_type,
        stack_type="IPV4_ONLY",
        access_configs=[],  # no external IP on any NIC
    )


def _scheduling(ctx: Context) -> gcp.compute.InstanceTemplateSchedulingArgs:
    capacity = ctx.args.capacity
    if capacity == "spot":
        return gcp.compute.InstanceTemplateSchedulingArgs(
            provisioning_model="SPOT",
            preemptible=True,
            automatic_restart=False,
            on_host_maintenance="TERMINATE",
            instance_termination_action="DELETE",
        )
    if capacity == "queued":
        return gcp.compute.InstanceTemplateSchedulingArgs(
            provisioning_model="FLEX_START",
            automatic_restart=False,
            on_host_maintenance="TERMINATE",
            instance_termination_action="DELETE",
        )
    if capacity == "reservation" and ctx.args.sku.placement.strategy == RESERVATION_BLOCK:
        # A3 Ultra and A4 capacity is reserved by a future reservation in calendar mode or in AI
        # Hypercomputer, and VMs consume it with the reservation-bound provisioning model: they
        # target the reservation specifically (_reservation) and Compute Engine stops or deletes
        # them, by their termination action, when the reservation period ends
        # (https://cloud.google.com/compute/docs/instances/about-reservation-bound-vms). DELETE,
        # as for spot and flex-start nodes: a stopped node would keep its boot disk billed.
        return gcp.compute.InstanceTemplateSchedulingArgs(
            provisioning_model="RESERVATION_BOUND",
            automatic_restart=False,
            on_host_maintenance="TERMINATE",
            instance_termination_action="DELETE",
        )
    return gcp.compute.InstanceTemplateSchedulingArgs(
        provisioning_model="STANDARD", automatic_restart=True, on_host_maintenance="TERMINATE"
    )


def _reservation(ctx: Context) -> gcp.compute.InstanceTemplateReservationAffinityArgs:
    if ctx.args.capacity == "reservation" and ctx.args.reservation:
        return gcp.compute.InstanceTemplateReservationAffinityArgs(
            type="SPECIFIC_RESERVATION",
            specific_reservation=gcp.compute.InstanceTemplateReservationAffinitySpecificReservationArgs(
                key=RESERVATION_KEY, values=[ctx.args.reservation]
            ),
        )
    # Nothing else may silently consume a reservation meant for another fleet.
    return gcp.compute.InstanceTemplateReservationAffinityArgs(type="NO_RESERVATION")


def _placement(ctx: Context) -> gcp.compute.ResourcePolicy | None:
    sku = ctx.args.sku
    if sku.placement.strategy != "compact-placement-policy" or ctx.args.capacity not in {"on-demand", "spot"}:
        return None
    return gcp.compute.ResourcePolicy(
        ctx.name("compact"),
        gcp.compute.ResourcePolicyArgs(
            region=ctx.args.region,
            description=f"fleetforge {ctx.args.name}: keep the fabric's VMs close together",
            # No vm_count: a group's size changes (spares, replacements) and a counted policy
            # would refuse the extra VM.
            group_placement_policy=gcp.compute.ResourcePolicyGroupPlacementPolicyArgs(
                collocation="COLLOCATED"
            ),
        ),
        ctx.opts(),
    )
