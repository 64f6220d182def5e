"""A static Ansible inventory of a TPU fleet's VMs, listed through the Cloud TPU API.

TPU VMs are TPU API resources (projects.locations.nodes), not Compute Engine instances, so the
google.cloud.gcp_compute plugin that serves GPU fleets never sees them. A TPU fleet is one queued
resource holding one node per slice; each node has one TPU VM (worker) per host of its topology,
reachable on the node's `networkEndpoints`, one per worker in worker order (the order gcloud's
`--worker=N` addresses). A slice's size is fixed by its topology and a re-queued slice comes back
whole, so the hosts are listed once and written as static YAML with the same groups and group
variables as every other fleet, plus one group per slice (tpu_slice_<n>). Each host's
`tpu_chips_per_vm` is the chips that VM has, which its slice decides (fleet/catalog/tpu.py: 4 on a
VM of a multi-host v5e/v6e slice, not the largest VM's 8); the outputs' chips_per_tpu_vm must agree.

The listing fails closed: the queued resource must be ACTIVE, every node READY, with as many
workers as its topology has hosts, each with an internal address; the slices must be the ones the
stack asked for. Every string the API returns is data: written `!unsafe` (fleet.ansible_yaml),
and nothing from the API becomes a host name (those are built from the outputs' node ids).

The client is google-cloud-tpu's TpuClient over REST with Application Default Credentials, imported
only when a TPU fleet is listed (the `cloud` extra).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fleet import ansible_yaml, regions
from fleet.catalog import Sku, UnknownSkuError, get_sku
from fleet.catalog import tpu as tpu_shapes
from stacks.ansible_inventory import (
    InventoryConfigError,
    fleet_vars,
    group_vars_for,
    lustre_from_outputs,
    node_groups,
    output_section,
)

if TYPE_CHECKING:
    from google.cloud.tpu_v2 import TpuClient

GROUP_KIND = "gcp-tpu-queued-resource"
EXTRA = "cloud"
API_TIMEOUT_S = 60.0
# Google's grammars: a project id (https://cloud.google.com/resource-manager/docs/creating-managing-projects);
# a zone, a queued resource id and a TPU node id are RFC 1035 labels (the node id is what
# `gcloud compute tpus tpu-vm create` and the queued resource's nodeSpec take). None can spell a
# template, so a value that passes may become part of a host name and a resource path.
_PROJECT = re.compile(r"[a-z][a-z0-9-]{4,28}[a-z0-9]")
_LABEL = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
# Label keys per https://cloud.google.com/compute/docs/labeling-resources: a key outside this
# cannot come from Google, and a mapping key cannot carry the `!unsafe` tag.
_LABEL_KEY = re.compile(r"[a-z][a-z0-9_-]{0,62}")
READY, ACTIVE = "READY", "ACTIVE"


class TpuListingError(InventoryConfigError):
    """The TPU API's answer cannot become an inventory (a slice not ready, a worker without an
    address, a slice of the wrong shape); `field` names the queued resource or node."""


class TpuApiUnavailable(RuntimeError):
    """The TPU API cannot be asked: the library is missing, no credentials, or the call failed."""


@dataclass(frozen=True)
class TpuFleet:
    """What the stack outputs say about the fleet's slices, checked."""

    name: str
    sku: Sku
    project: str
    zone: str
    queued_resource: str
    node_ids: tuple[str, ...]  # from the outputs; () when they name none
    workers: int  # TPU VMs per slice, from the topology
    chips_per_vm: int | None  # chips each worker has, from the topology; None when unknown
    accelerator_type: str | None
    topology: str | None
    storage: Mapping[str, Any] | None
    expected_hosts: int | None

    @property
    def parent(self) -> str:
        return f"projects/{self.project}/locations/{self.zone}"


def is_tpu_outputs(outputs: Mapping[str, Any]) -> bool:
    group = outputs.get("group")
    return isinstance(group, Mapping) and group.get("kind") == GROUP_KIND


