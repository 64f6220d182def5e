"""Ansible inventories for playbooks/site.yml, from an on-prem spec or from a cloud stack's outputs.

The groups are what site.yml applies roles by, and they follow from the SKU and the spec:

  gpu_nodes        the SKU's accelerators are NVIDIA GPUs; gpu_facts must then see exactly
                   accelerators_per_node of them (gpu_facts_expected_nvidia_gpus), and the NVSwitches
                   the SKU has, as PCI functions or NVLink 5 management ports
                   (gpu_facts_expected_nvswitch_fabric), which decide how Fabric Manager is set up
  ib_nodes         the fabric is InfiniBand or RoCE (GPUDirect RDMA); doca_ofed must see the SKU's HCAs
  lustre_clients   the spec's file system is Lustre (on-prem) or a managed Lustre (FSx, Managed, AMLFS)
  beegfs_clients   the spec's file system is BeeGFS
  nvmeof_clients   the spec lists storage.nvmeof targets (group vars carry them for the role)

GPU nodes get their fabric's NCCL environment from the catalog (fleet/catalog/skus.yaml `fabrics`):
`nccl_fabric`, `nccl_environment` and the vendor's profile script for roles/nccl (which writes
/etc/nccl.conf), and `burnin_fabric_environment` for the fleet burn-in's collectives and fabric
rounds (roles/burnin), so a cloud fleet's burn-in runs over its own transport without hand-editing.
Values that depend on the node (interface names) are not in the catalog: the profile script on the
node sets them, or the operator does (`--var burnin_environment=...`, which the role lays over the
fabric's mapping).

Every group is written even when empty, so site.yml's plays match a group rather than warn.
An on-prem spec lists its hosts, so its inventory is static YAML. A cloud fleet is one scale-out
group whose members change as nodes are replaced, so its inventory is the cloud's dynamic inventory
plugin configured from the stack outputs (AWS: amazon.aws.aws_ec2 filtered by the group's
node_filter; GCP: google.cloud.gcp_compute filtered by the group's labels, for a managed instance
group, while a TPU slice's VMs are listed through the TPU API: stacks/tpu_inventory.py; Azure:
azure.azcollection.azure_rm over the fleet's scale sets, one per InfiniBand domain, each host
grouped as ib_domain_<n>; nodes reached by private address), with the same groups and variables.

Every value comes from a spec or stack outputs, so it is data: in a static inventory every string
is tagged `!unsafe` (Ansible never templates it) and host names must be plain host names; in the
plugin's `compose` (Jinja expressions by design, whose results Ansible templates again when a
play uses them) a string is only allowed from a character set in which no template can be spelled.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from fleet import ansible_yaml, regions
from fleet.catalog import Sku, UnknownSkuError, fabric_environment, get_sku
from fleet.grammar import mount_point as valid_mount_point
from fleet.spec import FleetSpec

GROUPS = ("gpu_nodes", "ib_nodes", "lustre_clients", "beegfs_clients", "nvmeof_clients")
RDMA_FABRICS = {"infiniband", "gpudirect-rdma"}
LUSTRE_KINDS = {"lustre", "fsx-lustre", "managed-lustre", "amlfs"}
# Managed Lustre services speak LNet over TCP; an on-prem o2ib NID says InfiniBand.
_NID = re.compile(r"^[A-Za-z0-9.:-]+@(tcp|o2ib)[0-9]*$")
_MOUNT_SOURCE = re.compile(r"^(?P<nids>[^/]+):/(?P<fsname>[A-Za-z0-9_]{1,8})$")
# Strings a compose expression may carry: no braces, '%', '#', quotes or backslashes, so neither
# the expression nor the value it yields can hold a template.
_COMPOSE_TEXT = re.compile(r"[A-Za-z0-9 ._:/@(),=+-]*")
# The stack output each compose variable comes from, so an error names the field to fix.
_COMPOSE_SOURCE = {
    "fleetforge_fleet": "fleet.name",
    "lustre_client_mgs_nids": "storage.mount_source",
    "lustre_client_fsname": "storage.mount_source",
    "lustre_client_mount_point": "storage.mount_point",
}


# GCP grammars (https://cloud.google.com/compute/docs/naming-resources,
# https://cloud.google.com/resource-manager/docs/creating-managing-projects,
# https://cloud.google.com/compute/docs/labeling-resources): in none of them can a template, a
# quote or a filter operator be spelled, so values that pass are written into filters and compose.
_GCE_NAME = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
_GCP_PROJECT = re.compile(r"[a-z][a-z0-9-]{4,28}[a-z0-9]")
_GCP_LABEL_KEY = re.compile(r"[a-z][a-z0-9_-]{0,62}")
_GCP_LABEL_VALUE = re.compile(r"[a-z0-9_-]{0,63}")
GCE_GROUP_KIND = "gcp-managed-instance-group"
# TPU VMs are TPU API resources, which no inventory plugin lists: stacks/tpu_inventory.py.
TPU_GROUP_KIND = "gcp-tpu-queued-resource"
AZURE_GROUP_KIND = "azure-vm-scale-set"
SUPPORTED_GROUP_KINDS = ("aws-autoscaling-group", GCE_GROUP_KIND, AZURE_GROUP_KIND)
# Azure grammars (https://learn.microsoft.com/azure/azure-resource-manager/management/resource-name-rules):
# a subscription is a GUID; a resource group 1-90 of letters, digits _ - . ( ), not ending in '.';
# a scale set 1-64 of letters, digits _ . -, starting alphanumeric, ending alphanumeric or '_'.
# None can spell a quote or a template, so names that pass go into filters and compose verbatim.
_AZURE_SUBSCRIPTION = re.compile(r"[0-9a-fA-F]{8}-([0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}")
_AZURE_RESOURCE_GROUP = re.compile(r"[A-Za-z0-9_().-]{0,89}[A-Za-z0-9_()-]")
_AZURE_VMSS_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9_.-]{0,62}[A-Za-z0-9_])?")
# Where each plugin looks for its configuration: a file name ending in one of these.
PLUGIN_FILE_SUFFIXES = {
    "amazon.aws.aws_ec2": ("aws_ec2.yml", "aws_ec2.yaml"),
    "google.cloud.gcp_compute": ("gcp_compute.yml", "gcp_compute.yaml", "gcp.yml", "gcp.yaml"),
    "azure.azcollection.azure_rm": ("azure_rm.yml", "azure_rm.yaml"),
}


class InventoryConfigError(ValueError):
    """Input that cannot become an inventory; `field` names what is wrong."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def from_spec(spec: FleetSpec) -> dict[str, Any]:
    """A static inventory: every host of an on-prem spec, grouped for site.yml."""
    if spec.cloud != "onprem" or not spec.hosts:
        raise InventoryConfigError(
            "cloud",
            f"{spec.cloud} fleets have no host list in the spec; write the inventory from the stack's "
            "outputs with --stack-outputs",
        )
    sku = spec.catalog_sku
    hosts: dict[str, dict[str, Any]] = {}
    for h in spec.hosts:
        if not ansible_yaml.is_host_name(h.name):
            raise InventoryConfigError("hosts[].name", f"{h.name!r}: allowed: {ansible_yaml.HOST_NAME_RULE}")
        entry: dict[str, Any] = {"ansible_host": h.address}
        if h.port != 22:
            entry["ansible_port"] = h.port
        if h.user:
            entry["ansible_user"] = h.user
        hosts[h.name] = entry
    names = list(hosts)
    fs = spec.storage.filesystem
    storage: dict[str, Any] | None = None
    if fs is not None and fs.kind == "lustre":
        storage = {
            "kind": "lustre",
            "lustre_client_mgs_nids": list(fs.mgs_nids or ()),
            "lustre_client_fsname": fs.fsname,
            "lustre_client_mount_point": fs.mount_point,
        }
    elif fs is not None and fs.kind == "beegfs":
        storage = {
            "kind": "beegfs",
            "beegfs_client_mgmtd_host": fs.mgmtd_host,
            "beegfs_client_mount_point": fs.mount_point,
        }
    groups = node_groups(sku, storage)
    groups["nvmeof_clients"] = bool(spec.storage.nvmeof)
    children = {g: {"hosts": {n: None for n in names} if members else {}} for g, members in groups.items()}
    group_vars = group_vars_for(sku, storage)
    if spec.storage.nvmeof:
        group_vars["nvmeof_clients"] = {
            "nvmeof_initiator_targets": [t.model_dump(exclude_none=True) for t in spec.storage.nvmeof]
        }
    for g, gvars in group_vars.items():
        if gvars and groups[g]:
            children[g]["vars"] = gvars
    # Every string below came from the spec: written `!unsafe`, data to Ansible, never a template.
    return {
        "all": {
            "hosts": {name: ansible_yaml.unsafe_values(v) for name, v in hosts.items()},
            "vars": ansible_yaml.unsafe_values(fleet_vars(spec.name, sku, spec.validation.pinned_versions)),
            "children": {
                g: {k: ansible_yaml.unsafe_values(v) if k == "vars" else v for k, v in body.items()}
                for g, body in children.items()
            },
        }
    }


