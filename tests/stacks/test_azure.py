"""The Azure stack under Pulumi's mocks: what each SKU's plan holds, and how a fleet larger than
one InfiniBand domain is split."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pulumi
import pytest
import yaml

from fleet.catalog import Sku, get_sku
from fleet.spec import FleetSpec, SpecError, azure_ib_domains, spec_from_mapping
from stacks import azure_compute
from stacks.ansible_inventory import from_stack_outputs
from stacks.azure import AzureFleet
from stacks.azure_context import AzureFleetArgs, ib_domains
from stacks.azure_storage import KEY_VAULT_ENCRYPTION_USER
from stacks.mocks import MOCK_SUBSCRIPTION, FleetMocks, Recorded, run
from stacks.prerequisites import spec_problems
from tests.conftest import EXAMPLES
from tests.stacks.plans import (
    ACCOUNT,
    AMLFS,
    AZ_SUBNET,
    AZURE_SKUS,
    BLOB_SERVICE,
    IDENTITY,
    LIFECYCLE,
    NAT,
    NSG,
    PPG,
    PUBLIC_IP,
    ROLE,
    ROLE_DEFINITION,
    VMSS,
    azure_doc,
    of_type,
    one,
    plan_of,
)

VAULT = (
    f"/subscriptions/{MOCK_SUBSCRIPTION}/resourceGroups/keys/providers/Microsoft.KeyVault/vaults/fleetkeys"
)
KEY = "https://fleetkeys.vault.azure.net/keys/amlfs/0123456789abcdef0123456789abcdef"


def _vmss_profile(doc: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    vmss = one(plan_of(doc), VMSS).inputs
    return vmss, vmss["virtualMachineProfile"]


@pytest.mark.parametrize("sku", AZURE_SKUS)
def test_each_sku_is_one_uniform_single_placement_group_scale_set(sku: str) -> None:
    plan = plan_of(azure_doc(sku=sku))
    vmss = one(plan, VMSS).inputs
    assert vmss["sku"] == {"name": sku, "tier": "Standard", "capacity": 34}  # 32 nodes + 2 spares
    assert vmss["singlePlacementGroup"] is True
    assert vmss["orchestrationMode"] == "Uniform"
    assert vmss["overprovision"] is False  # no extra VMs joining the fabric
    assert vmss["zones"] == ["1"]
    assert vmss["proximityPlacementGroup"]["id"] == one(plan, PPG).id
    assert one(plan, PPG).inputs["intent"] == {"vmSizes": [sku]}
    assert vmss["upgradePolicy"]["mode"] == "Manual"


@pytest.mark.parametrize("sku", AZURE_SKUS)
def test_each_sku_has_private_accelerated_nics_keys_only_and_encryption_at_host(sku: str) -> None:
    _, profile = _vmss_profile(azure_doc(sku=sku))
    (nic,) = profile["networkProfile"]["networkInterfaceConfigurations"]
    assert nic["enableAcceleratedNetworking"] is True
    for ip in nic["ipConfigurations"]:
        assert "publicIPAddressConfiguration" not in ip
    linux = profile["osProfile"]["linuxConfiguration"]
    assert linux["disablePasswordAuthentication"] is True
    assert "adminPassword" not in profile["osProfile"]
    (key,) = linux["ssh"]["publicKeys"]
    assert key["keyData"].startswith("ssh-ed25519 ")
    assert profile["securityProfile"]["encryptionAtHost"] is True
    # Azure does not list ND H100/H200 v5 for Trusted Launch: no security type is forced on them.
    assert "securityType" not in profile["securityProfile"]
    image = profile["storageProfile"]["imageReference"]
    assert (image["publisher"], image["offer"], image["sku"]) == ("microsoft-dsvm", "ubuntu-hpc", "2204")
    # Pinned at deploy time to the newest version Azure publishes (the plan's mocks answer the lookup).
    assert image["version"] == "22.04.2025030701"
    assert profile["priority"] == "Regular"


def test_the_nodes_identity_is_the_only_one_and_reaches_only_the_checkpoint_container() -> None:
    plan = plan_of(azure_doc())
    identity = one(plan, IDENTITY)
    vmss = one(plan, VMSS).inputs
    assert vmss["identity"] == {"type": "UserAssigned", "userAssignedIdentities": [identity.id]}
    (grant,) = of_type(plan, ROLE)
    account = one(plan, ACCOUNT)
    assert grant.inputs["scope"] == f"{account.id}/blobServices/default/containers/checkpoints"
    # A role of the fleet's own: read, write and add checkpoint blobs, and no delete of a blob or a
    # version (Storage Blob Data Contributor has blobs/delete), as on AWS and GCP.
    writer = one(plan, ROLE_DEFINITION)
    assert grant.inputs["roleDefinitionId"] == writer.id
    group = f"/subscriptions/{MOCK_SUBSCRIPTION}/resourceGroups/{account.inputs['resourceGroupName']}"
    assert writer.inputs["scope"] == group and writer.inputs["assignableScopes"] == [group]
    assert writer.inputs["roleType"] == "CustomRole"
    (permission,) = writer.inputs["permissions"]
    blobs = "Microsoft.Storage/storageAccounts/blobServices/containers/blobs"
    assert permission == {
        "actions": ["Microsoft.Storage/storageAccounts/blobServices/containers/read"],
        "dataActions": [f"{blobs}/read", f"{blobs}/write", f"{blobs}/add/action"],
    }


def test_spot_reaches_the_scale_set_and_nothing_consumes_a_reservation_by_default() -> None:
    _, spot = _vmss_profile(azure_doc(capacity={"type": "spot"}))
    assert (spot["priority"], spot["evictionPolicy"], spot["billingProfile"]) == (
        "Spot",
        "Delete",
        {"maxPrice": -1},
    )
    assert "capacityReservation" not in spot
    assert "capacityReservation" not in _vmss_profile(azure_doc())[1]


RESERVATION_GROUP = (
    f"/subscriptions/{MOCK_SUBSCRIPTION}/resourceGroups/capacity/providers/Microsoft.Compute/"
    "capacityReservationGroups/ndh100-crg"
)


@pytest.mark.parametrize("sku", AZURE_SKUS)
@pytest.mark.parametrize("reservation_id", ["ndh100-crg", RESERVATION_GROUP])
def test_a_reservation_on_an_infiniband_sku_is_refused_before_pulumi_runs(
    sku: str, reservation_id: str
) -> None:
    # Azure attaches a capacity reservation group to a Uniform scale set only with
    # singlePlacementGroup false, and InfiniBand needs it true: such a fleet could never deploy.
    assert get_sku(sku).fabric.kind == "infiniband"
    doc = azure_doc(sku=sku, capacity={"type": "reservation", "reservation_id": reservation_id})
    problems = dict(spec_problems(spec_from_mapping(doc)))
    assert "singlePlacementGroup false" in problems["capacity.type"]
    assert problems["capacity.type"].endswith("allowed on azure InfiniBand SKUs: on-demand, spot")
    with pytest.raises(SpecError, match=r"capacity\.type: reservation"):
        plan_of(doc)


def test_the_stack_itself_refuses_a_reservation_on_an_infiniband_sku() -> None:
    doc = azure_doc(capacity={"type": "on-demand"})
    args = dataclasses.replace(
        AzureFleetArgs.from_spec(spec_from_mapping(doc)),
        capacity="reservation",
        reservation=RESERVATION_GROUP,
    )
    with pytest.raises(
        pulumi.RunError, match=r"capacity\.type: reservation needs singlePlacementGroup false"
    ):
        _fleet_records(args)


def _ethernet(sku: Sku) -> Sku:
    """The catalog's SKU with a fabric that is not InfiniBand (no catalog Azure SKU has one yet)."""
    return sku.model_copy(update={"fabric": sku.fabric.model_copy(update={"kind": "ethernet"})})


