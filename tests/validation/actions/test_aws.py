"""aws-unhealthy: SetInstanceHealth with exact parameters, checked by botocore's Stubber."""

from __future__ import annotations

from collections.abc import Iterator

import boto3
import pytest
from botocore.stub import Stubber

from tests.validation.actions.fakes import node
from validation.actions import AwsSetUnhealthy, NodeIdentifierError, run_actions

ONE = node(
    "gpu-01",
    "gemm_bf16_tflops 512 < 700 (floor)",
    ec2_instance_id="i-0123456789abcdef0",
    aws_region="us-east-1",
)
TWO = node("gpu-02", ec2_instance_id="i-0fedcba9876543210", ec2_availability_zone="us-west-2b")
THREE = node("gpu-03", ec2_instance_id="i-0aaaabbbbccccdddd", aws_region="us-east-1")


def expected(instance_id: str) -> dict[str, object]:
    return {"InstanceId": instance_id, "HealthStatus": "Unhealthy", "ShouldRespectGracePeriod": False}


@pytest.fixture
def stubbed(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Stubber]]:
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # never ask an instance role
    # Real boto3 clients; the Stubber answers at before-call, ahead of signing, so no credentials.
    stubs: dict[str, Stubber] = {}
    for region in ("us-east-1", "us-west-2"):
        client = boto3.session.Session(region_name=region).client("autoscaling")
        stubs[region] = Stubber(client)
        stubs[region].activate()
    yield stubs
    for stub in stubs.values():
        stub.deactivate()


def action(stubs: dict[str, Stubber]) -> AwsSetUnhealthy:
    return AwsSetUnhealthy(client_for_region=lambda region: stubs[region].client)


def test_plan_is_the_exact_call_and_region(stubbed: dict[str, Stubber]) -> None:
    steps = action(stubbed).plan([ONE, TWO])
    assert [(s.calls[0].method, dict(s.calls[0].params), dict(s.calls[0].scope)) for s in steps] == [
        ("set_instance_health", expected("i-0123456789abcdef0"), {"region": "us-east-1"}),
        ("set_instance_health", expected("i-0fedcba9876543210"), {"region": "us-west-2"}),
    ]
    assert steps[0].reasons == ("gemm_bf16_tflops 512 < 700 (floor)",)
    assert (
        "set_instance_health(InstanceId='i-0123456789abcdef0', HealthStatus='Unhealthy', "
        in steps[0].describe()
    )


def test_apply_sends_exactly_the_planned_parameters(stubbed: dict[str, Stubber]) -> None:
    stubbed["us-east-1"].add_response("set_instance_health", {}, expected("i-0123456789abcdef0"))
    stubbed["us-west-2"].add_response("set_instance_health", {}, expected("i-0fedcba9876543210"))
    report = run_actions([action(stubbed)], [ONE, TWO], dry_run=False)
    assert report.ok, report.render()
    assert [r.step.node for r in report.results] == ["gpu-01", "gpu-02"]
    for stub in stubbed.values():
        stub.assert_no_pending_responses()


def test_one_failing_node_is_reported_and_the_others_still_done(stubbed: dict[str, Stubber]) -> None:
    east = stubbed["us-east-1"]
    east.add_response("set_instance_health", {}, expected("i-0123456789abcdef0"))
    east.add_client_error(
        "set_instance_health",
        service_error_code="ValidationError",
        service_message="Instance Id not found - No managed instance found for instance ID: i-0aaaabbbbccccdddd",
        http_status_code=400,
        expected_params=expected("i-0aaaabbbbccccdddd"),
    )
    stubbed["us-west-2"].add_response("set_instance_health", {}, expected("i-0fedcba9876543210"))
    report = run_actions([action(stubbed)], [ONE, THREE, TWO], dry_run=False)
    assert not report.ok
    assert [(r.step.node, r.ok) for r in report.results] == [
        ("gpu-01", True),
        ("gpu-03", False),
        ("gpu-02", True),
    ]
    failed = report.failed[0]
    assert "ValidationError" in failed.detail and "No managed instance found" in failed.detail
    assert "FAILED: aws-unhealthy gpu-03" in report.render()
    for stub in stubbed.values():
        stub.assert_no_pending_responses()


def test_dry_run_sends_nothing(stubbed: dict[str, Stubber]) -> None:
    # No responses queued: any request would raise inside the Stubber.
    report = run_actions([action(stubbed)], [ONE, TWO], dry_run=True)
    assert report.ok and report.results == ()
    assert len(report.steps) == 2 and report.render().startswith("dry run: 2 step(s) would run")
    for stub in stubbed.values():
        stub.assert_no_pending_responses()


def test_missing_or_malformed_ids_name_the_node_and_host_var(stubbed: dict[str, Stubber]) -> None:
    bad = [
        node("gpu-07", aws_region="us-east-1"),
        node("gpu-08", ec2_instance_id="i-0123456789abcdef0"),
        node("gpu-09", ec2_instance_id="vm-12", aws_region="us-east-1"),
    ]
    with pytest.raises(NodeIdentifierError) as err:
        action(stubbed).plan([ONE, *bad])
    assert err.value.problems == [
        ("gpu-07", "ec2_instance_id", "aws-unhealthy: missing"),
        ("gpu-08", "aws_region", "aws-unhealthy: missing (or set ec2_availability_zone)"),
        (
            "gpu-09",
            "ec2_instance_id",
            "aws-unhealthy: 'vm-12' is not an EC2 instance id like i-0123456789abcdef0",
        ),
    ]
    assert "node 'gpu-07'" in str(err.value) and "host var 'ec2_instance_id'" in str(err.value)
