"""The accepted set as an Ansible inventory (YAML) for the job launcher.

Groups: `fleetforge_accepted` with children `fleetforge_job` and `fleetforge_spare`, in the fleet
verdict's order (best pace first). When the fleet is not ready the job group is empty and
`fleetforge_ready` is false: a launcher that targets `fleetforge_job` lands nothing rather than
landing on a short fleet, and a stale inventory from an earlier run is replaced, not left behind.
Without a spec every accepted node is a job node. Hosts the spec lists keep their address,
user and port.

Every string is written `!unsafe` (Ansible never templates it). A node name is a YAML key and
cannot carry the tag: an accepted node whose name is not a plain host name (no braces, ranges
such as `node[1:9]`, ports, spaces) cannot be placed, and the inventory then fails closed: not
ready, no job or spare node, the refused names listed as data.
"""

from __future__ import annotations

from collections.abc import Sequence

from fleet import ansible_yaml
from fleet.spec import Host
from validation.gate import GateResult


def _host_vars(name: str, hosts: dict[str, Host]) -> dict[str, object] | None:
    host = hosts.get(name)
    if host is None:
        return None
    out: dict[str, object] = {"ansible_host": host.address}
    if host.user:
        out["ansible_user"] = host.user
    if host.port != 22:
        out["ansible_port"] = host.port
    return out


def render_inventory(result: GateResult, hosts: Sequence[Host] = ()) -> str:
    by_name = {h.name: h for h in hosts}
    fleet = result.fleet
    role_of = dict.fromkeys(fleet.job, "fleetforge_job") | dict.fromkeys(fleet.spare, "fleetforge_spare")
    groups: dict[str, dict[str, object]] = {"fleetforge_job": {}, "fleetforge_spare": {}}
    refused = [name for name in fleet.accepted if not ansible_yaml.is_host_name(name)]
    ready = False if refused else fleet.ready
    if not refused:
        for name in fleet.accepted:
            group = role_of.get(name)
            if group is not None:
                groups[group][name] = _host_vars(name, by_name)
    accepted_vars: dict[str, object] = {"fleetforge_sku": fleet.sku}
    if ready is not None:  # without a spec there is no `nodes` to be ready for
        accepted_vars["fleetforge_ready"] = ready
        accepted_vars["fleetforge_required"] = fleet.required
    if fleet.name:
        accepted_vars["fleetforge_fleet"] = fleet.name
    if ready is False:
        # Not ready: nobody is a job node; the accepted nodes stay listed for the operator.
        accepted_vars["fleetforge_accepted_not_placed"] = list(fleet.accepted)
    if refused:
        accepted_vars["fleetforge_refused_host_names"] = refused
    doc = {
        "all": {
            "children": {
                "fleetforge_accepted": {
                    "vars": ansible_yaml.unsafe_values(accepted_vars),
                    "children": {
                        group: {"hosts": {n: ansible_yaml.unsafe_values(hv) for n, hv in members.items()}}
                        for group, members in groups.items()
                    },
                }
            }
        }
    }
    header = (
        "# Written by `fleetforge gate`: the nodes the gate accepted.\n"
        "# fleetforge_job: the job's nodes; fleetforge_spare: accepted nodes held in reserve.\n"
    )
    if refused:
        header += "# NOT READY: accepted nodes whose names cannot be inventory hosts are listed in vars.\n"
    return header + ansible_yaml.dump(doc)
