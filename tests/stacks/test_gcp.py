"""GcpFleet under Pulumi's mocks: what `pulumi up` would create for every GCP SKU in the catalog."""

from __future__ import annotations

import ipaddress
import json
import re
from typing import Any

import pulumi
import pytest
import yaml

from fleet.catalog import get_sku
from fleet.spec import SpecError, spec_from_mapping
from fleetforge.plan import Plan
from policy.rules import Resource, check
from stacks.gcp import GcpFleet, GcpFleetArgs
from stacks.gcp_compute import NODE_SCOPES, account_id
from stacks.gcp_layout import IAP_RANGE, TPU_RUNTIME_VERSIONS
from stacks.gcp_storage import CHECKPOINT_PREFIX
from stacks.gcp_tpu import DEFAULT_ACCOUNT_WARNING
from stacks.mocks import MOCK_PROJECT_NUMBER, FleetMocks, Recorded, run
from stacks.prerequisites import spec_problems
from tests.conftest import EXAMPLES
from tests.stacks.plans import (
    FIREWALL,
    GCP_EXAMPLE,
    GCP_GPU_SKUS,
    GCP_TPU_SKUS,
    GCS,
    GCS_IAM,
    LUSTRE,
    MIG,
    NETWORK,
    POLICY,
    QUEUED,
    RESIZE,
    SUBNETWORK,
    TEMPLATE,
    gcp_doc,
    of_type,
    one,
    plan_of,
    tpu_doc,
)

EXAMPLE_SIZE = 9  # 8 nodes + 1 spare in examples/gcp-a3-mega-fleet.yaml
KMS_KEY = "projects/keys-prj/locations/us-central1/keyRings/fleet/cryptoKeys/disks"
KEY_GRANT = "gcp:kms/cryptoKeyIAMMember:CryptoKeyIAMMember"
SERVICE_IDENTITY = "gcp:projects/serviceIdentity:ServiceIdentity"


def _networks_by_id(plan: Plan) -> dict[str, dict[str, Any]]:
    return {str(r.id): r.inputs for r in of_type(plan, NETWORK)}


# --------------------------------------------------------------------------- per GPU SKU


@pytest.mark.parametrize("sku", GCP_GPU_SKUS)
def test_networks_subnets_and_nics_follow_the_catalog_layout(sku: str) -> None:
    fabric = get_sku(sku).fabric
    plan = plan_of(gcp_doc(sku=sku))
    networks = _networks_by_id(plan)
    subnets = {str(r.id): r.inputs for r in of_type(plan, SUBNETWORK)}
    nics = one(plan, TEMPLATE).inputs["networkInterfaces"]
    assert len(nics) == fabric.host_nics + fabric.nics
    host, fast = nics[: fabric.host_nics], nics[fabric.host_nics :]
    assert all(n["nicType"] == "GVNIC" for n in host)
    if fabric.attach == "vpc-per-gpu-nic":
        assert len(networks) == fabric.host_nics + fabric.nics  # one VPC per NIC
        assert all(n["nicType"] == "GVNIC" for n in fast)
        assert len({n["network"] for n in nics}) == len(nics)
        assert not any("networkProfile" in net for net in networks.values())
    else:
        assert fabric.attach == "roce-vpc-subnet-per-nic"
        assert len(networks) == fabric.host_nics + 1  # the RDMA NICs share one RoCE VPC
        assert all(n["nicType"] == "MRDMA" for n in fast)
        (roce,) = {n["network"] for n in fast}
        assert networks[roce]["networkProfile"] == (
            "projects/fleetforge-plan/global/networkProfiles/us-central1-a-vpc-roce"
        )
        assert [k for k, net in networks.items() if "networkProfile" in net] == [roce]
    assert len(subnets) == len(nics)
    assert len({n["subnetwork"] for n in nics}) == len(nics), "one subnet per NIC"
    for nic in nics:
        assert subnets[nic["subnetwork"]]["network"] == nic["network"]
        assert nic.get("accessConfigs", []) == [] and "ipv6AccessConfigs" not in nic
    assert {net["mtu"] for net in networks.values()} == {fabric.mtu}
    ranges = [ipaddress.IPv4Network(s["ipCidrRange"]) for s in subnets.values()]
    assert not any(a.overlaps(b) for i, a in enumerate(ranges) for b in ranges[i + 1 :])
    assert [i["interface_type"] for i in plan.outputs["fabric"]["interfaces"]] == [n["nicType"] for n in nics]


