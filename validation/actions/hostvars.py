"""From an Ansible inventory to the identifiers the actions need.

Stacks and on-prem inventories write each node's identifiers as host vars (names in
`NodeIds.HOST_VARS`, documented in the README). `load_inventory_hostvars` reads an inventory two ways:

- A YAML inventory file (the format `fleetforge inventory` writes for on-prem fleets) is read here,
  without Ansible, `!unsafe` values included, merging vars the way Ansible does for one file: `all`
  first, then groups by depth (parents before children, ties by name), then the host's own vars.
  group_vars/ and host_vars/ beside it are not read.
- Anything else Ansible reads (a folder, an inventory plugin's configuration such as the
  amazon.aws.aws_ec2 file `fleetforge inventory --stack-outputs` writes, INI, a script) goes through
  `ansible-inventory --list` (the onprem extra): `hostvars_from_inventory_list` takes its JSON,
  whose vars Ansible has already merged with full precedence.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from fleet import ansible_yaml
from fleet.yamlsafe import yaml_error_text
from validation.actions.model import (
    UNIQUE_IDS,
    InventoryFileError,
    InventoryNeedsAnsibleError,
    NodeIds,
    RejectedNode,
    Seen,
)


def ids_from_hostvars(hostvars: Mapping[str, Any], *, host: str = "?") -> NodeIds:
    """The identifier host vars of one host; other vars are ignored. Numbers become strings
    (an Azure instance id is often written as 3); any other type is an error naming the var."""
    found: dict[str, str] = {}
    for var in NodeIds.HOST_VARS:
        value = hostvars.get(var)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, str | int):
            raise InventoryFileError(
                f"host {host!r}", f"host var {var!r} must be a string, got {type(value).__name__}"
            )
        found[var] = str(value).strip()
    return NodeIds(**found)


def rejected_nodes(
    rejects: Iterable[tuple[str, Sequence[str]]],
    hostvars: Mapping[str, Mapping[str, Any]],
    *,
    seen: Mapping[str, Seen] | None = None,
) -> list[RejectedNode]:
    """Pair each rejected node (name, reasons) with its identifiers and what the gate saw of it
    (`seen`, "measured" where not given). A node absent from the inventory gets no identifiers; an
    action that needs one then names the node and the var. An identifier another host of the
    inventory carries too is noted (`shared`): an action that needs it refuses the node."""
    ids = {host: ids_from_hostvars(vars_, host=host) for host, vars_ in hostvars.items()}
    shared: dict[str, list[tuple[str, str]]] = {}
    for host, var, why in shared_identities(ids):
        shared.setdefault(host, []).append((var, why))
    return [
        RejectedNode(
            name=name,
            reasons=tuple(reasons),
            ids=ids.get(name, NodeIds()),
            seen=(seen or {}).get(name, "measured"),
            shared=tuple(shared.get(name, ())),
        )
        for name, reasons in rejects
    ]


def shared_identities(ids: Mapping[str, NodeIds]) -> list[tuple[str, str, str]]:
    """(host, host var, which other hosts carry the same machine) for every identity (UNIQUE_IDS)
    that more than one host carries in full."""
    problems: list[tuple[str, str, str]] = []
    for key in UNIQUE_IDS:
        holders: dict[tuple[str, ...], list[str]] = {}
        for host, node in ids.items():
            values = tuple(node.get(var) or "" for var in key)
            if all(values):
                holders.setdefault(values, []).append(host)
        for values, hosts in holders.items():
            if len(hosts) < 2:
                continue
            shown = "/".join(values)
            for host in hosts:
                others = ", ".join(repr(h) for h in hosts if h != host)
                problems.append((host, key[-1], f"{shown} is also on {others}: copied identifiers"))
    return problems


def hostvars_from_inventory_list(data: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Every host of `ansible-inventory --list` output with its vars (`_meta.hostvars`, merged by
    Ansible); a host listed only in a group, which Ansible leaves out of `_meta`, has none."""
    meta = data.get("_meta")
    hostvars = meta.get("hostvars") if isinstance(meta, Mapping) else None
    if not isinstance(hostvars, Mapping):
        raise InventoryFileError("ansible-inventory --list output", "has no _meta.hostvars mapping")
    from validation.fleetrun.hosts import hosts_from_listing

    found: dict[str, dict[str, Any]] = {host: {} for host in hosts_from_listing(data)}
    found.update(
        (str(h), {str(k): _unwrap_unsafe(x) for k, x in v.items()} if isinstance(v, Mapping) else {})
        for h, v in hostvars.items()
    )
    return found


