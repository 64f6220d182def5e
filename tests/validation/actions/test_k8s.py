"""k8s-taint: CoreV1Api mocked with create_autospec (signatures enforced), the exact patch asserted;
credentials through the real kubernetes config loaders (kubeconfig files, no API server)."""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import yaml
from kubernetes import client
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from kubernetes.config import kube_config

from tests.validation.actions.fakes import node
from validation.actions import ActionConfigError, KubernetesTaint, NodeIdentifierError, run_actions

ADDED = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def v1node(name: str, version: str, taints: list[client.V1Taint] | None = None) -> client.V1Node:
    return client.V1Node(
        metadata=client.V1ObjectMeta(name=name, resource_version=version),
        spec=client.V1NodeSpec(taints=taints),
    )


@pytest.fixture
def api() -> Any:
    return mock.create_autospec(client.CoreV1Api, instance=True)


def patch_of(call: Any) -> dict[str, Any]:
    assert call.kwargs["_content_type"] == "application/strategic-merge-patch+json"
    return dict(call.kwargs["body"])


def test_cordon_and_taint_keeps_other_taints_and_replaces_ours(api: Any) -> None:
    api.read_node.return_value = v1node(
        "ip-10-0-1-7",
        "4711",
        [
            client.V1Taint(key="nvidia.com/gpu", value="present", effect="NoSchedule"),
            client.V1Taint(key="fleetforge.io/rejected", value="old", effect="NoSchedule"),
            client.V1Taint(key="node.kubernetes.io/unreachable", effect="NoExecute", time_added=ADDED),
        ],
    )
    reasons = ("gemm_bf16_tflops 512 < 700 (floor)", "nccl busbw 120 < 300 (fleet median - 5 MAD)")
    report = run_actions(
        [KubernetesTaint(api=api)], [node("gpu-01", *reasons, k8s_node_name="ip-10-0-1-7")], dry_run=False
    )
    assert report.ok, report.render()
    api.read_node.assert_called_once_with(name="ip-10-0-1-7", _request_timeout=30.0)
    api.patch_node.assert_called_once()
    assert api.patch_node.call_args.kwargs["name"] == "ip-10-0-1-7"
    assert patch_of(api.patch_node.call_args) == {
        "metadata": {
            "annotations": {"fleetforge.io/reject-reasons": "; ".join(reasons)},
            "resourceVersion": "4711",
        },
        "spec": {
            "unschedulable": True,
            "taints": [
                {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
                {
                    "key": "node.kubernetes.io/unreachable",
                    "effect": "NoExecute",
                    "timeAdded": ADDED.isoformat(),
                },
                {"key": "fleetforge.io/rejected", "value": "true", "effect": "NoSchedule"},
            ],
        },
    }


def test_a_node_without_taints_and_a_custom_key(api: Any) -> None:
    api.read_node.return_value = v1node("n1", "1")
    action = KubernetesTaint(api=api, key="example.com/burnin-failed", value="", effect="NoExecute")
    assert run_actions([action], [node("gpu-01", k8s_node_name="n1")], dry_run=False).ok
    assert patch_of(api.patch_node.call_args)["spec"]["taints"] == [
        {"key": "example.com/burnin-failed", "value": "", "effect": "NoExecute"}
    ]


def test_a_conflict_is_retried_with_a_fresh_read(api: Any) -> None:
    api.read_node.side_effect = [v1node("n1", "10"), v1node("n1", "11")]
    api.patch_node.side_effect = [ApiException(status=409, reason="Conflict"), v1node("n1", "12")]
    report = run_actions([KubernetesTaint(api=api)], [node("gpu-01", k8s_node_name="n1")], dry_run=False)
    assert report.ok
    versions = [patch_of(c)["metadata"]["resourceVersion"] for c in api.patch_node.call_args_list]
    assert versions == ["10", "11"]


def test_one_failing_node_is_reported_the_others_tainted(api: Any) -> None:
    def read(name: str, **kwargs: Any) -> client.V1Node:
        if name == "gone":
            raise ApiException(status=404, reason="Not Found")
        return v1node(name, "5")

    api.read_node.side_effect = read
    nodes = [
        node("gpu-01", k8s_node_name="n1"),
        node("gpu-02", k8s_node_name="gone"),
        node("gpu-03", k8s_node_name="n3"),
    ]
    report = run_actions([KubernetesTaint(api=api)], nodes, dry_run=False)
    assert [(r.step.node, r.ok) for r in report.results] == [
        ("gpu-01", True),
        ("gpu-02", False),
        ("gpu-03", True),
    ]
    assert "ApiException" in report.results[1].detail and "404" in report.results[1].detail
    assert [c.kwargs["name"] for c in api.patch_node.call_args_list] == ["n1", "n3"]


def test_dry_run_calls_nothing(api: Any) -> None:
    report = run_actions([KubernetesTaint(api=api)], [node("gpu-01", k8s_node_name="n1")], dry_run=True)
    assert api.mock_calls == []
    text = report.render()
    assert "patch_node(name='n1'" in text and "resourceVersion: from read_node" in text


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"key": "Bad Key"}, "not a qualified name"),
        ({"key": "UPPER.example.com/x"}, "not a qualified name"),
        ({"value": "has space"}, "not a label value"),
        ({"effect": "NoRun"}, "not one of NoSchedule, PreferNoSchedule, NoExecute"),
    ],
)
def test_bad_taint_settings(kwargs: dict[str, str], message: str) -> None:
    with pytest.raises(ActionConfigError, match=message):
        KubernetesTaint(**kwargs)  # type: ignore[arg-type]