def from_stack_outputs(outputs: Mapping[str, Any]) -> dict[str, Any]:
    """A dynamic inventory plugin configuration for the stack's scale-out group."""
    fleet = output_section(outputs, "fleet")
    group = output_section(outputs, "group")
    sku_name = fleet.get("sku")
    try:
        sku = get_sku(str(sku_name))
    except UnknownSkuError:
        raise InventoryConfigError("fleet.sku", f"unknown SKU {sku_name!r}") from None
    storage_out = outputs.get("storage")
    storage: dict[str, Any] | None = None
    if storage_out is not None:
        if not isinstance(storage_out, Mapping):
            raise InventoryConfigError("storage", "expected a mapping or null")
        storage = lustre_from_outputs(storage_out)
    kind = group.get("kind")
    if kind == GCE_GROUP_KIND:
        return _gcp_compute(fleet, group, sku, storage)
    if kind == TPU_GROUP_KIND:
        raise InventoryConfigError(
            "group.kind",
            f"{kind!r}: TPU VMs are not Compute Engine instances, so no inventory plugin lists them; "
            "their static inventory is listed through the TPU API (`fleetforge inventory --stack-outputs`)",
        )
    if kind == AZURE_GROUP_KIND:
        return _azure_rm(fleet, group, sku, storage, outputs.get("tags"))
    if kind != "aws-autoscaling-group":
        raise InventoryConfigError(
            "group.kind",
            f"{kind!r} has no inventory plugin mapping; supported: {', '.join(SUPPORTED_GROUP_KINDS)}",
        )
    node_filter = group.get("node_filter")
    if not isinstance(node_filter, Mapping) or not node_filter:
        raise InventoryConfigError("group.node_filter", "expected a non-empty mapping of EC2 filter -> value")
    region = group.get("region") or fleet.get("region")
    if not isinstance(region, str) or not region:
        raise InventoryConfigError("group.region", "required to list the group's instances")
    groups = node_groups(sku, storage)
    compose = {
        "ansible_host": "private_ip_address",
        # What the aws-unhealthy action reads, from the plugin's own host vars: the instance's id
        # and the region the plugin found it in.
        "ec2_instance_id": "instance_id",
        "aws_region": "placement.region",
        **_composed_literals(fleet, sku, storage, groups, {}),
    }
    return {
        "plugin": "amazon.aws.aws_ec2",
        "regions": [ansible_yaml.Unsafe(region)],
        "filters": {
            **{str(k): ansible_yaml.unsafe_values(v) for k, v in node_filter.items()},
            "instance-state-name": ["running"],
        },
        "hostnames": ["private-ip-address"],
        "compose": compose,
        "groups": {g: "true" if members else "false" for g, members in groups.items()},
    }