def test_a_reservation_elsewhere_must_be_the_group_s_full_id(monkeypatch: pytest.MonkeyPatch) -> None:
    ethernet = _ethernet(get_sku("Standard_ND96isr_H100_v5"))
    monkeypatch.setattr(FleetSpec, "catalog_sku", property(lambda _: ethernet))
    bare = spec_from_mapping(azure_doc(capacity={"type": "reservation", "reservation_id": "ndh100-crg"}))
    problems = dict(spec_problems(bare))
    assert "capacity.type" not in problems
    message = problems["capacity.reservation_id"]
    assert "resource group this stack creates" in message
    assert message.endswith(
        "allowed: the group's full id, /subscriptions/<subscription id>/resourceGroups/<group>/providers/"
        "Microsoft.Compute/capacityReservationGroups/<name>"
    )
    full = spec_from_mapping(azure_doc(capacity={"type": "reservation", "reservation_id": RESERVATION_GROUP}))
    assert spec_problems(full) == []


def test_a_reservation_elsewhere_reaches_a_scale_set_without_a_single_placement_group() -> None:
    base = AzureFleetArgs.from_spec(spec_from_mapping(azure_doc()))
    args = dataclasses.replace(
        base, sku=_ethernet(base.sku), capacity="reservation", reservation=RESERVATION_GROUP
    )
    recorded, _ = _fleet_records(args)
    (vmss,) = [r for r in recorded if r.type == VMSS]
    assert vmss.inputs["singlePlacementGroup"] is False
    profile = vmss.inputs["virtualMachineProfile"]
    assert profile["capacityReservation"] == {"capacityReservationGroup": {"id": RESERVATION_GROUP}}
    with pytest.raises(
        pulumi.RunError, match=r"capacity\.reservation_id: 'ndh100-crg'; allowed on azure: /subscriptions/"
    ):
        _fleet_records(dataclasses.replace(args, reservation="ndh100-crg"))


