"""azure-replace: a real ComputeManagementClient over a canned azure-core transport, so the real
ARM request URLs and JSON bodies (get, delete, long-running poll, capacity restore) are asserted."""

from __future__ import annotations

import json
from typing import Any

import pytest
from azure.core.rest import HttpRequest
from azure.mgmt.compute import ComputeManagementClient

from tests.validation.actions.fakes import CannedTransport, TokenCredential, node
from validation.actions import ActionConfigError, AzureReplace, NodeIdentifierError, run_actions

SUB = "00000000-0000-4000-8000-000000000001"
VMSS = f"https://management.azure.com/subscriptions/{SUB}/resourceGroups/rg-train/providers/Microsoft.Compute/virtualMachineScaleSets/fleet-nd"
SKU = {"name": "Standard_ND96isr_H100_v5", "tier": "Standard"}
POLL = "https://management.azure.com/providers/Microsoft.Compute/locations/eastus/operations/op-1?api-version=2024-07-01"


def az_node(name: str, instance: str) -> Any:
    return node(
        name,
        azure_subscription_id=SUB,
        azure_resource_group="rg-train",
        azure_vmss_name="fleet-nd",
        azure_vmss_instance_id=instance,
    )


class ScaleSet:
    """The ARM side of one scale set: capacity goes down on delete and follows a PATCH of sku."""

    def __init__(self, capacity: int, missing: set[str] | None = None) -> None:
        self.capacity = capacity
        self.missing = missing or set()

    def __call__(self, request: HttpRequest) -> tuple[int, dict[str, str], Any]:
        path = request.url.split("?")[0]
        body = request.content
        if request.method == "GET" and path == VMSS:
            return (
                200,
                {},
                {"name": "fleet-nd", "location": "eastus", "sku": {**SKU, "capacity": self.capacity}},
            )
        if request.method == "POST" and path == f"{VMSS}/delete":
            ids = json.loads(body)["instanceIds"]
            if set(ids) & self.missing:
                error = {
                    "code": "InvalidParameter",
                    "message": f"instance ids {ids} are not in the scale set",
                }
                return 400, {}, {"error": error}
            self.capacity -= len(ids)
            return 202, {"Azure-AsyncOperation": POLL, "Retry-After": "0"}, None
        if request.method == "GET" and request.url == POLL:
            return 200, {}, {"status": "Succeeded"}
        if request.method == "PATCH" and path == VMSS:
            self.capacity = json.loads(body)["sku"]["capacity"]
            sku = {**SKU, "capacity": self.capacity}
            return (
                200,
                {},
                {
                    "name": "fleet-nd",
                    "location": "eastus",
                    "sku": sku,
                    "properties": {"provisioningState": "Succeeded"},
                },
            )
        return 404, {}, {"error": {"code": "NotFound", "message": f"{request.method} {path}"}}


def action(transport: CannedTransport, capacity: int | None = None) -> AzureReplace:
    client = ComputeManagementClient(TokenCredential(), SUB, transport=transport, polling_interval=0)
    return AzureReplace(client_for_subscription=lambda sub: client, capacity=capacity, timeout_s=10)


def calls(transport: CannedTransport) -> list[tuple[str, str, Any]]:
    return [(m, u.split("?")[0], b) for m, u, b in transport.sent]


def test_plan_lists_get_delete_and_restore() -> None:
    (step,) = action(CannedTransport(ScaleSet(4))).plan([az_node("gpu-01", "3")])
    assert [c.method for c in step.calls] == ["get", "begin_delete_instances", "begin_update"]
    assert dict(step.calls[1].params) == {
        "resource_group_name": "rg-train",
        "vm_scale_set_name": "fleet-nd",
        "vm_instance_i_ds": {"instanceIds": ["3"]},
    }
    assert "capacity read by get before the delete" in step.describe()
    assert dict(step.calls[0].scope) == {"subscription_id": SUB}