def fleet_from_outputs(outputs: Mapping[str, Any]) -> TpuFleet:
    """The TPU fleet the outputs describe, or InventoryConfigError naming the field."""
    fleet = output_section(outputs, "fleet")
    group = output_section(outputs, "group")
    if group.get("kind") != GROUP_KIND:
        raise InventoryConfigError("group.kind", f"{group.get('kind')!r}; expected {GROUP_KIND!r}")
    sku_name = fleet.get("sku")
    try:
        sku = get_sku(str(sku_name))
    except UnknownSkuError:
        raise InventoryConfigError("fleet.sku", f"unknown SKU {sku_name!r}") from None
    if not sku.is_tpu:
        raise InventoryConfigError("fleet.sku", f"{sku.sku} is not a TPU SKU, but group.kind is {GROUP_KIND}")
    name = fleet.get("name")
    if not isinstance(name, str) or not name:
        raise InventoryConfigError("fleet.name", "required")
    project = _text(group.get("project"), _PROJECT, "group.project", "a GCP project id")
    region = _text(group.get("region") or fleet.get("region"), _LABEL, "group.region", "a GCP region")
    zone = _text(group.get("zone"), _LABEL, "group.zone", "a GCP zone (a TPU slice lives in one zone)")
    known = regions.zones("gcp", region)
    if zone not in known:
        raise InventoryConfigError(
            "group.zone", f"{zone!r} is not a zone of {region}: {', '.join(known) or 'unknown region'}"
        )
    queued = _text(group.get("name"), _LABEL, "group.name", "a queued resource id")
    placement = _placement(outputs)
    node_ids = _node_ids(placement.get("tpu_nodes"))
    topology = placement.get("topology")
    workers = _workers(sku, topology, placement.get("hosts_per_tpu_node"))
    chips_per_vm = _chips_per_vm(sku, topology, placement.get("chips_per_tpu_vm"))
    accelerator_type = placement.get("name")
    if accelerator_type is not None and not isinstance(accelerator_type, str):
        raise InventoryConfigError(
            "fabric.placement.name", f"{accelerator_type!r} is not an accelerator type"
        )
    storage_out = outputs.get("storage")
    storage = None
    if storage_out is not None:
        if not isinstance(storage_out, Mapping):
            raise InventoryConfigError("storage", "expected a mapping or null")
        storage = lustre_from_outputs(storage_out)
    desired = group.get("desired")
    expected = desired if isinstance(desired, int) and not isinstance(desired, bool) else None
    return TpuFleet(
        name=name,
        sku=sku,
        project=project,
        zone=zone,
        queued_resource=queued,
        node_ids=node_ids,
        workers=workers,
        chips_per_vm=chips_per_vm,
        accelerator_type=accelerator_type,
        topology=topology if isinstance(topology, str) else None,
        storage=storage,
        expected_hosts=expected,
    )


def from_tpu_outputs(outputs: Mapping[str, Any], client: TpuClient | None = None) -> dict[str, Any]:
    """The static inventory of every TPU VM of the fleet, listed through the TPU API.

    `client` defaults to a TpuClient over REST with Application Default Credentials."""
    fleet = fleet_from_outputs(outputs)
    api = client if client is not None else default_client()
    hosts = list_hosts(fleet, api)
    return inventory(fleet, hosts)


def default_client() -> TpuClient:
    try:
        import google.cloud.tpu_v2 as tpu_v2
        from google.auth import exceptions as auth_exceptions
    except ImportError as exc:
        raise TpuApiUnavailable(
            f"listing TPU VMs needs google-cloud-tpu ({exc.name or 'google.cloud.tpu_v2'} is not installed): "
            f"install the {EXTRA!r} extra (pip install 'fleetforge[{EXTRA}]')"
        ) from None
    try:
        return tpu_v2.TpuClient(transport="rest")
    except auth_exceptions.DefaultCredentialsError as exc:
        raise TpuApiUnavailable(
            f"no Application Default Credentials for the TPU API ({_first_line(exc)}); "
            "run `gcloud auth application-default login` or set GOOGLE_APPLICATION_CREDENTIALS"
        ) from None


