"""TPU slices: one queued resource (`tpu.V2QueuedResource`) holding every slice of the fleet.

A queued resource is how Cloud TPU hands out whole slices: the request waits until the slice's
capacity exists, then creates every TPU VM (host) of it at once. One node spec per slice makes a
multislice fleet a single request, so the resources stay the same whatever the slice size or
count. The slice's accelerator type and topology come from the spec's host count and the catalog
(stacks.gcp_layout.tpu_slice); the runtime version is pinned (the spec's tpu.runtime_version or
the generation's documented default). No TPU VM gets an
external IP; they reach the internet through the host VPC's Cloud NAT.

The provider's queued resource (pulumi-gcp 9.37) has no service-account, label, spot or
reservation field, so TPU VMs run as the project's default compute account and a TPU fleet
accepts on-demand or queued capacity only (stacks.prerequisites refuses the rest by name). The checkpoint
bucket is therefore granted to no TPU identity: widening the default account, which every VM of
the project without its own account shares, would break least privilege.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi_gcp as gcp

from stacks.gcp_context import Context
from stacks.gcp_layout import TpuSlice, tpu_slice
from stacks.gcp_network import Networks


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
    return Slices(queued, shape, ids)


def host_listing(zone: str, node_id: str) -> str:
    """The command that prints one slice's TPU VM (host) addresses, one per worker, in worker order:
    what inventory and burn-in connect to."""
    return (
        f"gcloud compute tpus tpu-vm describe {node_id} --zone {zone} "
        "--format='value(networkEndpoints[].ipAddress)'"
    )
