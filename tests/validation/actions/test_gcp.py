"""gcp-recreate: real compute_v1 clients on anonymous credentials, their REST session mocked the
way google-cloud-compute's own unit tests do it, so the exact URL and JSON body are asserted."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from dataclasses import replace
from typing import Any
from unittest import mock

import pytest
import requests
from google.auth import credentials as ga_credentials
from google.cloud import compute_v1

from tests.validation.actions.fakes import gcp_response, node
from validation.actions import GcpRecreate, NodeIdentifierError, RejectedNode, run_actions

API = "https://compute.googleapis.com/compute/v1/projects/train-prod-42"
ZONAL = node(
    "gpu-01",
    gce_project="train-prod-42",
    gce_zone="us-central1-a",
    gce_instance="fleet-a3-x7k2",
    gce_instance_id="8391620187735046721",
    gce_mig="fleet-a3",
)
REGIONAL = node(
    "gpu-02",
    gce_project="train-prod-42",
    gce_zone="us-central1-b",
    gce_instance="fleet-a3-q9p1",
    gce_instance_id="5102773319845522174",
    gce_mig="fleet-a3-r",
    gce_mig_region="us-central1",
)
OTHER = node(
    "gpu-03",
    gce_project="train-prod-42",
    gce_zone="us-central1-a",
    gce_instance="fleet-a3-z0z0",
    gce_instance_id="2277461903518804236",
    gce_mig="fleet-a3",
)


def op(name: str, **extra: Any) -> dict[str, Any]:
    return {"kind": "compute#operation", "name": name, "status": "DONE", **extra}


def instance(judged: RejectedNode, instance_id: str | None = None) -> requests.Response:
    """instances.get of the node's instance: the judged machine, or the VM now under its name."""
    ids = judged.ids
    body = {"kind": "compute#instance", "name": ids.gce_instance, "id": instance_id or ids.gce_instance_id}
    return gcp_response(200, body)


def instance_url(judged: RejectedNode) -> str:
    return f"{API}/zones/{judged.ids.gce_zone}/instances/{judged.ids.gce_instance}"


@pytest.fixture
def clients() -> Iterator[tuple[GcpRecreate, mock.MagicMock]]:
    anonymous = ga_credentials.AnonymousCredentials()
    zonal = compute_v1.InstanceGroupManagersClient(credentials=anonymous, transport="rest")
    regional = compute_v1.RegionInstanceGroupManagersClient(credentials=anonymous, transport="rest")
    instances = compute_v1.InstancesClient(credentials=anonymous, transport="rest")
    assert type(zonal.transport._session) is type(regional.transport._session)
    assert type(zonal.transport._session) is type(instances.transport._session)
    with mock.patch.object(type(zonal.transport._session), "request") as request:
        yield (
            GcpRecreate(
                zonal_client=zonal, regional_client=regional, timeout_s=5, instances_client=instances
            ),
            request,
        )


def sent(request: mock.MagicMock) -> list[tuple[str, str, Any]]:
    return [
        (c.args[0], c.args[1], json.loads(c.kwargs["data"]) if "data" in c.kwargs else None)
        for c in request.call_args_list
    ]


