"""Action `aws-unhealthy`: mark a rejected EC2 instance Unhealthy in its Auto Scaling group.

The group then terminates it and launches a replacement from the same launch template, keeping
the desired capacity (nodes + spares) without fleetforge touching it. The grace period is not
respected: the burn-in has already judged the node, and waiting would only delay the replacement.
Credentials come from boto3's default chain (environment, profile, SSO, instance role).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from validation.actions.base import Action, id_problem
from validation.actions.model import Call, CallOutcome, PlannedStep, RejectedNode

ClientFactory = Callable[[str], Any]  # region -> boto3 "autoscaling" client


class AwsSetUnhealthy(Action):
    name = "aws-unhealthy"
    description = "Auto Scaling SetInstanceHealth Unhealthy: the group replaces the instance"
    sdk_module = "boto3"
    needs = ("ec2_instance_id",)
    identity = "ec2_instance_id"

    def __init__(self, client_for_region: ClientFactory | None = None) -> None:
        self._factory = client_for_region
        self._clients: dict[str, Any] = {}

    def node_problems(self, node: RejectedNode) -> list[tuple[str, str, str]]:
        problems = super().node_problems(node)
        # The API is regional: the region comes from aws_region, else from the instance's AZ.
        if node.ids.aws_region is not None:
            bad = id_problem(node, "aws_region")
        elif node.ids.ec2_availability_zone is not None:
            bad = id_problem(node, "ec2_availability_zone")
        else:
            bad = (node.name, "aws_region", "missing (or set ec2_availability_zone)")
        return [*problems, bad] if bad else problems

    def _plan_node(self, node: RejectedNode) -> PlannedStep:
        region = node.ids.aws_region or str(node.ids.ec2_availability_zone)[:-1]
        call = Call(
            sdk="boto3",
            target=f"autoscaling[{region}]",
            method="set_instance_health",
            params={
                "InstanceId": node.ids.ec2_instance_id,
                "HealthStatus": "Unhealthy",
                "ShouldRespectGracePeriod": False,
            },
            scope={"region": region},
        )
        return PlannedStep(
            action=self.name,
            node=node.name,
            summary=f"mark {node.ids.ec2_instance_id} Unhealthy; its Auto Scaling group replaces it",
            reasons=node.reasons,
            calls=(call,),
        )

    def _client(self, region: str) -> Any:
        if region not in self._clients:
            if self._factory is not None:
                self._clients[region] = self._factory(region)
            else:
                import boto3  # lazy: the cloud extra

                self._clients[region] = boto3.session.Session().client("autoscaling", region_name=region)
        return self._clients[region]

    def _execute(self, step: PlannedStep, done: list[CallOutcome]) -> str:
        (call,) = step.calls
        region = call.scope["region"]
        response = self._client(region).set_instance_health(**call.params)
        request_id = response.get("ResponseMetadata", {}).get("RequestId", "?")
        done.append(CallOutcome(call, f"ok (request {request_id})"))
        return f"{call.params['InstanceId']} marked Unhealthy in {region}"

    def _failures(self) -> tuple[type[BaseException], ...]:
        from botocore.exceptions import BotoCoreError, ClientError

        return (BotoCoreError, ClientError)
