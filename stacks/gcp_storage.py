"""Fleet storage: Managed Lustre and the Cloud Storage checkpoint bucket.

- Managed Lustre (`lustre.Instance`) in the spec's zone on the primary host VPC, reached through
  private services access (stacks.gcp_network); capacity and throughput tier (or the Dynamic
  tier) come from the spec, which checks them against the tiers' sizes. Encrypted with the fleet's
  KMS key when one is given, once Managed Lustre's service agent may use it (stacks.gcp_keys).
- The checkpoint bucket: uniform bucket-level access, public access prevention enforced,
  versioning on, the fleet's KMS key as default key when given (Google-managed otherwise; the Cloud
  Storage service agent is granted the key first, stacks.gcp_keys), and a
  lifecycle that deletes checkpoints `retention_days` after they were written and replaced or
  deleted versions `noncurrent_retention_days` after they stopped being current.
- The nodes' service account may read the bucket and create objects under checkpoints/ only
  (an IAM condition on the object name); it can neither delete nor overwrite, so versioning and
  the lifecycle own retention and a compromised node cannot destroy a checkpoint.
"""

from __future__ import annotations

import re

import pulumi
import pulumi_gcp as gcp

from stacks import gcp_keys
from stacks.gcp_context import Context

CHECKPOINT_PREFIX = "checkpoints/"
ABORT_MULTIPART_DAYS = 7
_FSNAME_UNSAFE = re.compile(r"[^a-z0-9]")


def filesystem_name(fleet: str) -> str:
    """Managed Lustre's file system name: letters and digits, eight at most."""
    return (_FSNAME_UNSAFE.sub("", fleet.lower()) or "fleet")[:8]


def filesystem(
    ctx: Context, network: gcp.compute.Network, connection: gcp.servicenetworking.Connection | None
) -> gcp.lustre.Instance | None:
    fs = ctx.args.filesystem
    if fs is None:
        return None
    # Google refuses to create the instance while its service agent cannot use the key.
    key_grant = gcp_keys.lustre_grant(ctx)
    # The instance takes its addresses from the peered range, which must exist first.
    waits_for: list[pulumi.Resource] = [r for r in (connection, key_grant) if r is not None]
    return gcp.lustre.Instance(
        ctx.name("lustre"),
        gcp.lustre.InstanceArgs(
            instance_id=ctx.name("lustre")[:63],
            location=ctx.args.zone,
            network=network.id,
            filesystem=filesystem_name(ctx.args.name),
            capacity_gib=str(fs.capacity_gib),
            per_unit_storage_throughput=(
                str(fs.throughput_mbps_per_tib) if fs.throughput_mbps_per_tib is not None else None
            ),
            # The Dynamic tier has no fixed throughput; the API turns it on through its options, and with
            # DEFAULT_CACHE per_unit_storage_throughput must be unset or zero (Managed Lustre v1 API,
            # DynamicTierOptions.Mode: cloud.google.com/managed-lustre/docs/reference).
            dynamic_tier_options=(
                gcp.lustre.InstanceDynamicTierOptionsArgs(mode="DEFAULT_CACHE") if fs.dynamic else None
            ),
            kms_key=ctx.args.kms_key,
            gke_support_enabled=False,
            description=f"fleetforge {ctx.args.name}: shared file system",
            labels=ctx.labels("lustre"),
        ),
        ctx.opts(depends_on=waits_for or None),
    )


def bucket(ctx: Context) -> gcp.storage.Bucket | None:
    ckpt = ctx.args.checkpoints
    if ckpt is None:
        return None
    kms = ctx.args.kms_key
    # Cloud Storage refuses a default key its service agent cannot use.
    key_grant = gcp_keys.storage_grant(ctx)
    return gcp.storage.Bucket(
        ctx.name("checkpoints"),
        gcp.storage.BucketArgs(
            name=ckpt.bucket,  # None: Pulumi names it after the logical name with a unique suffix
            location=ctx.args.region.upper(),
            storage_class="STANDARD",
            uniform_bucket_level_access=True,
            public_access_prevention="enforced",
            versioning=gcp.storage.BucketVersioningArgs(enabled=True),
            encryption=gcp.storage.BucketEncryptionArgs(default_kms_key_name=kms) if kms else None,
            force_destroy=False,
            lifecycle_rules=[
                gcp.storage.BucketLifecycleRuleArgs(
                    action=gcp.storage.BucketLifecycleRuleActionArgs(type="Delete"),
                    condition=gcp.storage.BucketLifecycleRuleConditionArgs(
                        age=ckpt.retention_days, with_state="LIVE"
                    ),
                ),
                gcp.storage.BucketLifecycleRuleArgs(
                    action=gcp.storage.BucketLifecycleRuleActionArgs(type="Delete"),
                    condition=gcp.storage.BucketLifecycleRuleConditionArgs(
                        days_since_noncurrent_time=ckpt.noncurrent_retention_days, with_state="ARCHIVED"
                    ),
                ),
                gcp.storage.BucketLifecycleRuleArgs(
                    action=gcp.storage.BucketLifecycleRuleActionArgs(type="AbortIncompleteMultipartUpload"),
                    condition=gcp.storage.BucketLifecycleRuleConditionArgs(age=ABORT_MULTIPART_DAYS),
                ),
            ],
            labels=ctx.labels("checkpoints"),
        ),
        ctx.opts(depends_on=[key_grant] if key_grant is not None else None),
    )


def grant_checkpoints(ctx: Context, b: gcp.storage.Bucket, member: pulumi.Input[str]) -> None:
    """Read the bucket, create (never delete or replace) objects under checkpoints/."""
    gcp.storage.BucketIAMMember(
        ctx.name("nodes-read-checkpoints"),
        gcp.storage.BucketIAMMemberArgs(bucket=b.name, role="roles/storage.objectViewer", member=member),
        ctx.opts(),
    )
    gcp.storage.BucketIAMMember(
        ctx.name("nodes-write-checkpoints"),
        gcp.storage.BucketIAMMemberArgs(
            bucket=b.name,
            role="roles/storage.objectCreator",
            member=member,
            condition=gcp.storage.BucketIAMMemberConditionArgs(
                title="checkpoint-prefix-only",
                description=f"create objects under {CHECKPOINT_PREFIX} only",
                expression=pulumi.Output.concat(
                    'resource.name.startsWith("projects/_/buckets/', b.name, f'/objects/{CHECKPOINT_PREFIX}")'
                ),
            ),
        ),
        ctx.opts(),
    )
