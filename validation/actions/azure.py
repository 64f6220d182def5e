"""Action `azure-replace`: delete a rejected instance from its VM scale set, then restore capacity.

Azure offers no "mark this instance unhealthy" call: automatic instance repairs only act on the
scale set's own health probe or Application Health extension, which fleetforge's verdict does not
feed, and deleting an instance lowers `sku.capacity` by one. So each node takes three calls:

1. `virtual_machine_scale_sets.get`: the sku (name, tier, capacity) before the delete;
2. `begin_delete_instances` with the node's instance id, waited for;
3. `begin_update` with the same sku and the capacity put back, waited for, so the set returns to
   its size before the delete and the new VM lands on a fresh allocation.

`capacity` pins the restored size of each scale set a rejected node is in: it is per scale set, not
the fleet's `nodes + spares` (a fleet split over several scale sets, one per InfiniBand domain,
has a different size in each). The same value is sent to every scale set. By default the target is
the capacity read in step 1. A target below (capacity read - instances this step deletes) would
make Azure scale in and delete healthy VMs its scale-in policy picks, so such a step is refused
after the read and before the delete: nothing is deleted or patched. Nodes run one after the other,
so reads and restores do not interleave.
Credentials come from DefaultAzureCredential (environment, workload or managed identity, az login).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

from validation.actions.base import Action
from validation.actions.model import (
    ActionConfigError,
    Call,
    CallOutcome,
    MissingSdkError,
    PlannedStep,
    RejectedNode,
    StepFailed,
)

ClientFactory = Callable[[str], Any]  # subscription id -> azure.mgmt.compute.ComputeManagementClient
TARGET = "ComputeManagementClient.virtual_machine_scale_sets"


class AzureReplace(Action):
    name = "azure-replace"
    description = "scale set delete_instances, then sku.capacity restored: a new VM replaces it"
    sdk_module = "azure.mgmt.compute"
    needs = ("azure_subscription_id", "azure_resource_group", "azure_vmss_name", "azure_vmss_instance_id")
    identity = "azure_vmss_instance_id"

    def __init__(
        self,
        client_for_subscription: ClientFactory | None = None,
        capacity: int | None = None,
        timeout_s: float = 1800.0,
    ) -> None:
        if capacity is not None and capacity < 1:
            raise ActionConfigError(f"azure-replace capacity must be at least 1, got {capacity}")
        self._factory = client_for_subscription
        self._clients: dict[str, Any] = {}
        self.capacity = capacity
        self.timeout_s = timeout_s

    def check_available(self) -> None:
        super().check_available()
        # The default client also needs the credential chain.
        if self._factory is None and importlib.util.find_spec("azure.identity") is None:
            raise MissingSdkError(self.name, "azure.identity", self.extra)

    def _plan_node(self, node: RejectedNode) -> PlannedStep:
        ids = node.ids
        scope = {"subscription_id": str(ids.azure_subscription_id)}
        where = {"resource_group_name": ids.azure_resource_group, "vm_scale_set_name": ids.azure_vmss_name}
        sku: dict[str, Any] = {}
        later = ["parameters.sku.name and .tier: the scale set's own, from get"]
        if self.capacity is None:
            later.append("parameters.sku.capacity: sku.capacity read by get before the delete")
        else:
            sku["capacity"] = self.capacity
            later.append(
                "refused before the delete (nothing deleted) if parameters.sku.capacity is below "
                "the sku.capacity read by get minus the instances deleted"
            )
        calls = (
            Call("azure-mgmt-compute", TARGET, "get", dict(where), scope),
            Call(
                "azure-mgmt-compute",
                TARGET,
                "begin_delete_instances",
                {**where, "vm_instance_i_ds": {"instanceIds": [ids.azure_vmss_instance_id]}},
                scope,
            ),
            Call(
                "azure-mgmt-compute",
                TARGET,
                "begin_update",
                {**where, "parameters": {"sku": sku}},
                scope,
                filled_at_run_time=tuple(later),
            ),
        )
        restore = "the capacity it had" if self.capacity is None else f"capacity {self.capacity}"
        return PlannedStep(
            action=self.name,
            node=node.name,
            summary=(
                f"delete instance {ids.azure_vmss_instance_id} of scale set {ids.azure_vmss_name!r} "
                f"({ids.azure_resource_group}), then restore {restore}"
            ),
            reasons=node.reasons,
            calls=calls,
        )

    def _client(self, subscription_id: str) -> Any:
        if subscription_id not in self._clients:
            if self._factory is not None:
                self._clients[subscription_id] = self._factory(subscription_id)
            else:
                from azure.identity import DefaultAzureCredential  # lazy: the cloud extra
                from azure.mgmt.compute import ComputeManagementClient

                self._clients[subscription_id] = ComputeManagementClient(
                    DefaultAzureCredential(), subscription_id
                )
        return self._clients[subscription_id]

    def _wait(self, poller: Any, what: str) -> None:
        poller.result(timeout=self.timeout_s)
        if not poller.done():
            raise StepFailed(f"{what} still running after {self.timeout_s:g} s")

    def _execute(self, step: PlannedStep, done: list[CallOutcome]) -> str:
        get, delete, update = step.calls
        vmss = self._client(get.scope["subscription_id"]).virtual_machine_scale_sets

        found = vmss.get(**get.params)
        sku = getattr(found, "sku", None)
        before = getattr(sku, "capacity", None)
        if sku is None or before is None:
            raise StepFailed(f"scale set {get.params['vm_scale_set_name']!r} reports no sku.capacity")
        done.append(CallOutcome(get, f"sku {sku.name} x {before}"))

        deleting = list(delete.params["vm_instance_i_ds"]["instanceIds"])
        target = update.params["parameters"]["sku"].get("capacity", before)
        floor = before - len(deleting)
        if target < floor:
            # Checked before the delete: a PATCH below what the delete leaves makes Azure scale in
            # and remove healthy VMs chosen by the scale set's scale-in policy.
            raise StepFailed(
                f"refused, nothing deleted: target capacity {target} for scale set "
                f"{get.params['vm_scale_set_name']!r} ({get.params['resource_group_name']}) is below "
                f"{floor} (capacity read {before} - {len(deleting)} instance(s) this step deletes: "
                f"{', '.join(deleting)}); Azure would scale in and delete healthy VMs. The capacity "
                "is per scale set: pin each scale set's own size, or leave it unset to restore the "
                "capacity read"
            )

        self._wait(vmss.begin_delete_instances(**delete.params), "delete_instances")
        done.append(CallOutcome(delete, "deleted"))

        sent = Call(
            update.sdk,
            update.target,
            update.method,
            {
                **update.params,
                "parameters": {"sku": {"name": sku.name, "tier": sku.tier, "capacity": target}},
            },
            update.scope,
        )
        self._wait(vmss.begin_update(**sent.params), "update")
        done.append(CallOutcome(sent, f"capacity {target}"))
        return f"instance {delete.params['vm_instance_i_ds']['instanceIds'][0]} deleted, capacity back to {target}"

    def _failures(self) -> tuple[type[BaseException], ...]:
        from azure.core.exceptions import AzureError

        return (AzureError, TimeoutError)