@dataclass(frozen=True)
class TpuHost:
    name: str
    address: str
    node_id: str
    slice_index: int
    worker: int
    accelerator_type: str
    topology: str
    runtime_version: str
    labels: Mapping[str, str]


def host_name(node_id: str, worker: int) -> str:
    """Stable for the slice's life: the node id the stack chose and the worker index."""
    return f"{node_id}-w{worker}"


def list_hosts(fleet: TpuFleet, client: TpuClient) -> list[TpuHost]:
    """Every worker of every slice, slice by slice in the queued resource's order."""
    from google.api_core import exceptions as api_exceptions

    qr_name = f"{fleet.parent}/queuedResources/{fleet.queued_resource}"
    where = f"queued resource {fleet.queued_resource}"
    try:
        queued = client.get_queued_resource(name=qr_name, timeout=API_TIMEOUT_S)
    except api_exceptions.GoogleAPICallError as exc:
        raise TpuApiUnavailable(f"{where}: the TPU API refused get ({_api_error(exc)})") from None
    state = _enum_name(queued.state.state)
    if state != ACTIVE:
        raise TpuListingError(
            where, f"is {state}, not {ACTIVE}: its TPU VMs exist only once the request is ACTIVE"
        )
    node_ids = _queued_node_ids(queued, fleet, where)
    hosts: list[TpuHost] = []
    for index, node_id in enumerate(node_ids):
        node_name = f"{fleet.parent}/nodes/{node_id}"
        try:
            node = client.get_node(name=node_name, timeout=API_TIMEOUT_S)
        except api_exceptions.GoogleAPICallError as exc:
            raise TpuApiUnavailable(
                f"TPU node {node_id}: the TPU API refused get ({_api_error(exc)})"
            ) from None
        hosts.extend(_node_hosts(node, node_name, node_id, index, fleet))
    if fleet.expected_hosts is not None and len(hosts) != fleet.expected_hosts:
        raise TpuListingError(
            "group.desired",
            f"the slices have {len(hosts)} TPU VMs, the stack asked for {fleet.expected_hosts}",
        )
    return hosts


def inventory(fleet: TpuFleet, hosts: Sequence[TpuHost]) -> dict[str, Any]:
    """Static inventory: host vars per worker, site.yml's groups, one group per slice."""
    slices = len({h.node_id for h in hosts})
    host_vars: dict[str, dict[str, Any]] = {}
    per_vm = {} if fleet.chips_per_vm is None else {"tpu_chips_per_vm": fleet.chips_per_vm}
    for h in hosts:
        host_vars[h.name] = ansible_yaml.unsafe_values(
            {
                **per_vm,
                "ansible_host": h.address,
                "gce_project": fleet.project,
                "gce_zone": fleet.zone,
                "tpu_queued_resource": fleet.queued_resource,
                "tpu_node": h.node_id,
                "tpu_slice_index": h.slice_index,
                "tpu_slices": slices,
                "tpu_worker_index": h.worker,
                "tpu_workers_per_slice": fleet.workers,
                "tpu_accelerator_type": h.accelerator_type,
                "tpu_topology": h.topology,
                "tpu_runtime_version": h.runtime_version,
                "tpu_labels": dict(h.labels),
            }
        )
    names = [h.name for h in hosts]
    groups = node_groups(fleet.sku, fleet.storage)
    group_vars = group_vars_for(fleet.sku, fleet.storage)
    children: dict[str, dict[str, Any]] = {}
    for g, members in groups.items():
        body: dict[str, Any] = {"hosts": {n: None for n in names} if members else {}}
        if members and group_vars[g]:
            body["vars"] = ansible_yaml.unsafe_values(group_vars[g])
        children[g] = body
    for index in range(slices):
        children[f"tpu_slice_{index}"] = {"hosts": {h.name: None for h in hosts if h.slice_index == index}}
    return {
        "all": {
            "hosts": host_vars,
            "vars": ansible_yaml.unsafe_values(fleet_vars(fleet.name, fleet.sku, {})),
            "children": children,
        }
    }


