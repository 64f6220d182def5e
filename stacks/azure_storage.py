"""Storage: Azure Managed Lustre for training data and a storage account for checkpoints.

- AMLFS in the fleet's zone and its own subnet, the spec's AMLFS-Durable-Premium-<tier> SKU and
  capacity (fleet.spec checks the tier's capacity step), a weekly maintenance window in a quiet
  hour, and a Key Vault key when one is named (else Microsoft-managed keys). With a key, the file
  system gets its own user-assigned identity holding only "Key Vault Crypto Service Encryption
  User" on that vault, which is what AMLFS needs to wrap its data keys.
- The checkpoint account: StorageV2, HTTPS only, TLS 1.2 at least, no public blob access, no
  shared-key access (Entra ID only, so the nodes' managed identity is the only way in), blob
  versioning, soft delete of blobs and containers for the noncurrent retention, and a lifecycle
  rule that deletes checkpoints after `retention_days` and old versions after
  `noncurrent_retention_days`.
- With the Key Vault key, the checkpoint account is encrypted with it too, through an identity of
  its own holding the same single role on the vault.
- The nodes' identity gets a role of the fleet's own on the checkpoint container only: read, write
  and add blobs, and no delete of a blob or a version. With versioning on, an overwrite keeps the
  old version, so a compromised node cannot destroy a checkpoint (as on AWS, PutObject without
  DeleteObject, and GCP, objectCreator). Storage Blob Data Contributor would allow the deletes.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import pulumi
from pulumi_azure_native import authorization, managedidentity, storage, storagecache

from stacks.azure_context import Context

CHECKPOINT_CONTAINER = "checkpoints"
AMLFS_FSNAME = "lustrefs"  # AMLFS's file system name is always lustrefs
MAINTENANCE_DAY = storagecache.MaintenanceDayOfWeekType.SUNDAY
MAINTENANCE_TIME_UTC = "03:00"
# What the nodes may do in the checkpoint container: Storage Blob Data Contributor's actions without
# its deletes (blobs/delete, deleteBlobVersion/action) and tag or immutability changes.
CHECKPOINT_ACTIONS = ["Microsoft.Storage/storageAccounts/blobServices/containers/read"]
CHECKPOINT_DATA_ACTIONS = [
    "Microsoft.Storage/storageAccounts/blobServices/containers/blobs/read",
    "Microsoft.Storage/storageAccounts/blobServices/containers/blobs/write",
    "Microsoft.Storage/storageAccounts/blobServices/containers/blobs/add/action",
]
# Azure built-in role: Key Vault Crypto Service Encryption User (read a key, wrap and unwrap with it).
KEY_VAULT_ENCRYPTION_USER = "e147488a-f6f5-4113-8e2d-b22465e65bf6"


@dataclass(frozen=True)
class Checkpoints:
    account: storage.StorageAccount
    container: storage.BlobContainer


def account_name(fleet: str, explicit: str | None) -> str:
    """The spec's account name, or 3-24 lowercase letters and digits derived from the fleet's."""
    if explicit:
        return explicit
    stem = "".join(c for c in fleet.lower() if c.isalnum())[:16]
    return f"{stem}{hashlib.sha256(fleet.encode()).hexdigest()[:8]}"


def checkpoints(ctx: Context) -> Checkpoints | None:
    args = ctx.args
    ckpt = args.checkpoints
    if ckpt is None:
        return None
    # The fleet's Key Vault key encrypts the checkpoints too, through an identity of the account's own
    # that may use it, granted before the account is made (Azure reads the key at creation).
    key_user, key_grant = (
        _key_identity(
            ctx, args.key_vault_id, "ckpt", "the checkpoint account wraps its keys with the fleet's key"
        )
        if args.key_url and args.key_vault_id
        else (None, None)
    )
    account = storage.StorageAccount(
        ctx.name("ckpt"),
        storage.StorageAccountArgs(
            resource_group_name=ctx.resource_group,
            location=args.location,
            account_name=account_name(args.name, ckpt.bucket),
            kind="StorageV2",
            sku=storage.SkuArgs(name="Standard_ZRS" if args.zone else "Standard_LRS"),
            access_tier=storage.AccessTier.HOT,
            enable_https_traffic_only=True,
            minimum_tls_version="TLS1_2",
            allow_blob_public_access=False,
            allow_shared_key_access=False,
            default_to_o_auth_authentication=True,
            allow_cross_tenant_replication=False,
            identity=(
                storage.IdentityArgs(
                    type=storage.IdentityType.USER_ASSIGNED, user_assigned_identities=[key_user.id]
                )
                if key_user is not None
                else None
            ),
            encryption=_account_encryption(args.key_url, key_user)
            if key_user is not None and args.key_url
            else None,
            tags=ctx.tags("checkpoints"),
        ),
        ctx.opts(depends_on=[key_grant] if key_grant is not None else None),
    )
    soft_delete = storage.DeleteRetentionPolicyArgs(enabled=True, days=max(1, ckpt.noncurrent_retention_days))
    storage.BlobServiceProperties(
        ctx.name("ckpt-blob"),
        storage.BlobServicePropertiesArgs(
            resource_group_name=ctx.resource_group,
            account_name=account.name,
            blob_services_name="default",
            is_versioning_enabled=True,
            delete_retention_policy=soft_delete,
            container_delete_retention_policy=soft_delete,
        ),
        ctx.opts(),
    )
    container = storage.BlobContainer(
        ctx.name("ckpt-container"),
        storage.BlobContainerArgs(
            resource_group_name=ctx.resource_group,
            account_name=account.name,
            container_name=CHECKPOINT_CONTAINER,
            public_access=storage.PublicAccess.NONE,
        ),
        ctx.opts(),
    )
    storage.ManagementPolicy(
        ctx.name("ckpt-lifecycle"),
        storage.ManagementPolicyArgs(
            resource_group_name=ctx.resource_group,
            account_name=account.name,
            management_policy_name="default",
            policy=storage.ManagementPolicySchemaArgs(
                rules=[
                    storage.ManagementPolicyRuleArgs(
                        name="checkpoint-retention",
                        enabled=True,
                        type="Lifecycle",
                        definition=storage.ManagementPolicyDefinitionArgs(
                            filters=storage.ManagementPolicyFilterArgs(
                                blob_types=["blockBlob"], prefix_match=[f"{CHECKPOINT_CONTAINER}/"]
                            ),
                            actions=storage.ManagementPolicyActionArgs(
                                base_blob=storage.ManagementPolicyBaseBlobArgs(
                                    delete=storage.DateAfterModificationArgs(
                                        days_after_modification_greater_than=ckpt.retention_days
                                    )
                                ),
                                version=storage.ManagementPolicyVersionArgs(
                                    delete=storage.DateAfterCreationArgs(
                                        days_after_creation_greater_than=ckpt.noncurrent_retention_days
                                    )
                                ),
                            ),
                        ),
                    )
                ]
            ),
        ),
        ctx.opts(),
    )
    return Checkpoints(account, container)


def grant_checkpoints(
    ctx: Context, ckpt: Checkpoints, who: managedidentity.UserAssignedIdentity
) -> authorization.RoleAssignment:
    # A custom role's assignable scope is a resource group at the narrowest; it is assigned on the
    # container alone. Role names are unique in the tenant: the group's name is in it.
    group = pulumi.Output.concat(
        "/subscriptions/", ctx.subscription_id, "/resourceGroups/", ctx.resource_group
    )
    writer = authorization.RoleDefinition(
        ctx.name("ckpt-writer"),
        authorization.RoleDefinitionArgs(
            scope=group,
            role_name=pulumi.Output.concat(
                "fleetforge checkpoint writer ", ctx.args.name, " (", ctx.resource_group, ")"
            ),
            description=f"fleetforge {ctx.args.name}: read, write and add checkpoint blobs, never delete them",
            role_type="CustomRole",
            permissions=[
                authorization.PermissionArgs(actions=CHECKPOINT_ACTIONS, data_actions=CHECKPOINT_DATA_ACTIONS)
            ],
            assignable_scopes=[group],
        ),
        ctx.opts(),
    )
    scope = pulumi.Output.concat(ckpt.account.id, "/blobServices/default/containers/", CHECKPOINT_CONTAINER)
    return authorization.RoleAssignment(
        ctx.name("nodes-ckpt"),
        authorization.RoleAssignmentArgs(
            principal_id=who.principal_id,
            principal_type="ServicePrincipal",
            role_definition_id=writer.id,
            scope=scope,
            description=f"fleetforge {ctx.args.name}: nodes read and write their checkpoints",
        ),
        ctx.opts(depends_on=[ckpt.container]),
    )


def _role(ctx: Context, role: str) -> pulumi.Output[str]:
    return ctx.subscription_id.apply(
        lambda sub: f"/subscriptions/{sub}/providers/Microsoft.Authorization/roleDefinitions/{role}"
    )


def _key_identity(
    ctx: Context, vault_id: str, user: str, why: str
) -> tuple[managedidentity.UserAssignedIdentity, authorization.RoleAssignment]:
    """An identity for one resource (user: amlfs, ckpt) allowed to wrap keys with the vault's keys."""
    who = managedidentity.UserAssignedIdentity(
        ctx.name(f"{user}-id"),
        opts=ctx.opts(),
        resource_group_name=ctx.resource_group,
        location=ctx.args.location,
        resource_name_=f"{ctx.args.name}-{user}",
        tags=ctx.tags("identity"),
    )
    grant = authorization.RoleAssignment(
        ctx.name(f"{user}-key"),
        authorization.RoleAssignmentArgs(
            principal_id=who.principal_id,
            principal_type="ServicePrincipal",
            role_definition_id=_role(ctx, KEY_VAULT_ENCRYPTION_USER),
            scope=vault_id,
            description=f"fleetforge {ctx.args.name}: {why}",
        ),
        ctx.opts(),
    )
    return who, grant


