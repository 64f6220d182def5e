"""GPU nodes: a user-assigned identity, one proximity placement group, and one Uniform VM scale
set per InfiniBand domain (stacks.azure_context.ib_domains).

Each scale set of an InfiniBand SKU keeps `singlePlacementGroup=true`, because InfiniBand
connects only the VMs of one placement group, which holds at most 100 VMs; its capacity counts
the spares. A fleet of 8 or of 100 nodes is one scale set; 250 is three. Choices:

- Image: `spec.image` (a marketplace URN `publisher:offer:sku:version` or an image resource id),
  or the Gen2 Ubuntu 22.04 HPC image (microsoft-dsvm:ubuntu-hpc:2204) at the newest version Azure
  publishes in the location, pinned exactly at deploy time (stacks.azure_image), never "latest":
  a replacement node boots what the fleet was burnt in on.
- SSH keys only: `disablePasswordAuthentication`, no admin password; the key comes from
  `azure.ssh_public_key` or Pulumi config `fleetforge:sshPublicKey`, and the program refuses to
  run without one.
- No public IP configuration on any NIC; accelerated networking on the one host NIC (the eight
  InfiniBand HCAs are SR-IOV devices of the SKU, not NICs in the model).
- Encryption at host for the OS disk and temp disk. Trusted Launch only for sizes Azure lists as
  supporting it (TRUSTED_LAUNCH_SKUS). Azure's "Trusted launch for Azure virtual machines" page
  (learn.microsoft.com/azure/virtual-machines/trusted-launch, "Virtual machines sizes") lists
  GPU sizes up to NC_A100_v4 and NVadsA10 v5 as supported and the ND A100 v4 sizes as "not
  supported yet"; ND H100 v5 and ND H200 v5 are in neither column, so they run with securityType
  Standard (Azure's default) until that page lists them, rather than fail to deploy.
- Capacity: spot as Spot with Delete on eviction and no price cap. No reservation on an
  InfiniBand SKU (every catalog Azure GPU SKU today): Azure attaches a capacity reservation group
  to a Uniform scale set only with singlePlacementGroup false, which InfiniBand cannot have
  (https://learn.microsoft.com/en-us/azure/virtual-machines/capacity-reservation-associate-virtual-machine-scale-set).
  Elsewhere a reservation is the group's full resource id, never a bare name (the fleet's own
  resource group is created here, so it holds no reservation made beforehand), with
  singlePlacementGroup false; nothing else consumes a reservation.
- Upgrades are Manual: a model change never rolls a training fleet by itself; overprovisioning
  off, so the group never creates extra VMs that join the fabric.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
from pulumi_azure_native import compute, managedidentity

from fleet.spec import AzureSettings
from stacks.azure_context import SSH_KEY_CONFIG, AzureFleetArgs, Context
from stacks.azure_image import DEFAULT_IMAGE, pinned_version
from stacks.azure_layout import CAPACITY_RESERVATION_GROUP_FORM, CAPACITY_RESERVATION_GROUP_ID

ADMIN_USER = "fleetforge"
OS_DISK_GIB = 256  # image plus container images and logs; data lives on Lustre
# Catalog sizes Azure documents as supporting Trusted Launch (see above): none of the ND v5 sizes.
TRUSTED_LAUNCH_SKUS: frozenset[str] = frozenset()


@dataclass(frozen=True)
class ScaleSet:
    ib_domain: int
    capacity: int
    resource: compute.VirtualMachineScaleSet
    name: str


@dataclass(frozen=True)
class Compute:
    identity: managedidentity.UserAssignedIdentity
    placement: compute.ProximityPlacementGroup
    scale_sets: list[ScaleSet]


def scale_set_name(fleet: str, domain: int) -> str:
    """`<fleet>-ib<i>`: 1-64 characters, letters/digits/-, within Azure's VMSS name rules."""
    return f"{fleet[:58]}-ib{domain}"


def identity(ctx: Context) -> managedidentity.UserAssignedIdentity:
    # The typed Args class cannot carry `resource_name` (it collides with the logical name in
    # azure-native's constructor), so the identity's name goes in as the `resource_name_` keyword.
    return managedidentity.UserAssignedIdentity(
        ctx.name("nodes-id"),
        opts=ctx.opts(),
        resource_group_name=ctx.resource_group,
        location=ctx.args.location,
        resource_name_=f"{ctx.args.name}-nodes",
        tags=ctx.tags("identity"),
    )