def _unwrap_unsafe(value: Any) -> Any:
    """`--list` writes a `!unsafe` string as {"__ansible_unsafe": s}: it is the string s."""
    if isinstance(value, Mapping):
        if set(value) == {"__ansible_unsafe"} and isinstance(value["__ansible_unsafe"], str):
            return ansible_yaml.Unsafe(value["__ansible_unsafe"])
        return {k: _unwrap_unsafe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_unwrap_unsafe(v) for v in value]
    return value


# The extensions Ansible's YAML inventory plugin takes (its default yaml_valid_extensions), and none.
YAML_EXTENSIONS = ("", ".yml", ".yaml", ".json")


def load_inventory_hostvars(path: Path) -> dict[str, dict[str, Any]]:
    """Every host of the inventory with its merged vars: a YAML inventory file read here, anything
    else through Ansible (see the module's doc). Raises InventoryFileError, or
    InventoryNeedsAnsibleError when only Ansible reads it and Ansible is not installed."""
    kind, data = _classify(path)
    if kind is None:
        return _Inventory(str(path), data).hostvars()
    # Here, not at the top: the actions stand without the fleet run's modules until they need Ansible.
    from validation.fleetrun.hosts import HostListError, MissingAnsibleError, inventory_listing

    try:
        listing = inventory_listing(path)
    except MissingAnsibleError as exc:
        raise InventoryNeedsAnsibleError(str(path), f"is {kind}: only Ansible reads it, and {exc}") from None
    except HostListError as exc:
        raise InventoryFileError(str(path), f"is {kind}, and {exc}") from None
    return hostvars_from_inventory_list(listing)


def only_ansible_reads(path: Path) -> str | None:
    """What the inventory is ("a folder", "the configuration of inventory plugin ...") when it is
    no YAML inventory file, or None for one and for a path that does not exist yet. Vars folders
    beside a YAML file do not count: the file itself is still one to rewrite."""
    return _classify(path, vars_beside=False)[0] if path.exists() else None


def _classify(path: Path, vars_beside: bool = True) -> tuple[str | None, Any]:
    """(what Ansible has to read it as, or None; the parsed YAML inventory when this reads it),
    by the rules Ansible picks its inventory plugins by."""
    if path.is_dir():
        return "a folder", None
    if path.exists() and not path.is_file():
        # A FIFO would block the read forever, Ansible's as much as this one.
        raise InventoryFileError(str(path), "is not a regular file or a folder")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InventoryFileError(str(path), "no such file", missing=True) from None
    except OSError as exc:
        raise InventoryFileError(str(path), f"cannot be read: {exc.strerror}", missing=True) from None
    except UnicodeDecodeError:
        raise InventoryFileError(str(path), "is not UTF-8 text") from None
    extension = path.suffix.lower()
    if text.startswith("#!"):
        return "a script", None
    if extension not in YAML_EXTENSIONS:
        return f"a {extension} file, not YAML", None
    try:
        data = ansible_yaml.load(text)
    except yaml.YAMLError as exc:
        if extension:
            raise InventoryFileError(str(path), f"is {yaml_error_text(exc)}") from None
        return "not YAML", None
    if isinstance(data, Mapping) and data.get("plugin"):
        # Ansible's YAML plugin refuses any file with a plugin key; its auto plugin takes it.
        return f"the configuration of inventory plugin {data['plugin']!r}", None
    if not extension and data is not None and not isinstance(data, Mapping):
        return "not a YAML inventory", None
    beside = [d for d in ("group_vars", "host_vars") if (path.parent / d).is_dir()]
    if vars_beside and beside:
        # Ansible merges them into the file's hosts; read alone, an identifier there would be missed
        # or an outdated one in the file taken.
        return f"a YAML file with {' and '.join(f'{d}/' for d in beside)} beside it", None
    return None, data