@pytest.mark.parametrize("sku", GCP_GPU_SKUS)
def test_instance_template_is_hardened(sku: str) -> None:
    plan = plan_of(gcp_doc(sku=sku))
    tmpl = one(plan, TEMPLATE).inputs
    assert tmpl["machineType"] == get_sku(sku).machine_type
    assert tmpl["scheduling"]["onHostMaintenance"] == "TERMINATE"
    assert tmpl["shieldedInstanceConfig"] == {
        "enableSecureBoot": True,
        "enableVtpm": True,
        "enableIntegrityMonitoring": True,
    }
    account = one(plan, "gcp:serviceaccount/account:Account")
    assert (
        tmpl["serviceAccount"]["email"]
        == f"{account.inputs['accountId']}@fleetforge-plan.iam.gserviceaccount.com"
    )
    assert sorted(tmpl["serviceAccount"]["scopes"]) == sorted(NODE_SCOPES)
    assert not any(s.endswith("cloud-platform") for s in tmpl["serviceAccount"]["scopes"])
    (boot,) = tmpl["disks"]
    # Pinned at deploy time: a concrete image's self link, never the family.
    assert boot["sourceImage"].startswith("https://www.googleapis.com/compute/v1/projects/")
    assert "/global/images/" in boot["sourceImage"] and "/family/" not in boot["sourceImage"]
    assert "diskEncryptionKey" not in boot  # no KMS key in the spec: Google's default encryption
    assert tmpl["metadata"]["enable-oslogin"] == "TRUE"
    assert tmpl["labels"]["owner"] == "research-infra" and tmpl["labels"]["fleetforge-group"]
    roles = sorted(r.inputs["role"] for r in of_type(plan, "gcp:projects/iAMMember:IAMMember"))
    assert roles == ["roles/logging.logWriter", "roles/monitoring.metricWriter"]


@pytest.mark.parametrize("sku", GCP_GPU_SKUS)
def test_one_group_of_nodes_plus_spares_on_the_named_reservation(sku: str) -> None:
    plan = plan_of(gcp_doc(sku=sku))  # the example asks for reservation a3mega-res-1
    tmpl = one(plan, TEMPLATE)
    mig = one(plan, MIG).inputs
    assert mig["targetSize"] == EXAMPLE_SIZE and mig["zone"] == "us-central1-a"
    assert [v["instanceTemplate"] for v in mig["versions"]] == [
        f"https://www.googleapis.com/compute/v1/{tmpl.id}"
    ]
    assert tmpl.inputs["reservationAffinity"] == {
        "type": "SPECIFIC_RESERVATION",
        "specificReservation": {"key": "compute.googleapis.com/reservation-name", "values": ["a3mega-res-1"]},
    }
    assert of_type(plan, POLICY) == [] and of_type(plan, RESIZE) == []
    assert plan.outputs["fabric"]["placement"] == {"strategy": "reservation", "name": "a3mega-res-1"}


@pytest.mark.parametrize(
    ("sku", "bound"),
    [(s, get_sku(s).placement.strategy == "reservation-block") for s in GCP_GPU_SKUS],
)
def test_a_reservation_block_sku_consumes_its_reservation_as_reservation_bound_vms(
    sku: str, bound: bool
) -> None:
    # A3 Ultra and A4 reservations come from future reservations in calendar mode or AI
    # Hypercomputer, which VMs consume with the reservation-bound provisioning model and a
    # termination action for the reservation's end
    # (https://cloud.google.com/compute/docs/instances/about-reservation-bound-vms); other SKUs'
    # reservations are consumed by STANDARD VMs.
    sched = one(plan_of(gcp_doc(sku=sku)), TEMPLATE).inputs["scheduling"]  # a named reservation
    if bound:
        assert sched == {
            "provisioningModel": "RESERVATION_BOUND",
            "automaticRestart": False,
            "onHostMaintenance": "TERMINATE",
            "instanceTerminationAction": "DELETE",
        }
    else:
        assert sched == {
            "provisioningModel": "STANDARD",
            "automaticRestart": True,
            "onHostMaintenance": "TERMINATE",
        }
    # Without a reservation the same SKU runs STANDARD VMs.
    on_demand = one(plan_of(gcp_doc(sku=sku, capacity={"type": "on-demand"})), TEMPLATE).inputs["scheduling"]
    assert on_demand["provisioningModel"] == "STANDARD" and "instanceTerminationAction" not in on_demand


# IAM's service account id grammar, 6 to 30 characters
# (https://cloud.google.com/iam/docs/reference/rest/v1/projects.serviceAccounts/create).
ACCOUNT_ID = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])")
FLEET_NAMES = [
    "a",
    "a3mega-finetune",
    "a3mega-finetune-us-central1",  # 27
    "x" * 24,
    "x" * 23 + "y",
    "x" * 25,
    "x" * 24 + "y",
    "llm-pretrain-a3mega-east1-prod",
    "llm-pretrain-a3mega-east1-dev",
    "llm-pretrain-a3mega--x-dev",  # dashes where the long form cuts
    "llm-pretrain-a3mega-------x",
    "a" * 39 + "b",
    "a" * 39 + "c",
    "a" * 40,
]