# --------------------------------------------------------------------------- pieces


def _text(value: Any, grammar: re.Pattern[str], field: str, what: str) -> str:
    if not isinstance(value, str) or not grammar.fullmatch(value):
        raise InventoryConfigError(field, f"{value!r} is not {what} (allowed: {grammar.pattern})")
    return value


def _placement(outputs: Mapping[str, Any]) -> Mapping[str, Any]:
    fabric = outputs.get("fabric")
    placement = fabric.get("placement") if isinstance(fabric, Mapping) else None
    if not isinstance(placement, Mapping):
        raise InventoryConfigError(
            "fabric.placement", "missing: a TPU fleet's outputs describe its slices there"
        )
    return placement


def _node_ids(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not value:
        raise InventoryConfigError(
            "fabric.placement.tpu_nodes", f"{value!r}; expected a list of TPU node ids"
        )
    ids = tuple(
        _text(v, _LABEL, f"fabric.placement.tpu_nodes[{i}]", "a TPU node id") for i, v in enumerate(value)
    )
    if len(set(ids)) != len(ids):
        raise InventoryConfigError("fabric.placement.tpu_nodes", "names a node twice")
    return ids


def _workers(sku: Sku, topology: Any, per_node: Any) -> int:
    """TPU VMs per slice: the catalog's hosts for the topology, which the outputs must agree with."""
    declared = (
        per_node if isinstance(per_node, int) and not isinstance(per_node, bool) and per_node > 0 else None
    )
    if per_node is not None and declared is None:
        raise InventoryConfigError(
            "fabric.placement.hosts_per_tpu_node", f"{per_node!r}; expected a whole number of TPU VMs"
        )
    if topology is None:
        if declared is None:
            raise InventoryConfigError(
                "fabric.placement.topology", "required (or hosts_per_tpu_node): how many TPU VMs a slice has"
            )
        return declared
    if not isinstance(topology, str):
        raise InventoryConfigError("fabric.placement.topology", f"{topology!r} is not a topology")
    try:
        shape = tpu_shapes.slice_of(sku.accelerator.generation, topology)
    except tpu_shapes.ShapeError as exc:
        raise InventoryConfigError("fabric.placement.topology", str(exc)) from None
    if declared is not None and declared != shape.hosts:
        raise InventoryConfigError(
            "fabric.placement.hosts_per_tpu_node",
            f"{declared}, but a {sku.accelerator.generation} {topology} slice has {shape.hosts} TPU VM(s)",
        )
    return shape.hosts


def _chips_per_vm(sku: Sku, topology: Any, declared: Any) -> int | None:
    """Chips on each TPU VM: the catalog's for the topology (v5e/v6e 4 on a multi-host slice, not
    the largest VM's 8), which the outputs' chips_per_tpu_vm must agree with; None when neither
    says (outputs older than the field, without a topology)."""
    told = declared if isinstance(declared, int) and not isinstance(declared, bool) and declared > 0 else None
    if declared is not None and told is None:
        raise InventoryConfigError(
            "fabric.placement.chips_per_tpu_vm", f"{declared!r}; expected a whole number of chips"
        )
    if not isinstance(topology, str):
        return told  # _workers has refused a topology that is not a string
    per_vm = tpu_shapes.slice_of(sku.accelerator.generation, topology).chips_per_vm
    if told is not None and told != per_vm:
        raise InventoryConfigError(
            "fabric.placement.chips_per_tpu_vm",
            f"{told}, but each TPU VM of a {sku.accelerator.generation} {topology} slice has {per_vm} chips",
        )
    return per_vm


def _queued_node_ids(queued: Any, fleet: TpuFleet, where: str) -> tuple[str, ...]:
    """The nodes the queued resource holds, in its order; they must be those the outputs name."""
    found: list[str] = []
    for spec in queued.tpu.node_spec:
        params = spec.multislice_params
        if params and params.node_count:
            # Multislice requests name their nodes <prefix>-0 .. <prefix>-(n-1); the prefix
            # defaults to the queued resource's id (the nodeSpec reference of the TPU API).
            prefix = params.node_id_prefix or fleet.queued_resource
            found.extend(f"{prefix}-{i}" for i in range(params.node_count))
        else:
            found.append(spec.node_id)
    bad = [n for n in found if not _LABEL.fullmatch(n)]
    if bad:
        raise TpuListingError(where, f"names TPU node ids that are not RFC 1035 labels: {bad!r}")
    if not found:
        raise TpuListingError(where, "holds no TPU node (tpu.nodeSpec is empty)")
    if fleet.node_ids and tuple(found) != fleet.node_ids:
        raise TpuListingError(
            where,
            f"holds nodes {', '.join(found)}, but the stack outputs name {', '.join(fleet.node_ids)} "
            "(fabric.placement.tpu_nodes): re-export the outputs",
        )
    if len(set(found)) != len(found):
        raise TpuListingError(where, "names a TPU node twice")
    return tuple(found)


def _node_hosts(node: Any, node_name: str, node_id: str, index: int, fleet: TpuFleet) -> list[TpuHost]:
    where = f"TPU node {node_id}"
    if node.name != node_name:
        raise TpuListingError(where, f"the API answered for {node.name!r}, not {node_name!r}")
    state = _enum_name(node.state)
    if state != READY:
        health = f" ({node.health_description})" if node.health_description else ""
        raise TpuListingError(where, f"is {state}, not {READY}{health}")
    accelerator_type = str(node.accelerator_type)
    if fleet.accelerator_type is not None and accelerator_type != fleet.accelerator_type:
        raise TpuListingError(
            where,
            f"is a {accelerator_type!r} slice, but the stack asked for {fleet.accelerator_type!r} "
            "(fabric.placement.name)",
        )
    endpoints = list(node.network_endpoints)
    if len(endpoints) != fleet.workers:
        topology = fleet.topology or "its"
        raise TpuListingError(
            where,
            f"has {len(endpoints)} worker(s) (networkEndpoints), but a {topology} slice has {fleet.workers}",
        )
    labels: dict[str, str] = {}
    for key, value in node.labels.items():
        if not _LABEL_KEY.fullmatch(key):
            raise TpuListingError(f"{where}.labels", f"{key!r} is not a GCP label key ({_LABEL_KEY.pattern})")
        labels[key] = str(value)
    topology = str(node.accelerator_config.topology) if node.accelerator_config else ""
    hosts = []
    for worker, endpoint in enumerate(endpoints):
        address = _address(endpoint.ip_address, f"{where} worker {worker}")
        hosts.append(
            TpuHost(
                name=host_name(node_id, worker),
                address=address,
                node_id=node_id,
                slice_index=index,
                worker=worker,
                accelerator_type=accelerator_type,
                topology=topology or (fleet.topology or ""),
                runtime_version=str(node.runtime_version),
                labels=labels,
            )
        )
    return hosts


def _address(value: Any, where: str) -> str:
    if not value:
        raise TpuListingError(where, "has no internal IP address (networkEndpoints[].ipAddress is empty)")
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        raise TpuListingError(where, f"ipAddress {value!r} is not an IP address") from None
    if not address.is_private:
        raise TpuListingError(
            where, f"ipAddress {value} is not an internal address; TPU VMs are reached on the VPC only"
        )
    return str(address)


def _enum_name(value: Any) -> str:
    return str(getattr(value, "name", value))


def _api_error(exc: Any) -> str:
    code = getattr(exc, "code", None)
    message = _first_line(getattr(exc, "message", None) or exc)
    return f"{int(code)} {message}" if code is not None else message


def _first_line(value: Any) -> str:
    text = str(value).strip()
    return (text.splitlines() or [""])[0][:300]