def _composed_literals(
    fleet: Mapping[str, Any],
    sku: Sku,
    storage: Mapping[str, Any] | None,
    groups: Mapping[str, bool],
    extra: Mapping[str, Any],
) -> dict[str, str]:
    """Compose entries for the values every node of the group shares, as Jinja literals.

    The plugin's compose sets per-host variables; group-level facts are the same for every node,
    and a node belongs to every group the SKU and spec imply."""
    merged: dict[str, Any] = fleet_vars(str(fleet.get("name", "")), sku, {})
    for g, gvars in group_vars_for(sku, storage).items():
        if groups[g]:
            merged.update(gvars)
    merged.update(extra)
    return {
        key: _jinja_literal(value, _COMPOSE_SOURCE.get(key, f"compose.{key}"))
        for key, value in merged.items()
    }


def _gcp_compute(
    fleet: Mapping[str, Any], group: Mapping[str, Any], sku: Sku, storage: Mapping[str, Any] | None
) -> dict[str, Any]:
    """google.cloud.gcp_compute for a managed instance group.

    Nodes are listed by the labels every node of the group carries (group.node_filter), in the
    group's project and zone (a regional group: every zone of its region), running ones only, and
    named by instance name, which the burn-in results and the gate's rejects use. Each host gets
    the identifiers the gcp-recreate action reads: gce_project, gce_zone, gce_instance and
    gce_instance_id from the instance itself, gce_mig (and gce_mig_region for a regional group)
    from the outputs."""
    project = _gcp_text(group.get("project"), _GCP_PROJECT, "group.project", "a GCP project id")
    region = _gcp_text(group.get("region") or fleet.get("region"), _GCE_NAME, "group.region", "a GCP region")
    if region not in regions.regions("gcp"):
        raise InventoryConfigError("group.region", f"{region!r} is not a GCP region fleetforge knows")
    zone_value = group.get("zone")
    zone = None if zone_value is None else _gcp_text(zone_value, _GCE_NAME, "group.zone", "a GCP zone")
    known_zones = regions.zones("gcp", region)
    if zone is not None and zone not in known_zones:
        raise InventoryConfigError(
            "group.zone", f"{zone!r} is not a zone of {region}: {', '.join(known_zones)}"
        )
    ids: dict[str, Any] = {
        "gce_project": project,
        "gce_mig": _gcp_text(group.get("name"), _GCE_NAME, "group.name", "a managed instance group name"),
    }
    if zone is None:  # a regional group: recreation goes through the region's API
        ids["gce_mig_region"] = region
    groups = node_groups(sku, storage)
    compose = {
        # Nodes have no external address: Ansible reaches them on the first interface's private IP.
        "ansible_host": "networkInterfaces[0].networkIP",
        # The plugin's own host vars: the instance's name, its zone's short name, and its id, which
        # a recreated instance does not keep (`fleetforge bringup` tells old from new by it).
        "gce_instance": "name",
        "gce_instance_id": "id",
        "gce_zone": "zone",
        **_composed_literals(fleet, sku, storage, groups, ids),
    }
    return {
        "plugin": "google.cloud.gcp_compute",
        "auth_kind": "application",  # Application Default Credentials, as the gcp-recreate action
        "projects": [ansible_yaml.Unsafe(project)],
        "zones": [ansible_yaml.Unsafe(z) for z in ([zone] if zone else known_zones)],
        "filters": [
            ansible_yaml.Unsafe(f)
            for f in [*_gcp_label_filters(group.get("node_filter")), "status = RUNNING"]
        ],
        "hostnames": ["name"],
        "compose": compose,
        "groups": {g: "true" if members else "false" for g, members in groups.items()},
    }