def test_each_fleet_name_gets_its_own_valid_service_account_id() -> None:
    ids = {name: account_id(name) for name in FLEET_NAMES}
    for name, found in ids.items():
        assert 6 <= len(found) <= 30 and ACCOUNT_ID.fullmatch(found), (name, found)
        if len(name) <= 24:  # the id such a fleet has always had: its account is not replaced
            assert found == f"{name}-nodes"
        else:  # never an id a short name could have: that always ends in -nodes
            assert not found.endswith("-nodes") and found.startswith(name[:15])
    assert len(set(ids.values())) == len(ids)


def test_two_fleets_sharing_a_24_character_prefix_deploy_two_service_accounts() -> None:
    # GCP answers 409 to the second fleet's `pulumi up` when both ask for one account id.
    names = ("llm-pretrain-a3mega-east1-prod", "llm-pretrain-a3mega-east1-dev")
    accounts = [one(plan_of(gcp_doc(name=n)), "gcp:serviceaccount/account:Account").inputs for n in names]
    assert accounts[0]["accountId"] != accounts[1]["accountId"]
    assert [a["displayName"] for a in accounts] == [f"fleetforge {n} nodes" for n in names]


# --------------------------------------------------------------------------- capacity variants


@pytest.mark.parametrize(
    ("sku", "compact"),
    [(s, get_sku(s).placement.strategy == "compact-placement-policy") for s in GCP_GPU_SKUS],
)
def test_on_demand_gets_a_compact_policy_where_the_sku_uses_one(sku: str, compact: bool) -> None:
    plan = plan_of(gcp_doc(sku=sku, capacity={"type": "on-demand"}))
    tmpl = one(plan, TEMPLATE).inputs
    assert tmpl["reservationAffinity"] == {"type": "NO_RESERVATION"}
    if compact:
        policy = one(plan, POLICY)
        assert policy.inputs["groupPlacementPolicy"] == {"collocation": "COLLOCATED"}
        assert tmpl["resourcePolicies"] == policy.id.rsplit("/", 1)[-1]
    else:  # A3 Ultra / A4 take their placement from reservation blocks
        assert of_type(plan, POLICY) == [] and "resourcePolicies" not in tmpl


def test_spot_vms_are_deleted_on_preemption() -> None:
    plan = plan_of(gcp_doc(capacity={"type": "spot"}))
    sched = one(plan, TEMPLATE).inputs["scheduling"]
    assert sched == {
        "provisioningModel": "SPOT",
        "preemptible": True,
        "automaticRestart": False,
        "onHostMaintenance": "TERMINATE",
        "instanceTerminationAction": "DELETE",
    }
    assert one(plan, MIG).inputs["targetSize"] == EXAMPLE_SIZE


def test_queued_gpu_fleet_is_one_flex_start_resize_request_for_the_whole_fleet() -> None:
    plan = plan_of(gcp_doc(capacity={"type": "queued"}))
    tmpl = one(plan, TEMPLATE).inputs
    mig = one(plan, MIG)
    resize = one(plan, RESIZE).inputs
    assert tmpl["scheduling"]["provisioningModel"] == "FLEX_START"
    assert tmpl["scheduling"]["onHostMaintenance"] == "TERMINATE"
    assert tmpl["reservationAffinity"] == {"type": "NO_RESERVATION"}
    assert mig.inputs["targetSize"] == 0 and mig.inputs["instanceLifecyclePolicy"] == {
        "defaultActionOnFailure": "DO_NOTHING"
    }
    assert resize["resizeBy"] == EXAMPLE_SIZE and resize["instanceGroupManager"] == mig.id.rsplit("/", 1)[-1]
    assert resize["requestedRunDuration"] == {"seconds": str(7 * 24 * 3600)}
    assert plan.outputs["group"]["desired"] == EXAMPLE_SIZE
    assert plan.outputs["fabric"]["placement"]["strategy"] == "flex-start"


def test_a_flex_start_fleet_runs_for_the_specs_duration() -> None:
    plan = plan_of(gcp_doc(capacity={"type": "queued", "run_duration_hours": 36}))
    assert one(plan, RESIZE).inputs["requestedRunDuration"] == {"seconds": str(36 * 3600)}
    with pytest.raises(SpecError, match=r"capacity\.run_duration_hours"):
        spec_from_mapping(gcp_doc(capacity={"type": "on-demand", "run_duration_hours": 36}))


