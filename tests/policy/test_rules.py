"""Policy rules on real plans (no violations) and on deliberately bad inputs (each rule fires).

`check` here judges resources as CrossGuard hands them (pulumi_policy's own proxies, see
crossguard.py); `plain_check` as `fleetforge plan` does (plain dicts). Both must agree.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from fleetforge.plan import Plan
from policy import rules
from policy.rules import Resource, Violation
from policy.rules import check as plain_check
from tests.policy.crossguard import crossguard, crossguard_props
from tests.stacks.plans import AWS_SKUS, BUCKET, LT, on_demand, one, plan_of, spec_doc

LT_TYPE = rules.LAUNCH_TEMPLATE


def check(resources: list[Resource]) -> list[Violation]:
    """The rules as the CrossGuard pack runs them: every resource's props through the real proxy."""
    return plain_check([crossguard(r) for r in resources])


def test_the_proxy_is_not_a_list_or_dict() -> None:
    """The premise of these tests: CrossGuard's values are neither list nor dict, numbers floats."""
    props = crossguard_props({"ingress": [{"cidrBlocks": ["0.0.0.0/0"], "fromPort": 22}]})
    assert not isinstance(props, dict)
    assert not isinstance(props["ingress"], list | tuple)
    assert props["ingress"][0]["fromPort"] == 22.0 and isinstance(props["ingress"][0]["fromPort"], float)


def _resources(plan: Plan) -> list[Resource]:
    return [Resource(r.type, r.name, r.inputs, id=r.id) for r in plan.resources]


def _rules_fired(resources: list[Resource]) -> set[str]:
    return {v.rule for v in check(resources)}


def _with(plan: Plan, type_: str, change: Any, suffix: str | None = None) -> list[Resource]:
    """The plan's resources with one resource's inputs changed by `change(inputs)`."""
    target = one(plan, type_, suffix)
    out = []
    for r in _resources(plan):
        if r.type == target.type and r.name == target.name:
            props = copy.deepcopy(dict(r.props))
            change(props)
            r = Resource(r.type, r.name, props, id=r.id)
        out.append(r)
    return out


@pytest.mark.parametrize("sku", AWS_SKUS)
def test_planned_fleets_violate_nothing(sku: str) -> None:
    for doc in (on_demand(sku), spec_doc(sku=sku)):
        assert plain_check(_resources(plan_of(doc))) == []
        assert check(_resources(plan_of(doc))) == [], "CrossGuard's proxies must read the same plan"


def test_variants_violate_nothing() -> None:
    for doc in (
        spec_doc(capacity={"type": "spot"}),
        spec_doc(network={"vpc_id": "vpc-0abc1234def567890", "subnet_id": "subnet-0abc1234def567890"}),
        spec_doc(storage={"checkpoints": None}),
        spec_doc(tags={"owner": "ml-platform"}),  # no dataset: tagged dataset=unspecified
    ):
        assert plan_of(doc).violations == ()
        assert check(_resources(plan_of(doc))) == []


# --------------------------------------------------------------------------- each rule fires


def _set(path: str, value: Any) -> Any:
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


BAD_LAUNCH_TEMPLATES = [
    ("no-public-ip", "networkInterfaces.0.associatePublicIpAddress", "true"),
    ("no-public-ip", "networkInterfaces.0.associatePublicIpAddress", None),
    ("no-public-ip", "networkInterfaces.3.associatePublicIpAddress", "true"),
    ("no-public-ip", "networkInterfaces", []),
    ("imdsv2-required", "metadataOptions.httpTokens", "optional"),
    ("imdsv2-required", "metadataOptions", None),
    ("encrypted-at-rest", "blockDeviceMappings.0.ebs.encrypted", "false"),
    ("encrypted-at-rest", "blockDeviceMappings", []),
    ("required-tags", "tags.dataset", None),
    ("required-tags", "tagSpecifications", []),
    ("one-instance-type", "instanceType", None),
]


@pytest.mark.parametrize(
    ("rule", "path", "value"), BAD_LAUNCH_TEMPLATES, ids=[f"{r}:{p}={v}" for r, p, v in BAD_LAUNCH_TEMPLATES]
)
def test_launch_template_violations_fire(rule: str, path: str, value: Any) -> None:
    plan = plan_of(spec_doc())
    assert rule in _rules_fired(_with(plan, LT_TYPE, _set(path, value)))


def test_public_subnet_mapping_fires() -> None:
    plan = plan_of(spec_doc())
    bad = _with(plan, rules.SUBNET, _set("mapPublicIpOnLaunch", True), "public")
    assert "no-public-ip" in _rules_fired(bad)


