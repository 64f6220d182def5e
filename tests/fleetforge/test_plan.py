"""`fleetforge plan`: the stack under mocks from the command line, with documented exit codes."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

import fleetforge.plan as planner
from fleetforge import exitcodes
from fleetforge.cli import main
from policy.rules import Violation
from tests.conftest import EXAMPLES
from tests.stacks.plans import spec_doc

P5 = str(EXAMPLES / "aws-p5-fleet.yaml")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _write(tmp_path: Path, doc: dict[str, Any]) -> str:
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


@pytest.fixture
def no_program(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Fails the test if the stack program is run (bad specs must stop before any resource)."""
    calls: list[Any] = []
    monkeypatch.setattr(planner, "_stack_program", lambda: calls.append("ran"))
    return calls


def test_json_lists_resources_outputs_and_no_violations(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "plan", P5, "--json")
    assert code == exitcodes.OK, err
    doc = json.loads(out)
    assert set(doc) == {"resources", "outputs", "placeholders", "violations"} and doc["violations"] == []
    assert all(set(r) == {"type", "name", "inputs"} for r in doc["resources"])
    types = {r["type"] for r in doc["resources"]}
    assert {
        "fleetforge:aws:Fleet",
        "aws:autoscaling/group:Group",
        "aws:ec2/launchTemplate:LaunchTemplate",
    } <= types
    assert [r["name"] for r in doc["resources"]] == sorted(r["name"] for r in doc["resources"])
    assert doc["outputs"]["fleet"]["size"] == 18 and doc["outputs"]["group"]["desired"] == 18


def test_table_names_every_resource_and_summarises(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "plan", P5)
    assert code == exitcodes.OK
    assert "llm-pretrain-p5-nodes" in out and "aws:fsx/lustreFileSystem:LustreFileSystem" in out
    assert "group: aws-autoscaling-group" in out and "resources, no policy violations" in out


def test_plan_twice_in_one_process_gives_the_same_plan() -> None:
    first, second = planner.plan_file(P5), planner.plan_file(P5)
    assert [r.as_json() for r in first.resources] == [r.as_json() for r in second.resources]
    assert first.outputs == second.outputs


def test_bad_spec_fails_like_spec_check_before_any_resource(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, no_program: list[Any]
) -> None:
    path = _write(
        tmp_path,
        spec_doc(
            storage={
                "filesystem": {"kind": "fsx-lustre", "capacity_gib": 1000, "throughput_mbps_per_tib": 250}
            }
        ),
    )
    code, out, err = run(capsys, "plan", path, "--json")
    assert code == exitcodes.DATA and out == ""
    assert path in err and "storage.filesystem.capacity_gib:" in err and "Traceback" not in err
    assert no_program == []


def test_spec_the_stack_cannot_provision_names_the_field(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, no_program: list[Any]
) -> None:
    path = _write(tmp_path, spec_doc(network={"vpc_id": "vpc-0abc1234def567890"}))
    code, _, err = run(capsys, "plan", path)
    assert code == exitcodes.DATA and "network.subnet_id: required with network.vpc_id" in err
    path = _write(tmp_path, spec_doc(network={"vpc_cidr": "10.0.0.0/24"}, nodes=400, spares=0))
    code, _, err = run(capsys, "plan", path)
    assert code == exitcodes.DATA and "network.vpc_cidr:" in err and "for 400 nodes" in err
    assert no_program == []


def test_onprem_is_refused_not_silently_planned(
    capsys: pytest.CaptureFixture[str], no_program: list[Any]
) -> None:
    code, out, err = run(capsys, "plan", str(EXAMPLES / "onprem-hgx-h100.yaml"))
    assert code == exitcodes.DATA and out == ""
    assert "cloud:" in err and "allowed here: aws, gcp, azure" in err
    assert no_program == []


def test_missing_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(capsys, "plan", str(tmp_path / "nope.yaml"))
    assert code == exitcodes.NO_INPUT and "no such file" in err


def test_missing_pulumi_names_the_cloud_extra(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, no_program: list[Any]
) -> None:
    monkeypatch.setitem(sys.modules, "pulumi_aws", None)  # makes `import pulumi_aws` fail
    code, _, err = run(capsys, "plan", P5)
    assert code == exitcodes.UNAVAILABLE and "'cloud' extra" in err and "pulumi_aws" in err
    assert no_program == []


def test_policy_violations_exit_1_and_are_listed(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    found = [
        Violation(
            "imdsv2-required", "aws:ec2/launchTemplate:LaunchTemplate", "lt", "httpTokens is 'optional'"
        )
    ]
    monkeypatch.setattr(planner, "check", lambda resources: found if list(resources) else [])
    code, out, err = run(capsys, "plan", P5, "--json")
    assert code == exitcodes.REJECTED
    assert json.loads(out)["violations"] == [
        {
            "rule": "imdsv2-required",
            "type": "aws:ec2/launchTemplate:LaunchTemplate",
            "name": "lt",
            "message": "httpTokens is 'optional'",
        }
    ]
    assert "[imdsv2-required]" in err and "1 policy violation(s)" in err


def test_values_the_mocks_made_up_are_marked_as_placeholders(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "plan", P5, "--json")
    assert code == exitcodes.OK
    doc = json.loads(out)
    marked = set(doc["placeholders"])
    # The bucket name, FSx DNS name and group name are the cloud's to assign: the mocks made them up.
    assert {"checkpoints.uri", "storage.mount_source", "group.name"} <= marked
    # What the spec and catalog decide is real, never a placeholder.
    assert not {p for p in marked if p.startswith("fleet.") or p.startswith("fabric.")}
    code, out, _ = run(capsys, "plan", P5)
    assert "placeholders (made up by the mocks" in out and "checkpoints.uri" in out
