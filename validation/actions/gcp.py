"""Action `gcp-recreate`: recreate a rejected instance through its managed instance group.

`recreateInstances` deletes the instance and creates it again from the group's instance template
with the same name, so the group keeps its target size (nodes + spares) and the inventory name stays
valid; the new VM lands on other hardware. Zonal groups use InstanceGroupManagersClient, regional
groups (host var `gce_mig_region`) RegionInstanceGroupManagersClient. The call returns once the
group has accepted the recreation (the operation is waited for, up to `timeout_s`).
Credentials come from Application Default Credentials.
"""

from __future__ import annotations

from typing import Any

from validation.actions.base import Action, id_problem
from validation.actions.model import Call, CallOutcome, PlannedStep, RejectedNode

ZONAL = "InstanceGroupManagersClient"
REGIONAL = "RegionInstanceGroupManagersClient"


class GcpRecreate(Action):
    name = "gcp-recreate"
    description = "managed instance group recreateInstances: same name, new VM from the template"
    sdk_module = "google.cloud.compute_v1"
    needs = ("gce_project", "gce_zone", "gce_instance", "gce_mig")
    identity = "gce_instance_id"

    def __init__(
        self, zonal_client: Any | None = None, regional_client: Any | None = None, timeout_s: float = 600.0
    ) -> None:
        self._zonal = zonal_client
        self._regional = regional_client
        self.timeout_s = timeout_s

    def node_problems(self, node: RejectedNode) -> list[tuple[str, str, str]]:
        problems = super().node_problems(node)
        if node.ids.gce_mig_region is not None:
            problems += [p for p in [self._region_problem(node)] if p]
        return problems

    @staticmethod
    def _region_problem(node: RejectedNode) -> tuple[str, str, str] | None:
        bad = id_problem(node, "gce_mig_region")
        if bad is None and not str(node.ids.gce_zone).startswith(f"{node.ids.gce_mig_region}-"):
            return (node.name, "gce_mig_region", f"zone {node.ids.gce_zone!r} is not in this region")
        return bad

    def _plan_node(self, node: RejectedNode) -> PlannedStep:
        ids = node.ids
        # A partial URL names the instance; the API accepts it for zonal and regional groups.
        instance = f"zones/{ids.gce_zone}/instances/{ids.gce_instance}"
        if ids.gce_mig_region:
            call = Call(
                sdk="google-cloud-compute",
                target=REGIONAL,
                method="recreate_instances",
                params={
                    "project": ids.gce_project,
                    "region": ids.gce_mig_region,
                    "instance_group_manager": ids.gce_mig,
                    "region_instance_group_managers_recreate_request_resource": {"instances": [instance]},
                },
            )
        else:
            call = Call(
                sdk="google-cloud-compute",
                target=ZONAL,
                method="recreate_instances",
                params={
                    "project": ids.gce_project,
                    "zone": ids.gce_zone,
                    "instance_group_manager": ids.gce_mig,
                    "instance_group_managers_recreate_instances_request_resource": {"instances": [instance]},
                },
            )
        where = (
            f"regional group {ids.gce_mig!r} ({ids.gce_mig_region})"
            if ids.gce_mig_region
            else (f"zonal group {ids.gce_mig!r} ({ids.gce_zone})")
        )
        return PlannedStep(
            action=self.name,
            node=node.name,
            summary=f"recreate {ids.gce_instance} through {where}, project {ids.gce_project}",
            reasons=node.reasons,
            calls=(call,),
        )

    def _client(self, target: str) -> Any:
        from google.cloud import compute_v1  # lazy: the cloud extra

        if target == REGIONAL:
            if self._regional is None:
                self._regional = compute_v1.RegionInstanceGroupManagersClient()
            return self._regional
        if self._zonal is None:
            self._zonal = compute_v1.InstanceGroupManagersClient()
        return self._zonal

    def _execute(self, step: PlannedStep, done: list[CallOutcome]) -> str:
        from google.cloud import compute_v1

        (call,) = step.calls
        kwargs = dict(call.params)
        # The request body travels as plain data in the plan; the SDK wants its message type.
        if call.target == REGIONAL:
            key = "region_instance_group_managers_recreate_request_resource"
            kwargs[key] = compute_v1.RegionInstanceGroupManagersRecreateRequest(**kwargs[key])
        else:
            key = "instance_group_managers_recreate_instances_request_resource"
            kwargs[key] = compute_v1.InstanceGroupManagersRecreateInstancesRequest(**kwargs[key])
        operation = self._client(call.target).recreate_instances(**kwargs)
        # result() raises the operation's error (as a GoogleAPICallError) or TimeoutError.
        operation.result(timeout=self.timeout_s)
        done.append(CallOutcome(call, f"operation {operation.name} done"))
        return f"recreate accepted by {call.params['instance_group_manager']}"

    def _failures(self) -> tuple[type[BaseException], ...]:
        from google.api_core.exceptions import GoogleAPIError
        from google.auth.exceptions import GoogleAuthError

        return (GoogleAPIError, GoogleAuthError, TimeoutError)
