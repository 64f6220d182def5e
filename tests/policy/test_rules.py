"""Policy rules on real plans (no violations) and on deliberately bad inputs (each rule fires).

`check` here judges resources as CrossGuard hands them (pulumi_policy's own proxies, see
crossguard.py); `plain_check` as `fleetforge plan` does (plain dicts). Both must agree.
"""

from __future__ import annotations

import copy
import json
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


# --------------------------------------------------------------------------- SSH sources, every cloud

SSH_TCP = {"protocol": "tcp", "fromPort": 22, "toPort": 22}
WIDE_PUBLIC = ["0.0.0.0/0", "203.0.0.0/16", "198.51.100.0/23", "::/0", "2001:db8::/48", "::ffff:0:0/96"]
NARROW = ["10.0.0.0/8", "203.0.113.0/24", "fd00::/8", "2001:db8:1:2::/64"]


def _ssh_messages(resource: Resource) -> list[str]:
    return [str(v) for v in check([resource]) if v.rule == "ssh-not-from-internet"]


@pytest.mark.parametrize("cidr", WIDE_PUBLIC)
def test_an_inline_security_group_rule_is_judged_through_the_proxy(cidr: str) -> None:
    key = "ipv6CidrBlocks" if ":" in cidr else "cidrBlocks"
    group = Resource(rules.SG, "g", {"ingress": [{**SSH_TCP, "description": "admin", key: [cidr]}]})
    (message,) = _ssh_messages(group)
    assert "[ssh-not-from-internet]" in message and "inline ingress rule 0 ('admin')" in message
    assert repr(cidr) in message
    default = Resource(rules.DEFAULT_SG, "d", {"ingress": [{"protocol": "-1", key: [cidr]}]})
    assert len(_ssh_messages(default)) == 1


@pytest.mark.parametrize("cidr", NARROW)
def test_narrow_or_private_sources_pass_in_every_aws_form(cidr: str) -> None:
    v6 = ":" in cidr
    forms = [
        Resource(
            rules.SG, "g", {"ingress": [{**SSH_TCP, ("ipv6CidrBlocks" if v6 else "cidrBlocks"): [cidr]}]}
        ),
        Resource(
            rules.SG_RULE,
            "r",
            {"type": "ingress", **SSH_TCP, ("ipv6CidrBlocks" if v6 else "cidrBlocks"): [cidr]},
        ),
        Resource(
            rules.SG_INGRESS,
            "i",
            {"ipProtocol": "tcp", "fromPort": 22, "toPort": 22, ("cidrIpv6" if v6 else "cidrIpv4"): cidr},
        ),
    ]
    assert [m for f in forms for m in _ssh_messages(f)] == []


@pytest.mark.parametrize("cidr", ["203.0.0.0/16", "2001:db8::/32", "not-a-cidr"])
def test_wide_public_sources_fire_in_rule_resources_not_only_the_whole_internet(cidr: str) -> None:
    v6 = ":" in cidr
    legacy = Resource(
        rules.SG_RULE, "r", {"type": "ingress", **SSH_TCP, ("ipv6CidrBlocks" if v6 else "cidrBlocks"): [cidr]}
    )
    modern = Resource(
        rules.SG_INGRESS, "i", {"ipProtocol": "6", "fromPort": 0, "toPort": 65535, "cidrIpv4": cidr}
    )
    assert len(_ssh_messages(legacy)) == 1
    assert len(_ssh_messages(modern)) == 1


def test_a_bare_string_where_a_list_belongs_is_still_judged() -> None:
    group = Resource(rules.SG, "g", {"ingress": [{**SSH_TCP, "cidrBlocks": "0.0.0.0/0"}]})
    assert len(_ssh_messages(group)) == 1


def test_rules_not_reaching_ssh_pass() -> None:
    https = Resource(
        rules.SG,
        "g",
        {"ingress": [{"protocol": "tcp", "fromPort": 443, "toPort": 443, "cidrBlocks": ["0.0.0.0/0"]}]},
    )
    udp = Resource(
        rules.SG_INGRESS, "u", {"ipProtocol": "udp", "fromPort": 22, "toPort": 22, "cidrIpv4": "0.0.0.0/0"}
    )
    egress = Resource(rules.SG_RULE, "e", {"type": "egress", **SSH_TCP, "cidrBlocks": ["0.0.0.0/0"]})
    assert [m for r in (https, udp, egress) for m in _ssh_messages(r)] == []


