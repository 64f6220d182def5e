"""policy/__main__.py builds the CrossGuard pack from every rule. The real PolicyPack starts the
analyzer server and blocks, so a stand-in `pulumi_policy` module records what the pack is given."""

from __future__ import annotations

import ast
import importlib
import runpy
import sys
import types
from enum import Enum
from pathlib import Path
from typing import Any

import pytest

from policy import rules
from tests.conftest import ROOT
from tests.policy.crossguard import crossguard_props


class _Level(Enum):
    ADVISORY = "advisory"
    MANDATORY = "mandatory"


class _Policy:
    def __init__(
        self, name: str, description: str, validate: Any, enforcement_level: _Level | None = None, **_: Any
    ) -> None:
        self.name, self.description, self.validate = name, description, validate
        self.level = enforcement_level


class _Pack:
    made: list[_Pack] = []

    def __init__(self, name: str, policies: list[_Policy], enforcement_level: _Level | None = None) -> None:
        self.name, self.policies, self.level = name, policies, enforcement_level
        _Pack.made.append(self)


class _Args:
    def __init__(self, **fields: Any) -> None:
        self.property_dependencies: dict[str, list[Any]] = {}  # as a PolicyResource has
        self.__dict__.update(fields)


@pytest.fixture
def pack(monkeypatch: pytest.MonkeyPatch) -> _Pack:
    fake = types.ModuleType("pulumi_policy")
    for attr, value in {
        "EnforcementLevel": _Level,
        "PolicyPack": _Pack,
        "ReportViolation": object,
        "ResourceValidationArgs": _Args,
        "ResourceValidationPolicy": _Policy,
        "StackValidationArgs": _Args,
        "StackValidationPolicy": _Policy,
    }.items():
        setattr(fake, attr, value)
    proxy = importlib.import_module("pulumi_policy.proxy")  # the real one: its sentinels and error
    monkeypatch.setitem(sys.modules, "pulumi_policy", fake)
    monkeypatch.setitem(sys.modules, "pulumi_policy.proxy", proxy)
    _Pack.made.clear()
    runpy.run_path(str(Path(ROOT, "policy", "__main__.py")), run_name="__main__")
    (made,) = _Pack.made
    return made


def test_pack_holds_every_rule_mandatory_but_the_advisory_ones(pack: _Pack) -> None:
    assert pack.name == "fleetforge" and pack.level is _Level.MANDATORY
    assert [p.name for p in pack.policies] == [
        r.name for r in (*rules.RESOURCE_RULES, *rules.ADVISORY_RULES, *rules.STACK_RULES)
    ]
    advisory = {r.name for r in rules.ADVISORY_RULES}
    assert advisory == {"gcp-tpu-default-service-account"}
    # None: the pack's level (mandatory); the advisory rules say so themselves.
    assert {p.name: p.level for p in pack.policies} == {
        p.name: _Level.ADVISORY if p.name in advisory else None for p in pack.policies
    }


def test_the_advisory_tpu_rule_reports_a_queued_resource(pack: _Pack) -> None:
    tpu = next(p for p in pack.policies if p.name == "gcp-tpu-default-service-account")
    reported: list[str] = []
    props = crossguard_props(
        {"tpu": {"nodeSpecs": [{"nodeId": "slice-0", "node": {"acceleratorType": "v5p-64"}}]}}
    )
    tpu.validate(_Args(resource_type=rules.GCP_TPU_QUEUED, props=props), lambda m, u=None: reported.append(m))
    assert len(reported) == 1 and "default compute service account" in reported[0]


def test_resource_policy_reports_the_rule_messages(pack: _Pack) -> None:
    imds = next(p for p in pack.policies if p.name == "imdsv2-required")
    reported: list[tuple[str, str | None]] = []
    args = _Args(resource_type=rules.LAUNCH_TEMPLATE, props={"metadataOptions": {"httpTokens": "optional"}})
    imds.validate(args, lambda message, urn=None: reported.append((message, urn)))
    assert reported == [("metadataOptions.httpTokens is 'optional'; IMDSv2 needs 'required'", None)]
    reported.clear()
    imds.validate(
        _Args(resource_type=rules.LAUNCH_TEMPLATE, props={"metadataOptions": {"httpTokens": "required"}}),
        lambda m, u=None: reported.append((m, u)),
    )
    assert reported == []


def test_stack_policy_reports_against_the_culprit_urn(pack: _Pack) -> None:
    homogeneity = next(p for p in pack.policies if p.name == "one-instance-type")
    resources = [
        _Args(
            resource_type=rules.LAUNCH_TEMPLATE, name="a", props={"instanceType": "p5.48xlarge"}, urn="urn:a"
        ),
        _Args(resource_type=rules.LAUNCH_TEMPLATE, name="b", props={}, urn="urn:b"),
    ]
    reported: list[tuple[str, str | None]] = []
    homogeneity.validate(_Args(resources=resources), lambda m, u=None: reported.append((m, u)))
    assert [u for _, u in reported] == ["urn:b"]


def test_the_pack_reports_what_crossguard_props_hold(pack: _Pack) -> None:
    """The pack's validate sees props as the analyzer builds them; an inline rule is not missed."""
    ssh = next(p for p in pack.policies if p.name == "ssh-not-from-internet")
    reported: list[str] = []
    props = crossguard_props(
        {"ingress": [{"protocol": "tcp", "fromPort": 22, "toPort": 22, "cidrBlocks": ["0.0.0.0/0"]}]}
    )
    ssh.validate(_Args(resource_type=rules.SG, props=props), lambda m, u=None: reported.append(m))
    assert len(reported) == 1 and "inline ingress rule 0" in reported[0]
    reported.clear()
    props = crossguard_props(
        {"ingress": [{"protocol": "tcp", "fromPort": 22, "toPort": 22, "cidrBlocks": ["10.0.0.0/8"]}]}
    )
    ssh.validate(_Args(resource_type=rules.SG, props=props), lambda m, u=None: reported.append(m))
    assert reported == []


def test_stack_policies_read_proxied_resources(pack: _Pack) -> None:
    homogeneity = next(p for p in pack.policies if p.name == "one-instance-type")
    group = {
        "mixedInstancesPolicy": {
            "launchTemplate": {
                "overrides": [{"instanceType": "p5.48xlarge"}, {"instanceType": "p4d.24xlarge"}]
            }
        }
    }
    resources = [_Args(resource_type=rules.ASG, name="g", props=crossguard_props(group), urn="urn:g")]
    reported: list[str] = []
    homogeneity.validate(_Args(resources=resources), lambda m, u=None: reported.append(m))
    assert len(reported) == 1 and "p4d.24xlarge" in reported[0]


def test_the_pack_needs_nothing_but_the_standard_library_and_netpolicy() -> None:
    """The policy host runs the pack in its own venv (pulumi, pulumi-policy only): rules.py and what
    it imports from the checkout must not pull in fleetforge's dependencies."""
    allowed = set(sys.stdlib_module_names) | {"fleet"}
    for path, expected_local in (
        ("policy/rules.py", {"fleet.netpolicy"}),
        ("fleet/__init__.py", set()),
        ("fleet/netpolicy.py", set()),
    ):
        tree = ast.parse(Path(ROOT, path).read_text())
        imported = {
            node.module if isinstance(node, ast.ImportFrom) else alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.Import | ast.ImportFrom)
            for alias in node.names
        }
        imported.discard(None)
        assert {str(m).split(".")[0] for m in imported} <= allowed, path
        assert {m for m in imported if str(m).startswith("fleet")} == expected_local, path