def _account_encryption(key_url: str, who: managedidentity.UserAssignedIdentity) -> storage.EncryptionArgs:
    """Customer-managed keys for a storage account from a versioned key identifier
    (https://<vault>.vault.azure.net/keys/<name>/<version>, held to that grammar by the spec)."""
    _, _, host, _, name, version = key_url.split("/")
    return storage.EncryptionArgs(
        key_source=storage.KeySource.MICROSOFT_KEYVAULT,
        key_vault_properties=storage.KeyVaultPropertiesArgs(
            key_vault_uri=f"https://{host}/", key_name=name, key_version=version
        ),
        encryption_identity=storage.EncryptionIdentityArgs(encryption_user_assigned_identity=who.id),
    )


def filesystem(ctx: Context, subnet_id: pulumi.Input[str]) -> storagecache.AmlFilesystem | None:
    args = ctx.args
    fs = args.filesystem
    if fs is None:
        return None
    # As for the checkpoint account: Azure reads the key when it creates the file system, so the
    # identity's grant on the vault must exist first.
    key_user, key_grant = (
        _key_identity(ctx, args.key_vault_id, "amlfs", "the file system wraps its keys with the fleet's key")
        if args.key_url and args.key_vault_id
        else (None, None)
    )
    return storagecache.AmlFilesystem(
        ctx.name("amlfs"),
        storagecache.AmlFilesystemArgs(
            resource_group_name=ctx.resource_group,
            location=args.location,
            aml_filesystem_name=f"{args.name}-amlfs",
            sku=storagecache.SkuNameArgs(name=f"AMLFS-Durable-Premium-{fs.throughput_mbps_per_tib}"),
            storage_capacity_ti_b=fs.capacity_tib,
            filesystem_subnet=subnet_id,
            zones=ctx.zones,
            maintenance_window=storagecache.AmlFilesystemMaintenanceWindowArgs(
                day_of_week=MAINTENANCE_DAY, time_of_day_utc=MAINTENANCE_TIME_UTC
            ),
            encryption_settings=(
                storagecache.AmlFilesystemEncryptionSettingsArgs(
                    key_encryption_key=storagecache.KeyVaultKeyReferenceArgs(
                        key_url=args.key_url,
                        source_vault=storagecache.KeyVaultKeyReferenceSourceVaultArgs(id=args.key_vault_id),
                    )
                )
                if args.key_url and args.key_vault_id
                else None
            ),
            identity=(
                storagecache.AmlFilesystemIdentityArgs(
                    type=storagecache.AmlFilesystemIdentityType.USER_ASSIGNED,
                    user_assigned_identities=[key_user.id],
                )
                if key_user is not None
                else None
            ),
            tags=ctx.tags("filesystem"),
        ),
        ctx.opts(depends_on=[key_grant] if key_grant is not None else None),
    )