# --------------------------------------------------------------------------- network


def test_firewalls_are_internal_ssh_from_the_spec_only_and_nat_gives_egress() -> None:
    plan = plan_of(gcp_doc(sku="a3-ultragpu-8g"))
    networks = _networks_by_id(plan)
    account_email = one(plan, TEMPLATE).inputs["serviceAccount"]["email"]
    rules = [r.inputs for r in of_type(plan, FIREWALL)]
    assert all(r["direction"] == "INGRESS" and r["targetServiceAccounts"] == [account_email] for r in rules)
    assert not any("0.0.0.0/0" in r["sourceRanges"] for r in rules)
    ssh = [r for r in rules if any(a.get("ports") == ["22"] for a in r["allows"])]
    assert [s["sourceRanges"] for s in ssh] == [["10.10.0.0/16"]]
    roce = next(k for k, n in networks.items() if "networkProfile" in n)
    assert not [r for r in rules if r["network"] == roce], "RoCE networks take no firewall rules"
    subnets_of: dict[str, set[str]] = {}
    for s in of_type(plan, SUBNETWORK):
        subnets_of.setdefault(s.inputs["network"], set()).add(s.inputs["ipCidrRange"])
    for r in rules:
        if r is not ssh[0] and "Lustre" not in r["description"]:
            assert set(r["sourceRanges"]) == subnets_of[r["network"]]  # the fleet's own subnets only
    router = one(plan, "gcp:compute/router:Router").inputs
    primary = one(plan, NETWORK, "host-0-vpc")
    assert router["network"] == primary.id
    assert one(plan, "gcp:compute/routerNat:RouterNat").inputs["natIpAllocateOption"] == "AUTO_ONLY"
    # Only the primary VPC keeps its internet route (through the NAT).
    assert [k for k, n in networks.items() if not n["deleteDefaultRoutesOnCreate"]] == [primary.id]


def test_without_an_ssh_source_ssh_comes_through_iap_only() -> None:
    plan = plan_of(gcp_doc(network=None))
    (ssh,) = [r.inputs for r in of_type(plan, FIREWALL) if r.name.endswith("-ssh")]
    assert ssh["sourceRanges"] == [str(IAP_RANGE)]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"network": {"vpc_id": "default"}}, "network.vpc_id"),
        ({"network": {"bastion": "bastion-vm"}}, "network.bastion"),
        ({"network": {"vpc_cidr": "10.64.0.0/22"}}, "network.vpc_cidr"),
    ],
)
def test_network_settings_the_stack_cannot_honour_are_refused_by_field(
    change: dict[str, Any], field: str
) -> None:
    spec = spec_from_mapping(gcp_doc(**change))
    assert [path for path, _ in spec_problems(spec)] == [field]


def test_a_range_too_small_for_managed_lustres_block_is_refused_only_with_managed_lustre() -> None:
    # /20: sixteen /24 subnets hold the fleet, but the private-services range would be a /24.
    small = {"network": {"vpc_cidr": "10.64.0.0/20"}}
    ((path, why),) = spec_problems(spec_from_mapping(gcp_doc(**small)))
    assert path == "network.vpc_cidr"
    assert why == (
        "10.64.0.0/20 leaves Managed Lustre a /24 private-services range (1/16 of it), and an instance "
        "needs a /23; allowed: /19 or larger"
    )
    assert spec_problems(spec_from_mapping(gcp_doc(storage__filesystem=None, **small))) == []
    assert spec_problems(spec_from_mapping(gcp_doc(network={"vpc_cidr": "10.64.0.0/19"}))) == []


# --------------------------------------------------------------------------- storage


def test_managed_lustre_uses_the_spec_tier_over_private_services_access() -> None:
    plan = plan_of(gcp_doc())
    fs = one(plan, LUSTRE).inputs
    primary = one(plan, NETWORK, "host-0-vpc").id
    assert fs["capacityGib"] == "36000" and fs["perUnitStorageThroughput"] == "250"
    assert fs["network"] == primary and fs["location"] == "us-central1-a" and "kmsKey" not in fs
    address = one(plan, "gcp:compute/globalAddress:GlobalAddress")
    assert address.inputs["purpose"] == "VPC_PEERING" and address.inputs["network"] == primary
    peering = one(plan, "gcp:servicenetworking/connection:Connection").inputs
    assert peering["service"] == "servicenetworking.googleapis.com"
    assert peering["reservedPeeringRanges"] == [address.id.rsplit("/", 1)[-1]]
    services = ipaddress.IPv4Network(f"{address.inputs['address']}/{address.inputs['prefixLength']}")
    assert not any(
        services.overlaps(ipaddress.IPv4Network(s.inputs["ipCidrRange"])) for s in of_type(plan, SUBNETWORK)
    )
    storage = plan.outputs["storage"]
    assert storage["kind"] == "managed-lustre" and storage["mount_point"] == "/lustre"
    assert storage["mount_source"].endswith(f"@tcp:/{fs['filesystem']}")


