"""TPU slices: one queued resource (`tpu.V2QueuedResource`) holding every slice of the fleet.

A queued resource is how Cloud TPU hands out whole slices: the request waits until the slice's
capacity exists, then creates every TPU VM (host) of it at once. One node spec per slice makes a
multislice fleet a single request, so the resources stay the same whatever the slice size or
count. The slice's accelerator type and topology come from the spec's host count and the catalog
(stacks.gcp_layout.tpu_slice); the runtime version is pinned (the spec's tpu.runtime_version or
the generation's documented default). No TPU VM gets an
external IP; they reach the internet through the host VPC's Cloud NAT.

The provider's queued resource (pulumi-gcp 9.37) has no service-account, label, spot or
reservation field, so a TPU fleet accepts on-demand or queued capacity only (stacks.prerequisites
refuses the rest by name), and:

SECURITY: every TPU VM of this stack runs as the project's DEFAULT Compute Engine service account
(<project-number>-compute@developer.gserviceaccount.com), not a fleet account of its own. Google
grants that account the project's Editor role unless the organization policy
iam.automaticIamGrantsForDefaultServiceAccounts is enforced
(https://cloud.google.com/compute/docs/access/service-accounts), so any process on a TPU host may
then change most of the project. Before `pulumi up`, remove roles/editor from that account (or
deploy into a project where the policy is enforced), or create the slices outside this stack with
`gcloud compute tpus queued-resources create --service-account`. The policy pack reports every
queued resource (gcp-tpu-default-service-account, advisory) and the program warns at each run.
The checkpoint bucket is granted to no TPU identity: widening the default account, which every
VM of the project without its own account shares, would break least privilege further.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from stacks.gcp_context import Context
from stacks.gcp_layout import TpuSlice, tpu_slice
from stacks.gcp_network import Networks

# Said on every run, `fleetforge plan` included: the queued resource cannot name an account.
DEFAULT_ACCOUNT_WARNING = (
    "TPU VMs run as the project's default Compute Engine service account (the queued resource has no "
    "service-account field), which holds the project's Editor role unless that grant was removed: "
    "remove roles/editor from <project-number>-compute@developer.gserviceaccount.com or enforce the "
    "organization policy iam.automaticIamGrantsForDefaultServiceAccounts before `pulumi up`"
)


@dataclass(frozen=True)
class Slices:
    queued: gcp.tpu.V2QueuedResource
    shape: TpuSlice
    node_ids: list[str]


def node_ids(fleet: str, slices: int) -> list[str]:
    return [f"{fleet}-slice-{i}" for i in range(slices)]


def slices(ctx: Context, net: Networks) -> Slices:
    args = ctx.args
    shape = tpu_slice(args.sku, args.hosts_per_slice, args.tpu_topology, args.tpu_runtime_version)
    ids = node_ids(args.name, args.slices)
    parent = ctx.project.apply(lambda p: f"projects/{p}/locations/{args.zone}")
    queued = gcp.tpu.V2QueuedResource(
        ctx.name("slices"),
        gcp.tpu.V2QueuedResourceArgs(
            zone=args.zone,
            tpu=gcp.tpu.V2QueuedResourceTpuArgs(
                node_specs=[
                    gcp.tpu.V2QueuedResourceTpuNodeSpecArgs(
                        parent=parent,
                        node_id=node_id,
                        node=gcp.tpu.V2QueuedResourceTpuNodeSpecNodeArgs(
                            accelerator_type=shape.accelerator_type,
                            runtime_version=shape.runtime_version,
                            description=f"fleetforge {args.name}: {shape.topology} slice of {shape.chips} chips",
                            network_config=gcp.tpu.V2QueuedResourceTpuNodeSpecNodeNetworkConfigArgs(
                                network=net.primary.id,
                                subnetwork=net.primary_subnet.id,
                                enable_external_ips=False,
                                can_ip_forward=False,
                            ),
                        ),
                    )
                    for node_id in ids
                ]
            ),
        ),
        # Google creates the slice's VMs on the subnet; NAT must be there for their first boot.
        ctx.opts(depends_on=[net.primary_subnet]),
    )
    pulumi.log.warn(DEFAULT_ACCOUNT_WARNING, resource=queued)
    return Slices(queued, shape, ids)


def host_listing(zone: str, node_id: str) -> str:
    """The command that prints one slice's TPU VM (host) addresses, one per worker, in worker order:
    what inventory and burn-in connect to."""
    return (
        f"gcloud compute tpus tpu-vm describe {node_id} --zone {zone} "
        "--format='value(networkEndpoints[].ipAddress)'"
    )
