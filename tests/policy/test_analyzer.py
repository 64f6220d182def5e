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