def _azure_rm(
    fleet: Mapping[str, Any],
    group: Mapping[str, Any],
    sku: Sku,
    storage: Mapping[str, Any] | None,
    tags: Any,
) -> dict[str, Any]:
    """azure.azcollection.azure_rm for the fleet's scale sets, one per InfiniBand domain.

    The plugin lists the Uniform scale sets of the group's resource group and their instances;
    only instances of the fleet's own scale sets are kept (and none tagged for another fleet),
    named by instance name (<scale set>_<instance id>), reached on the first private address, and
    grouped per InfiniBand domain (ib_domain_<n>) so burn-in and jobs see who shares a fabric.
    Each host gets what the azure-replace action reads: azure_subscription_id and
    azure_resource_group from the outputs, azure_vmss_name and azure_vmss_instance_id (the last
    segment of the instance's resource id) from the plugin's own host vars."""
    subscription = _gcp_text(
        group.get("subscription_id"), _AZURE_SUBSCRIPTION, "group.subscription_id", "an Azure subscription id"
    )
    resource_group = _gcp_text(
        group.get("resource_group"), _AZURE_RESOURCE_GROUP, "group.resource_group", "an Azure resource group"
    )
    domains = _azure_scale_sets(group.get("scale_sets"), fleet.get("size"))
    names = ", ".join(f"'{name}'" for name in domains)
    domain_of = "{" + ", ".join(f"'{name}': {index}" for name, index in domains.items()) + "}"
    fleet_tag = (tags.get("fleet") if isinstance(tags, Mapping) else None) or fleet.get("name")
    ids = {"azure_subscription_id": subscription, "azure_resource_group": resource_group}
    groups = node_groups(sku, storage)
    compose = {
        # Nodes have no public address: Ansible reaches them on the primary NIC's private IP.
        "ansible_host": "private_ipv4_addresses | first",
        "azure_vmss_name": "vmss.name",
        # .../virtualMachineScaleSets/<set>/virtualMachines/<instance id>
        "azure_vmss_instance_id": "id.split('/') | last",
        "fleetforge_ib_domain": f"{domain_of}[vmss.name]",
        **_composed_literals(fleet, sku, storage, groups, ids),
    }
    return {
        "plugin": "azure.azcollection.azure_rm",
        "auth_source": "auto",  # environment, managed identity or CLI, as the azure-replace action
        "subscription_id": ansible_yaml.Unsafe(subscription),
        "include_vm_resource_groups": [],  # scale set instances only, never stray VMs
        "include_vmss_resource_groups": [ansible_yaml.Unsafe(resource_group)],
        "plain_host_names": True,
        "hostnames": ["name"],
        # An instance view shows the scale set's tags only on newer API versions, so the scale set
        # names decide membership; a node tagged for another fleet is dropped all the same.
        # Filters and the keyed group's key are Jinja the plugin evaluates, so they are plain
        # strings; every value in them has passed a grammar in which no quote or brace exists.
        "include_host_filters": [f"vmss.name is defined and vmss.name in [{names}]"],
        "exclude_host_filters": [
            f"tags.fleet is defined and tags.fleet != {_jinja_literal(fleet_tag, 'tags.fleet')}"
        ],
        "compose": compose,
        "conditional_groups": {g: "true" if members else "false" for g, members in groups.items()},
        # As text: a keyed group whose key yields 0 is taken as "no key" and fails the source.
        "keyed_groups": [{"prefix": "ib_domain", "key": f"{domain_of}[vmss.name] | string"}],
    }