def test_checkpoint_bucket_is_private_versioned_and_expires_per_the_spec() -> None:
    plan = plan_of(gcp_doc(storage__checkpoints={"retention_days": 45, "noncurrent_retention_days": 5}))
    bucket = one(plan, GCS)
    b = bucket.inputs
    assert b["uniformBucketLevelAccess"] is True and b["publicAccessPrevention"] == "enforced"
    assert b["versioning"] == {"enabled": True} and b["forceDestroy"] is False
    assert "encryption" not in b
    conditions = {
        r["action"]["type"] + ":" + r["condition"].get("withState", ""): r["condition"]
        for r in b["lifecycleRules"]
    }
    assert conditions["Delete:LIVE"]["age"] == 45
    assert conditions["Delete:ARCHIVED"]["daysSinceNoncurrentTime"] == 5
    grants = {g.inputs["role"]: g.inputs for g in of_type(plan, GCS_IAM)}
    assert set(grants) == {"roles/storage.objectViewer", "roles/storage.objectCreator"}  # no delete
    assert CHECKPOINT_PREFIX in grants["roles/storage.objectCreator"]["condition"]["expression"]
    assert plan.outputs["checkpoints"]["uri"] == f"gs://{bucket.id}/{CHECKPOINT_PREFIX}"


def test_without_file_system_or_checkpoints_nothing_of_them_is_made() -> None:
    plan = plan_of(gcp_doc(storage={"checkpoints": None}))
    kinds = {r.type for r in plan.resources}
    assert not kinds & {LUSTRE, GCS, GCS_IAM, "gcp:servicenetworking/connection:Connection"}
    assert plan.outputs["storage"] is None and plan.outputs["checkpoints"] is None


def _agent(domain: str) -> str:
    """A service agent of the mocks' project (stacks.mocks names them after its number)."""
    return f"service-{MOCK_PROJECT_NUMBER}@{domain}.iam.gserviceaccount.com"


def _keyed_fleet(doc: dict[str, Any]) -> tuple[list[Recorded], dict[str, Any]]:
    """The fleet's resources (with their dependencies) and outputs, under the mocks."""
    args = GcpFleetArgs.from_spec(spec_from_mapping(doc))

    def program() -> None:
        for section, value in GcpFleet(args.name, args).outputs.items():
            pulumi.export(section, value)

    mocks = FleetMocks(region=args.region, zone=args.zone)
    return mocks.recorded, run(program, mocks, {}).outputs


def _records(recorded: list[Recorded], type_: str) -> list[Recorded]:
    return [r for r in recorded if r.type == type_]


def test_the_spec_kms_key_encrypts_boot_disks_bucket_and_lustre() -> None:
    recorded, outputs = _keyed_fleet(gcp_doc(kms_key=KMS_KEY))
    ((tmpl,), (bucket,), (fs,)) = (_records(recorded, t) for t in (TEMPLATE, GCS, LUSTRE))
    (boot,) = tmpl.inputs["disks"]
    assert boot["diskEncryptionKey"] == {"kmsKeySelfLink": KMS_KEY}
    assert bucket.inputs["encryption"] == {"defaultKmsKeyName": KMS_KEY}
    assert fs.inputs["kmsKey"] == KMS_KEY
    assert outputs["checkpoints"]["kms_key"] == KMS_KEY
    assert check(Resource(r.type, r.name, r.inputs, id=r.id, urn=r.urn) for r in recorded) == []