def test_nsg_allows_ssh_only_from_the_spec_cidr_and_denies_the_internet() -> None:
    rules = {r["name"]: r for r in one(plan_of(azure_doc()), NSG).inputs["securityRules"]}
    ssh = rules["allow-ssh-from-spec-cidr"]
    assert (ssh["access"], ssh["direction"], ssh["sourceAddressPrefix"], ssh["destinationPortRange"]) == (
        "Allow",
        "Inbound",
        "10.20.0.0/16",
        "22",
    )
    deny = rules["deny-internet-inbound"]
    assert (deny["access"], deny["sourceAddressPrefix"], deny["destinationPortRange"]) == (
        "Deny",
        "Internet",
        "*",
    )
    allows = [r for r in rules.values() if r["access"] == "Allow" and r["direction"] == "Inbound"]
    assert all(r["sourceAddressPrefix"] not in {"*", "Internet", "0.0.0.0/0"} for r in allows)
    assert all(r["priority"] < deny["priority"] for r in allows)
    no_ssh = one(plan_of(azure_doc(network={})), NSG).inputs["securityRules"]
    assert not [r for r in no_ssh if r.get("destinationPortRange") == "22"]


def test_egress_is_the_nat_gateway_and_its_address_is_the_only_public_ip() -> None:
    plan = plan_of(azure_doc())
    nat = one(plan, NAT)
    (address,) = of_type(plan, PUBLIC_IP)
    assert nat.inputs["publicIpAddresses"] == [{"id": address.id}]
    nodes = one(plan, AZ_SUBNET, "nodes-subnet").inputs
    assert nodes["natGateway"] == {"id": nat.id}
    assert nodes["defaultOutboundAccess"] is False
    # Managed Lustre must reach Azure cloud services (the AzureCloud service tag) from its subnet
    # (https://learn.microsoft.com/en-us/azure/azure-managed-lustre/amlfs-prerequisites, "Subnet
    # access and permissions"): its subnet goes out through the same NAT gateway, which takes no
    # inbound flow, and Azure's default outbound access stays off there too.
    lustre = one(plan, AZ_SUBNET, "lustre-subnet").inputs
    assert lustre["natGateway"] == {"id": nat.id}
    assert lustre["defaultOutboundAccess"] is False
    assert lustre["networkSecurityGroup"] == nodes["networkSecurityGroup"]  # the NSG denying the internet