def _azure_scale_sets(value: Any, size: Any) -> dict[str, int]:
    """Scale set name -> InfiniBand domain, domains exactly 0..n-1, capacities adding to the size."""
    if not isinstance(value, list) or not value:
        raise InventoryConfigError(
            "group.scale_sets", "expected a non-empty list of {name, ib_domain, capacity}, one per domain"
        )
    found: dict[str, int] = {}
    total = 0
    for index, entry in enumerate(value):
        where = f"group.scale_sets[{index}]"
        if not isinstance(entry, Mapping):
            raise InventoryConfigError(where, "expected a mapping {name, ib_domain, capacity}")
        name = _gcp_text(entry.get("name"), _AZURE_VMSS_NAME, f"{where}.name", "an Azure scale set name")
        domain, capacity = entry.get("ib_domain"), entry.get("capacity")
        if isinstance(domain, bool) or domain != index:
            raise InventoryConfigError(
                f"{where}.ib_domain", f"{domain!r}; allowed: {index} (domains in order from 0)"
            )
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 0:
            raise InventoryConfigError(
                f"{where}.capacity", f"{capacity!r}; allowed: a whole number of instances"
            )
        if name in found:
            raise InventoryConfigError(f"{where}.name", f"{name!r} names two domains")
        found[name] = index
        total += capacity
    if isinstance(size, int) and not isinstance(size, bool) and total != size:
        raise InventoryConfigError("group.scale_sets", f"capacities add to {total}, but fleet.size is {size}")
    return found


def _gcp_text(value: Any, grammar: re.Pattern[str], field: str, what: str) -> str:
    if not isinstance(value, str) or not grammar.fullmatch(value):
        raise InventoryConfigError(field, f"{value!r} is not {what} (allowed: {grammar.pattern})")
    return value


def _gcp_label_filters(node_filter: Any) -> list[str]:
    """`labels.KEY = "VALUE"` filter expressions of the instances list API, one per label."""
    if not isinstance(node_filter, Mapping) or not node_filter:
        raise InventoryConfigError(
            "group.node_filter", 'expected a non-empty mapping of "labels.<key>" -> label value'
        )
    filters = []
    for key, value in node_filter.items():
        label = str(key).removeprefix("labels.")
        if not str(key).startswith("labels.") or not _GCP_LABEL_KEY.fullmatch(label):
            raise InventoryConfigError(
                "group.node_filter", f"{key!r}: allowed: labels.<key>, key {_GCP_LABEL_KEY.pattern}"
            )
        if not isinstance(value, str) or not _GCP_LABEL_VALUE.fullmatch(value):
            raise InventoryConfigError(
                f"group.node_filter.{key}", f"{value!r} is no GCP label value ({_GCP_LABEL_VALUE.pattern})"
            )
        filters.append(f'labels.{label} = "{value}"')
    return filters


