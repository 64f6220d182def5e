"""`fleetforge inventory` for TPU slices: the real google-cloud-tpu client lists the TPU VMs over its
REST session, whose answers are canned in the shape of Google's REST reference
(tests/stacks/fixtures/tpu_api.py); Ansible itself then reads the static inventory it writes."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import google.auth
import pytest
import requests
from google.auth import credentials as ga_credentials
from google.auth import exceptions as auth_exceptions
from google.auth.transport.requests import AuthorizedSession
from google.cloud import tpu_v2

from fleetforge import exitcodes
from fleetforge.cli import main
from stacks import tpu_inventory
from stacks.ansible_inventory import GROUPS
from tests.hostile.conftest import Canary
from tests.hostile.helpers import ansible_hostvars, ansible_list
from tests.stacks.fixtures import tpu_api
from tests.validation.actions.fakes import gcp_response

SLICES = ["tpu-v5p-64-slice-0", "tpu-v5p-64-slice-1"]
# 4x4x2 is 32 v5p chips at 4 a host: 8 TPU VMs a slice (fleet.catalog.tpu).
WORKERS = 8


def addresses(slice_index: int) -> list[str]:
    return [f"10.130.{slice_index}.{10 + w}" for w in range(WORKERS)]


def tpu_outputs(**placement: Any) -> dict[str, Any]:
    """TPU stack outputs in the shape stacks/gcp.py exports (a v5p fleet of two 4x4x2 slices)."""
    return {
        "fleet": {
            "name": "tpu-v5p-64",
            "cloud": "gcp",
            "sku": "tpu-v5p",
            "region": "us-east5",
            "zone": tpu_api.ZONE,
            "nodes": 16,
        },
        "group": {
            "kind": "gcp-tpu-queued-resource",
            "name": tpu_api.QUEUED,
            "project": tpu_api.PROJECT,
            "region": "us-east5",
            "zone": tpu_api.ZONE,
            "min_size": 16,
            "max_size": 16,
            "desired": 16,
            "node_filter": {"name": [f"{tpu_api.PARENT}/nodes/tpu-v5p-64-slice-{i}" for i in range(2)]},
        },
        "fabric": {
            "kind": "ici",
            "nics": 6,
            "placement": {
                "strategy": "tpu-slice",
                "name": "v5p-64",
                "topology": "4x4x2",
                "slices": 2,
                "tpu_nodes": list(SLICES),
                "hosts_per_tpu_node": WORKERS,
                **placement,
            },
        },
        "storage": None,
        "checkpoints": None,
        "tags": {"owner": "ml"},
    }


class CannedApi:
    """The TPU API behind the client's REST session: GET url -> (status, JSON body)."""

    def __init__(self) -> None:
        self.answers: dict[str, tuple[int, Any]] = {}
        self.sent: list[tuple[str, str]] = []

    def serve(self, path: str, body: Any, status: int = 200) -> None:
        self.answers[f"{tpu_api.API}/{path}"] = (status, body)

    def healthy(self, outputs: dict[str, Any] | None = None) -> CannedApi:
        group = (outputs or tpu_outputs())["group"]
        parent = f"projects/{group['project']}/locations/{group['zone']}"
        ids = (outputs or tpu_outputs())["fabric"]["placement"]["tpu_nodes"]
        self.serve(
            f"{parent}/queuedResources/{group['name']}",
            tpu_api.queued_resource(ids, parent=parent, queued=group["name"]),
        )
        for i, node_id in enumerate(ids):
            self.serve(f"{parent}/nodes/{node_id}", tpu_api.node(node_id, addresses(i), parent=parent))
        return self

    def __call__(self, method: str, url: str, *args: Any, **kwargs: Any) -> requests.Response:
        self.sent.append((method, url))
        status, body = self.answers.get(
            url, (404, tpu_api.error(404, "NOT_FOUND", f"Resource '{url}' was not found"))
        )
        return gcp_response(status, body, url)


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> Iterator[CannedApi]:
    """Application Default Credentials resolve (anonymously) and every HTTP call is answered here."""
    canned = CannedApi()
    monkeypatch.setattr(
        google.auth, "default", lambda *a, **k: (ga_credentials.AnonymousCredentials(), tpu_api.PROJECT)
    )
    with mock.patch.object(AuthorizedSession, "request", side_effect=canned):
        yield canned