def test_amlfs_takes_the_spec_tier_capacity_zone_subnet_and_a_maintenance_window() -> None:
    plan = plan_of(azure_doc())
    fs = one(plan, AMLFS).inputs
    assert fs["sku"] == {"name": "AMLFS-Durable-Premium-125"}
    assert fs["storageCapacityTiB"] == 16
    assert fs["zones"] == ["1"]
    assert fs["filesystemSubnet"] == one(plan, AZ_SUBNET, "lustre-subnet").id
    assert fs["maintenanceWindow"] == {"dayOfWeek": "Sunday", "timeOfDayUTC": "03:00"}
    assert "encryptionSettings" not in fs  # no key named: Microsoft-managed keys
    storage = plan.outputs["storage"]
    assert storage["kind"] == "amlfs" and storage["mount_source"] == "192.0.2.30@tcp:/lustrefs"
    assert of_type(plan_of(azure_doc(storage={"filesystem": None})), AMLFS) == []


def test_checkpoint_account_is_https_tls12_private_keyless_versioned_with_retention() -> None:
    plan = plan_of(azure_doc(storage__checkpoints={"bucket": "ndh100ckpt", "retention_days": 30}))
    account = one(plan, ACCOUNT).inputs
    assert account["accountName"] == "ndh100ckpt"
    assert account["enableHttpsTrafficOnly"] is True
    assert account["minimumTlsVersion"] == "TLS1_2"
    assert account["allowBlobPublicAccess"] is False
    assert account["allowSharedKeyAccess"] is False
    blob = one(plan, BLOB_SERVICE).inputs
    assert blob["isVersioningEnabled"] is True
    assert blob["deleteRetentionPolicy"] == {"enabled": True, "days": 7}
    (rule,) = one(plan, LIFECYCLE).inputs["policy"]["rules"]
    actions = rule["definition"]["actions"]
    assert actions["baseBlob"]["delete"] == {"daysAfterModificationGreaterThan": 30}
    assert actions["version"]["delete"] == {"daysAfterCreationGreaterThan": 7}
    assert plan.outputs["checkpoints"]["uri"] == "https://ndh100ckpt.blob.core.windows.net/checkpoints/"


def test_outputs_carry_the_azure_group_contract() -> None:
    group = plan_of(azure_doc()).outputs["group"]
    assert group["kind"] == "azure-vm-scale-set"
    assert group["subscription_id"] == MOCK_SUBSCRIPTION
    assert group["resource_group"] == "nd-h100-train-rg"
    assert group["scale_sets"] == [{"name": "nd-h100-train-ib0", "ib_domain": 0, "capacity": 34}]
    assert group["node_filter"] == {"tags.fleet": "nd-h100-train"}
    assert (group["min_size"], group["max_size"], group["desired"]) == (32, 34, 34)


def _type_names(doc: dict[str, Any]) -> set[tuple[str, str]]:
    return {(r.type, r.name) for r in plan_of(doc).resources}


def test_same_resources_at_8_and_100_nodes() -> None:
    # The plan time ratio is measured by benchmarks/plan_scaling.py --fleet azure.
    small, large = azure_doc(nodes=8, spares=0), azure_doc(nodes=98, spares=2)
    assert _type_names(small) == _type_names(large)
    assert one(plan_of(large), VMSS).inputs["sku"]["capacity"] == 100


@pytest.mark.parametrize(
    ("size", "domain", "expected"),
    [(34, 100, (34,)), (100, 100, (100,)), (101, 100, (51, 50)), (250, 100, (84, 83, 83)), (9, 4, (3, 3, 3))],
)
def test_ib_domains_are_balanced_and_never_exceed_the_domain(
    size: int, domain: int, expected: tuple[int, ...]
) -> None:
    assert ib_domains(size, domain) == expected
    assert sum(expected) == size and max(expected) <= domain