def nodes(
    ctx: Context, subnet_id: pulumi.Input[str], who: managedidentity.UserAssignedIdentity, key: str
) -> Compute:
    args = ctx.args
    placement = compute.ProximityPlacementGroup(
        ctx.name("ppg"),
        compute.ProximityPlacementGroupArgs(
            resource_group_name=ctx.resource_group,
            location=args.location,
            proximity_placement_group_name=f"{args.name}-ppg",
            proximity_placement_group_type="Standard",
            intent=compute.ProximityPlacementGroupPropertiesIntentArgs(vm_sizes=[args.sku.machine_type]),
            zones=ctx.zones,
            tags=ctx.tags("placement"),
        ),
        ctx.opts(),
    )
    reservation = _reservation_id(args)
    sets = []
    for domain, capacity in enumerate(args.domains):
        name = scale_set_name(args.name, domain)
        vmss = compute.VirtualMachineScaleSet(
            ctx.name(f"ib{domain}"),
            compute.VirtualMachineScaleSetArgs(
                resource_group_name=ctx.resource_group,
                location=args.location,
                vm_scale_set_name=name,
                sku=compute.SkuArgs(name=args.sku.machine_type, tier="Standard", capacity=capacity),
                orchestration_mode="Uniform",
                # A reservation needs singlePlacementGroup false, which _reservation_id allows
                # only where the fabric is not InfiniBand.
                single_placement_group=reservation is None,
                overprovision=False,
                platform_fault_domain_count=1,
                proximity_placement_group=compute.SubResourceArgs(id=placement.id),
                zones=ctx.zones,
                identity=compute.VirtualMachineScaleSetIdentityArgs(
                    type=compute.ResourceIdentityType.USER_ASSIGNED, user_assigned_identities=[who.id]
                ),
                upgrade_policy=compute.UpgradePolicyArgs(mode=compute.UpgradeMode.MANUAL),
                virtual_machine_profile=_profile(ctx, subnet_id, key, domain, reservation),
                tags={**ctx.tags("node"), "fleetforge-ib-domain": str(domain)},
            ),
            ctx.opts(),
        )
        sets.append(ScaleSet(domain, capacity, vmss, name))
    return Compute(who, placement, sets)


def ssh_key(args: AzureFleetArgs) -> str:
    """The admin SSH public key; refused before any resource exists when there is none, or when
    it is not one whole OpenSSH public key line."""
    where, key = "azure.ssh_public_key", args.ssh_public_key
    if not key:
        where, key = f"fleetforge:{SSH_KEY_CONFIG}", pulumi.Config("fleetforge").get(SSH_KEY_CONFIG)
    if not key:
        raise pulumi.RunError(
            f"azure.ssh_public_key: missing; nodes take SSH keys only (no passwords): set it in the "
            f'spec or with `pulumi config set fleetforge:{SSH_KEY_CONFIG} "$(cat ~/.ssh/id_ed25519.pub)"`'
        )
    # Pulumi config is not a spec: hold it to the spec's own key grammar (fleet.spec.AzureSettings)
    # so a truncated or pasted-together key fails here, not as an Azure deployment error.
    try:
        AzureSettings(ssh_public_key=key)
    except ValueError as exc:
        raise pulumi.RunError(
            f"{where}: not an OpenSSH public key line; allowed: 'ssh-ed25519 AAAA...' or 'ssh-rsa "
            "AAAA...' (RSA of 2048+ bits) with an optional comment, on one line"
        ) from exc
    return key


def image_reference(ctx: Context) -> compute.ImageReferenceArgs:
    image = ctx.args.image
    if image is None:
        default = DEFAULT_IMAGE
        return compute.ImageReferenceArgs(
            publisher=default.publisher,
            offer=default.offer,
            sku=default.sku,
            version=pinned_version(ctx.subscription_id, ctx.args.location, default),
        )
    if image.startswith("/subscriptions/"):
        return compute.ImageReferenceArgs(id=image)
    parts = image.split(":")
    if len(parts) != 4 or not all(parts) or parts[3] == "latest":
        raise pulumi.RunError(
            f"image: {image!r}; allowed on azure: publisher:offer:sku:version with a pinned version, "
            "or an image resource id (/subscriptions/...)"
        )
    publisher, offer, sku, version = parts
    return compute.ImageReferenceArgs(publisher=publisher, offer=offer, sku=sku, version=version)


