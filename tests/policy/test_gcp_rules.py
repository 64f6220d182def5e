"""GCP policy rules, judged as CrossGuard hands resources to the pack (pulumi_policy's own proxies).

The resources are written as pulumi_gcp puts them on the wire (camelCase inputs), one GPU fleet
and one TPU fleet that break no rule; each test changes one property and names the rule that must
fire, so every rule has a passing and a violating resource. Type tokens are checked against the
installed pulumi_gcp package, so a renamed token fails here rather than passing every resource.
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
from tests.policy.wire import getters as _getters

LABELS = {"owner": "research-infra", "fleet": "a3mega", "dataset": "code-mix-v3", "managed-by": "fleetforge"}
KEY = "projects/p/locations/us-central1/keyRings/fleet/cryptoKeys/disks"


def check(resources: list[Resource]) -> list[Violation]:
    return plain_check([crossguard(r) for r in resources])


def gpu_fleet() -> list[Resource]:
    template = {
        "machineType": "a3-megagpu-8g",
        "labels": dict(LABELS),
        "networkInterfaces": [
            {"network": "host-vpc", "subnetwork": "host-subnet"},
            *({"network": f"gpu-vpc-{i}", "subnetwork": f"gpu-subnet-{i}"} for i in range(8)),
        ],
        "disks": [{"boot": True, "sourceImage": "img", "diskEncryptionKey": {"kmsKeySelfLink": KEY}}],
        "scheduling": {"onHostMaintenance": "TERMINATE", "automaticRestart": True},
        "serviceAccount": {"email": "a3mega-nodes@p.iam.gserviceaccount.com", "scopes": ["cloud-platform"]},
    }
    return [
        Resource(rules.GCP_TEMPLATE, "a3mega-template", template),
        Resource(
            rules.GCP_MIG,
            "a3mega-nodes",
            {"baseInstanceName": "a3mega", "targetSize": 9, "zone": "us-central1-a"},
        ),
        Resource(
            rules.GCP_BUCKET,
            "a3mega-checkpoints",
            {
                "location": "US-CENTRAL1",
                "labels": dict(LABELS),
                "uniformBucketLevelAccess": True,
                "publicAccessPrevention": "enforced",
                "versioning": {"enabled": True},
                "encryption": {"defaultKmsKeyName": KEY},
            },
        ),
        Resource(
            rules.GCP_LUSTRE,
            "a3mega-lustre",
            {"capacityGib": "36000", "labels": dict(LABELS), "kmsKey": KEY},
        ),
        Resource(
            rules.GCP_FIREWALL,
            "a3mega-ssh",
            {
                "direction": "INGRESS",
                "allows": [{"protocol": "tcp", "ports": ["22"]}],
                "sourceRanges": ["35.235.240.0/20"],
            },
        ),
        Resource(
            rules.GCP_PROJECT_IAM_MEMBER,
            "a3mega-logging",
            {
                "role": "roles/logging.logWriter",
                "member": "serviceAccount:a3mega-nodes@p.iam.gserviceaccount.com",
            },
        ),
    ]


def tpu_fleet(slices: int = 2) -> list[Resource]:
    node = {
        "acceleratorType": "v5litepod-64",
        "runtimeVersion": "v2-alpha-tpuv5-lite",
        "networkConfig": {"network": "host-vpc", "subnetwork": "host-subnet", "enableExternalIps": False},
    }
    return [
        Resource(
            rules.GCP_TPU_QUEUED,
            "tpu-v5e-64",
            {
                "zone": "us-west4-a",
                "tpu": {
                    "nodeSpecs": [
                        {
                            "parent": "projects/p/locations/us-west4-a",
                            "nodeId": f"slice-{i}",
                            "node": copy.deepcopy(node),
                        }
                        for i in range(slices)
                    ]
                },
            },
        )
    ]


def _fired(resources: list[Resource]) -> set[str]:
    return {v.rule for v in check(resources)}


def _changed(
    resources: list[Resource], type_: str, change: Callable[[dict[str, Any]], None]
) -> list[Resource]:
    out = []
    for r in resources:
        if r.type == type_:
            props = copy.deepcopy(dict(r.props))
            change(props)
            r = Resource(r.type, r.name, props)
        out.append(r)
    return out


def test_type_tokens_are_pulumi_gcps() -> None:
    """Each token the rules match is the one the installed provider registers its resource under."""
    tokens = {
        rules.GCP_TEMPLATE: ("compute", "InstanceTemplate"),
        rules.GCP_REGION_TEMPLATE: ("compute", "RegionInstanceTemplate"),
        rules.GCP_INSTANCE: ("compute", "Instance"),
        rules.GCP_INSTANCE_FROM_TEMPLATE: ("compute", "InstanceFromTemplate"),
        rules.GCP_DISK: ("compute", "Disk"),
        rules.GCP_MIG: ("compute", "InstanceGroupManager"),
        rules.GCP_REGION_MIG: ("compute", "RegionInstanceGroupManager"),
        rules.GCP_FIREWALL: ("compute", "Firewall"),
        rules.GCP_BUCKET: ("storage", "Bucket"),
        rules.GCP_LUSTRE: ("lustre", "Instance"),
        rules.GCP_TPU_QUEUED: ("tpu", "V2QueuedResource"),
        rules.GCP_TPU_VM: ("tpu", "V2Vm"),
        rules.GCP_KMS_KEY: ("kms", "CryptoKey"),
        rules.GCP_PROJECT_IAM_MEMBER: ("projects", "IAMMember"),
    }
    for token, (module, cls) in tokens.items():
        source = importlib.import_module(f"pulumi_gcp.{module}")
        resource_class = getattr(source, cls)
        text = open(importlib.import_module(resource_class.__module__).__file__ or "").read()  # noqa: SIM115
        assert f"'{token}'" in text, token


def test_gpu_and_tpu_fleets_pass_every_rule() -> None:
    assert check(gpu_fleet()) == []
    assert check(tpu_fleet()) == []
    assert plain_check(gpu_fleet()) == [], "plain dicts (fleetforge plan) read the same"


def test_without_any_customer_key_google_managed_encryption_passes() -> None:
    def drop_keys(props: dict[str, Any]) -> None:
        props.pop("kmsKey", None)
        props.pop("encryption", None)
        for disk in props.get("disks", []):
            disk.pop("diskEncryptionKey", None)

    fleet = gpu_fleet()
    for type_ in (rules.GCP_TEMPLATE, rules.GCP_BUCKET, rules.GCP_LUSTRE):
        fleet = _changed(fleet, type_, drop_keys)
    assert check(fleet) == []


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


GPU_VIOLATIONS: list[tuple[str, str, str, Any]] = [
    ("no-public-ip", rules.GCP_TEMPLATE, "networkInterfaces.0.accessConfigs", [{"networkTier": "PREMIUM"}]),
    ("no-public-ip", rules.GCP_TEMPLATE, "networkInterfaces.4.accessConfigs", [{}]),
    (
        "no-public-ip",
        rules.GCP_TEMPLATE,
        "networkInterfaces.0.ipv6AccessConfigs",
        [{"networkTier": "PREMIUM"}],
    ),
    ("no-public-ip", rules.GCP_TEMPLATE, "networkInterfaces", []),
    ("gpu-terminate-on-maintenance", rules.GCP_TEMPLATE, "scheduling.onHostMaintenance", "MIGRATE"),
    ("gpu-terminate-on-maintenance", rules.GCP_TEMPLATE, "scheduling", None),
    ("required-tags", rules.GCP_TEMPLATE, "labels.dataset", None),
    ("required-tags", rules.GCP_BUCKET, "labels.owner", None),
    ("required-tags", rules.GCP_LUSTRE, "labels", None),
    ("gcp-service-account-least-privilege", rules.GCP_TEMPLATE, "serviceAccount", None),
    (
        "gcp-service-account-least-privilege",
        rules.GCP_TEMPLATE,
        "serviceAccount.email",
        "123456789-compute@developer.gserviceaccount.com",
    ),
    ("gcp-service-account-least-privilege", rules.GCP_PROJECT_IAM_MEMBER, "role", "roles/editor"),
    ("one-instance-type", rules.GCP_TEMPLATE, "machineType", None),
    ("gcs-bucket-protected", rules.GCP_BUCKET, "uniformBucketLevelAccess", False),
    ("gcs-bucket-protected", rules.GCP_BUCKET, "publicAccessPrevention", "inherited"),
    ("gcs-bucket-protected", rules.GCP_BUCKET, "publicAccessPrevention", None),
    ("gcs-bucket-protected", rules.GCP_BUCKET, "versioning.enabled", False),
    ("gcs-bucket-protected", rules.GCP_BUCKET, "versioning", None),
    ("gcp-cmek-everywhere", rules.GCP_TEMPLATE, "disks.0.diskEncryptionKey", None),
    ("gcp-cmek-everywhere", rules.GCP_BUCKET, "encryption", None),
    ("gcp-cmek-everywhere", rules.GCP_LUSTRE, "kmsKey", None),
    ("ssh-not-from-internet", rules.GCP_FIREWALL, "sourceRanges", ["0.0.0.0/0"]),
]


@pytest.mark.parametrize(
    ("rule", "type_", "path", "value"),
    GPU_VIOLATIONS,
    ids=[f"{r}:{t.rpartition(':')[2]}.{p}={v}" for r, t, p, v in GPU_VIOLATIONS],
)
def test_each_gpu_fleet_violation_fires_its_rule(rule: str, type_: str, path: str, value: Any) -> None:
    fired = _fired(_changed(gpu_fleet(), type_, _set(path, value)))
    assert rule in fired


TPU_VIOLATIONS: list[tuple[str, str, Any]] = [
    ("no-public-ip", "tpu.nodeSpecs.0.node.networkConfig.enableExternalIps", True),
    ("no-public-ip", "tpu.nodeSpecs.1.node.networkConfig.enableExternalIps", None),
    ("no-public-ip", "tpu.nodeSpecs.0.node.networkConfig", None),
    ("no-public-ip", "tpu.nodeSpecs", []),
    ("one-instance-type", "tpu.nodeSpecs.1.node.acceleratorType", "v5litepod-32"),
    ("one-instance-type", "tpu.nodeSpecs.0.node.acceleratorType", None),
]


@pytest.mark.parametrize(
    ("rule", "path", "value"), TPU_VIOLATIONS, ids=[f"{r}:{p}={v}" for r, p, v in TPU_VIOLATIONS]
)
def test_each_tpu_fleet_violation_fires_its_rule(rule: str, path: str, value: Any) -> None:
    assert rule in _fired(_changed(tpu_fleet(), rules.GCP_TPU_QUEUED, _set(path, value)))


def test_a_tpu_vm_with_external_ips_fires() -> None:
    vm = Resource(
        rules.GCP_TPU_VM,
        "tpu",
        {
            "acceleratorType": "v5litepod-8",
            "labels": dict(LABELS),
            "networkConfig": {"enableExternalIps": True},
        },
    )
    assert "no-public-ip" in _fired([vm])
    ok = Resource(vm.type, vm.name, {**vm.props, "networkConfig": {"enableExternalIps": False}})
    assert check([ok]) == []


def test_two_machine_types_make_a_mixed_fleet() -> None:
    fleet = gpu_fleet()
    second = Resource(rules.GCP_REGION_TEMPLATE, "other", {**fleet[0].props, "machineType": "a3-highgpu-8g"})
    violations = [v for v in check([*fleet, second]) if v.rule == "one-instance-type"]
    assert len(violations) == 1 and "a3-highgpu-8g" in violations[0].message
    assert "a3-megagpu-8g" in violations[0].message
    same = Resource(rules.GCP_REGION_TEMPLATE, "other", dict(fleet[0].props))
    assert check([*fleet, same]) == []


def test_a_gpu_and_a_tpu_fleet_in_one_stack_are_mixed() -> None:
    assert "one-instance-type" in _fired(gpu_fleet() + tpu_fleet())


def test_terminate_applies_to_gpu_families_and_attached_gpus_only() -> None:
    cpu = {"machineType": "n2-standard-8", "scheduling": {"onHostMaintenance": "MIGRATE"}}
    assert list(rules.gpu_vm_terminates_on_maintenance(rules.GCP_INSTANCE, cpu)) == []
    with_gpu = {**cpu, "guestAccelerators": [{"type": "nvidia-l4", "count": 1}]}
    assert list(rules.gpu_vm_terminates_on_maintenance(rules.GCP_INSTANCE, with_gpu))
    url = {"machineType": "zones/us-central1-a/machineTypes/a4-highgpu-8g", "scheduling": {}}
    assert list(rules.gpu_vm_terminates_on_maintenance(rules.GCP_INSTANCE, url))


def test_a_standalone_instance_boot_disk_without_the_key_fires() -> None:
    props: dict[str, Any] = {
        "machineType": "a3-megagpu-8g",
        "labels": dict(LABELS),
        "networkInterfaces": [{"network": "host-vpc"}],
        "bootDisk": {"initializeParams": {"image": "img"}},
        "scheduling": {"onHostMaintenance": "TERMINATE"},
        "serviceAccount": {"email": "n@p.iam.gserviceaccount.com"},
    }
    vm = Resource(rules.GCP_INSTANCE, "vm", props)
    key = Resource(rules.GCP_KMS_KEY, "key", {"keyRing": "ring", "labels": dict(LABELS)})
    assert check([vm]) == []
    assert "gcp-cmek-everywhere" in _fired([vm, key])
    keyed = Resource(vm.type, vm.name, {**props, "bootDisk": {**props["bootDisk"], "kmsKeySelfLink": KEY}})
    assert check([keyed, key]) == []


def test_iap_range_may_reach_ssh_but_its_neighbours_may_not() -> None:
    def firewall(ranges: list[str]) -> Resource:
        props = {
            "direction": "INGRESS",
            "allows": [{"protocol": "tcp", "ports": ["22"]}],
            "sourceRanges": ranges,
        }
        return Resource(rules.GCP_FIREWALL, "ssh", props)

    assert check([firewall([rules.GCP_IAP_RANGE])]) == []
    assert "ssh-not-from-internet" in _fired([firewall(["35.235.240.0/19"])])
    assert "ssh-not-from-internet" in _fired([firewall([rules.GCP_IAP_RANGE, "0.0.0.0/0"])])


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("gcp-*.yaml")))
def test_planned_gcp_examples_violate_nothing_and_a_changed_template_does(example: str) -> None:
    """The GCP component's real resources (planned under mocks), judged through CrossGuard's proxy."""
    from fleetforge.plan import plan_file

    planned = [Resource(r.type, r.name, r.inputs, id=r.id) for r in plan_file(EXAMPLES / example).resources]
    assert check(planned) == []
    if any(r.type == rules.GCP_TEMPLATE for r in planned):

        def open_to_the_internet(props: dict[str, Any]) -> None:
            props["networkInterfaces"][0]["accessConfigs"] = [{}]
            props["scheduling"]["onHostMaintenance"] = "MIGRATE"

        fired = _fired(_changed(planned, rules.GCP_TEMPLATE, open_to_the_internet))
        assert {"no-public-ip", "gpu-terminate-on-maintenance"} <= fired
    else:

        def external(props: dict[str, Any]) -> None:
            props["tpu"]["nodeSpecs"][0]["node"]["networkConfig"]["enableExternalIps"] = True

        assert "no-public-ip" in _fired(_changed(planned, rules.GCP_TPU_QUEUED, external))


def advise(resources: list[Resource]) -> list[Violation]:
    return rules.advise([crossguard(r) for r in resources])


def test_a_queued_resource_is_reported_as_running_as_the_default_compute_account() -> None:
    """pulumi-gcp's queued resource cannot name a service account, so every TPU VM of it runs as the
    project's default compute account (Editor unless removed): an advisory per slice, never a
    refusal, since no TPU fleet could comply."""
    reported = advise(tpu_fleet(slices=2))
    assert [(v.rule, v.type, v.name) for v in reported] == [
        ("gcp-tpu-default-service-account", rules.GCP_TPU_QUEUED, "tpu-v5e-64")
    ] * 2
    for i, v in enumerate(reported):
        assert v.message.startswith(f"tpu.nodeSpecs[{i}] (slice-{i}) runs as the project's default compute")
        assert "remove roles/editor from <project-number>-compute@developer.gserviceaccount.com" in v.message
        assert "--service-account" in v.message
    assert check(tpu_fleet()) == []  # mandatory rules: the TPU fleet still passes
    assert advise(gpu_fleet()) == []  # GPU nodes have the fleet's own account, judged by the mandatory rule


def test_a_queued_node_has_no_service_account_field_so_every_slice_is_reported() -> None:
    """pulumi_gcp's queued-resource node takes no service account (the rule used to read one that
    the provider never sends): every slice runs as the default compute account."""
    from pulumi_gcp.tpu import _inputs, outputs

    for cls in (outputs.V2QueuedResourceTpuNodeSpecNode, _inputs.V2QueuedResourceTpuNodeSpecNodeArgs):
        assert "serviceAccount" not in _getters(cls) and "service_account" not in inspect.getsource(cls)
    fleet = tpu_fleet()
    (queued,) = [r for r in fleet if r.type == rules.GCP_TPU_QUEUED]
    assert len(advise(fleet)) == len(queued.props["tpu"]["nodeSpecs"])


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("gcp-tpu-*.yaml")))
def test_planned_tpu_examples_are_advised_about_and_plan_with_the_stack_s_warning(example: str) -> None:
    from fleetforge.plan import plan_file
    from stacks.gcp_tpu import DEFAULT_ACCOUNT_WARNING

    plan = plan_file(EXAMPLES / example)
    planned = [Resource(r.type, r.name, r.inputs, id=r.id) for r in plan.resources]
    (queued,) = [r for r in planned if r.type == rules.GCP_TPU_QUEUED]
    slices = len(queued.props["tpu"]["nodeSpecs"])
    assert [v.rule for v in advise(planned)] == ["gcp-tpu-default-service-account"] * slices
    assert plan.violations == ()  # advisory: `fleetforge plan` still passes
    assert plan.warnings == (DEFAULT_ACCOUNT_WARNING,)  # and says so


def test_every_tpu_vm_network_config_is_judged() -> None:
    """V2Vm has networkConfig and a list networkConfigs: an external IP on any of them is refused."""
    vm = {
        "acceleratorType": "v5litepod-8",
        "networkConfig": {"enableExternalIps": False},
        "networkConfigs": [{"enableExternalIps": False}, {"enableExternalIps": True}],
    }
    found = [v.message for v in check([Resource(rules.GCP_TPU_VM, "vm", vm)]) if v.rule == "no-public-ip"]
    assert len(found) == 1 and "networkConfigs[1].enableExternalIps" in found[0]
    only_list = {"acceleratorType": "v5litepod-8", "networkConfigs": [{"enableExternalIps": False}]}
    assert [v for v in check([Resource(rules.GCP_TPU_VM, "vm", only_list)]) if v.rule == "no-public-ip"] == []