def _fleet_records(args: AzureFleetArgs) -> tuple[list[Recorded], dict[str, Any]]:
    def program() -> None:
        fleet = AzureFleet(args.name, args)
        for section, value in fleet.outputs.items():
            pulumi.export(section, value)

    mocks = FleetMocks(region=args.location, zone=args.zone or "")
    result = run(program, mocks, {})
    return mocks.recorded, result.outputs


def test_a_fleet_above_one_ib_domain_is_split_into_scale_sets_named_in_the_outputs() -> None:
    base = AzureFleetArgs.from_spec(spec_from_mapping(azure_doc()))
    args = dataclasses.replace(base, nodes=240, spares=10)
    recorded, outputs = _fleet_records(args)
    sets = [r for r in recorded if r.type == VMSS]
    assert sorted(r.inputs["sku"]["capacity"] for r in sets) == [83, 83, 84]
    assert all(r.inputs["singlePlacementGroup"] is True for r in sets)
    assert sorted(r.inputs["tags"]["fleetforge-ib-domain"] for r in sets) == ["0", "1", "2"]
    domains = [
        {"name": f"nd-h100-train-ib{i}", "ib_domain": i, "capacity": c} for i, c in enumerate((84, 83, 83))
    ]
    assert outputs["group"]["scale_sets"] == domains
    assert outputs["fabric"]["placement"]["domains"] == [
        {"ib_domain": d["ib_domain"], "scale_set": d["name"], "capacity": d["capacity"]} for d in domains
    ]
    # Resources grow with domains only: three domains add two scale sets to the one-domain fleet.
    one_domain, _ = _fleet_records(dataclasses.replace(base, nodes=98, spares=2))
    assert len(recorded) - len(one_domain) == 2


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("azure-*.yaml")))
def test_every_azure_example_plans_with_no_policy_violation(example: str) -> None:
    doc = yaml.safe_load((EXAMPLES / example).read_text())
    plan = plan_of(doc)
    assert plan.violations == ()
    assert plan.outputs["fleet"]["cloud"] == "azure"
    assert sum(s["capacity"] for s in plan.outputs["group"]["scale_sets"]) == plan.outputs["fleet"]["size"]


def test_an_image_override_is_pinned_into_the_scale_set() -> None:
    urn = "microsoft-dsvm:ubuntu-hpc:2204:22.04.2025030701"
    image = _vmss_profile(azure_doc(image=urn))[1]["storageProfile"]["imageReference"]
    assert image == {
        "publisher": "microsoft-dsvm",
        "offer": "ubuntu-hpc",
        "sku": "2204",
        "version": "22.04.2025030701",
    }
    gallery = "/subscriptions/00000000-0000-4000-8000-000000000001/resourceGroups/img/providers/Microsoft.Compute/galleries/g/images/hpc/versions/1.0.0"
    assert _vmss_profile(azure_doc(image=gallery))[1]["storageProfile"]["imageReference"] == {"id": gallery}


@pytest.mark.parametrize(
    ("changes", "path"),
    [
        ({"image": "microsoft-dsvm:ubuntu-hpc:2204:latest"}, "image"),
        ({"network": {"vpc_id": "existing-vnet", "subnet_id": "existing-subnet"}}, "network.vpc_id"),
        ({"network": {"bastion": "10.0.0.5"}}, "network.bastion"),
        ({"network": {"vpc_cidr": "10.0.0.0/26"}}, "network.vpc_cidr"),
    ],
)
def test_what_the_azure_stack_cannot_provision_is_named_before_pulumi_runs(
    changes: dict[str, Any], path: str
) -> None:
    spec = spec_from_mapping(azure_doc(**changes))
    assert path in [p for p, _ in spec_problems(spec)]
    assert spec_problems(spec_from_mapping(azure_doc())) == []


