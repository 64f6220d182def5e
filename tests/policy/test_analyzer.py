"""The pack under pulumi_policy's real analyzer: policy/__main__.py builds a real PolicyPack, and
its gRPC servicer's Analyze/AnalyzeStack are called with protobuf requests as the engine sends them.

Only the server is kept from starting (constructing PolicyPack would otherwise listen and block):
everything from the request's Struct to the proxies, the policies and the diagnostics is the
installed pulumi_policy's own code.
"""

from __future__ import annotations

import json
import runpy
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pulumi_policy.policy as analyzer
import pytest
from google.protobuf import struct_pb2
from pulumi.runtime import proto
from pulumi_policy.proxy import UNKNOWN_STRING_VALUE as UNKNOWN

from policy import rules
from tests.conftest import ROOT
from tests.stacks.plans import AWS_SKUS, on_demand, plan_of, spec_doc


class _ServerNotStarted(Exception):
    """Raised where PolicyPack would start its gRPC server."""


@pytest.fixture(scope="module")
def servicer() -> Iterator[Any]:
    made: list[Any] = []

    class Recording(analyzer._PolicyAnalyzerServicer):  # type: ignore[misc,name-defined]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            made.append(self)

    def no_server(*_: Any, **__: Any) -> None:
        raise _ServerNotStarted

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(analyzer, "_PolicyAnalyzerServicer", Recording)
        patch.setattr(analyzer.grpc, "server", no_server)
        with pytest.raises(_ServerNotStarted):
            runpy.run_path(str(Path(ROOT, "policy", "__main__.py")), run_name="__main__")
    (made_one,) = made
    yield made_one


def _struct(props: Mapping[str, Any]) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    struct.update(json.loads(json.dumps(props)))
    return struct


def _analyze(servicer: Any, type_: str, props: Mapping[str, Any], name: str = "r") -> list[tuple[str, str]]:
    request = proto.AnalyzeRequest(type=type_, properties=_struct(props), urn=f"urn:{name}", name=name)
    response = servicer.Analyze(request, None)
    return [(d.policyName, d.message) for d in response.diagnostics]


@pytest.mark.parametrize("sku", AWS_SKUS)
def test_the_projects_own_plans_pass_the_real_analyzer(servicer: Any, sku: str) -> None:
    for doc in (on_demand(sku), spec_doc(sku=sku)):
        plan = plan_of(doc)
        found = [d for r in plan.resources for d in _analyze(servicer, r.type, r.inputs, r.name)]
        assert found == []
        request = proto.AnalyzeStackRequest(
            resources=[
                # A stack policy sees each resource's outputs, which carry its id (a bucket's name).
                proto.AnalyzerResource(
                    type=r.type, properties=_struct({**r.inputs, "id": r.id}), urn=r.urn, name=r.name
                )
                for r in plan.resources
            ]
        )
        assert list(servicer.AnalyzeStack(request, None).diagnostics) == []


def test_an_inline_ssh_rule_open_to_the_internet_is_a_mandatory_violation(servicer: Any) -> None:
    group = {"ingress": [{"protocol": "tcp", "fromPort": 22, "toPort": 22, "cidrBlocks": ["0.0.0.0/0"]}]}
    request = proto.AnalyzeRequest(type=rules.SG, properties=_struct(group), urn="urn:g", name="g")
    (diagnostic,) = [
        d for d in servicer.Analyze(request, None).diagnostics if d.policyName != "required-tags"
    ]
    assert diagnostic.policyName == "ssh-not-from-internet"
    assert diagnostic.enforcementLevel == proto.EnforcementLevel.Value("MANDATORY")
    assert "inline ingress rule 0" in diagnostic.message and "0.0.0.0/0" in diagnostic.message


def test_the_broad_managed_policy_on_the_node_role_is_a_violation(servicer: Any) -> None:
    attachment = {"role": "node", "policyArn": "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore"}
    assert [p for p, _ in _analyze(servicer, rules.ROLE_POLICY_ATTACHMENT, attachment)] == [
        "node-role-least-privilege"
    ]


# --------------------------------------------------------------------------- preview: unknown values
#
# At preview the engine sends a value that depends on a resource not yet created as
# pulumi_policy's unknown sentinel; the real proxy raises on reading one, and pulumi_policy turns
# that into an advisory "can't run" for the whole policy. These send the sentinel as the engine does.

MANDATORY = proto.EnforcementLevel.Value("MANDATORY")
ADVISORY = proto.EnforcementLevel.Value("ADVISORY")
TAGS = {"owner": "o", "fleet": "f", "dataset": "d"}


def _diagnostics(response: Any, policy: str) -> list[tuple[int, str]]:
    return [(d.enforcementLevel, d.message) for d in response.diagnostics if d.policyName == policy]


def _stack(servicer: Any, *resources: tuple[str, str, Mapping[str, Any], Mapping[str, list[str]]]) -> Any:
    request = proto.AnalyzeStackRequest(
        resources=[
            proto.AnalyzerResource(
                type=type_,
                properties=_struct(props),
                urn=f"urn:{name}",
                name=name,
                propertyDependencies={
                    key: proto.AnalyzerPropertyDependencies(urns=urns) for key, urns in deps.items()
                },
            )
            for type_, name, props, deps in resources
        ]
    )
    return servicer.AnalyzeStack(request, None)