def _profile(
    ctx: Context, subnet_id: pulumi.Input[str], key: str, domain: int, reservation: str | None
) -> compute.VirtualMachineScaleSetVMProfileArgs:
    args = ctx.args
    spot = args.capacity == "spot"
    trusted = args.sku.machine_type in TRUSTED_LAUNCH_SKUS
    return compute.VirtualMachineScaleSetVMProfileArgs(
        os_profile=compute.VirtualMachineScaleSetOSProfileArgs(
            computer_name_prefix=f"{args.name[:9]}{domain}",
            admin_username=ADMIN_USER,
            linux_configuration=compute.LinuxConfigurationArgs(
                disable_password_authentication=True,
                provision_vm_agent=True,
                ssh=compute.SshConfigurationArgs(
                    public_keys=[
                        compute.SshPublicKeyArgs(
                            path=f"/home/{ADMIN_USER}/.ssh/authorized_keys", key_data=key
                        )
                    ]
                ),
            ),
        ),
        storage_profile=compute.VirtualMachineScaleSetStorageProfileArgs(
            image_reference=image_reference(ctx),
            os_disk=compute.VirtualMachineScaleSetOSDiskArgs(
                create_option="FromImage",
                caching=compute.CachingTypes.READ_WRITE,
                disk_size_gb=OS_DISK_GIB,
                managed_disk=compute.VirtualMachineScaleSetManagedDiskParametersArgs(
                    storage_account_type="Premium_LRS"
                ),
            ),
        ),
        network_profile=compute.VirtualMachineScaleSetNetworkProfileArgs(
            network_interface_configurations=[
                compute.VirtualMachineScaleSetNetworkConfigurationArgs(
                    name="host",
                    primary=True,
                    enable_accelerated_networking=True,
                    enable_ip_forwarding=False,
                    ip_configurations=[
                        compute.VirtualMachineScaleSetIPConfigurationArgs(
                            name="host",
                            primary=True,
                            subnet=compute.ApiEntityReferenceArgs(id=subnet_id),
                            # No public_ip_address_configuration: nodes have private addresses only.
                        )
                    ],
                )
            ]
        ),
        security_profile=compute.SecurityProfileArgs(
            encryption_at_host=True,
            security_type="TrustedLaunch" if trusted else None,
            uefi_settings=(
                compute.UefiSettingsArgs(secure_boot_enabled=True, v_tpm_enabled=True) if trusted else None
            ),
        ),
        priority="Spot" if spot else "Regular",
        eviction_policy="Delete" if spot else None,
        billing_profile=compute.BillingProfileArgs(max_price=-1) if spot else None,
        capacity_reservation=(
            compute.CapacityReservationProfileArgs(
                capacity_reservation_group=compute.SubResourceArgs(id=reservation)
            )
            if reservation is not None
            else None
        ),
    )


def _reservation_id(args: AzureFleetArgs) -> str | None:
    """The capacity reservation group's full id, or None when the fleet consumes no reservation.

    stacks.prerequisites refuses both cases below with the spec's field paths; they are kept for
    args built without a validated spec."""
    if args.capacity != "reservation":
        return None
    if args.sku.fabric.kind == "infiniband":
        # https://learn.microsoft.com/en-us/azure/virtual-machines/capacity-reservation-associate-virtual-machine-scale-set
        raise pulumi.RunError(
            "capacity.type: reservation needs singlePlacementGroup false on a Uniform scale set, and "
            f"{args.sku.sku}'s InfiniBand needs it true; allowed on azure InfiniBand SKUs: on-demand, spot"
        )
    reservation = args.reservation or ""
    if not CAPACITY_RESERVATION_GROUP_ID.fullmatch(reservation):
        # A bare name would resolve in the resource group this stack creates, which cannot hold a
        # reservation made before the fleet.
        raise pulumi.RunError(
            f"capacity.reservation_id: {reservation!r}; allowed on azure: {CAPACITY_RESERVATION_GROUP_FORM}"
        )
    return reservation
