"""The fleet's networks: one VPC per catalog network plan (stacks.gcp_layout), firewalls, Cloud NAT.

- Every VPC is custom-mode (no auto subnets) with the catalog's MTU, its default internet route
  kept only on the primary host VPC, where Cloud NAT gives nodes egress without external IPs.
- The RoCE VPC of an RDMA fabric is created with the zone's RoCE network profile
  (`<zone>-vpc-roce`), which is what lets its NICs be MRDMA. RoCE networks carry RDMA only and
  take no VPC firewall rules, so none is made for them.
- Firewalls name the nodes by their service account, not by network tags: any user allowed to
  set a tag on a VM could otherwise join it to the fleet's rules. The only ingress from outside
  the fleet is SSH on the primary host VPC, from the spec's `network.ssh_cidr`, its bastion, or
  else Google's IAP TCP-forwarding range. GCP's implied rules deny every other ingress.
- With Managed Lustre, the primary host VPC reserves the layout's services range for private
  services access and peers it with Service Networking; the Lustre servers reach clients on TCP
  988 from that range (Managed Lustre's VPC setup guide).
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from stacks.gcp_context import Context
from stacks.gcp_layout import IAP_RANGE, FabricLayout, NetworkPlan, fabric_layout

LUSTRE_PORT = "988"
ALL_PROTOCOLS = ("tcp", "udp", "icmp")


@dataclass(frozen=True)
class Networks:
    layout: FabricLayout
    networks: dict[str, gcp.compute.Network]
    subnets: dict[str, gcp.compute.Subnetwork]
    primary: gcp.compute.Network
    primary_subnet: gcp.compute.Subnetwork
    services_connection: gcp.servicenetworking.Connection | None


def networks(ctx: Context, node_account: pulumi.Input[str] | None, with_lustre: bool) -> Networks:
    layout = fabric_layout(ctx.args.sku, ctx.args.vpc_cidr)
    nets: dict[str, gcp.compute.Network] = {}
    subnets: dict[str, gcp.compute.Subnetwork] = {}
    for plan in layout.networks:
        net = _network(ctx, plan, layout.mtu)
        nets[plan.key] = net
        for sub in plan.subnets:
            subnets[sub.key] = gcp.compute.Subnetwork(
                ctx.name(f"{sub.key}-subnet"),
                gcp.compute.SubnetworkArgs(
                    network=net.id,
                    region=ctx.args.region,
                    ip_cidr_range=str(sub.cidr),
                    stack_type="IPV4_ONLY",
                    # Nodes reach Cloud Storage and Google APIs without NAT or external IPs.
                    private_ip_google_access=plan.role == "host",
                    description=f"fleetforge {ctx.args.name}: {sub.key}",
                ),
                ctx.opts(),
            )
        if plan.role != "rdma":
            _internal_rule(ctx, plan, net, node_account)
    primary_plan = layout.networks[0]
    primary = nets[primary_plan.key]
    primary_subnet = subnets[primary_plan.subnets[0].key]
    _egress(ctx, primary)
    _ssh_rule(ctx, primary, node_account)
    connection = _private_services(ctx, layout, primary, node_account) if with_lustre else None
    return Networks(layout, nets, subnets, primary, primary_subnet, connection)


def _targets(node_account: pulumi.Input[str] | None) -> list[pulumi.Input[str]] | None:
    # TPU VMs from a queued resource run as the project's default compute account (pulumi-gcp's
    # queued resource has no service-account field), so their rules cover the fleet's own VPC.
    return [node_account] if node_account is not None else None


def _network(ctx: Context, plan: NetworkPlan, mtu: int | None) -> gcp.compute.Network:
    profile = None
    if plan.roce:
        profile = ctx.project.apply(lambda p: f"projects/{p}/global/networkProfiles/{ctx.args.zone}-vpc-roce")
    return gcp.compute.Network(
        ctx.name(f"{plan.key}-vpc"),
        gcp.compute.NetworkArgs(
            auto_create_subnetworks=False,
            mtu=mtu,
            routing_mode="REGIONAL",
            network_profile=profile,
            # Only the primary host VPC reaches the internet (through Cloud NAT).
            delete_default_routes_on_create=not plan.egress,
            description=f"fleetforge {ctx.args.name}: {plan.role} network {plan.key}",
        ),
        ctx.opts(),
    )


def _internal_rule(
    ctx: Context, plan: NetworkPlan, net: gcp.compute.Network, node_account: pulumi.Input[str] | None
) -> None:
    # NCCL, its TCP bootstrap and torchrun's rendezvous among the fleet's nodes, nothing else.
    gcp.compute.Firewall(
        ctx.name(f"{plan.key}-internal"),
        gcp.compute.FirewallArgs(
            network=net.id,
            direction="INGRESS",
            allows=[gcp.compute.FirewallAllowArgs(protocol=p) for p in ALL_PROTOCOLS],
            source_ranges=[str(s.cidr) for s in plan.subnets],
            target_service_accounts=_targets(node_account),
            description=f"fleetforge {ctx.args.name}: fleet-internal traffic on {plan.key}",
        ),
        ctx.opts(),
    )


def _ssh_rule(ctx: Context, primary: gcp.compute.Network, node_account: pulumi.Input[str] | None) -> None:
    sources = [str(ctx.args.ssh_cidr)] if ctx.args.ssh_cidr is not None else []
    if ctx.args.bastion is not None:
        sources.append(f"{ctx.args.bastion}/32")
    if not sources:
        sources = [str(IAP_RANGE)]
    gcp.compute.Firewall(
        ctx.name("ssh"),
        gcp.compute.FirewallArgs(
            network=primary.id,
            direction="INGRESS",
            allows=[gcp.compute.FirewallAllowArgs(protocol="tcp", ports=["22"])],
            source_ranges=sources,
            target_service_accounts=_targets(node_account),
            description=f"fleetforge {ctx.args.name}: SSH from the named source only",
        ),
        ctx.opts(),
    )


def _egress(ctx: Context, primary: gcp.compute.Network) -> None:
    router = gcp.compute.Router(
        ctx.name("router"),
        gcp.compute.RouterArgs(network=primary.id, region=ctx.args.region),
        ctx.opts(),
    )
    gcp.compute.RouterNat(
        ctx.name("nat"),
        gcp.compute.RouterNatArgs(
            router=router.name,
            region=ctx.args.region,
            nat_ip_allocate_option="AUTO_ONLY",
            source_subnetwork_ip_ranges_to_nat="ALL_SUBNETWORKS_ALL_IP_RANGES",
            # A training fleet opens many connections to registries at once while pulling images.
            enable_dynamic_port_allocation=True,
            min_ports_per_vm=1024,
            log_config=gcp.compute.RouterNatLogConfigArgs(enable=True, filter="ERRORS_ONLY"),
        ),
        ctx.opts(),
    )


def _private_services(
    ctx: Context, layout: FabricLayout, primary: gcp.compute.Network, node_account: pulumi.Input[str] | None
) -> gcp.servicenetworking.Connection:
    services = layout.services_range
    reserved = gcp.compute.GlobalAddress(
        ctx.name("services-range"),
        gcp.compute.GlobalAddressArgs(
            network=primary.id,
            purpose="VPC_PEERING",
            address_type="INTERNAL",
            address=str(services.network_address),
            prefix_length=services.prefixlen,
            description=f"fleetforge {ctx.args.name}: private services access for Managed Lustre",
            labels=ctx.labels("services-range"),
        ),
        ctx.opts(),
    )
    connection = gcp.servicenetworking.Connection(
        ctx.name("services-peering"),
        gcp.servicenetworking.ConnectionArgs(
            network=primary.id,
            service="servicenetworking.googleapis.com",
            reserved_peering_ranges=[reserved.name],
        ),
        ctx.opts(),
    )
    gcp.compute.Firewall(
        ctx.name("lustre-to-nodes"),
        gcp.compute.FirewallArgs(
            network=primary.id,
            direction="INGRESS",
            allows=[gcp.compute.FirewallAllowArgs(protocol="tcp", ports=[LUSTRE_PORT])],
            source_ranges=[str(services)],
            target_service_accounts=_targets(node_account),
            description=f"fleetforge {ctx.args.name}: Managed Lustre servers to their clients",
        ),
        ctx.opts(),
    )
    return connection