@pytest.fixture
def canary(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Canary]:
    c = Canary(tmp_path_factory.mktemp("canary") / "pwned")
    yield c
    c.assert_untouched()


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def inventory_cli(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, outputs: dict[str, Any], name: str = "tpu.yml"
) -> tuple[int, str, Path]:
    src = tmp_path / "outputs.json"
    src.write_text(json.dumps(outputs))
    target = tmp_path / name
    code, _, err = run(capsys, "inventory", "--stack-outputs", str(src), "-o", str(target))
    return code, err, target


def test_every_worker_of_every_slice_as_ansible_reads_it(
    api: CannedApi, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    api.healthy()
    code, err, target = inventory_cli(capsys, tmp_path, tpu_outputs())
    assert code == exitcodes.OK, err
    parent = f"{tpu_api.API}/{tpu_api.PARENT}"
    assert api.sent == [
        ("GET", f"{parent}/queuedResources/{tpu_api.QUEUED}"),
        ("GET", f"{parent}/nodes/{SLICES[0]}"),
        ("GET", f"{parent}/nodes/{SLICES[1]}"),
    ]
    inv = ansible_list(target)
    names = [f"{s}-w{w}" for s in SLICES for w in range(WORKERS)]
    assert sorted(inv["_meta"]["hostvars"]) == sorted(names)
    assert sorted(inv["tpu_slice_0"]["hosts"]) == sorted(names[:WORKERS])
    assert sorted(inv["tpu_slice_1"]["hosts"]) == sorted(names[WORKERS:])
    # site.yml's groups exist; a TPU VM is no NVIDIA GPU host and ICI is no RDMA fabric.
    assert sorted(inv["all"]["children"]) == sorted([*GROUPS, "ungrouped", "tpu_slice_0", "tpu_slice_1"])
    assert "hosts" not in inv.get("gpu_nodes", {}) and "hosts" not in inv.get("ib_nodes", {})
    assert inv["_meta"]["hostvars"]["tpu-v5p-64-slice-1-w7"] == {
        "ansible_host": "10.130.1.17",
        "gce_project": "ml-research-1",
        "gce_zone": "us-east5-a",
        "tpu_queued_resource": "tpu-v5p-64-slices",
        "tpu_node": "tpu-v5p-64-slice-1",
        "tpu_slice_index": 1,
        "tpu_slices": 2,
        "tpu_worker_index": 7,
        "tpu_workers_per_slice": 8,
        "tpu_accelerator_type": "v5p-64",
        "tpu_topology": "4x4x2",
        "tpu_runtime_version": "v2-alpha-tpuv5",
        "tpu_labels": {"owner": "ml"},
        "tpu_chips_per_vm": 4,  # what the VM's burn-in must find
        "fleetforge_fleet": "tpu-v5p-64",
        "fleetforge_sku": "tpu-v5p",
    }


def test_the_planned_stack_outputs_list_through_the_api(api: CannedApi) -> None:
    """The outputs the real GCP stack plans (stacks/gcp.py) are what the lister reads."""
    plans = pytest.importorskip("tests.stacks.plans")
    plan = plans.plan_of(plans.tpu_doc(sku="tpu-v5p", nodes=16, tpu={"topology": "4x4x2", "slices": 2}))
    outputs = json.loads(json.dumps(plan.outputs, default=str))
    api.healthy(outputs)
    client = tpu_v2.TpuClient(credentials=ga_credentials.AnonymousCredentials(), transport="rest")
    doc = tpu_inventory.from_tpu_outputs(outputs, client)
    ids = outputs["fabric"]["placement"]["tpu_nodes"]
    assert list(doc["all"]["hosts"]) == [f"{i}-w{w}" for i in ids for w in range(WORKERS)]
    first = doc["all"]["hosts"][f"{ids[0]}-w0"]
    assert (first["gce_project"], first["gce_zone"], first["tpu_queued_resource"]) == (
        outputs["group"]["project"],
        outputs["group"]["zone"],
        outputs["group"]["name"],
    )
    # The stack, the inventory and the burn-in agree on the chips each VM has.
    assert first["tpu_chips_per_vm"] == outputs["fabric"]["placement"]["chips_per_tpu_vm"] == 4
    assert outputs["fleet"]["accelerators_per_node"] == 4


def test_a_multislice_request_names_its_nodes_by_prefix(
    api: CannedApi, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Without node ids in the outputs the queued resource's nodeSpec says them: <prefix>-<n>."""
    outputs = tpu_outputs()
    del outputs["fabric"]["placement"]["tpu_nodes"]
    spec = tpu_api.node_spec("")
    del spec["nodeId"]
    spec["multisliceParams"] = {"nodeCount": 2, "nodeIdPrefix": "ms"}
    queued = tpu_api.queued_resource([])
    queued["tpu"]["nodeSpec"] = [spec]
    api.serve(f"{tpu_api.PARENT}/queuedResources/{tpu_api.QUEUED}", queued)
    for i in range(2):
        api.serve(f"{tpu_api.PARENT}/nodes/ms-{i}", tpu_api.node(f"ms-{i}", addresses(i)))
    code, err, target = inventory_cli(capsys, tmp_path, outputs)
    assert code == exitcodes.OK, err
    assert sorted(ansible_list(target)["tpu_slice_1"]["hosts"]) == sorted(
        f"ms-1-w{w}" for w in range(WORKERS)
    )


def _waiting(api: CannedApi) -> None:
    api.serve(
        f"{tpu_api.PARENT}/queuedResources/{tpu_api.QUEUED}",
        tpu_api.queued_resource(SLICES, state="WAITING_FOR_RESOURCES"),
    )


def _node(api: CannedApi, index: int, **changes: Any) -> None:
    ips = changes.pop("ips", addresses(index))
    body = tpu_api.node(SLICES[index], ips, **changes)
    api.serve(f"{tpu_api.PARENT}/nodes/{SLICES[index]}", body)


@pytest.mark.parametrize(
    ("break_it", "needle"),
    [
        (_waiting, f"queued resource {tpu_api.QUEUED}: is WAITING_FOR_RESOURCES, not ACTIVE"),
        (
            lambda api: _node(api, 1, state="REPAIRING", healthDescription="ICI link down"),
            f"TPU node {SLICES[1]}: is REPAIRING, not READY (ICI link down)",
        ),
        (
            lambda api: _node(api, 0, ips=addresses(0)[:7]),
            f"TPU node {SLICES[0]}: has 7 worker(s) (networkEndpoints), but a 4x4x2 slice has 8",
        ),
        (
            lambda api: _node(api, 0, ips=[*addresses(0)[:3], "", *addresses(0)[4:]]),
            f"TPU node {SLICES[0]} worker 3: has no internal IP address",
        ),
        (
            lambda api: _node(api, 0, ips=[*addresses(0)[:7], "34.118.2.9"]),
            "worker 7: ipAddress 34.118.2.9 is not an internal address",
        ),
        (
            lambda api: _node(api, 1, accelerator_type="v5p-32"),
            "is a 'v5p-32' slice, but the stack asked for 'v5p-64'",
        ),
        (
            lambda api: api.serve(
                f"{tpu_api.PARENT}/queuedResources/{tpu_api.QUEUED}", tpu_api.queued_resource(SLICES[:1])
            ),
            "holds nodes tpu-v5p-64-slice-0, but the stack outputs name tpu-v5p-64-slice-0, tpu-v5p-64-slice-1",
        ),
    ],
    ids=["queued", "repairing", "short-slice", "no-ip", "external-ip", "wrong-type", "other-nodes"],
)
def test_a_fleet_not_ready_to_list_exits_65_naming_what(
    api: CannedApi,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    break_it: Any,
    needle: str,
) -> None:
    api.healthy()
    break_it(api)
    code, err, target = inventory_cli(capsys, tmp_path, tpu_outputs())
    assert code == exitcodes.DATA and needle in " ".join(err.split()), err
    assert "Traceback" not in err and not target.exists()


def test_the_api_refusing_exits_69_with_its_words(
    api: CannedApi, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    api.healthy()
    api.serve(
        f"{tpu_api.PARENT}/nodes/{SLICES[1]}",
        tpu_api.error(403, "PERMISSION_DENIED", "Permission 'tpu.nodes.get' denied"),
        status=403,
    )
    code, err, target = inventory_cli(capsys, tmp_path, tpu_outputs())
    text = " ".join(err.split())
    assert code == exitcodes.UNAVAILABLE and f"TPU node {SLICES[1]}: the TPU API refused get (403" in text
    assert "tpu.nodes.get" in text and "Traceback" not in err and not target.exists()


def test_no_application_default_credentials_exits_69(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    def no_adc(*args: Any, **kwargs: Any) -> Any:
        raise auth_exceptions.DefaultCredentialsError("Your default credentials were not found.")

    monkeypatch.setattr(google.auth, "default", no_adc)
    code, err, _ = inventory_cli(capsys, tmp_path, tpu_outputs())
    assert code == exitcodes.UNAVAILABLE and "Application Default Credentials" in err


def test_without_the_library_exits_69_naming_the_cloud_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "google.cloud.tpu_v2", None)  # `import` now raises ImportError
    code, err, target = inventory_cli(capsys, tmp_path, tpu_outputs())
    assert code == exitcodes.UNAVAILABLE and "google-cloud-tpu" in err and "'cloud' extra" in err
    assert not target.exists()


@pytest.mark.parametrize("name", ["tpu.gcp_compute.yml", "tpu.ini", "hosts"])
def test_a_static_inventory_name_ansible_would_misread_exits_64_before_any_call(
    api: CannedApi, capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str
) -> None:
    code, err, target = inventory_cli(capsys, tmp_path, tpu_outputs(), name=name)
    assert code == exitcodes.USAGE and "*.yml" in err and api.sent == [] and not target.exists()


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"hosts_per_tpu_node": 4}, "fabric.placement.hosts_per_tpu_node: 4, but a v5p 4x4x2 slice has 8"),
        (
            {"chips_per_tpu_vm": 8},
            "fabric.placement.chips_per_tpu_vm: 8, but each TPU VM of a v5p 4x4x2 slice has 4 chips",
        ),
        ({"chips_per_tpu_vm": "4"}, "fabric.placement.chips_per_tpu_vm: '4'; expected a whole number"),
        ({"topology": "3x3x3"}, "fabric.placement.topology"),
        ({"tpu_nodes": ["Slice_0"]}, "fabric.placement.tpu_nodes[0]"),
    ],
)
def test_outputs_that_disagree_with_the_catalog_exit_65_before_any_call(
    api: CannedApi, capsys: pytest.CaptureFixture[str], tmp_path: Path, change: dict[str, Any], field: str
) -> None:
    code, err, _ = inventory_cli(capsys, tmp_path, tpu_outputs(**change))
    assert code == exitcodes.DATA and field in " ".join(err.split()) and api.sent == []


