"""Fleet storage: a KMS key, FSx for Lustre, and the S3 checkpoint bucket.

- One customer-managed KMS key (rotated yearly) encrypts the file system and the bucket.
- FSx for Lustre PERSISTENT_2 in the nodes' subnet, throughput per TiB from the spec, reachable only
  through its own security group (see aws_network).
- The checkpoint bucket: versioned, SSE-KMS with a bucket key, every public-access switch on, a
  TLS-only bucket policy, and a lifecycle that expires checkpoints after `retention_days` and
  overwritten or deleted versions `noncurrent_retention_days` after they stop being current.
- With both a file system and a bucket, a data repository association mirrors
  `<mount point>/checkpoints` and `s3://<bucket>/checkpoints/`: jobs write checkpoints at Lustre
  speed and FSx exports new and changed files. Deletions are not exported, so removing files on
  Lustre never removes a checkpoint from S3; the bucket's lifecycle owns retention.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_aws as aws

from stacks.aws_compute import CHECKPOINT_PREFIX, Account
from stacks.aws_context import Context

FILESYSTEM_CHECKPOINT_PATH = "/checkpoints"
LUSTRE_VERSION = "2.15"
# FSx for Lustre's S3 data repositories are read and written by a per-file-system service-linked
# role; the key policy lets those roles (and only in this account, only through S3) use the key.
FSX_S3_ROLE_PATH = (
    "role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/AWSServiceRoleForFSxS3Access_*"
)


@dataclass(frozen=True)
class Storage:
    key: aws.kms.Key
    filesystem: aws.fsx.LustreFileSystem | None
    bucket: aws.s3.Bucket | None
    data_repository: aws.fsx.DataRepositoryAssociation | None


def kms_key(ctx: Context, acct: Account, for_data_repository: bool) -> aws.kms.Key:
    statements: list[Any] = [
        {
            # The account's IAM policies decide who else may use the key (the default key policy).
            "Sid": "AccountAdministersThroughIam",
            "Effect": "Allow",
            "Principal": {
                "AWS": pulumi.Output.format("arn:{0}:iam::{1}:root", acct.partition, acct.account_id)
            },
            "Action": "kms:*",
            "Resource": "*",
        }
    ]
    if for_data_repository:
        statements.append(
            {
                "Sid": "FsxDataRepositoryThroughS3",
                "Effect": "Allow",
                "Principal": {"AWS": "*"},
                "Action": [
                    "kms:Decrypt",
                    "kms:Encrypt",
                    "kms:GenerateDataKey*",
                    "kms:ReEncrypt*",
                    "kms:DescribeKey",
                ],
                "Resource": "*",
                "Condition": {
                    "StringEquals": {
                        "kms:CallerAccount": acct.account_id,
                        "kms:ViaService": f"s3.{ctx.args.region}.amazonaws.com",
                    },
                    "ArnLike": {
                        "aws:PrincipalArn": pulumi.Output.format(
                            "arn:{0}:iam::{1}:{2}", acct.partition, acct.account_id, FSX_S3_ROLE_PATH
                        )
                    },
                },
            }
        )
    return aws.kms.Key(
        ctx.name("key"),
        description=f"fleetforge {ctx.args.name}: FSx for Lustre and checkpoint bucket",
        enable_key_rotation=True,
        deletion_window_in_days=30,
        policy=pulumi.Output.json_dumps({"Version": "2012-10-17", "Statement": statements}),
        tags=ctx.tags("key"),
        opts=ctx.opts(),
    )


def filesystem(
    ctx: Context, subnet_id: pulumi.Input[str], lustre_sg: aws.ec2.SecurityGroup, key: aws.kms.Key
) -> aws.fsx.LustreFileSystem | None:
    fs = ctx.args.filesystem
    if fs is None:
        return None
    return aws.fsx.LustreFileSystem(
        ctx.name("lustre"),
        aws.fsx.LustreFileSystemArgs(
            deployment_type="PERSISTENT_2",
            storage_type="SSD",
            storage_capacity=fs.capacity_gib,
            per_unit_storage_throughput=fs.throughput_mbps_per_tib,
            file_system_type_version=LUSTRE_VERSION,
            subnet_ids=subnet_id,  # a string in pulumi-aws 7: FSx for Lustre takes exactly one subnet
            security_group_ids=[lustre_sg.id],
            kms_key_id=key.arn,
            data_compression_type="LZ4",
            copy_tags_to_backups=True,
            tags=ctx.tags("lustre"),
        ),
        ctx.opts(),
    )


def bucket(ctx: Context, key: aws.kms.Key) -> aws.s3.Bucket | None:
    ckpt = ctx.args.checkpoints
    if ckpt is None:
        return None
    b = aws.s3.Bucket(
        ctx.name("checkpoints"),
        aws.s3.BucketArgs(
            bucket=ckpt.bucket,
            # Bucket names are global: without a name, AWS appends a unique suffix to this prefix.
            bucket_prefix=None if ckpt.bucket else f"{ctx.args.name[:28]}-ckpt-",
            force_destroy=False,
            tags=ctx.tags("checkpoints"),
        ),
        ctx.opts(),
    )
    versioning = aws.s3.BucketVersioning(
        ctx.name("checkpoints-versioning"),
        aws.s3.BucketVersioningInitArgs(
            bucket=b.id,
            versioning_configuration=aws.s3.BucketVersioningVersioningConfigurationArgs(status="Enabled"),
        ),
        ctx.opts(),
    )
    aws.s3.BucketServerSideEncryptionConfiguration(
        ctx.name("checkpoints-sse"),
        aws.s3.BucketServerSideEncryptionConfigurationInitArgs(
            bucket=b.id,
            rules=[
                aws.s3.BucketServerSideEncryptionConfigurationRuleArgs(
                    apply_server_side_encryption_by_default=aws.s3.BucketServerSideEncryptionConfigurationRuleApplyServerSideEncryptionByDefaultArgs(
                        sse_algorithm="aws:kms", kms_master_key_id=key.arn
                    ),
                    bucket_key_enabled=True,  # one KMS call per object batch, not per request
                )
            ],
        ),
        ctx.opts(),
    )
    block = aws.s3.BucketPublicAccessBlock(
        ctx.name("checkpoints-public-access"),
        aws.s3.BucketPublicAccessBlockArgs(
            bucket=b.id,
            block_public_acls=True,
            block_public_policy=True,
            ignore_public_acls=True,
            restrict_public_buckets=True,
        ),
        ctx.opts(),
    )
    aws.s3.BucketLifecycleConfiguration(
        ctx.name("checkpoints-lifecycle"),
        aws.s3.BucketLifecycleConfigurationArgs(
            bucket=b.id,
            rules=[
                aws.s3.BucketLifecycleConfigurationRuleArgs(
                    id="checkpoint-retention",
                    status="Enabled",
                    filter=aws.s3.BucketLifecycleConfigurationRuleFilterArgs(prefix=""),
                    expiration=aws.s3.BucketLifecycleConfigurationRuleExpirationArgs(
                        days=ckpt.retention_days
                    ),
                    noncurrent_version_expiration=aws.s3.BucketLifecycleConfigurationRuleNoncurrentVersionExpirationArgs(
                        noncurrent_days=ckpt.noncurrent_retention_days
                    ),
                    abort_incomplete_multipart_upload=aws.s3.BucketLifecycleConfigurationRuleAbortIncompleteMultipartUploadArgs(
                        days_after_initiation=7
                    ),
                )
            ],
        ),
        # Noncurrent-version rules only make sense once versioning is on.
        ctx.opts(depends_on=[versioning]),
    )
    aws.s3.BucketPolicy(
        ctx.name("checkpoints-tls-only"),
        aws.s3.BucketPolicyArgs(
            bucket=b.id,
            policy=pulumi.Output.json_dumps(
                {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Sid": "DenyPlainHttp",
                            "Effect": "Deny",
                            "Principal": "*",
                            "Action": "s3:*",
                            "Resource": [b.arn, pulumi.Output.concat(b.arn, "/*")],
                            "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                        }
                    ],
                }
            ),
        ),
        # S3 rejects policy writes that race the public access block being applied.
        ctx.opts(depends_on=[block]),
    )
    return b


def data_repository(
    ctx: Context, fs: aws.fsx.LustreFileSystem | None, b: aws.s3.Bucket | None
) -> aws.fsx.DataRepositoryAssociation | None:
    if fs is None or b is None:
        return None
    return aws.fsx.DataRepositoryAssociation(
        ctx.name("checkpoints-dra"),
        aws.fsx.DataRepositoryAssociationArgs(
            file_system_id=fs.id,
            file_system_path=FILESYSTEM_CHECKPOINT_PATH,
            data_repository_path=pulumi.Output.concat("s3://", b.bucket, "/", CHECKPOINT_PREFIX),
            batch_import_meta_data_on_create=True,
            delete_data_in_filesystem=False,
            s3=aws.fsx.DataRepositoryAssociationS3Args(
                auto_export_policy=aws.fsx.DataRepositoryAssociationS3AutoExportPolicyArgs(
                    events=["NEW", "CHANGED"]
                ),
                auto_import_policy=aws.fsx.DataRepositoryAssociationS3AutoImportPolicyArgs(
                    events=["NEW", "CHANGED", "DELETED"]
                ),
            ),
            tags=ctx.tags("checkpoints-dra"),
        ),
        ctx.opts(),
    )