@pytest.mark.parametrize(
    ("allows", "ranges", "fires"),
    [
        ([{"protocol": "tcp", "ports": ["22"]}], ["0.0.0.0/0"], True),
        # A public /20 (the IAP forwarding range beside it is allowed: test_gcp_rules.py).
        ([{"protocol": "tcp", "ports": ["20-30"]}], ["35.235.224.0/20"], True),
        ([{"protocol": "all"}], ["198.51.0.0/16"], True),
        ([{"protocol": "tcp", "ports": ["22"]}], ["10.128.0.0/9"], False),
        ([{"protocol": "tcp", "ports": ["443"]}], ["0.0.0.0/0"], False),
        ([{"protocol": "tcp", "ports": ["22"]}], [], True),  # no source: GCP applies 0.0.0.0/0
    ],
)
def test_gcp_firewall_sources_are_judged(allows: list[Any], ranges: list[str], fires: bool) -> None:
    firewall = Resource(
        rules.GCP_FIREWALL, "fw", {"direction": "INGRESS", "allows": allows, "sourceRanges": ranges}
    )
    assert bool(_ssh_messages(firewall)) is fires


@pytest.mark.parametrize(
    ("source", "ports", "fires"),
    [
        ("*", "22", True),
        ("Internet", "*", True),
        ("198.51.0.0/16", "20-25", True),
        ("VirtualNetwork", "22", False),
        ("10.0.0.0/8", "22", False),
        ("*", "443", False),
    ],
)
def test_azure_security_rules_are_judged(source: str, ports: str, fires: bool) -> None:
    rule = {
        "direction": "Inbound",
        "access": "Allow",
        "protocol": "Tcp",
        "destinationPortRange": ports,
        "sourceAddressPrefix": source,
    }
    assert bool(_ssh_messages(Resource(rules.AZURE_NSG_RULE, "r", rule))) is fires
    nsg = Resource(rules.AZURE_NSG, "nsg", {"securityRules": [{"name": "ssh", **rule}]})
    assert bool(_ssh_messages(nsg)) is fires


# --------------------------------------------------------------------------- node role least privilege

CORE = "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore"


