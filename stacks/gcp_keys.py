"""The spec's customer-managed key (`kms_key`): the grants Google's service agents need to use it.

Google encrypts with a customer-managed key as the service agent of the product that stores the
data, never as the caller, and refuses to create the store while that agent lacks
roles/cloudkms.cryptoKeyEncrypterDecrypter on the key:

- the checkpoint bucket: the Cloud Storage service agent,
  service-<project-number>@gs-project-accounts.iam.gserviceaccount.com
  (cloud.google.com/storage/docs/encryption/using-customer-managed-keys), read with
  `storage.get_project_service_account`, which also makes Google create the agent if it does not
  exist yet (pulumi-gcp's advice over writing the address out);
- the nodes' boot disks: the Compute Engine service agent,
  service-<project-number>@compute-system.iam.gserviceaccount.com
  (cloud.google.com/compute/docs/disks/customer-managed-encryption), which exists once the Compute
  Engine API is on; its address is built from the project number (`organizations.get_project`);
- Managed Lustre: the Lustre service agent, service-<project-number>@gcp-sa-lustre.iam.gserviceaccount.com
  (cloud.google.com/managed-lustre/docs/cmek), read from a `projects.ServiceIdentity` for
  lustre.googleapis.com, which creates the agent when it is missing.

Each grant is made only for a store the fleet creates, on the one key (never its key ring or
project), and the store waits for it (depends_on). The key may live in another project (Google
recommends a separate key project): granting on it then needs `cloudkms.cryptoKeys.setIamPolicy`
there, which the deploying identity must hold.
"""

from __future__ import annotations

import pulumi
import pulumi_gcp as gcp

from stacks.gcp_context import Context

ENCRYPTER_DECRYPTER = "roles/cloudkms.cryptoKeyEncrypterDecrypter"
LUSTRE_SERVICE = "lustre.googleapis.com"


def storage_grant(ctx: Context) -> gcp.kms.CryptoKeyIAMMember | None:
    """The Cloud Storage service agent's grant, or None without a key."""
    key = ctx.args.kms_key
    if not key:
        return None
    agent = gcp.storage.get_project_service_account_output(opts=ctx.invoke_opts())
    return _grant(ctx, "gcs-agent-key", key, agent.member)


def compute_grant(ctx: Context) -> gcp.kms.CryptoKeyIAMMember | None:
    """The Compute Engine service agent's grant, or None without a key."""
    key = ctx.args.kms_key
    if not key:
        return None
    number = gcp.organizations.get_project_output(opts=ctx.invoke_opts()).number
    member = pulumi.Output.concat(
        "serviceAccount:service-", number, "@compute-system.iam.gserviceaccount.com"
    )
    return _grant(ctx, "compute-agent-key", key, member)


def lustre_grant(ctx: Context) -> gcp.kms.CryptoKeyIAMMember | None:
    """The Managed Lustre service agent's grant, or None without a key."""
    key = ctx.args.kms_key
    if not key:
        return None
    agent = gcp.projects.ServiceIdentity(
        ctx.name("lustre-agent"),
        gcp.projects.ServiceIdentityArgs(service=LUSTRE_SERVICE),
        ctx.opts(),
    )
    return _grant(ctx, "lustre-agent-key", key, agent.member)


def _grant(ctx: Context, suffix: str, key: str, member: pulumi.Input[str]) -> gcp.kms.CryptoKeyIAMMember:
    # On the key itself: the agent may use this key and no other in its ring or project.
    return gcp.kms.CryptoKeyIAMMember(
        ctx.name(suffix),
        gcp.kms.CryptoKeyIAMMemberArgs(crypto_key_id=key, role=ENCRYPTER_DECRYPTER, member=member),
        ctx.opts(),
    )