def test_hostile_api_strings_are_written_unsafe_and_never_render(
    api: CannedApi, capsys: pytest.CaptureFixture[str], tmp_path: Path, canary: Canary
) -> None:
    api.healthy()
    _node(api, 0, runtime_version=canary.pipe, labels={"owner": canary.pipe, "note": canary.block})
    code, err, target = inventory_cli(capsys, tmp_path, tpu_outputs())
    assert code == exitcodes.OK, err
    assert "!unsafe" in target.read_text()
    rendered = ansible_hostvars(target)["tpu-v5p-64-slice-0-w0"]
    assert rendered["tpu_runtime_version"] == canary.pipe
    assert rendered["tpu_labels"] == {"owner": canary.pipe, "note": canary.block}
    canary.assert_untouched()


@pytest.mark.parametrize("where", ["node name", "node id", "label key", "address"])
def test_hostile_names_from_the_api_are_refused(
    api: CannedApi, capsys: pytest.CaptureFixture[str], tmp_path: Path, canary: Canary, where: str
) -> None:
    api.healthy()
    if where == "node name":
        _node(api, 0, name=f"{tpu_api.PARENT}/nodes/{canary.pipe}")
    elif where == "node id":
        api.serve(
            f"{tpu_api.PARENT}/queuedResources/{tpu_api.QUEUED}",
            tpu_api.queued_resource([SLICES[0], canary.pipe]),
        )
    elif where == "label key":
        _node(api, 0, labels={canary.pipe: "x"})
    else:
        _node(api, 0, ips=[canary.pipe, *addresses(0)[1:]])
    code, err, target = inventory_cli(capsys, tmp_path, tpu_outputs())
    assert code == exitcodes.DATA and "Traceback" not in err and not target.exists(), err
    canary.assert_untouched()


def test_help_does_not_load_the_tpu_client() -> None:
    code = (
        "import sys\n"
        "from fleetforge.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "print('google.cloud.tpu_v2' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip().splitlines()[-1] == "False"


@pytest.mark.parametrize(
    ("section", "key"),
    [("group", "name"), ("group", "project"), ("group", "zone"), ("fleet", "sku"), ("fabric", "placement")],
)
def test_hostile_stack_outputs_exit_65_before_any_call(
    api: CannedApi,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    canary: Canary,
    section: str,
    key: str,
) -> None:
    outputs = tpu_outputs()
    if key == "placement":
        outputs[section][key]["tpu_nodes"] = [canary.pipe]
    else:
        outputs[section][key] = canary.pipe
    code, err, target = inventory_cli(capsys, tmp_path, outputs)
    assert code == exitcodes.DATA and api.sent == [] and not target.exists(), err
