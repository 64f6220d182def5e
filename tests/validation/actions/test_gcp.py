"""gcp-recreate: real compute_v1 clients on anonymous credentials, their REST session mocked the
way google-cloud-compute's own unit tests do it, so the exact URL and JSON body are asserted."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from unittest import mock

import pytest
from google.auth import credentials as ga_credentials
from google.cloud import compute_v1

from tests.validation.actions.fakes import gcp_response, node
from validation.actions import GcpRecreate, NodeIdentifierError, run_actions

API = "https://compute.googleapis.com/compute/v1/projects/train-prod-42"
ZONAL = node(
    "gpu-01",
    gce_project="train-prod-42",
    gce_zone="us-central1-a",
    gce_instance="fleet-a3-x7k2",
    gce_mig="fleet-a3",
)
REGIONAL = node(
    "gpu-02",
    gce_project="train-prod-42",
    gce_zone="us-central1-b",
    gce_instance="fleet-a3-q9p1",
    gce_mig="fleet-a3-r",
    gce_mig_region="us-central1",
)
OTHER = node(
    "gpu-03",
    gce_project="train-prod-42",
    gce_zone="us-central1-a",
    gce_instance="fleet-a3-z0z0",
    gce_mig="fleet-a3",
)


def op(name: str, **extra: Any) -> dict[str, Any]:
    return {"kind": "compute#operation", "name": name, "status": "DONE", **extra}


@pytest.fixture
def clients() -> Iterator[tuple[GcpRecreate, mock.MagicMock]]:
    anonymous = ga_credentials.AnonymousCredentials()
    zonal = compute_v1.InstanceGroupManagersClient(credentials=anonymous, transport="rest")
    regional = compute_v1.RegionInstanceGroupManagersClient(credentials=anonymous, transport="rest")
    assert type(zonal.transport._session) is type(regional.transport._session)
    with mock.patch.object(type(zonal.transport._session), "request") as request:
        yield GcpRecreate(zonal_client=zonal, regional_client=regional, timeout_s=5), request


def sent(request: mock.MagicMock) -> list[tuple[str, str, Any]]:
    return [(c.args[0], c.args[1], json.loads(c.kwargs["data"])) for c in request.call_args_list]


def test_plan_names_client_method_and_request_body(clients: tuple[GcpRecreate, mock.MagicMock]) -> None:
    action, _ = clients
    zonal, regional = action.plan([ZONAL, REGIONAL])
    assert (zonal.calls[0].target, dict(zonal.calls[0].params)) == (
        "InstanceGroupManagersClient",
        {
            "project": "train-prod-42",
            "zone": "us-central1-a",
            "instance_group_manager": "fleet-a3",
            "instance_group_managers_recreate_instances_request_resource": {
                "instances": ["zones/us-central1-a/instances/fleet-a3-x7k2"]
            },
        },
    )
    assert (regional.calls[0].target, dict(regional.calls[0].params)) == (
        "RegionInstanceGroupManagersClient",
        {
            "project": "train-prod-42",
            "region": "us-central1",
            "instance_group_manager": "fleet-a3-r",
            "region_instance_group_managers_recreate_request_resource": {
                "instances": ["zones/us-central1-b/instances/fleet-a3-q9p1"]
            },
        },
    )


def test_apply_posts_recreate_instances_for_zonal_and_regional_groups(
    clients: tuple[GcpRecreate, mock.MagicMock],
) -> None:
    action, request = clients
    request.side_effect = [gcp_response(200, op("operation-1")), gcp_response(200, op("operation-2"))]
    report = run_actions([action], [ZONAL, REGIONAL], dry_run=False)
    assert report.ok, report.render()
    assert sent(request) == [
        (
            "POST",
            f"{API}/zones/us-central1-a/instanceGroupManagers/fleet-a3/recreateInstances",
            {"instances": ["zones/us-central1-a/instances/fleet-a3-x7k2"]},
        ),
        (
            "POST",
            f"{API}/regions/us-central1/instanceGroupManagers/fleet-a3-r/recreateInstances",
            {"instances": ["zones/us-central1-b/instances/fleet-a3-q9p1"]},
        ),
    ]
    assert report.results[0].done[0].result == "operation operation-1 done"


def test_http_error_and_failed_operation_are_reported_others_done(
    clients: tuple[GcpRecreate, mock.MagicMock],
) -> None:
    action, request = clients
    request.side_effect = [
        gcp_response(404, {"error": {"code": 404, "message": "The resource 'fleet-a3' was not found"}}),
        gcp_response(
            200,
            op(
                "operation-2",
                httpErrorStatusCode=400,
                httpErrorMessage="BAD REQUEST",
                error={
                    "errors": [{"code": "INVALID_USAGE", "message": "instance is not a member of the group"}]
                },
            ),
        ),
        gcp_response(200, op("operation-3")),
    ]
    report = run_actions([action], [ZONAL, REGIONAL, OTHER], dry_run=False)
    assert [(r.step.node, r.ok) for r in report.results] == [
        ("gpu-01", False),
        ("gpu-02", False),
        ("gpu-03", True),
    ]
    assert "NotFound" in report.results[0].detail and "was not found" in report.results[0].detail
    assert "instance is not a member of the group" in report.results[1].detail
    assert len(sent(request)) == 3 and not report.ok


def test_dry_run_sends_no_request(clients: tuple[GcpRecreate, mock.MagicMock]) -> None:
    action, request = clients
    report = run_actions([action], [ZONAL, REGIONAL], dry_run=True)
    assert request.call_count == 0
    assert "recreate_instances(project='train-prod-42'" in report.render()


def test_missing_identifiers_and_zone_outside_region(clients: tuple[GcpRecreate, mock.MagicMock]) -> None:
    action, request = clients
    stray = node(
        "gpu-05",
        gce_project="train-prod-42",
        gce_zone="europe-west4-a",
        gce_instance="fleet-a3-aa11",
        gce_mig="fleet-a3-r",
        gce_mig_region="us-central1",
    )
    with pytest.raises(NodeIdentifierError) as err:
        action.plan([node("gpu-04", gce_project="train-prod-42", gce_zone="us-central1-a"), stray])
    assert [(n, v) for n, v, _ in err.value.problems] == [
        ("gpu-04", "gce_instance"),
        ("gpu-04", "gce_mig"),
        ("gpu-05", "gce_mig_region"),
    ]
    assert "zone 'europe-west4-a' is not in this region" in str(err.value)
    assert request.call_count == 0