def test_plan_names_client_method_and_request_body(clients: tuple[GcpRecreate, mock.MagicMock]) -> None:
    action, _ = clients
    zonal, regional = action.plan([ZONAL, REGIONAL])
    assert (zonal.calls[0].target, zonal.calls[0].method, dict(zonal.calls[0].params)) == (
        "InstancesClient",
        "get",
        {"project": "train-prod-42", "zone": "us-central1-a", "instance": "fleet-a3-x7k2"},
    )
    assert zonal.calls[0].scope == {"judged_id": "8391620187735046721"}
    assert (zonal.calls[1].target, dict(zonal.calls[1].params)) == (
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
    assert (regional.calls[1].target, dict(regional.calls[1].params)) == (
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


def test_apply_checks_the_instance_then_posts_recreate_instances_for_zonal_and_regional_groups(
    clients: tuple[GcpRecreate, mock.MagicMock],
) -> None:
    action, request = clients
    request.side_effect = [
        instance(ZONAL),
        gcp_response(200, op("operation-1")),
        instance(REGIONAL),
        gcp_response(200, op("operation-2")),
    ]
    report = run_actions([action], [ZONAL, REGIONAL], dry_run=False)
    assert report.ok, report.render()
    assert sent(request) == [
        ("GET", instance_url(ZONAL), None),
        (
            "POST",
            f"{API}/zones/us-central1-a/instanceGroupManagers/fleet-a3/recreateInstances",
            {"instances": ["zones/us-central1-a/instances/fleet-a3-x7k2"]},
        ),
        ("GET", instance_url(REGIONAL), None),
        (
            "POST",
            f"{API}/regions/us-central1/instanceGroupManagers/fleet-a3-r/recreateInstances",
            {"instances": ["zones/us-central1-b/instances/fleet-a3-q9p1"]},
        ),
    ]
    assert [o.result for o in report.results[0].done] == [
        "id 8391620187735046721: the machine judged",
        "operation operation-1 done",
    ]


def test_a_rerun_does_not_recreate_an_instance_already_recreated(
    clients: tuple[GcpRecreate, mock.MagicMock],
) -> None:
    # The first act recreated gpu-01 and failed on gpu-02; exit 75 says retry. gpu-01's name now
    # shows a fresh VM nobody judged: the retry must leave it alone and still recreate gpu-02.
    action, request = clients
    request.side_effect = [
        instance(ZONAL, instance_id="6650092231874416510"),
        instance(REGIONAL),
        gcp_response(200, op("operation-2")),
    ]
    report = run_actions([action], [ZONAL, REGIONAL], dry_run=False)
    assert [(r.step.node, r.ok) for r in report.results] == [("gpu-01", False), ("gpu-02", True)]
    detail = report.results[0].detail
    assert detail.startswith("StepFailed: refused, nothing recreated: instance 'fleet-a3-x7k2'")
    assert "now id 6650092231874416510, not 8391620187735046721" in detail
    assert report.results[0].done == ()
    assert [(m, u) for m, u, _ in sent(request)] == [
        ("GET", instance_url(ZONAL)),
        ("GET", instance_url(REGIONAL)),
        ("POST", f"{API}/regions/us-central1/instanceGroupManagers/fleet-a3-r/recreateInstances"),
    ]


def test_http_error_and_failed_operation_are_reported_others_done(
    clients: tuple[GcpRecreate, mock.MagicMock],
) -> None:
    action, request = clients
    request.side_effect = [
        instance(ZONAL),
        gcp_response(404, {"error": {"code": 404, "message": "The resource 'fleet-a3' was not found"}}),
        instance(REGIONAL),
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
        instance(OTHER),
        gcp_response(200, op("operation-3")),
    ]
    report = run_actions([action], [ZONAL, REGIONAL, OTHER], dry_run=False)
    assert [(r.step.node, r.ok) for r in report.results] == [
        ("gpu-01", False),
        ("gpu-02", False),
        ("gpu-03", True),
    ]
    assert "NotFound" in report.results[0].detail and "was not found" in report.results[0].detail
    assert "(after 1 of 2 calls succeeded)" in report.results[0].detail
    assert "instance is not a member of the group" in report.results[1].detail
    assert len(sent(request)) == 6 and not report.ok


def test_an_unreachable_api_fails_each_step_and_the_act_goes_on() -> None:
    # The real clients on a port nothing listens on: requests raises its ConnectionError (an
    # OSError the SDK does not wrap); it must fail that node's step, not abort the other nodes.
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        endpoint = {"api_endpoint": f"http://127.0.0.1:{held.getsockname()[1]}"}
        anonymous = ga_credentials.AnonymousCredentials()
        action = GcpRecreate(
            zonal_client=compute_v1.InstanceGroupManagersClient(
                credentials=anonymous, transport="rest", client_options=endpoint
            ),
            instances_client=compute_v1.InstancesClient(
                credentials=anonymous, transport="rest", client_options=endpoint
            ),
            timeout_s=5,
        )
        report = run_actions([action], [ZONAL, OTHER], dry_run=False)
    assert [(r.step.node, r.ok, r.done) for r in report.results] == [
        ("gpu-01", False, ()),
        ("gpu-03", False, ()),
    ]
    assert all(r.detail.startswith("ConnectionError: ") for r in report.results)


def test_dry_run_sends_no_request(clients: tuple[GcpRecreate, mock.MagicMock]) -> None:
    action, request = clients
    report = run_actions([action], [ZONAL, REGIONAL], dry_run=True)
    assert request.call_count == 0
    text = report.render()
    assert "recreate fleet-a3-x7k2 (id 8391620187735046721) through zonal group 'fleet-a3'" in text
    assert (
        "InstancesClient.get(project='train-prod-42', zone='us-central1-a', instance='fleet-a3-x7k2')" in text
    )
    assert "recreate_instances(project='train-prod-42'" in text
    assert "if get returns an id other than 8391620187735046721" in text


def test_missing_identifiers_and_zone_outside_region(clients: tuple[GcpRecreate, mock.MagicMock]) -> None:
    action, request = clients
    stray = node(
        "gpu-05",
        gce_project="train-prod-42",
        gce_zone="europe-west4-a",
        gce_instance="fleet-a3-aa11",
        gce_instance_id="1234567890123",
        gce_mig="fleet-a3-r",
        gce_mig_region="us-central1",
    )
    with pytest.raises(NodeIdentifierError) as err:
        action.plan([node("gpu-04", gce_project="train-prod-42", gce_zone="us-central1-a"), stray])
    assert [(n, v) for n, v, _ in err.value.problems] == [
        ("gpu-04", "gce_instance"),
        ("gpu-04", "gce_instance_id"),
        ("gpu-04", "gce_mig"),
        ("gpu-05", "gce_mig_region"),
    ]
    assert "zone 'europe-west4-a' is not in this region" in str(err.value)
    assert request.call_count == 0


def test_the_judged_instance_id_is_required(clients: tuple[GcpRecreate, mock.MagicMock]) -> None:
    # Without it a rerun could not tell the judged machine from a fresh VM under its name.
    action, request = clients
    bare = replace(ZONAL, name="gpu-06", ids=replace(ZONAL.ids, gce_instance_id=None))
    malformed = replace(OTHER, name="gpu-07", ids=replace(OTHER.ids, gce_instance_id="fleet-a3-z0z0"))
    with pytest.raises(NodeIdentifierError) as err:
        action.plan([bare, malformed])
    assert [(n, v, p) for n, v, p in err.value.problems] == [
        ("gpu-06", "gce_instance_id", "gcp-recreate: missing"),
        (
            "gpu-07",
            "gce_instance_id",
            "gcp-recreate: 'fleet-a3-z0z0' is not a GCE instance id (an unsigned 64-bit number)",
        ),
    ]
    assert request.call_count == 0