def test_a_spec_with_ib_domain_size_plans_one_scale_set_per_domain_as_the_spec_counts_them() -> None:
    doc = azure_doc(nodes=240, spares=10, network={"ssh_cidr": "10.20.0.0/16", "ib_domain_size": 100})
    plan = plan_of(doc)
    expected = azure_ib_domains(spec_from_mapping(doc))
    assert expected == (84, 83, 83)
    assert [s["capacity"] for s in plan.outputs["group"]["scale_sets"]] == list(expected)
    sets = sorted(of_type(plan, VMSS), key=lambda r: r.name)
    assert [r.inputs["sku"]["capacity"] for r in sets] == list(expected)
    assert all(r.inputs["singlePlacementGroup"] is True for r in sets)
    assert plan.outputs["fabric"]["placement"]["domain_size"] == 100
    assert plan.violations == ()


def test_the_spec_s_resource_group_and_ssh_key_are_used_and_no_group_is_created() -> None:
    key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDpFL4e1QjzJdJ0tfLp6Gx6pRWvPLDkXc4T5cWzqf1Ta ops@fleet"
    plan = plan_of(azure_doc(azure={"resource_group": "ml-prod", "ssh_public_key": key}))
    assert of_type(plan, "azure-native:resources:ResourceGroup") == []
    assert {r.inputs["resourceGroupName"] for r in of_type(plan, VMSS) + of_type(plan, NSG)} == {"ml-prod"}
    assert plan.outputs["group"]["resource_group"] == "ml-prod"
    (public,) = one(plan, VMSS).inputs["virtualMachineProfile"]["osProfile"]["linuxConfiguration"]["ssh"][
        "publicKeys"
    ]
    assert public["keyData"] == key


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("azure-*.yaml")))
def test_the_azure_stacks_planned_outputs_make_an_inventory(example: str) -> None:
    """What the component exports is what `fleetforge inventory --stack-outputs` takes."""
    outputs = json.loads(json.dumps(plan_of(yaml.safe_load((EXAMPLES / example).read_text())).outputs))
    doc = from_stack_outputs(outputs)
    group = outputs["group"]
    assert doc["plugin"] == "azure.azcollection.azure_rm"
    assert doc["subscription_id"] == group["subscription_id"] == MOCK_SUBSCRIPTION
    assert doc["include_vmss_resource_groups"] == [group["resource_group"]]
    assert all(s["name"] in " ".join(doc["include_host_filters"]) for s in group["scale_sets"])


