"""Azure policy rules, judged as CrossGuard hands resources to the pack (pulumi_policy's own proxies).

The resources are written as pulumi-azure-native puts them on the wire (camelCase inputs): one
fleet that breaks no rule; each test changes one property and names the rule that must fire, so
every Azure rule has a passing and a violating resource. Type tokens and property names are checked
against the installed pulumi_azure_native package, so a renamed token or property fails here.
"""

from __future__ import annotations

import copy
import importlib
import inspect
from collections.abc import Callable
from typing import Any

import pytest

from policy import rules
from policy.rules import Resource, Violation
from policy.rules import check as plain_check
from tests.conftest import EXAMPLES
from tests.policy.crossguard import crossguard
from tests.policy.wire import getters

TAGS = {"owner": "research-infra", "fleet": "ndh100", "dataset": "code-mix-v3", "managed-by": "fleetforge"}
NAT_IP_ID = "/subscriptions/0/resourceGroups/rg/providers/Microsoft.Network/publicIPAddresses/ndh100-nat"


def check(resources: list[Resource]) -> list[Violation]:
    return plain_check([crossguard(r) for r in resources])


def scale_set(name: str = "ndh100-ib0", size: str = "Standard_ND96isr_H100_v5") -> Resource:
    return Resource(
        rules.AZURE_VMSS,
        name,
        {
            "sku": {"name": size, "tier": "Standard", "capacity": 9},
            "singlePlacementGroup": True,
            "orchestrationMode": "Uniform",
            "tags": dict(TAGS),
            "virtualMachineProfile": {
                "securityProfile": {"encryptionAtHost": True},
                "osProfile": {
                    "computerNamePrefix": "ndh100",
                    "adminUsername": "fleet",
                    "linuxConfiguration": {
                        "disablePasswordAuthentication": True,
                        "ssh": {"publicKeys": [{"path": "/home/fleet/.ssh/authorized_keys", "keyData": "k"}]},
                    },
                },
                "networkProfile": {
                    "networkInterfaceConfigurations": [
                        {
                            "name": "nic0",
                            "primary": True,
                            "enableAcceleratedNetworking": True,
                            "ipConfigurations": [{"name": "ip0", "subnet": {"id": "subnet"}}],
                        }
                    ]
                },
            },
        },
    )


def fleet() -> list[Resource]:
    return [
        scale_set(),
        scale_set("ndh100-ib1"),
        Resource(
            rules.AZURE_NSG,
            "ndh100-nsg",
            {
                "tags": dict(TAGS),
                "securityRules": [
                    {
                        "name": "ssh-from-office",
                        "direction": "Inbound",
                        "access": "Allow",
                        "protocol": "Tcp",
                        "priority": 100,
                        "sourceAddressPrefix": "10.20.0.0/16",
                        "sourcePortRange": "*",
                        "destinationAddressPrefix": "*",
                        "destinationPortRange": "22",
                    },
                    {
                        "name": "deny-internet",
                        "direction": "Inbound",
                        "access": "Deny",
                        "protocol": "*",
                        "priority": 4000,
                        "sourceAddressPrefix": "Internet",
                        "sourcePortRange": "*",
                        "destinationAddressPrefix": "*",
                        "destinationPortRange": "*",
                    },
                ],
            },
        ),
        Resource(
            rules.AZURE_NSG_RULE,
            "ndh100-ssh-vnet",
            {
                "direction": "Inbound",
                "access": "Allow",
                "protocol": "Tcp",
                "priority": 110,
                "sourceAddressPrefix": "VirtualNetwork",
                "destinationPortRange": "22",
            },
        ),
        Resource(rules.AZURE_PUBLIC_IP, "ndh100-nat", {"tags": dict(TAGS), "sku": {"name": "Standard"}}),
        Resource(
            rules.AZURE_NAT_GATEWAY,
            "ndh100-nat",
            {"tags": dict(TAGS), "sku": {"name": "Standard"}, "publicIpAddresses": [{"id": NAT_IP_ID}]},
        ),
        Resource(
            rules.AZURE_STORAGE_ACCOUNT,
            "ndh100ckpt",
            {
                "kind": "StorageV2",
                "sku": {"name": "Standard_ZRS"},
                "tags": dict(TAGS),
                "enableHttpsTrafficOnly": True,
                "minimumTlsVersion": "TLS1_2",
                "allowBlobPublicAccess": False,
                "allowSharedKeyAccess": False,
            },
        ),
        Resource(
            rules.AZURE_AMLFS,
            "ndh100-lustre",
            {"sku": {"name": "AMLFS-Durable-Premium-250"}, "storageCapacityTiB": 16, "tags": dict(TAGS)},
        ),
    ]