def test_each_service_agent_that_encrypts_with_the_key_may_use_that_key_only() -> None:
    # Google encrypts as the product's service agent, and refuses a key that agent cannot use.
    recorded, _ = _keyed_fleet(gcp_doc(kms_key=KMS_KEY))
    grants = {r.inputs["member"]: r.inputs for r in _records(recorded, KEY_GRANT)}
    assert set(grants) == {
        f"serviceAccount:{_agent('gs-project-accounts')}",  # Cloud Storage: the checkpoint bucket
        f"serviceAccount:{_agent('compute-system')}",  # Compute Engine: the nodes' boot disks
        f"serviceAccount:{_agent('gcp-sa-lustre')}",  # Managed Lustre
    }
    for grant in grants.values():
        # On the one key: neither its key ring nor the project.
        assert grant == {
            "cryptoKeyId": KMS_KEY,
            "role": "roles/cloudkms.cryptoKeyEncrypterDecrypter",
            "member": grant["member"],
        }
    (agent,) = _records(recorded, SERVICE_IDENTITY)
    assert agent.inputs == {"service": "lustre.googleapis.com"}
    kms_types = {r.type for r in recorded if r.type.startswith("gcp:kms/")}
    assert kms_types == {KEY_GRANT}
    project_roles = {r.inputs["role"] for r in _records(recorded, "gcp:projects/iAMMember:IAMMember")}
    assert not any("cloudkms" in role for role in project_roles)
    # Without a key, Google's own keys encrypt and no agent is granted anything.
    plain = plan_of(gcp_doc())
    assert of_type(plain, KEY_GRANT) == [] and of_type(plain, SERVICE_IDENTITY) == []


@pytest.mark.parametrize(
    ("doc", "agents"),
    [
        (gcp_doc(storage__filesystem=None), {"gs-project-accounts", "compute-system"}),
        (
            gcp_doc(storage={**GCP_EXAMPLE["storage"], "checkpoints": None}),
            {"compute-system", "gcp-sa-lustre"},
        ),
        # TPU VMs take no key (stacks.gcp_tpu): only the checkpoint bucket uses it.
        (tpu_doc(), {"gs-project-accounts"}),
    ],
    ids=["no-file-system", "no-checkpoints", "tpu"],
)
def test_only_the_agents_of_stores_the_fleet_creates_are_granted_the_key(
    doc: dict[str, Any], agents: set[str]
) -> None:
    key = KMS_KEY.replace("us-central1", doc["region"])
    recorded, _ = _keyed_fleet({**doc, "kms_key": key})
    grants = _records(recorded, KEY_GRANT)
    assert {r.inputs["member"] for r in grants} == {f"serviceAccount:{_agent(a)}" for a in agents}
    assert {r.inputs["cryptoKeyId"] for r in grants} == {key}
    assert (_records(recorded, SERVICE_IDENTITY) != []) == ("gcp-sa-lustre" in agents)


def test_the_bucket_lustre_and_the_nodes_wait_for_their_agents_grant() -> None:
    recorded, _ = _keyed_fleet(gcp_doc(kms_key=KMS_KEY))
    grant = {r.inputs["member"].split("@")[1].split(".")[0]: r for r in _records(recorded, KEY_GRANT)}
    waits = {
        GCS: "gs-project-accounts",
        LUSTRE: "gcp-sa-lustre",
        TEMPLATE: "compute-system",
        MIG: "compute-system",
    }
    for type_, agent in waits.items():
        (consumer,) = _records(recorded, type_)
        assert grant[agent].urn and grant[agent].urn in consumer.dependencies, (type_, consumer.dependencies)
    (fs,) = _records(recorded, LUSTRE)
    (peering,) = _records(recorded, "gcp:servicenetworking/connection:Connection")
    assert peering.urn in fs.dependencies  # still after private services access


def test_dynamic_tier_lustre_has_no_fixed_throughput() -> None:
    plan = plan_of(
        gcp_doc(storage__filesystem={"kind": "managed-lustre", "capacity_gib": 472_000, "tier": "dynamic"})
    )
    fs = one(plan, LUSTRE).inputs
    assert fs["capacityGib"] == "472000" and "perUnitStorageThroughput" not in fs
    assert fs["dynamicTierOptions"] == {"mode": "DEFAULT_CACHE"}
    assert plan.outputs["storage"]["throughput_mbps_per_tib"] is None


def test_args_carry_the_spec_fields_they_are_built_from() -> None:
    doc = tpu_doc(
        sku="tpu-v5p", nodes=64, tpu={"topology": "4x4x8", "slices": 2, "runtime_version": "v2-alpha-tpuv5"}
    )
    args = GcpFleetArgs.from_spec(
        spec_from_mapping({**doc, "kms_key": KMS_KEY.replace("us-central1", "us-west4")})
    )
    assert (args.slices, args.hosts_per_slice, args.tpu_topology) == (2, 32, "4x4x8")
    assert args.tpu_runtime_version == "v2-alpha-tpuv5" and args.kms_key is not None


# --------------------------------------------------------------------------- TPU