def _s3_bucket(
    versioning: str = "Enabled",
) -> list[tuple[str, str, Mapping[str, Any], Mapping[str, list[str]]]]:
    """A fresh stack's checkpoint bucket at preview: every companion's `bucket` (= bucket.id) unknown."""
    on_bucket = {"bucket": ["urn:ckpt"]}
    switches = ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls", "restrictPublicBuckets")
    kms = {"applyServerSideEncryptionByDefault": {"sseAlgorithm": "aws:kms", "kmsMasterKeyId": UNKNOWN}}
    return [
        (rules.BUCKET, "ckpt", {"bucketPrefix": "ckpt-", "tags": TAGS, "id": UNKNOWN}, {}),
        (rules.BUCKET_SSE, "sse", {"bucket": UNKNOWN, "rules": [kms]}, on_bucket),
        (rules.BUCKET_PAB, "pab", {"bucket": UNKNOWN, **dict.fromkeys(switches, True)}, on_bucket),
        (
            rules.BUCKET_VERSIONING,
            "v",
            {"bucket": UNKNOWN, "versioningConfiguration": {"status": versioning}},
            on_bucket,
        ),
        (rules.BUCKET_POLICY, "tls", {"bucket": UNKNOWN, "policy": UNKNOWN}, on_bucket),
    ]


def test_a_public_gcs_bucket_is_refused_before_it_is_created(servicer: Any) -> None:
    """Resource policies run before `up` creates a resource; stack policies only after."""
    bucket = {
        "name": "ckpt",
        "location": "US",
        "labels": TAGS,
        "uniformBucketLevelAccess": False,
        "publicAccessPrevention": "inherited",
        "versioning": {"enabled": False},
    }
    found = _analyze(servicer, rules.GCP_BUCKET, bucket)
    assert [p for p, _ in found] == ["gcs-bucket-protected"] * 3
    messages = " ".join(m for _, m in found)
    assert (
        "uniformBucketLevelAccess" in messages
        and "'enforced'" in messages
        and "versioning.enabled" in messages
    )


def test_s3_companions_are_matched_to_their_bucket_by_dependency_at_preview(servicer: Any) -> None:
    """On a fresh stack every companion's `bucket` is unknown; its dependency names the bucket."""
    good = _diagnostics(_stack(servicer, *_s3_bucket()), "bucket-protected")
    # Only the policy document (bucket ARNs inside) is unknown: that part alone waits, advisory.
    assert [level for level, _ in good] == [ADVISORY] and "bucket policy" in good[0][1]
    bad = _diagnostics(_stack(servicer, *_s3_bucket(versioning="Suspended")), "bucket-protected")
    assert [level for level, _ in bad] == [MANDATORY, ADVISORY]
    assert "versioning is not enabled" in bad[0][1]


def test_an_unknown_id_does_not_stop_the_stack_rules(servicer: Any) -> None:
    template = {"instanceType": "p5.48xlarge", "id": UNKNOWN}
    response = _stack(
        servicer,
        (rules.LAUNCH_TEMPLATE, "a", template, {}),
        (rules.LAUNCH_TEMPLATE, "b", {**template, "instanceType": "p4d.24xlarge"}, {}),
    )
    ((level, message),) = _diagnostics(response, "one-instance-type")
    assert level == MANDATORY and "mixes instance types" in message
    assert all(d.enforcementLevel == MANDATORY for d in response.diagnostics)


def test_an_unknown_nat_reference_is_matched_by_dependency(servicer: Any) -> None:
    address = {"tags": TAGS, "sku": {"name": "Standard"}, "id": UNKNOWN}
    nat = {"tags": TAGS, "publicIpAddresses": [{"id": UNKNOWN}]}
    response = _stack(
        servicer,
        (rules.AZURE_PUBLIC_IP, "nat-ip", address, {}),
        (rules.AZURE_PUBLIC_IP, "node-ip", address, {}),  # used by nothing: a node's own address
        (rules.AZURE_NAT_GATEWAY, "nat", nat, {"publicIpAddresses": ["urn:nat-ip"]}),
    )
    found = [d for d in response.diagnostics if d.policyName == "azure-public-ip-only-for-nat"]
    assert [(d.enforcementLevel, d.urn) for d in found] == [(MANDATORY, "urn:node-ip")]


def test_an_unknown_value_hides_no_other_violation_of_the_rule(servicer: Any) -> None:
    """Interface 0's setting is unknown at preview; interface 1 asks for a public IP regardless."""
    template = {
        "networkInterfaces": [
            {"deviceIndex": 0, "associatePublicIpAddress": UNKNOWN},
            {"deviceIndex": 1, "associatePublicIpAddress": "true"},
        ]
    }
    request = proto.AnalyzeRequest(
        type=rules.LAUNCH_TEMPLATE, properties=_struct(template), urn="urn:t", name="t"
    )
    found = _diagnostics(servicer.Analyze(request, None), "no-public-ip")
    assert [level for level, _ in found] == [MANDATORY, ADVISORY]
    assert "networkInterfaces[1].associatePublicIpAddress is true" in found[0][1]
    assert "networkInterfaces[0]" in found[1][1] and "during preview" in found[1][1]


def test_an_unknown_policy_document_waits_for_up(servicer: Any) -> None:
    request = proto.AnalyzeRequest(
        type=rules.ROLE_POLICY, properties=_struct({"role": "node", "policy": UNKNOWN}), urn="urn:p", name="p"
    )
    found = _diagnostics(servicer.Analyze(request, None), "node-role-least-privilege")
    assert [level for level, _ in found] == [ADVISORY]