def _fired(resources: list[Resource]) -> set[str]:
    return {v.rule for v in check(resources)}


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(props: dict[str, Any]) -> None:
        *parents, leaf = path.split(".")
        node: Any = props
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        if value is None:
            del node[leaf]
        else:
            node[leaf] = value

    return change


def _changed(
    resources: list[Resource], type_: str, change: Callable[[dict[str, Any]], None], name: str | None = None
) -> list[Resource]:
    out = []
    for r in resources:
        if r.type == type_ and (name is None or r.name == name):
            props = copy.deepcopy(dict(r.props))
            change(props)
            r = Resource(r.type, r.name, props, id=r.id)
        out.append(r)
    return out


def test_type_tokens_are_pulumi_azure_natives() -> None:
    tokens = {
        rules.AZURE_VMSS: ("compute", "VirtualMachineScaleSet"),
        rules.AZURE_VM: ("compute", "VirtualMachine"),
        rules.AZURE_NIC: ("network", "NetworkInterface"),
        rules.AZURE_PUBLIC_IP: ("network", "PublicIPAddress"),
        rules.AZURE_NAT_GATEWAY: ("network", "NatGateway"),
        rules.AZURE_NSG: ("network", "NetworkSecurityGroup"),
        rules.AZURE_NSG_RULE: ("network", "SecurityRule"),
        rules.AZURE_STORAGE_ACCOUNT: ("storage", "StorageAccount"),
        rules.AZURE_AMLFS: ("storagecache", "AmlFilesystem"),
    }
    for token, (module, cls) in tokens.items():
        resource_class = getattr(importlib.import_module(f"pulumi_azure_native.{module}"), cls)
        text = inspect.getsource(importlib.import_module(resource_class.__module__))
        assert f"'{token}'" in text or f'"{token}"' in text, token


@pytest.mark.parametrize(
    ("module", "cls", "wire_name"),
    [
        ("compute", "VirtualMachineScaleSetIPConfigurationArgs", "publicIPAddressConfiguration"),
        ("compute", "VirtualMachineNetworkInterfaceIPConfigurationArgs", "publicIPAddressConfiguration"),
        ("compute", "SecurityProfileArgs", "encryptionAtHost"),
        ("compute", "LinuxConfigurationArgs", "disablePasswordAuthentication"),
        ("network", "NetworkInterfaceIPConfigurationArgs", "publicIPAddress"),
        ("network", "NatGateway", "publicIpAddresses"),
        ("storage", "StorageAccount", "enableHttpsTrafficOnly"),
        ("storage", "StorageAccount", "minimumTlsVersion"),
        ("storage", "StorageAccount", "allowBlobPublicAccess"),
        ("storage", "StorageAccount", "allowSharedKeyAccess"),
        ("storagecache", "AmlFilesystem", "sku"),
        ("authorization", "RoleAssignment", "roleDefinitionId"),
        ("authorization", "RoleAssignment", "scope"),
        ("authorization", "RoleDefinition", "permissions"),
        ("authorization", "PermissionArgs", "actions"),
        ("authorization", "PermissionArgs", "dataActions"),
    ],
)
def test_property_names_are_the_providers_wire_names(module: str, cls: str, wire_name: str) -> None:
    """On the very class whose values the rule reads, not merely somewhere in the module."""
    assert wire_name in getters(getattr(importlib.import_module(f"pulumi_azure_native.{module}"), cls))


def test_the_fleet_passes_every_rule() -> None:
    assert check(fleet()) == []
    assert plain_check(fleet()) == [], "plain dicts (fleetforge plan) read the same"


VMSS_PROFILE = "virtualMachineProfile"
NIC0_IP0 = f"{VMSS_PROFILE}.networkProfile.networkInterfaceConfigurations.0.ipConfigurations.0"