def test_a_size_azure_lists_for_trusted_launch_gets_secure_boot_and_vtpm(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    args = AzureFleetArgs.from_spec(spec_from_mapping(azure_doc()))
    monkeypatch.setattr(azure_compute, "TRUSTED_LAUNCH_SKUS", frozenset({args.sku.machine_type}))
    recorded, _ = _fleet_records(args)
    (vmss,) = [r for r in recorded if r.type == VMSS]
    security = vmss.inputs["virtualMachineProfile"]["securityProfile"]
    assert security == {
        "encryptionAtHost": True,
        "securityType": "TrustedLaunch",
        "uefiSettings": {"secureBootEnabled": True, "vTpmEnabled": True},
    }


def test_a_key_vault_key_encrypts_amlfs_through_its_own_identity_and_grant() -> None:
    vault, key = VAULT, KEY
    args = dataclasses.replace(
        AzureFleetArgs.from_spec(spec_from_mapping(azure_doc())), key_url=key, key_vault_id=vault
    )
    recorded, _ = _fleet_records(args)
    (fs,) = [r for r in recorded if r.type == AMLFS]
    assert fs.inputs["encryptionSettings"] == {
        "keyEncryptionKey": {"keyUrl": key, "sourceVault": {"id": vault}}
    }
    (fs_identity,) = [r for r in recorded if r.type == IDENTITY and r.name.endswith("amlfs-id")]
    assert fs.inputs["identity"] == {"type": "UserAssigned", "userAssignedIdentities": [fs_identity.id]}
    grants = [r for r in recorded if r.type == ROLE and r.inputs["scope"] == vault]
    assert len(grants) == 2  # the file system's identity and the checkpoint account's, nothing else
    assert all(
        g.inputs["roleDefinitionId"].endswith(f"/roleDefinitions/{KEY_VAULT_ENCRYPTION_USER}") for g in grants
    )


def test_a_key_vault_key_encrypts_the_checkpoint_account_through_its_own_identity() -> None:
    vault, key = VAULT, KEY
    doc = azure_doc(storage__checkpoints={"bucket": "ndh100ckpt", "retention_days": 30})
    args = dataclasses.replace(
        AzureFleetArgs.from_spec(spec_from_mapping(doc)), key_url=key, key_vault_id=vault
    )
    recorded, outputs = _fleet_records(args)
    (account,) = [r for r in recorded if r.type == ACCOUNT]
    (who,) = [r for r in recorded if r.type == IDENTITY and r.name.endswith("ckpt-id")]
    assert account.inputs["identity"] == {"type": "UserAssigned", "userAssignedIdentities": [who.id]}
    assert account.inputs["encryption"] == {
        "keySource": "Microsoft.Keyvault",
        "keyVaultProperties": {
            "keyVaultUri": "https://fleetkeys.vault.azure.net/",
            "keyName": "amlfs",
            "keyVersion": "0123456789abcdef0123456789abcdef",
        },
        "encryptionIdentity": {"encryptionUserAssignedIdentity": who.id},
    }
    (grant,) = [r for r in recorded if r.type == ROLE and r.name.endswith("ckpt-key")]
    assert grant.inputs["scope"] == vault and "checkpoint account" in grant.inputs["description"]
    # What the outputs say encrypts the checkpoints is what does.
    assert outputs["checkpoints"]["kms_key"] == key
    # Without a key: Microsoft-managed keys, and the outputs name none.
    recorded, outputs = _fleet_records(AzureFleetArgs.from_spec(spec_from_mapping(doc)))
    (account,) = [r for r in recorded if r.type == ACCOUNT]
    assert "encryption" not in account.inputs and "identity" not in account.inputs
    assert outputs["checkpoints"]["kms_key"] is None


def test_the_specs_key_vault_key_reaches_the_file_system() -> None:
    vault, key = VAULT, KEY
    doc = azure_doc()
    doc["azure"] = {**(doc.get("azure") or {}), "key_url": key, "key_vault_id": vault}
    args = AzureFleetArgs.from_spec(spec_from_mapping(doc))
    assert (args.key_url, args.key_vault_id) == (key, vault)
    bad = {**doc, "azure": {**doc["azure"], "key_vault_id": vault.replace("fleetkeys", "otherkeys")}}
    with pytest.raises(SpecError, match="another vault"):
        spec_from_mapping(bad)
    with pytest.raises(SpecError, match="go together"):
        spec_from_mapping({**doc, "azure": {"key_url": key}})


def test_the_file_system_waits_for_its_identity_s_grant_on_the_key_vault() -> None:
    # Azure reads the key when it creates the file system: the grant must exist first, as it does
    # for the checkpoint account.
    vault, key = VAULT, KEY
    args = dataclasses.replace(
        AzureFleetArgs.from_spec(spec_from_mapping(azure_doc())), key_url=key, key_vault_id=vault
    )
    recorded, _ = _fleet_records(args)
    (fs,) = [r for r in recorded if r.type == AMLFS]
    (fs_grant,) = [r for r in recorded if r.type == ROLE and r.name.endswith("amlfs-key")]
    (account,) = [r for r in recorded if r.type == ACCOUNT]
    (ckpt_grant,) = [r for r in recorded if r.type == ROLE and r.name.endswith("ckpt-key")]
    assert fs_grant.urn and fs_grant.urn in fs.dependencies
    assert ckpt_grant.urn and ckpt_grant.urn in account.dependencies


def _run_with_config_key(value: str) -> None:
    args = AzureFleetArgs.from_spec(spec_from_mapping(azure_doc()))
    assert args.ssh_public_key is None  # the key comes from Pulumi config

    def program() -> None:
        AzureFleet(args.name, args)

    run(program, FleetMocks(region=args.location, zone=args.zone or ""), {"fleetforge:sshPublicKey": value})


@pytest.mark.parametrize(
    "value",
    [
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHm3Ij6DJEdqPQBHtoXuUo3hJZc7CrHD8dSv",  # truncated
        "ssh-ed25519",
        "-----BEGIN OPENSSH PRIVATE KEY-----",
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHm3Ij6DJEdqPQBHtoXuUo3hJZc7CrHD8dSv/TWedJb3 a\nssh-rsa AAAA b",
    ],
)
def test_a_malformed_ssh_key_from_pulumi_config_is_refused_by_its_config_name(value: str) -> None:
    with pytest.raises(
        pulumi.RunError, match=r"^fleetforge:sshPublicKey: not an OpenSSH public key line; allowed: "
    ) as caught:
        _run_with_config_key(value)
    assert "ssh-ed25519 AAAA..." in str(caught.value) and "2048+ bits" in str(caught.value)


def _lustre_subnet(doc: dict[str, Any]) -> str:
    prefix: str = one(plan_of(doc), AZ_SUBNET, "lustre-subnet").inputs["addressPrefix"]
    return prefix


@pytest.mark.parametrize(
    ("tier", "tib", "expected"),
    [
        (500, 4, "10.64.128.0/27"),  # 4-16 TiB: /27
        (125, 16, "10.64.128.0/27"),
        (125, 32, "10.64.128.0/26"),  # 20-40 TiB: /26
        (125, 128, "10.64.128.0/24"),  # 96-196 TiB: /24
        (40, 384, "10.64.128.0/23"),  # 200-400 TiB: /23
        (40, 768, "10.64.128.0/22"),  # beyond Microsoft's table: one more bit
    ],
)
def test_the_lustre_subnet_is_sized_by_the_file_system_s_capacity(tier: int, tib: int, expected: str) -> None:
    fs = {"kind": "amlfs", "capacity_tib": tib, "throughput_mbps_per_tib": tier}
    doc = azure_doc(network={"ssh_cidr": "10.20.0.0/16"}, storage__filesystem=fs)
    assert spec_problems(spec_from_mapping(doc)) == []
    assert _lustre_subnet(doc) == expected
    # Nodes keep the VNet's first half whatever the file system's size.
    assert one(plan_of(doc), AZ_SUBNET, "nodes-subnet").inputs["addressPrefix"] == "10.64.0.0/17"


def test_a_vnet_too_small_for_a_large_file_system_is_named_before_pulumi_runs() -> None:
    large = {"kind": "amlfs", "capacity_tib": 384, "throughput_mbps_per_tib": 40}
    doc = azure_doc(network={"vpc_cidr": "10.64.0.0/23"}, storage__filesystem=large)
    problems = dict(spec_problems(spec_from_mapping(doc)))
    assert problems["network.vpc_cidr"] == (
        "10.64.0.0/23 leaves a /24 (the VNet's second half) for Azure Managed Lustre, and 384 TiB needs a "
        "/23 (https://learn.microsoft.com/en-us/azure/azure-managed-lustre/amlfs-prerequisites); "
        "allowed: a /22 or larger range"
    )
    # The same VNet holds a small file system's /27 (and the nodes) without a problem.
    small = {"kind": "amlfs", "capacity_tib": 16, "throughput_mbps_per_tib": 125}
    assert (
        spec_problems(
            spec_from_mapping(azure_doc(network={"vpc_cidr": "10.64.0.0/23"}, storage__filesystem=small))
        )
        == []
    )
    with pytest.raises(SpecError, match=r"network\.vpc_cidr: 10\.64\.0\.0/23 leaves a /24"):
        plan_of(doc)