def _doc(action: Any, resource: Any = "*") -> str:
    return json.dumps(
        {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": action, "Resource": resource}]}
    )


@pytest.mark.parametrize(
    "resource",
    [
        Resource(rules.ROLE_POLICY_ATTACHMENT, "a", {"role": "node", "policyArn": CORE}),
        Resource(
            rules.ROLE_POLICY_ATTACHMENT,
            "a",
            {"role": "node", "policyArn": CORE.replace(":aws:", ":aws-us-gov:")},
        ),
        Resource(
            rules.ROLE, "r", {"managedPolicyArns": [CORE], "tags": dict.fromkeys(rules.REQUIRED_TAGS, "x")}
        ),
        Resource(rules.ROLE_POLICY, "p", {"policy": _doc(["ssm:GetParameter*"])}),
        Resource(rules.ROLE_POLICY, "p", {"policy": _doc("ssm:*")}),
        Resource(
            rules.ROLE_POLICY,
            "p",
            {"policy": _doc(["SSM:GetParameters"], ["arn:aws:ssm:us-east-1:1:parameter/*"])},
        ),
        Resource(rules.ROLE_POLICY, "p", {"policy": "{not json"}),
        Resource(
            rules.ROLE,
            "r",
            {
                "inlinePolicies": [{"name": "x", "policy": _doc("*")}],
                "tags": dict.fromkeys(rules.REQUIRED_TAGS, "x"),
            },
        ),
    ],
    ids=[
        "core",
        "core-govcloud",
        "role-managed",
        "get-star",
        "ssm-star",
        "mixed-case",
        "unreadable",
        "role-inline",
    ],
)
def test_broad_node_permissions_fire(resource: Resource) -> None:
    assert [v.rule for v in check([resource])] == ["node-role-least-privilege"]


def test_the_planned_node_role_passes_and_a_scoped_parameter_read_would_too() -> None:
    plan = plan_of(spec_doc())
    roles = [
        r for r in _resources(plan) if r.type in {rules.ROLE, rules.ROLE_POLICY, rules.ROLE_POLICY_ATTACHMENT}
    ]
    assert len(roles) >= 2 and check(roles) == []
    scoped = Resource(
        rules.ROLE_POLICY,
        "p",
        {"policy": _doc("ssm:GetParameter", "arn:aws:ssm:us-east-1:1:parameter/fleet/x")},
    )
    assert check([scoped]) == []


# --------------------------------------------------------------------------- review findings

TAGS = {"owner": "o", "fleet": "f", "dataset": "d"}
EVERY_PARAMETER = json.dumps(
    {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": "ssm:GetParameter*", "Resource": "*"}],
    }
)
ALL_BUT_IAM = json.dumps({"Statement": [{"Effect": "Allow", "NotAction": "iam:*", "Resource": "*"}]})


def _rule_messages(rule: str, type_: str, props: dict[str, Any]) -> list[str]:
    return [v.message for v in check([Resource(type_, "r", props)]) if v.rule == rule]


def test_a_customer_managed_policy_document_is_judged() -> None:
    found = _rule_messages(
        "node-role-least-privilege", rules.IAM_POLICY, {"policy": EVERY_PARAMETER, "tags": TAGS}
    )
    assert len(found) == 1 and "every SSM parameter" in found[0]


@pytest.mark.parametrize("type_", [rules.ROLE_POLICY, rules.IAM_POLICY])
def test_allow_with_not_action_on_every_resource_is_broad(type_: str) -> None:
    found = _rule_messages("node-role-least-privilege", type_, {"policy": ALL_BUT_IAM, "tags": TAGS})
    assert len(found) == 1 and "NotAction" in found[0]


def test_exclusive_attachments_are_judged_and_untaggable() -> None:
    admin = {"roleName": "node", "policyArns": ["arn:aws:iam::aws:policy/AdministratorAccess"]}
    found = check([Resource(rules.ROLE_POLICY_ATTACHMENTS_EXCLUSIVE, "x", admin)])
    assert [v.rule for v in found] == ["node-role-least-privilege"] and "AdministratorAccess" in found[
        0
    ].message
    assert rules.ROLE_POLICY_ATTACHMENTS_EXCLUSIVE in rules.UNTAGGABLE


def test_an_instance_that_states_nothing_is_refused_as_a_launch_template_is() -> None:
    instance = {
        "ami": "ami-1",
        "instanceType": "p5.48xlarge",
        "tags": TAGS,
        "metadataOptions": {"httpTokens": "required"},
    }
    assert {v.rule for v in check([Resource(rules.INSTANCE, "i", instance)])} == {
        "no-public-ip",
        "encrypted-at-rest",
    }
    stated = {**instance, "associatePublicIpAddress": False, "rootBlockDevice": {"encrypted": True}}
    assert check([Resource(rules.INSTANCE, "i", stated)]) == []


@pytest.mark.parametrize(
    ("key", "value"), [("ipv6AddressCount", 1), ("ipv6Addresses", ["2600:1f18::1"]), ("primaryIpv6", "true")]
)
def test_ipv6_addresses_on_a_node_interface_are_refused(key: str, value: Any) -> None:
    plan = plan_of(spec_doc())
    found = [
        v
        for v in check(_with(plan, LT, _set(f"networkInterfaces.0.{key}", value)))
        if v.rule == "no-public-ip"
    ]
    assert len(found) == 1 and f"networkInterfaces[0].{key}" in found[0].message


def test_an_instance_with_ipv6_is_refused() -> None:
    instance = {"associatePublicIpAddress": False, "enablePrimaryIpv6": True, "ipv6AddressCount": 2}
    assert len(_rule_messages("no-public-ip", rules.INSTANCE, instance)) == 2


@pytest.mark.parametrize(
    ("type_", "props"),
    [
        (rules.SG_INGRESS, {"ipProtocol": "tcp", "fromPort": 22, "toPort": 22, "prefixListId": "pl-123"}),
        (rules.SG_RULE, {"type": "ingress", **SSH_TCP, "prefixListIds": ["pl-123"]}),
        (rules.SG, {"ingress": [{**SSH_TCP, "prefixListIds": ["pl-123"]}]}),
    ],
)
def test_ssh_from_a_prefix_list_is_judged_like_a_cidr(type_: str, props: dict[str, Any]) -> None:
    found = _rule_messages("ssh-not-from-internet", type_, props)
    assert len(found) == 1 and "pl-123" in found[0]


def test_a_bucket_without_a_tls_only_policy_is_refused() -> None:
    plan = plan_of(spec_doc())
    policy = one(plan, rules.BUCKET_POLICY)
    without = [r for r in _resources(plan) if r.name != policy.name]
    found = [v for v in check(without) if v.rule == "bucket-protected"]
    assert len(found) == 1 and "aws:SecureTransport" in found[0].message
    allows_http = _with(plan, rules.BUCKET_POLICY, _set("policy", json.dumps({"Statement": []})))
    assert [v.rule for v in check(allows_http)] == ["bucket-protected"]


def test_messages_name_the_property_and_what_is_allowed() -> None:
    plan = plan_of(spec_doc())
    public = _with(plan, LT, _set("networkInterfaces.0.associatePublicIpAddress", "true"))
    (message,) = [v.message for v in check(public) if v.rule == "no-public-ip"]
    assert "networkInterfaces[0].associatePublicIpAddress" in message and "allowed: false" in message
    plain = _with(plan, LT, _set("blockDeviceMappings.0.ebs.encrypted", "false"))
    (message,) = [v.message for v in check(plain) if v.rule == "encrypted-at-rest"]
    assert "blockDeviceMappings[0].ebs.encrypted" in message and "allowed: true" in message