VIOLATIONS: list[tuple[str, str, str, Any]] = [
    ("no-public-ip", rules.AZURE_VMSS, f"{NIC0_IP0}.publicIPAddressConfiguration", {"name": "pip"}),
    ("encrypted-at-rest", rules.AZURE_VMSS, f"{VMSS_PROFILE}.securityProfile.encryptionAtHost", False),
    ("encrypted-at-rest", rules.AZURE_VMSS, f"{VMSS_PROFILE}.securityProfile", None),
    (
        "password-authentication-disabled",
        rules.AZURE_VMSS,
        f"{VMSS_PROFILE}.osProfile.linuxConfiguration.disablePasswordAuthentication",
        False,
    ),
    (
        "password-authentication-disabled",
        rules.AZURE_VMSS,
        f"{VMSS_PROFILE}.osProfile.linuxConfiguration",
        None,
    ),
    ("required-tags", rules.AZURE_VMSS, "tags.owner", None),
    ("required-tags", rules.AZURE_NSG, "tags.fleet", None),
    ("required-tags", rules.AZURE_STORAGE_ACCOUNT, "tags.dataset", ""),
    ("required-tags", rules.AZURE_AMLFS, "tags", None),
    ("required-tags", rules.AZURE_PUBLIC_IP, "tags", None),
    ("ssh-not-from-internet", rules.AZURE_NSG, "securityRules.0.sourceAddressPrefix", "Internet"),
    ("ssh-not-from-internet", rules.AZURE_NSG, "securityRules.0.sourceAddressPrefix", "0.0.0.0/0"),
    ("ssh-not-from-internet", rules.AZURE_NSG, "securityRules.1.access", "Allow"),
    ("ssh-not-from-internet", rules.AZURE_NSG_RULE, "sourceAddressPrefix", "*"),
    ("azure-storage-account-protected", rules.AZURE_STORAGE_ACCOUNT, "enableHttpsTrafficOnly", False),
    ("azure-storage-account-protected", rules.AZURE_STORAGE_ACCOUNT, "enableHttpsTrafficOnly", None),
    ("azure-storage-account-protected", rules.AZURE_STORAGE_ACCOUNT, "minimumTlsVersion", "TLS1_1"),
    ("azure-storage-account-protected", rules.AZURE_STORAGE_ACCOUNT, "minimumTlsVersion", None),
    ("azure-storage-account-protected", rules.AZURE_STORAGE_ACCOUNT, "allowBlobPublicAccess", True),
    ("azure-storage-account-protected", rules.AZURE_STORAGE_ACCOUNT, "allowBlobPublicAccess", None),
    ("azure-storage-account-protected", rules.AZURE_STORAGE_ACCOUNT, "allowSharedKeyAccess", True),
    ("azure-storage-account-protected", rules.AZURE_STORAGE_ACCOUNT, "allowSharedKeyAccess", None),
    ("azure-public-ip-only-for-nat", rules.AZURE_NAT_GATEWAY, "publicIpAddresses", []),
]


@pytest.mark.parametrize(("rule", "type_", "path", "value"), VIOLATIONS)
def test_each_azure_violation_fires_its_rule(rule: str, type_: str, path: str, value: Any) -> None:
    broken = _changed(fleet(), type_, _set(path, value))
    assert rule in _fired(broken), (rule, path, value)
    assert _fired(broken) == {rule}, "only the rule that was broken fires"


def test_a_nat_gateways_public_ip_known_by_id_passes_and_a_second_one_does_not() -> None:
    resources = [
        Resource(r.type, r.name, r.props, id=NAT_IP_ID if r.type == rules.AZURE_PUBLIC_IP else None)
        for r in fleet()
    ]
    assert check(resources) == []
    extra = Resource(rules.AZURE_PUBLIC_IP, "node-ip", {"tags": dict(TAGS)}, id="/subscriptions/0/x/node-ip")
    violations = check([*resources, extra])
    assert [(v.rule, v.name) for v in violations] == [("azure-public-ip-only-for-nat", "node-ip")]


def test_a_nic_with_a_public_ip_fires_no_public_ip() -> None:
    nic = Resource(
        rules.AZURE_NIC,
        "node-nic",
        {"tags": dict(TAGS), "ipConfigurations": [{"name": "ip0", "publicIPAddress": {"id": NAT_IP_ID}}]},
    )
    assert _fired([nic]) == {"no-public-ip"}
    clean = Resource(rules.AZURE_NIC, "node-nic", {"tags": dict(TAGS), "ipConfigurations": [{"name": "ip0"}]})
    assert check([clean]) == []


def test_a_single_vm_is_judged_like_a_scale_set() -> None:
    vm: dict[str, Any] = {
        "hardwareProfile": {"vmSize": "Standard_ND96isr_H100_v5"},
        "tags": dict(TAGS),
        "securityProfile": {"encryptionAtHost": True},
        "osProfile": {"linuxConfiguration": {"disablePasswordAuthentication": True}},
        "networkProfile": {"networkInterfaceConfigurations": [{"ipConfigurations": [{"name": "ip0"}]}]},
    }
    assert check([Resource(rules.AZURE_VM, "vm", vm)]) == []
    bad = copy.deepcopy(vm)
    bad["securityProfile"] = {}
    bad["osProfile"] = {"linuxConfiguration": {}}
    bad["networkProfile"]["networkInterfaceConfigurations"][0]["ipConfigurations"][0][
        "publicIPAddressConfiguration"
    ] = {"name": "p"}
    assert _fired([Resource(rules.AZURE_VM, "vm", bad)]) == {
        "encrypted-at-rest",
        "password-authentication-disabled",
        "no-public-ip",
    }