def inventory_hosts(data: Any, where: str) -> set[str]:
    """Every host a parsed YAML inventory lists, in any group (InventoryFileError if it is not one)."""
    return set(_Inventory(where, data).host_groups)


class _Inventory:
    def __init__(self, where: str, data: Any) -> None:
        self.where = where
        self.group_vars: dict[str, dict[str, Any]] = {}
        self.parents: dict[str, set[str]] = {}
        self.host_groups: dict[str, set[str]] = {}
        self.host_vars: dict[str, dict[str, Any]] = {}
        if data is None:
            return
        if not isinstance(data, Mapping):
            raise InventoryFileError(where, "a YAML inventory is a mapping of group names")
        for name, body in data.items():
            self._group(str(name), body, parent=None if name == "all" else "all", trail=())

    def _group(self, name: str, body: Any, parent: str | None, trail: tuple[str, ...]) -> None:
        if name in trail:
            raise InventoryFileError(
                self.where, f"group {name!r} is its own ancestor: {' > '.join((*trail, name))}"
            )
        self.group_vars.setdefault(name, {})
        self.parents.setdefault(name, set())
        if parent is not None:
            self.parents[name].add(parent)
        if body is None:
            return
        if not isinstance(body, Mapping):
            raise InventoryFileError(
                self.where, f"group {name!r} must be a mapping with hosts, vars, children"
            )
        unknown = set(body) - {"hosts", "vars", "children"}
        if unknown:
            raise InventoryFileError(
                self.where, f"group {name!r} has {sorted(unknown)}; allowed: hosts, vars, children"
            )
        self.group_vars[name].update(self._mapping(body.get("vars"), f"group {name!r} vars"))
        for host, hvars in self._mapping(body.get("hosts"), f"group {name!r} hosts").items():
            self.host_groups.setdefault(host, set()).add(name)
            self.host_vars.setdefault(host, {}).update(self._mapping(hvars, f"host {host!r}"))
        for child, child_body in self._mapping(body.get("children"), f"group {name!r} children").items():
            self._group(child, child_body, parent=name, trail=(*trail, name))

    def _mapping(self, value: Any, what: str) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise InventoryFileError(self.where, f"{what} must be a mapping")
        return {str(k): v for k, v in value.items()}

    def _depth(self, group: str, seen: tuple[str, ...] = ()) -> int:
        if group == "all" or not self.parents.get(group):
            return 0
        if group in seen:
            raise InventoryFileError(self.where, f"group {group!r} is its own ancestor")
        return 1 + max(self._depth(p, (*seen, group)) for p in self.parents[group])

    def _ancestors(self, groups: set[str]) -> set[str]:
        out: set[str] = set()
        todo = list(groups)
        while todo:
            g = todo.pop()
            if g not in out:
                out.add(g)
                todo.extend(self.parents.get(g, ()))
        return out | {"all"}

    def hostvars(self) -> dict[str, dict[str, Any]]:
        merged: dict[str, dict[str, Any]] = {}
        for host, groups in self.host_groups.items():
            values: dict[str, Any] = {}
            for group in sorted(self._ancestors(groups), key=lambda g: (self._depth(g), g)):
                values.update(self.group_vars.get(group, {}))
            values.update(self.host_vars.get(host, {}))
            merged[host] = values
        return merged