@pytest.mark.parametrize(
    ("sku", "hosts", "accelerator_type", "topology", "per_vm"),
    [
        ("tpu-v5e", 16, "v5litepod-64", "8x8", 4),  # 16 VMs of 4 chips, not 8 of 8
        ("tpu-v5e", 64, "v5litepod-256", "16x16", 4),
        ("tpu-v5e", 1, "v5litepod-8", "2x4", 8),  # one VM: the 8-chip one
        ("tpu-v6e", 4, "v6e-16", "4x4", 4),
        ("tpu-v6e", 1, "v6e-8", "2x4", 8),
        ("tpu-v5p", 2, "v5p-16", "2x2x2", 4),  # 8 chips = 16 TensorCores
        ("tpu-v5p", 128, "v5p-1024", "8x8x8", 4),
    ],
)
def test_tpu_slice_type_and_hosts_follow_the_topology(
    sku: str, hosts: int, accelerator_type: str, topology: str, per_vm: int
) -> None:
    # A v5e/v6e slice of several VMs names its shape (fleet/spec.py); one VM and v5p need not.
    named = {"tpu": {"topology": topology}} if per_vm == 4 and not sku.startswith("tpu-v5p") else {}
    plan = plan_of(tpu_doc(sku=sku, nodes=hosts, **named))
    (spec,) = one(plan, QUEUED).inputs["tpu"]["nodeSpecs"]
    node = spec["node"]
    assert node["acceleratorType"] == accelerator_type
    assert node["runtimeVersion"] == TPU_RUNTIME_VERSIONS[get_sku(sku).accelerator.generation]
    assert node["networkConfig"]["enableExternalIps"] is False
    assert node["networkConfig"]["subnetwork"] == one(plan, SUBNETWORK).id
    assert spec["parent"] == "projects/fleetforge-plan/locations/us-west4-a"
    assert plan.outputs["group"]["desired"] == hosts
    placement = plan.outputs["fabric"]["placement"]
    assert placement["topology"] == topology and placement["hosts_per_tpu_node"] == hosts
    # What each VM has (the inventory's tpu_chips_per_vm and the burn-in's count follow it).
    assert placement["chips_per_tpu_vm"] == plan.outputs["fleet"]["accelerators_per_node"] == per_vm
    assert placement["tpu_nodes"] == [spec["nodeId"]] and spec["nodeId"] in placement["list_hosts"][0]
    assert of_type(plan, TEMPLATE) == [] and of_type(plan, MIG) == []


def test_multislice_is_one_queued_resource_with_a_node_spec_per_slice() -> None:
    plan = plan_of(
        tpu_doc(nodes=64, tpu={"topology": "8x8", "slices": 4})
    )  # 4 slices of 16 VMs (8x8, 4 chips each)
    specs = one(plan, QUEUED).inputs["tpu"]["nodeSpecs"]
    assert [s["nodeId"] for s in specs] == [f"tpu-v5e-64-slice-{i}" for i in range(4)]
    assert {s["node"]["acceleratorType"] for s in specs} == {"v5litepod-64"}
    out = plan.outputs
    assert out["group"]["desired"] == 64 and out["fleet"]["nodes"] == 64
    assert (
        out["fabric"]["placement"]["slices"] == 4 and out["fabric"]["placement"]["hosts_per_tpu_node"] == 16
    )
    assert len(out["fabric"]["placement"]["list_hosts"]) == 4


def test_the_tpu_group_names_the_nodes_its_slices_are() -> None:
    # A queued resource cannot label the VMs it creates, so a label filter would match nothing.
    plan = plan_of(tpu_doc(nodes=16, tpu={"topology": "4x8", "slices": 2}))
    specs = one(plan, QUEUED).inputs["tpu"]["nodeSpecs"]
    assert all("labels" not in spec["node"] for spec in specs)
    assert plan.outputs["group"]["node_filter"] == {
        "name": [f"{spec['parent']}/nodes/{spec['nodeId']}" for spec in specs]
    }


def test_named_topology_and_runtime_are_what_the_slice_gets() -> None:
    plan = plan_of(
        tpu_doc(sku="tpu-v5p", nodes=32, tpu={"topology": "4x4x8", "runtime_version": "v2-alpha-tpuv5"})
    )
    (spec,) = one(plan, QUEUED).inputs["tpu"]["nodeSpecs"]
    assert spec["node"]["acceleratorType"] == "v5p-256"  # 128 chips, 256 TensorCores
    assert spec["node"]["runtimeVersion"] == "v2-alpha-tpuv5"
    assert plan.outputs["fabric"]["placement"]["topology"] == "4x4x8"


@pytest.mark.parametrize("capacity", [{"type": "spot"}, {"type": "reservation", "reservation_id": "tpu-res"}])
def test_tpu_capacity_the_queued_resource_cannot_express_is_refused(capacity: dict[str, str]) -> None:
    spec = spec_from_mapping(tpu_doc(capacity=capacity))
    assert [path for path, _ in spec_problems(spec)] == ["capacity.type"]