def test_two_vm_sizes_in_one_fleet_fire_one_instance_type() -> None:
    mixed = [
        r if r.name != "ndh100-ib1" else scale_set("ndh100-ib1", "Standard_ND96isr_H200_v5") for r in fleet()
    ]
    violations = [v for v in check(mixed) if v.rule == "one-instance-type"]
    assert len(violations) == 1 and "Standard_ND96isr_H200_v5" in violations[0].message
    unsized = _changed(fleet(), rules.AZURE_VMSS, _set("sku.name", None), name="ndh100-ib0")
    assert _fired(unsized) == {"one-instance-type"}


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("azure-*.yaml")))
def test_planned_azure_examples_violate_nothing_and_a_changed_scale_set_does(example: str) -> None:
    """The Azure component's real resources (planned under mocks), judged through CrossGuard's proxy."""
    from fleetforge.plan import plan_file

    planned = [Resource(r.type, r.name, r.inputs, id=r.id) for r in plan_file(EXAMPLES / example).resources]
    assert any(r.type == rules.AZURE_VMSS for r in planned)
    assert check(planned) == []

    def open_and_weak(props: dict[str, Any]) -> None:
        profile = props["virtualMachineProfile"]
        nic = profile["networkProfile"]["networkInterfaceConfigurations"][0]
        nic["ipConfigurations"][0]["publicIPAddressConfiguration"] = {"name": "pip"}
        profile["osProfile"]["linuxConfiguration"]["disablePasswordAuthentication"] = False
        profile["securityProfile"]["encryptionAtHost"] = False

    fired = _fired(_changed(planned, rules.AZURE_VMSS, open_and_weak))
    assert {"no-public-ip", "password-authentication-disabled", "encrypted-at-rest"} <= fired


# --------------------------------------------------------------------------- role assignments

ROLE_IDS = "/subscriptions/0/providers/Microsoft.Authorization/roleDefinitions/"
GROUP = "/subscriptions/0/resourceGroups/rg"


def _role_messages(type_: str, props: dict[str, Any]) -> list[str]:
    return [v.message for v in check([Resource(type_, "r", props)]) if v.rule == "azure-role-least-privilege"]


@pytest.mark.parametrize(
    ("guid", "role"),
    [
        ("8e3af657-a8ff-443c-a75c-2fe8c4bcb635", "Owner"),
        ("b24988ac-6180-42a0-ab88-20f7382dd24c", "Contributor"),
        ("18d7d88d-d35e-4fb5-a5c3-7773c20a72d9", "User Access Administrator"),
    ],
)
def test_broad_built_in_roles_are_refused(guid: str, role: str) -> None:
    found = _role_messages(rules.AZURE_ROLE_ASSIGNMENT, {"roleDefinitionId": ROLE_IDS + guid, "scope": GROUP})
    assert len(found) == 1 and role in found[0] and "roleDefinitionId" in found[0]


@pytest.mark.parametrize(
    "scope",
    ["/subscriptions/0", "/subscriptions/0/", "/providers/Microsoft.Management/managementGroups/mg", "/"],
)
def test_assignments_on_a_subscription_or_management_group_are_refused(scope: str) -> None:
    reader = ROLE_IDS + "e147488a-f6f5-4113-8e2d-b22465e65bf6"
    assert len(_role_messages(rules.AZURE_ROLE_ASSIGNMENT, {"roleDefinitionId": reader, "scope": scope})) == 1
    assert _role_messages(rules.AZURE_ROLE_ASSIGNMENT, {"roleDefinitionId": reader, "scope": GROUP}) == []


@pytest.mark.parametrize(("key", "action"), [("actions", "*"), ("dataActions", "*"), ("actions", "*/read")])
def test_custom_roles_with_wildcard_actions_are_refused(key: str, action: str) -> None:
    narrow = {
        "actions": ["Microsoft.Storage/storageAccounts/blobServices/containers/read"],
        "dataActions": [],
    }
    role = {"roleType": "CustomRole", "permissions": [narrow, {**narrow, key: [action]}]}
    (found,) = _role_messages(rules.AZURE_ROLE_DEFINITION, role)
    assert f"permissions[1].{key}" in found
    assert _role_messages(rules.AZURE_ROLE_DEFINITION, {"permissions": [narrow]}) == []