def render(inventory: Mapping[str, Any], source: str) -> str:
    header = (
        f"# Ansible inventory written by `fleetforge inventory` from {source}; regenerate, do not edit.\n"
    )
    return header + ansible_yaml.dump(dict(inventory))


def default_output_name(inventory: Mapping[str, Any], fleet_name: str) -> str:
    """A plugin only reads files named for it (*aws_ec2.yml, *gcp_compute.yml); static
    inventories take any name."""
    suffixes = PLUGIN_FILE_SUFFIXES.get(str(inventory.get("plugin")))
    return f"{fleet_name}.{suffixes[0]}" if suffixes else f"{fleet_name}.yml"


# ------------------------------------------ shared pieces (stacks/tpu_inventory.py builds with them too)


def node_groups(sku: Sku, storage: Mapping[str, Any] | None) -> dict[str, bool]:
    acc = sku.accelerator
    kind = storage["kind"] if storage else None
    return {
        "gpu_nodes": acc.kind == "gpu" and acc.vendor == "nvidia" and sku.accelerators_per_node > 0,
        "ib_nodes": sku.fabric.kind in RDMA_FABRICS and sku.fabric.nics > 0,
        "lustre_clients": kind == "lustre",
        "beegfs_clients": kind == "beegfs",
        "nvmeof_clients": False,
    }


def nccl_vars(sku: Sku) -> dict[str, Any]:
    """The SKU's fabric environment as role variables (see the module docstring); none without NCCL."""
    env = fabric_environment(sku)
    if env.nccl_fabric == "none":
        return {}
    out: dict[str, Any] = {
        "nccl_fabric": env.nccl_fabric,
        "nccl_environment": env.nccl_conf(),
        "burnin_fabric_environment": env.process_environment(),
    }
    if env.profile:
        out["nccl_profile"] = env.profile
        out["nccl_profile_environment"] = dict(env.profile_environment)
    return out