def test_delete_then_capacity_back_to_what_it_was() -> None:
    scale_set = ScaleSet(capacity=10)
    transport = CannedTransport(scale_set)
    report = run_actions([action(transport)], [az_node("gpu-01", "3")], dry_run=False)
    assert report.ok, report.render()
    assert calls(transport) == [
        ("GET", VMSS, None),
        ("POST", f"{VMSS}/delete", {"instanceIds": ["3"]}),
        ("GET", POLL.split("?")[0], None),
        ("PATCH", VMSS, {"sku": {**SKU, "capacity": 10}}),
    ]
    assert scale_set.capacity == 10
    sent_update = report.results[0].done[-1].call
    assert sent_update.params["parameters"] == {"sku": {**SKU, "capacity": 10}}


def test_pinned_capacity_is_the_spec_size() -> None:
    transport = CannedTransport(ScaleSet(capacity=9))  # one already lost earlier
    report = run_actions([action(transport, capacity=10)], [az_node("gpu-01", "3")], dry_run=False)
    assert report.ok and transport.sent[-1][2] == {"sku": {**SKU, "capacity": 10}}
    assert "restore capacity 10" in report.steps[0].summary
    assert "refused before the delete" in report.steps[0].describe()


def test_a_target_below_what_the_delete_leaves_is_refused_before_anything_is_deleted() -> None:
    # Capacity 4, one instance deleted: a PATCH to 2 would make Azure scale in a healthy VM.
    scale_set = ScaleSet(capacity=4)
    transport = CannedTransport(scale_set)
    report = run_actions([action(transport, capacity=2)], [az_node("gpu-01", "3")], dry_run=False)
    assert not report.ok
    assert calls(transport) == [("GET", VMSS, None)]  # no delete, no PATCH
    assert scale_set.capacity == 4
    (failed,) = report.results
    assert failed.detail.startswith("StepFailed: refused, nothing deleted: target capacity 2 for scale set")
    assert "'fleet-nd' (rg-train) is below 3 (capacity read 4 - 1 instance(s) this step deletes: 3)" in (
        failed.detail
    )
    assert "per scale set" in failed.detail
    assert [o.call.method for o in failed.done] == ["get"]


def test_a_target_equal_to_what_the_delete_leaves_shrinks_by_the_deleted_one_only() -> None:
    scale_set = ScaleSet(capacity=4)
    transport = CannedTransport(scale_set)
    report = run_actions([action(transport, capacity=3)], [az_node("gpu-01", "3")], dry_run=False)
    assert report.ok, report.render()
    assert calls(transport)[1:] == [
        ("POST", f"{VMSS}/delete", {"instanceIds": ["3"]}),
        ("GET", POLL.split("?")[0], None),
        ("PATCH", VMSS, {"sku": {**SKU, "capacity": 3}}),
    ]
    assert scale_set.capacity == 3


def test_failed_delete_skips_restore_and_the_next_node_is_still_replaced() -> None:
    scale_set = ScaleSet(capacity=10, missing={"7"})
    transport = CannedTransport(scale_set)
    report = run_actions([action(transport)], [az_node("gpu-02", "7"), az_node("gpu-03", "8")], dry_run=False)
    assert [(r.step.node, r.ok) for r in report.results] == [("gpu-02", False), ("gpu-03", True)]
    failed = report.results[0]
    assert "HttpResponseError" in failed.detail and "not in the scale set" in failed.detail
    assert "after 1 of 3 calls succeeded" in failed.detail and [o.call.method for o in failed.done] == ["get"]
    assert [(m, u) for m, u, _ in calls(transport)].count(("PATCH", VMSS)) == 1  # only gpu-03's restore
    assert scale_set.capacity == 10


def test_dry_run_sends_no_request() -> None:
    transport = CannedTransport(ScaleSet(capacity=10))
    report = run_actions([action(transport)], [az_node("gpu-01", "3")], dry_run=True)
    assert transport.sent == [] and len(report.steps) == 1


def test_bad_inputs() -> None:
    with pytest.raises(ActionConfigError, match="at least 1"):
        AzureReplace(capacity=0)
    with pytest.raises(NodeIdentifierError) as err:
        action(CannedTransport(ScaleSet(1))).plan([node("gpu-09", azure_subscription_id="not-a-uuid")])
    assert [(n, v) for n, v, _ in err.value.problems] == [
        ("gpu-09", "azure_subscription_id"),
        ("gpu-09", "azure_resource_group"),
        ("gpu-09", "azure_vmss_name"),
        ("gpu-09", "azure_vmss_instance_id"),
    ]