def test_unencrypted_file_system_fires() -> None:
    plan = plan_of(spec_doc())
    assert "encrypted-at-rest" in _rules_fired(_with(plan, rules.LUSTRE, _set("kmsKeyId", None)))


@pytest.mark.parametrize(
    "rule_props",
    [
        {"ipProtocol": "tcp", "fromPort": 22, "toPort": 22, "cidrIpv4": "0.0.0.0/0"},
        {"ipProtocol": "tcp", "fromPort": 0, "toPort": 1024, "cidrIpv4": "0.0.0.0/0"},
        {"ipProtocol": "-1", "cidrIpv6": "::/0"},
    ],
)
def test_ssh_from_the_internet_fires(rule_props: dict[str, Any]) -> None:
    plan = plan_of(spec_doc())

    def change(props: dict[str, Any]) -> None:
        props.pop("cidrIpv4", None)
        props.update(rule_props)

    assert "ssh-not-from-internet" in _rules_fired(_with(plan, rules.SG_INGRESS, change, "ssh-from-cidr"))


def test_ssh_from_the_internet_fires_in_legacy_rule_forms() -> None:
    legacy = Resource(
        rules.SG_RULE,
        "r",
        {"type": "ingress", "protocol": "tcp", "fromPort": 22, "toPort": 22, "cidrBlocks": ["0.0.0.0/0"]},
    )
    inline = Resource(
        rules.SG,
        "g",
        {
            "ingress": [{"protocol": "tcp", "fromPort": 22, "toPort": 22, "cidrBlocks": ["0.0.0.0/0"]}],
            "tags": {},
        },
    )
    assert {v.rule for v in check([legacy])} == {"ssh-not-from-internet"}
    assert "ssh-not-from-internet" in {v.rule for v in check([inline])}
    named = Resource(
        rules.SG_INGRESS, "ok", {"ipProtocol": "tcp", "fromPort": 22, "toPort": 22, "cidrIpv4": "10.0.0.0/8"}
    )
    assert "ssh-not-from-internet" not in {v.rule for v in check([named])}


def test_group_without_propagated_tags_fires() -> None:
    plan = plan_of(spec_doc())

    def change(props: dict[str, Any]) -> None:
        for tag in props["tags"]:
            tag["propagateAtLaunch"] = False

    bad = _with(plan, rules.ASG, change)
    assert any(v.rule == "required-tags" and v.type == rules.ASG for v in check(bad))


def test_required_tags_fail_closed_for_unknown_aws_types_and_skip_others() -> None:
    unknown = Resource("aws:ec2/somethingNew:SomethingNew", "n", {})
    assert [v.rule for v in check([unknown])] == ["required-tags"]
    assert (
        check(
            [
                Resource("aws:iam/rolePolicy:RolePolicy", "p", {"policy": '{"Statement": []}'}),
                Resource("pulumi:providers:aws", "a", {}),
            ]
        )
        == []
    )


@pytest.mark.parametrize(
    ("type_", "path", "value", "fragment"),
    [
        (rules.BUCKET_SSE, "rules.0.applyServerSideEncryptionByDefault.sseAlgorithm", "AES256", "SSE-KMS"),
        (rules.BUCKET_PAB, "restrictPublicBuckets", False, "restrictPublicBuckets"),
        (rules.BUCKET_VERSIONING, "versioningConfiguration.status", "Suspended", "versioning"),
        (rules.BUCKET_SSE, "bucket", "someone-elses-bucket", "SSE-KMS"),
    ],
)
def test_unprotected_bucket_fires(type_: str, path: str, value: Any, fragment: str) -> None:
    plan = plan_of(spec_doc())
    found = [v for v in check(_with(plan, type_, _set(path, value))) if v.rule == "bucket-protected"]
    assert len(found) == 1 and found[0].type == BUCKET and fragment in found[0].message


def test_mixed_instance_types_fire_once_for_the_stack() -> None:
    plan = plan_of(spec_doc())
    resources = _resources(plan)
    lt = next(r for r in resources if r.type == LT)
    other = Resource(LT, "second-lt", {**lt.props, "instanceType": "p4d.24xlarge"}, id="lt-2")
    found = [v for v in check([*resources, other]) if v.rule == "one-instance-type"]
    assert len(found) == 1 and "p4d.24xlarge" in found[0].message and "p5.48xlarge" in found[0].message
    override = Resource(
        rules.ASG,
        "mixed",
        {
            "tags": [{"key": k, "value": "x", "propagateAtLaunch": True} for k in rules.REQUIRED_TAGS],
            "mixedInstancesPolicy": {
                "launchTemplate": {
                    "overrides": [{"instanceType": "p5.48xlarge"}, {"instanceType": "p5e.48xlarge"}]
                }
            },
        },
    )
    assert [v.rule for v in check([override])] == ["one-instance-type"]