def group_vars_for(sku: Sku, storage: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    fabric = sku.fabric
    gpu: dict[str, Any] = {
        "gpu_facts_expected_nvidia_gpus": sku.accelerators_per_node,
        **nccl_vars(sku),
    }
    if sku.accelerator.vendor == "nvidia":
        gpu["gpu_facts_expected_nvswitch_fabric"] = sku.nvswitch_fabric
    ib: dict[str, Any] = {"doca_ofed_expected_hcas": fabric.nics}
    store = {k: v for k, v in (storage or {}).items() if k != "kind"}
    return {
        "gpu_nodes": gpu,
        "ib_nodes": ib,
        "lustre_clients": store if storage and storage["kind"] == "lustre" else {},
        "beegfs_clients": store if storage and storage["kind"] == "beegfs" else {},
        "nvmeof_clients": {},
    }


# An NCCL pin: the release (2.30.7, or with NVIDIA's package revision 2.30.7-1) and, optionally, the
# build's CUDA as the package names it (2.30.7-1+cuda12.9: libnccl2=2.30.7-1+cuda12.9 on Debian and
# Ubuntu, libnccl-2.30.7-1+cuda12.9 on RHEL). NVIDIA builds each release for a minor or two of each
# CUDA major only (2.30.7: +cuda12.9 and +cuda13.3), and a build runs with any toolkit of its major
# (minor-version compatibility). So a pin without the build takes the cuda pin's MAJOR.MINOR, the
# toolkit the roles install (without a cuda pin, the roles' defaults agree: 12.8), and a pin that
# names its build must be of the cuda pin's major. Where NVIDIA has no build for the toolkit's minor
# (cuda 13.0 with NCCL 2.30.7), the pin names the build: 2.30.7-1+cuda13.3.
_NCCL_PIN = re.compile(r"(?P<release>\d+\.\d+\.\d+(?:-\d+)?)(?:\+cuda(?P<cuda>\d+\.\d+))?")


def fleet_vars(name: str, sku: Sku, pinned: Mapping[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {"fleetforge_fleet": name, "fleetforge_sku": sku.sku}
    # Exact pins reach the roles exactly: the roles install (and hold) these versions, and the gate
    # then checks each node reports them. A branch alone ("570") pins only the branch.
    driver = pinned.get("driver")
    if driver:
        out["nvidia_driver_branch"] = driver.split(".")[0]
        if re.fullmatch(r"\d+\.\d+(\.\d+)?", driver):
            out["nvidia_driver_version"] = driver
    cuda = pinned.get("cuda")
    if cuda and re.fullmatch(r"\d+\.\d+(\.\d+)?", cuda):
        out["cuda_toolkit_version"] = ".".join(cuda.split(".")[:2])
        if cuda.count(".") == 2:
            out["cuda_toolkit_release"] = cuda
    nccl = _NCCL_PIN.fullmatch(pinned.get("nccl") or "")
    if nccl:
        # NVIDIA's NCCL packages are revision 1 (libnccl2=2.26.2-1+cuda12.8); a pin may name another.
        release = nccl["release"]
        out["nccl_version"] = release if "-" in release else f"{release}-1"
        build = nccl["cuda"] or out.get("cuda_toolkit_version")
        if build:
            out["nccl_cuda_version"] = build
        toolkit = out.get("cuda_toolkit_version")
        if build and toolkit and build.split(".")[0] != toolkit.split(".")[0]:
            raise InventoryConfigError(
                "validation.pinned_versions.nccl",
                f"{pinned['nccl']!r} is a CUDA {build.split('.')[0]} build of NCCL, but the cuda pin "
                f"{pinned['cuda']!r} installs CUDA {toolkit.split('.')[0]}: pin the CUDA "
                f"{toolkit.split('.')[0]}.x build NVIDIA publishes for {out['nccl_version']} "
                f"(libnccl2={out['nccl_version']}+cudaMAJOR.MINOR in the CUDA repository)",
            )
    return out


def output_section(outputs: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = outputs.get(name)
    if not isinstance(value, Mapping):
        raise InventoryConfigError(
            name, "missing: stack outputs carry fleet, group, fabric, storage, checkpoints, tags"
        )
    return value


def lustre_from_outputs(storage: Mapping[str, Any]) -> dict[str, Any] | None:
    kind = storage.get("kind")
    if kind not in LUSTRE_KINDS:
        return None
    source = storage.get("mount_source")
    match = _MOUNT_SOURCE.match(source) if isinstance(source, str) else None
    nids = match.group("nids").split(":") if match else []
    if not match or not all(_NID.match(n) for n in nids):
        raise InventoryConfigError(
            "storage.mount_source", f"{source!r} is not a Lustre mount source (<nid>[:<nid>]:/<fsname>)"
        )
    # The node mounts there as root: the spec's rule (fleet.grammar), not just compose-safe text.
    mount_point = storage.get("mount_point") or "/lustre"
    if not isinstance(mount_point, str):
        raise InventoryConfigError(
            "storage.mount_point", f"{mount_point!r} is not a path (expected a string)"
        )
    try:
        valid_mount_point(mount_point)
    except ValueError as err:
        raise InventoryConfigError("storage.mount_point", str(err)) from None
    return {
        "kind": "lustre",
        "lustre_client_mgs_nids": nids,
        "lustre_client_fsname": match.group("fsname"),
        "lustre_client_mount_point": mount_point,
        # Managed Lustre is reached over TCP from the VPC, through the interface of the node's
        # default route: which one that is (ens5, ens4, enp0s12; one of several NICs) is the node's
        # to say, so the network names none and roles/lustre_client fills it in from the node's
        # facts. The vendor's repository is configured on the image, not by the role.
        "lustre_client_lnet_networks": "tcp0",
        "lustre_client_manage_repo": False,
    }


def _jinja_literal(value: Any, field: str) -> str:
    """A compose expression that evaluates to `value` (compose values are Jinja expressions).

    The value a compose expression yields becomes a plain host var, which Ansible templates again
    when a play reads it; a string is therefore refused unless it cannot hold a template at all."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        if not _COMPOSE_TEXT.fullmatch(value):
            raise InventoryConfigError(
                field,
                f"{value!r} cannot be written into the inventory plugin's compose; "
                "allowed: letters, digits, space and . _ : / @ ( ) , = + -",
            )
        return "'" + value + "'"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_jinja_literal(v, field) for v in value) + "]"
    if isinstance(value, Mapping):
        items = (f"{_jinja_literal(str(k), field)}: {_jinja_literal(v, field)}" for k, v in value.items())
        return "{" + ", ".join(items) + "}"
    raise TypeError(f"no Jinja literal for {type(value).__name__}")
