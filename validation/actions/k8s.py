"""Action `k8s-taint`: cordon a rejected Kubernetes node and taint it, with the reasons annotated.

One `CoreV1Api.patch_node` sets `spec.unschedulable` (what `kubectl cordon` does), adds the taint
(default `fleetforge.io/rejected=true:NoSchedule`) and writes the reasons to the annotation
`fleetforge.io/reject-reasons`. `spec.taints` is an atomic list (a patch replaces it whole), so the
node is read first and the patch carries its other taints plus ours, and the read's
`metadata.resourceVersion`: a concurrent change makes the API answer 409 instead of losing a
taint. A 409 is retried with a fresh read, a few times. Pods already running stay unless the
effect is NoExecute. Credentials: kubeconfig (optionally a named context) or the in-cluster account.
The kubeconfig is `$KUBECONFIG` when set (a `:`-separated list is merged, as kubectl does), else
`~/.kube/config` when it exists; otherwise the in-cluster service account. Nothing is printed (a
`--json` report owns stdout), and the client's process-wide default configuration is left alone.
"""

from __future__ import annotations

import os
import re
from typing import Any

from validation.actions.base import Action
from validation.actions.model import ActionConfigError, Call, CallOutcome, PlannedStep, RejectedNode

ANNOTATION = "fleetforge.io/reject-reasons"
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
PATCH_TYPE = "application/strategic-merge-patch+json"
_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_KEY = re.compile(rf"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?{_NAME}")
_VALUE = re.compile(rf"({_NAME})?")
_CONFLICT_RETRIES = 3
_ANNOTATION_MAX = 4096


class KubernetesTaint(Action):
    name = "k8s-taint"
    description = "cordon the node and taint it NoSchedule, reasons in an annotation"
    sdk_module = "kubernetes"
    needs = ("k8s_node_name",)

    def __init__(
        self,
        api: Any | None = None,
        key: str = "fleetforge.io/rejected",
        value: str = "true",
        effect: str = "NoSchedule",
        context: str | None = None,
        timeout_s: float = 30.0,
    ) -> None:
        prefix = key.split("/", 1)[0] if "/" in key else ""
        if not _KEY.fullmatch(key) or len(prefix) > 253:
            raise ActionConfigError(
                f"taint key {key!r} is not a qualified name ([prefix/]name; name: up to 63 letters, digits, -_.)"
            )
        if not _VALUE.fullmatch(value):
            raise ActionConfigError(
                f"taint value {value!r} is not a label value (up to 63 letters, digits, -_.)"
            )
        if effect not in EFFECTS:
            raise ActionConfigError(f"taint effect {effect!r} is not one of {', '.join(EFFECTS)}")
        self._api = api
        self.taint = {"key": key, "value": value, "effect": effect}
        self.context = context
        self.timeout_s = timeout_s

    def _plan_node(self, node: RejectedNode) -> PlannedStep:
        name = node.ids.k8s_node_name
        reasons = "; ".join(node.reasons)[:_ANNOTATION_MAX]
        read = Call(
            "kubernetes", "CoreV1Api", "read_node", {"name": name, "_request_timeout": self.timeout_s}
        )
        patch = Call(
            "kubernetes",
            "CoreV1Api",
            "patch_node",
            {
                "name": name,
                "body": {
                    "metadata": {"annotations": {ANNOTATION: reasons}},
                    "spec": {"unschedulable": True, "taints": [dict(self.taint)]},
                },
                "_content_type": PATCH_TYPE,
                "_request_timeout": self.timeout_s,
            },
            filled_at_run_time=(
                "body.spec.taints: the node's current taints first, any with this key and effect replaced",
                "body.metadata.resourceVersion: from read_node, so a concurrent change fails with 409",
            ),
        )
        t = self.taint
        return PlannedStep(
            action=self.name,
            node=node.name,
            summary=f"cordon Kubernetes node {name} and taint it {t['key']}={t['value']}:{t['effect']}",
            reasons=node.reasons,
            calls=(read, patch),
        )

    def _client(self) -> Any:
        if self._api is None:
            from kubernetes import client, config  # type: ignore[import-untyped]  # lazy: the cloud extra

            # Not config.load_config: it tests os.path.exists on $KUBECONFIG as one path (so a
            # kubectl-style list falls through to in-cluster), reads $KUBECONFIG once at import,
            # and prints a notice to stdout. load_kube_config merges a list of files itself.
            configuration = client.Configuration()
            kubeconfig = os.environ.get("KUBECONFIG") or (
                "~/.kube/config" if os.path.exists(os.path.expanduser("~/.kube/config")) else None
            )
            if kubeconfig is not None:
                config.load_kube_config(
                    config_file=kubeconfig, context=self.context, client_configuration=configuration
                )
            else:
                config.load_incluster_config(client_configuration=configuration)
            self._api = client.CoreV1Api(client.ApiClient(configuration))
        return self._api

    def _execute(self, step: PlannedStep, done: list[CallOutcome]) -> str:
        from kubernetes.client.exceptions import ApiException  # type: ignore[import-untyped]

        read, patch = step.calls
        api = self._client()
        for attempt in range(1, _CONFLICT_RETRIES + 1):
            current = api.read_node(**read.params)
            done.append(CallOutcome(read, f"resourceVersion {current.metadata.resource_version}"))
            sent = self._merged(patch, current)
            try:
                api.patch_node(**sent.params)
            except ApiException as exc:
                if exc.status == 409 and attempt < _CONFLICT_RETRIES:
                    done.append(CallOutcome(sent, "409 conflict: node changed since the read; reading again"))
                    continue
                raise
            done.append(CallOutcome(sent, "patched"))
            break
        t = self.taint
        return f"cordoned, tainted {t['key']}={t['value']}:{t['effect']}"

    def _merged(self, patch: Call, current: Any) -> Call:
        t = self.taint
        keep = []
        for old in current.spec.taints or []:
            if old.key == t["key"] and old.effect == t["effect"]:
                continue  # ours, replaced below (taints are unique by key and effect)
            entry = {"key": old.key, "effect": old.effect}
            if old.value is not None:
                entry["value"] = old.value
            if old.time_added is not None:
                entry["timeAdded"] = old.time_added.isoformat()
            keep.append(entry)
        body = patch.params["body"]
        metadata = {**body["metadata"], "resourceVersion": current.metadata.resource_version}
        spec = {**body["spec"], "taints": [*keep, *body["spec"]["taints"]]}
        return Call(
            patch.sdk,
            patch.target,
            patch.method,
            {**patch.params, "body": {"metadata": metadata, "spec": spec}},
            patch.scope,
        )

    def _failures(self) -> tuple[type[BaseException], ...]:
        from kubernetes.client.exceptions import ApiException
        from kubernetes.config.config_exception import ConfigException  # type: ignore[import-untyped]
        from urllib3.exceptions import HTTPError

        return (ApiException, ConfigException, HTTPError, OSError)
