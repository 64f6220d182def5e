"""The hosts an Ansible inventory names, parsed by Ansible itself (`ansible-inventory --list`), so
INI, YAML, folders and dynamic inventory plugins all mean what they mean to the playbook run.

Every host listed is a host the fleet run expects results from: the gate rejects one that leaves
none, with the reason the run found, never leaving it out.

A host name becomes the name of its results file (`<results>/<host>.jsonl`), a node name in the
gate and its reports, and an argument of the multi-node run; so it must be a plain host name
(letters, digits, '.', '_', '-') or an IP address: no '/' or '..' to leave the results folder,
no braces to template, no spaces or commas to split an argument list.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fleet.ansible_yaml import HOST_NAME_RULE, is_host_name
from validation.gate import natural_key


class HostListError(ValueError):
    """The inventory cannot be read, or names no host."""


class MissingAnsibleError(RuntimeError):
    """Ansible or ansible-runner is not installed (the `onprem` extra)."""


def ansible_tool(name: str) -> Path:
    """An Ansible executable: beside this Python first (its virtual environment), then on PATH."""
    beside = Path(sys.executable).parent / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return beside
    found = shutil.which(name)
    if found is None:
        raise MissingAnsibleError(
            f"{name} not found: install the onprem extra (pip install 'fleetforge[onprem]')"
        )
    return Path(found)


def inventory_listing(inventory: Path) -> dict[str, Any]:
    """`ansible-inventory --list` of the inventory: any form Ansible reads (YAML, INI, a folder with
    group_vars/, a plugin's configuration, a script), vars merged with Ansible's precedence. Raises
    HostListError, with Ansible's words, when Ansible cannot read it, and MissingAnsibleError
    without Ansible."""
    exe = ansible_tool("ansible-inventory")
    env = {
        **os.environ,
        # An inventory Ansible cannot parse is an error here, not a warning and an empty fleet.
        "ANSIBLE_INVENTORY_UNPARSED_FAILED": "True",
        "ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED": "True",
        "ANSIBLE_NOCOLOR": "True",
    }
    try:
        done = subprocess.run(
            [str(exe), "-i", str(inventory), "--list"], capture_output=True, text=True, timeout=300, env=env
        )
    except subprocess.TimeoutExpired:
        raise HostListError("ansible-inventory did not answer in 300 s") from None
    if done.returncode != 0:
        raise HostListError(
            f"Ansible cannot read it: {why_unparsed(done.stderr) or f'exit {done.returncode}'}"
        )
    try:
        doc = json.loads(done.stdout)
    except json.JSONDecodeError as exc:
        raise HostListError(f"ansible-inventory printed no JSON ({exc.msg})") from None
    if not isinstance(doc, dict):
        raise HostListError("ansible-inventory printed no inventory listing")
    return doc


# ansible-inventory's stderr says, plugin by plugin, why each could not parse the source, among
# deprecation warnings and a closing "Completely failed to parse inventory source". ansible-core 2.19
# writes "[WARNING]: Failed to parse inventory with 'ini' plugin: REASON" and then the same again with
# its cause after a blank line; 2.16 writes "[WARNING]:  * Failed to parse PATH with ini plugin:
# REASON", wrapped at 80 columns. A message runs to the next blank line or the next message.
_MESSAGE_START = re.compile(r"^(\[[A-Z ]+\]:|ERROR!)")
_PLUGIN_FAILED = re.compile(r"^\[WARNING\]:\s+(?:\*\s+)?Failed to parse .+? with '?([\w.]+)'? plugin: (.+)$")


def why_unparsed(stderr: str) -> str:
    """Each inventory plugin's reason for refusing the source ("auto: Failed to describe instances:
    Unable to locate credentials; yaml: ..."), or the end of stderr when Ansible gave none."""
    messages: list[str] = []
    for line in stderr.splitlines():
        if _MESSAGE_START.match(line):
            messages.append(line.strip())
        elif line.strip() and messages and messages[-1]:
            messages[-1] += " " + line.strip()
        else:
            messages.append("")  # a blank line ends the message; what follows is no reason
    reasons = [f"{m[1]}: {m[2]}" for m in map(_PLUGIN_FAILED.match, messages) if m]
    if reasons:
        return "; ".join(reasons)[:600]
    return " ".join(stderr.split())[-600:]


def list_hosts(inventory: Path) -> list[str]:
    """Host names in natural order; raises HostListError with Ansible's words when it cannot parse."""
    try:
        doc = inventory_listing(inventory)
    except HostListError as exc:
        raise HostListError(f"--inventory {inventory}: {exc}") from None
    return usable_hosts(doc, inventory)


def usable_hosts(doc: Mapping[str, Any], inventory: Path) -> list[str]:
    """The hosts of an `ansible-inventory --list` listing of `inventory`, in natural order; a
    HostListError when it names none or a name that is not allowed."""
    hosts = hosts_from_listing(doc)
    if not hosts:
        raise HostListError(f"--inventory {inventory}: names no host")
    bad = [h for h in hosts if not usable_host_name(h)]
    if bad:
        shown = ", ".join(ascii(h) for h in bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
        raise HostListError(
            f"--inventory {inventory}: host name(s) {shown} not allowed: {HOST_NAME_RULE}, or an IP address"
        )
    return hosts


def usable_host_name(name: str) -> bool:
    """A name safe as a results file name, a node name and an argument: see the module's doc."""
    if is_host_name(name):
        return True
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return False
    # An IPv6 scope ("%eth0") may hold any text: only the bare address is allowed.
    return not isinstance(address, ipaddress.IPv6Address) or address.scope_id is None


def hosts_from_listing(doc: Mapping[str, Any]) -> list[str]:
    """Every host of an `ansible-inventory --list` document: those with vars and those only in a group."""
    meta = doc.get("_meta")
    hosts = set(meta.get("hostvars", {})) if isinstance(meta, Mapping) else set()
    for name, group in doc.items():
        if name == "_meta" or not isinstance(group, Mapping):
            continue
        members = group.get("hosts") or []
        hosts.update(h for h in members if isinstance(h, str))
    return sorted(hosts, key=natural_key)
