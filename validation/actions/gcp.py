"""Action `gcp-recreate`: recreate a rejected instance through its managed instance group.

`recreateInstances` deletes the instance and creates it again from the group's instance template
with the same name, so the group keeps its target size (nodes + spares) and the inventory name stays
valid; the new VM lands on other hardware. Zonal groups use InstanceGroupManagersClient, regional
groups (host var `gce_mig_region`) RegionInstanceGroupManagersClient. The call returns once the
group has accepted the recreation (the operation is waited for, up to `timeout_s`).

The name outlives the machine (a recreation, the group's autohealing), so each step first reads the
instance (InstancesClient.get) and recreates it only while its numeric id is still `gce_instance_id`,
the machine the gate judged: a rerun after a partial failure does not destroy fresh, unjudged VMs.
Credentials come from Application Default Credentials.
"""

from __future__ import annotations

from typing import Any

from validation.actions.base import Action, id_problem
from validation.actions.model import Call, CallOutcome, PlannedStep, RejectedNode, StepFailed

INSTANCES = "InstancesClient"
ZONAL = "InstanceGroupManagersClient"
REGIONAL = "RegionInstanceGroupManagersClient"


class GcpRecreate(Action):
    name = "gcp-recreate"
    description = "managed instance group recreateInstances: same name, new VM from the template"
    sdk_module = "google.cloud.compute_v1"
    needs = ("gce_project", "gce_zone", "gce_instance", "gce_instance_id", "gce_mig")
    identity = "gce_instance_id"

    def __init__(
        self,
        zonal_client: Any | None = None,
        regional_client: Any | None = None,
        timeout_s: float = 600.0,
        instances_client: Any | None = None,
    ) -> None:
        self._clients: dict[str, Any] = {
            INSTANCES: instances_client,
            ZONAL: zonal_client,
            REGIONAL: regional_client,
        }
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
        # The judged id travels in the plan (scope: not an argument of get), so apply compares
        # against what the gate saw, not against whatever the inventory says by then.
        get = Call(
            sdk="google-cloud-compute",
            target=INSTANCES,
            method="get",
            params={"project": ids.gce_project, "zone": ids.gce_zone, "instance": ids.gce_instance},
            scope={"judged_id": str(ids.gce_instance_id)},
        )
        return PlannedStep(
            action=self.name,
            node=node.name,
            summary=(
                f"recreate {ids.gce_instance} (id {ids.gce_instance_id}) through {self._where(node)}, "
                f"project {ids.gce_project}"
            ),
            reasons=node.reasons,
            calls=(get, self._recreate_call(node)),
        )

    @staticmethod
    def _where(node: RejectedNode) -> str:
        ids = node.ids
        if ids.gce_mig_region:
            return f"regional group {ids.gce_mig!r} ({ids.gce_mig_region})"
        return f"zonal group {ids.gce_mig!r} ({ids.gce_zone})"

    @staticmethod
    def _recreate_call(node: RejectedNode) -> Call:
        ids = node.ids
        # A partial URL names the instance; the API accepts it for zonal and regional groups.
        body = {"instances": [f"zones/{ids.gce_zone}/instances/{ids.gce_instance}"]}
        refusal = (
            f"refused before the recreate (nothing recreated) if get returns an id other than "
            f"{ids.gce_instance_id}, the machine judged: it has been recreated since",
        )
        where: dict[str, str | None]
        if ids.gce_mig_region:
            target, where = REGIONAL, {"region": ids.gce_mig_region}
            request = "region_instance_group_managers_recreate_request_resource"
        else:
            target, where = ZONAL, {"zone": ids.gce_zone}
            request = "instance_group_managers_recreate_instances_request_resource"
        return Call(
            sdk="google-cloud-compute",
            target=target,
            method="recreate_instances",
            params={
                "project": ids.gce_project,
                **where,
                "instance_group_manager": ids.gce_mig,
                request: body,
            },
            filled_at_run_time=refusal,
        )

    def _client(self, target: str) -> Any:
        from google.cloud import compute_v1  # lazy: the cloud extra

        if self._clients[target] is None:
            self._clients[target] = getattr(compute_v1, target)()
        return self._clients[target]

    def _execute(self, step: PlannedStep, done: list[CallOutcome]) -> str:
        get, recreate = step.calls
        self._check_judged(get, done)
        return self._recreate(recreate, done)

    def _check_judged(self, get: Call, done: list[CallOutcome]) -> None:
        live = self._client(INSTANCES).get(**get.params)
        judged = get.scope["judged_id"]
        if live.id != int(judged):
            raise StepFailed(
                f"refused, nothing recreated: instance {get.params['instance']!r} ({get.params['zone']}) "
                f"is now id {live.id}, not {judged}, the machine the gate judged: it has been recreated "
                "since (an earlier run, the group's autohealing). Burn in the new VM before acting on it"
            )
        done.append(CallOutcome(get, f"id {live.id}: the machine judged"))

    def _recreate(self, call: Call, done: list[CallOutcome]) -> str:
        from google.cloud import compute_v1

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

        # The REST transport lets requests' own errors through unwrapped: ConnectionError and
        # Timeout are OSErrors (RequestException is one), as is the TimeoutError of result().
        return (GoogleAPIError, GoogleAuthError, OSError)