@pytest.mark.parametrize("sku", GCP_TPU_SKUS)
def test_tpu_fleet_firewalls_cover_the_fleets_own_vpc(sku: str) -> None:
    hosts = {"tpu-v5e": 1, "tpu-v6e": 4}.get(sku, 2)  # one slice of each: 2x4, 4x4, 2x2x2
    named = {"tpu": {"topology": "4x4"}} if sku == "tpu-v6e" else {}
    plan = plan_of(tpu_doc(sku=sku, nodes=hosts, **named))
    rules = [r.inputs for r in of_type(plan, FIREWALL)]
    assert rules and all("targetServiceAccounts" not in r for r in rules)
    assert not any("0.0.0.0/0" in r["sourceRanges"] for r in rules)


# --------------------------------------------------------------------------- scale and outputs


@pytest.mark.parametrize(
    ("doc", "changing"),
    [
        (gcp_doc(capacity={"type": "on-demand"}), {(MIG, "targetSize")}),
        (gcp_doc(capacity={"type": "queued"}), {(RESIZE, "resizeBy")}),
    ],
)
def test_8_and_1024_nodes_make_the_same_resources_and_differ_only_in_group_size(
    doc: dict[str, Any], changing: set[tuple[str, str]]
) -> None:
    small = plan_of({**doc, "nodes": 8, "spares": 1})
    large = plan_of({**doc, "nodes": 1024, "spares": 1})
    assert {(r.type, r.name) for r in small.resources} == {(r.type, r.name) for r in large.resources}
    by_name = {(r.type, r.name): r.inputs for r in large.resources}
    differing = {
        (r.type, key)
        for r in small.resources
        for key in set(r.inputs) | set(by_name[(r.type, r.name)])
        if r.inputs.get(key) != by_name[(r.type, r.name)].get(key)
    }
    assert differing == changing


def test_tpu_slices_of_8_and_1024_hosts_make_the_same_resources() -> None:
    small = plan_of(tpu_doc(sku="tpu-v5p", nodes=8))
    large = plan_of(tpu_doc(sku="tpu-v5p", nodes=1024))
    assert {(r.type, r.name) for r in small.resources} == {(r.type, r.name) for r in large.resources}


def test_outputs_have_the_common_shape() -> None:
    plan = plan_of(gcp_doc())
    out = plan.outputs
    assert set(out) == {"fleet", "group", "fabric", "storage", "checkpoints", "tags"}
    assert out["fleet"] == {
        "name": "a3mega-finetune",
        "cloud": "gcp",
        "sku": "a3-megagpu-8g",
        "machine_type": "a3-megagpu-8g",
        "accelerator": "H100-SXM5-80GB",
        "accelerators_per_node": 8,
        "region": "us-central1",
        "zone": "us-central1-a",
        "nodes": 8,
        "spares": 1,
        "size": 9,
        "capacity": "reservation",
    }
    group = out["group"]
    assert (
        group["kind"] == "gcp-managed-instance-group"
        and group["name"] == one(plan, MIG).id.rsplit("/", 1)[-1]
    )
    assert group["project"] == "fleetforge-plan"
    label = one(plan, TEMPLATE).inputs["labels"]["fleetforge-group"]
    assert group["node_filter"] == {"labels.fleetforge-group": label}
    assert out["fabric"]["nics"] == 8 and len(out["fabric"]["interfaces"]) == 9
    assert out["tags"]["owner"] == "research-infra"
    assert plan.warnings == ()
    assert json.loads(json.dumps(out)) == out  # plain JSON once exported


def test_every_resource_is_a_child_of_the_component() -> None:
    plan = plan_of(gcp_doc())
    (component,) = [r for r in plan.resources if r.type == "fleetforge:gcp:Fleet"]
    assert (
        component.urn
        == "urn:pulumi:plan::fleetforge::pulumi:pulumi:Stack$fleetforge:gcp:Fleet::a3mega-finetune"
    )
    for r in plan.resources:
        if r is not component:
            assert r.urn.split("::")[2] == f"fleetforge:gcp:Fleet${r.type}", r.urn


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("gcp-*.yaml")))
def test_gcp_examples_plan_without_violations(example: str) -> None:
    plan = plan_of(yaml.safe_load((EXAMPLES / example).read_text()))
    # A TPU fleet's one warning: its VMs run as the default compute service account (stacks.gcp_tpu).
    tpu = any(r.type == QUEUED for r in plan.resources)
    assert plan.violations == () and plan.warnings == ((DEFAULT_ACCOUNT_WARNING,) if tpu else ())
    assert plan.outputs["fleet"]["cloud"] == "gcp"