def test_node_name_needed(api: Any) -> None:
    with pytest.raises(
        NodeIdentifierError, match=re.escape("node 'gpu-04': k8s-taint: missing (host var 'k8s_node_name')")
    ):
        KubernetesTaint(api=api).plan([node("gpu-04")])


# --- credentials: the real kubernetes config loaders, no API server ------------------------------


def kubeconfig(path: Path, name: str, server: str, current: bool) -> Path:
    doc: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": {"server": server}}],
        "users": [{"name": f"{name}-admin", "user": {"token": f"token-{name}"}}],
        "contexts": [{"name": f"ctx-{name}", "context": {"cluster": name, "user": f"{name}-admin"}}],
    }
    if current:
        doc["current-context"] = f"ctx-{name}"
    path.write_text(yaml.safe_dump(doc))
    return path


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str | None], None]:
    """A process started with this KUBECONFIG (None: unset), a HOME without ~/.kube/config, no pod."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for var in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
        monkeypatch.delenv(var, raising=False)

    def start(value: str | None) -> None:
        if value is None:
            monkeypatch.delenv("KUBECONFIG", raising=False)
        else:
            monkeypatch.setenv("KUBECONFIG", value)
        # The client reads KUBECONFIG once, at import: give it what that process would have read.
        snapshot = value if value is not None else "~/.kube/config"
        monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", snapshot)
        monkeypatch.setattr(k8s_config, "KUBE_CONFIG_DEFAULT_LOCATION", snapshot)

    return start


def test_a_kubeconfig_list_is_merged_and_a_context_from_the_second_file_is_used(
    tmp_path: Path, environment: Callable[[str | None], None], capfd: pytest.CaptureFixture[str]
) -> None:
    port = closed_port()
    first = kubeconfig(tmp_path / "a.yaml", "a", "https://a.example.invalid:6443", current=True)
    second = kubeconfig(tmp_path / "b.yaml", "b", f"http://127.0.0.1:{port}", current=False)
    environment(f"{first}:{second}")
    default = client.Configuration.get_default_copy().host

    action = KubernetesTaint(context="ctx-b", timeout_s=2)
    report = run_actions([action], [node("gpu-01", k8s_node_name="n1")], dry_run=False)
    (result,) = report.results
    # It got as far as the cluster of file two: refused there, not the in-cluster ConfigException.
    assert not result.ok and "ConfigException" not in result.detail
    assert result.detail.startswith("MaxRetryError") and f"port={port}" in result.detail
    configuration = action._client().api_client.configuration
    assert configuration.host == f"http://127.0.0.1:{port}"
    assert configuration.api_key["BearerToken"] == "Bearer token-b"
    assert KubernetesTaint()._client().api_client.configuration.host == "https://a.example.invalid:6443"
    assert client.Configuration.get_default_copy().host == default  # process-wide default untouched
    assert capfd.readouterr().out == ""


def test_home_kubeconfig_without_kubeconfig_variable(
    environment: Callable[[str | None], None], capfd: pytest.CaptureFixture[str]
) -> None:
    kube = Path(os.environ["HOME"]) / ".kube"
    kube.mkdir()
    kubeconfig(kube / "config", "home", "https://home.example.invalid", current=True)
    environment(None)
    assert KubernetesTaint()._client().api_client.configuration.host == "https://home.example.invalid"
    assert capfd.readouterr().out == ""


def test_no_kubeconfig_outside_a_pod_fails_the_step_and_prints_nothing(
    environment: Callable[[str | None], None], capfd: pytest.CaptureFixture[str]
) -> None:
    environment(None)
    report = run_actions([KubernetesTaint()], [node("gpu-01", k8s_node_name="n1")], dry_run=False)
    (result,) = report.results
    assert not result.ok and result.detail.startswith("ConfigException: Service host/port is not set")
    assert capfd.readouterr().out == ""
