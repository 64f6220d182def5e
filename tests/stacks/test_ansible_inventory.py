"""`fleetforge inventory`: groups from the SKU and the spec, Ansible reads what it writes, bad input fails."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleet import ansible_yaml
from fleet.spec import FleetSpec, load_spec
from fleetforge import exitcodes
from fleetforge.cli import main
from stacks.ansible_inventory import (
    GROUPS,
    InventoryConfigError,
    from_spec,
    from_stack_outputs,
    lustre_from_outputs,
    render,
)
from tests.conftest import BIN, EXAMPLES, ROOT
from tests.hostile.conftest import Canary
from tests.hostile.helpers import ansible_hostvars, plain
from tests.local_play import local_hosts, run_play
from validation.actions.gcp import GcpRecreate
from validation.actions.hostvars import ids_from_hostvars
from validation.actions.model import RejectedNode


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def ansible_inventory(path: Path) -> dict[str, Any]:
    """What Ansible itself makes of an inventory file (groups, members, merged host variables)."""
    done = subprocess.run(
        [str(BIN / "ansible-inventory"), "-i", str(path), "--list"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    data: dict[str, Any] = plain(json.loads(done.stdout))
    return data


def onprem_spec(tmp_path: Path, **changes: Any) -> Path:
    doc = yaml.safe_load((EXAMPLES / "onprem-hgx-h100.yaml").read_text())
    doc.update(changes)
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def aws_outputs(**storage: Any) -> dict[str, Any]:
    """Stack outputs in the shape stacks/outputs.py documents, for a p5 fleet."""
    return {
        "fleet": {"name": "train-a", "cloud": "aws", "sku": "p5.48xlarge", "region": "us-east-2", "nodes": 4},
        "group": {
            "kind": "aws-autoscaling-group",
            "name": "train-a-asg",
            "region": "us-east-2",
            "node_filter": {"tag:aws:autoscaling:groupName": "train-a-asg"},
        },
        "fabric": {"kind": "efa", "nics": 32},
        "storage": storage or None,
        "checkpoints": None,
        "tags": {"owner": "ml"},
    }


def test_onprem_spec_groups_and_vars_as_ansible_reads_them(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "inventory.yml"
    code, _, err = run(capsys, "inventory", str(EXAMPLES / "onprem-hgx-h100.yaml"), "-o", str(out))
    assert code == exitcodes.OK, err
    inv = ansible_inventory(out)
    hosts = ["gpu01", "gpu02", "gpu03", "gpu04"]
    # HGX H100: NVIDIA GPUs, InfiniBand fabric, Lustre in the spec; no BeeGFS, no NVMe-oF section.
    assert sorted(inv["gpu_nodes"]["hosts"]) == hosts
    assert sorted(inv["ib_nodes"]["hosts"]) == hosts
    assert sorted(inv["lustre_clients"]["hosts"]) == hosts
    for empty in ("beegfs_clients", "nvmeof_clients"):
        assert "hosts" not in inv.get(empty, {})
    hv = inv["_meta"]["hostvars"]["gpu03"]
    assert hv["ansible_host"] == "10.1.0.13"
    assert hv["gpu_facts_expected_nvidia_gpus"] == 8  # the SKU's GPUs per node
    assert hv["gpu_facts_expected_nvswitch_fabric"] == "nvswitch"  # HGX H100: NVSwitches on PCI
    assert hv["doca_ofed_expected_hcas"] == 8  # one ConnectX-7 per GPU
    assert hv["nccl_fabric"] == "infiniband"
    # InfiniBand has no fabric-wide NCCL variable: NCCL's Debugging ones stay out (the catalog's source).
    assert hv["nccl_environment"] == {} and hv["burnin_fabric_environment"] == {}
    # The spec's exact pins reach the roles exactly (validation.pinned_versions.driver 570.133.20),
    # so the roles install the version the gate will demand, not the newest of the branch.
    assert hv["nvidia_driver_branch"] == "570" and hv["nvidia_driver_version"] == "570.133.20"
    assert hv["lustre_client_mgs_nids"] == ["10.1.0.2@o2ib"] and hv["lustre_client_fsname"] == "scratch"


def test_stdout_equals_file_and_cpu_fleet_has_no_gpu_or_ib_nodes(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    spec = onprem_spec(
        tmp_path,
        sku="cpu",
        nodes=2,
        spares=0,
        hosts=[
            {"name": "c1", "address": "10.2.0.1", "port": 2222, "user": "ops"},
            {"name": "c2", "address": "c2.lab"},
        ],
        storage={
            "filesystem": {"kind": "beegfs", "mgmtd_host": "mgmt.lab", "mount_point": "/beegfs"},
            "checkpoints": None,
        },
        validation={"level": "quick"},
    )
    code, stdout, _ = run(capsys, "inventory", str(spec))
    assert code == exitcodes.OK
    out = tmp_path / "inv.yml"
    out.write_text(stdout)
    inv = ansible_inventory(out)
    for group in ("gpu_nodes", "ib_nodes", "lustre_clients"):
        assert "hosts" not in inv.get(group, {}), group
    assert sorted(inv["beegfs_clients"]["hosts"]) == ["c1", "c2"]
    c1 = inv["_meta"]["hostvars"]["c1"]
    assert (c1["ansible_port"], c1["ansible_user"]) == (2222, "ops")
    assert c1["beegfs_client_mgmtd_host"] == "mgmt.lab" and c1["beegfs_client_mount_point"] == "/beegfs"
    assert "gpu_facts_expected_nvidia_gpus" not in c1
    assert "burnin_fabric_environment" not in c1 and "nccl_fabric" not in c1  # gloo: nothing for NCCL


def test_nvmeof_targets_from_the_spec_reach_the_role(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    targets = [
        {"transport": "rdma", "address": "10.1.0.50"},
        {"transport": "tcp", "address": "10.1.0.51", "port": 8009, "nqn": "nqn.2014-08.org.example:ckpt"},
    ]
    spec = onprem_spec(tmp_path, storage={"nvmeof": targets, "checkpoints": None})
    out = tmp_path / "inv.yml"
    code, _, err = run(capsys, "inventory", str(spec), "-o", str(out))
    assert code == exitcodes.OK, err
    inv = ansible_inventory(out)
    assert sorted(inv["nvmeof_clients"]["hosts"]) == ["gpu01", "gpu02", "gpu03", "gpu04"]
    got = inv["_meta"]["hostvars"]["gpu02"]["nvmeof_initiator_targets"]
    assert got == [{"transport": "rdma", "address": "10.1.0.50", "port": 4420}, targets[1]]


def test_every_group_is_written_even_when_empty() -> None:
    doc = from_spec(load_spec(EXAMPLES / "onprem-hgx-h100.yaml"))
    assert set(GROUPS) <= set(doc["all"]["children"])


@pytest.mark.parametrize("kind", ["fsx-lustre", "managed-lustre", "amlfs"])
def test_managed_lustre_leaves_the_lnet_interface_to_the_node(kind: str) -> None:
    """Managed Lustre is reached through the node's default route, whose interface only the node
    knows (ens5 on the DLAMI, ens4 or enp0s12 on GCP's images, nic0 of an A3 Mega's ten): the
    inventory names none, and roles/lustre_client fills it in from the node's facts."""
    values = lustre_from_outputs({"kind": kind, "mount_source": "10.9.0.2@tcp:/lfs"})
    assert values is not None and values["lustre_client_lnet_networks"] == "tcp0"


def test_stack_outputs_become_an_aws_ec2_plugin_config(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    outputs = tmp_path / "outputs.json"
    outputs.write_text(
        json.dumps(
            aws_outputs(
                kind="fsx-lustre",
                mount_source="fs-0abc.fsx.us-east-2.amazonaws.com@tcp:/x7yz",
                mount_point="/fsx",
            )
        )
    )
    target = tmp_path / "train-a.aws_ec2.yml"
    code, _, err = run(capsys, "inventory", "--stack-outputs", str(outputs), "-o", str(target))
    assert code == exitcodes.OK, err
    doc = ansible_yaml.load(target.read_text())
    assert doc["plugin"] == "amazon.aws.aws_ec2"
    assert doc["regions"] == ["us-east-2"]
    assert doc["filters"]["tag:aws:autoscaling:groupName"] == "train-a-asg"
    assert doc["filters"]["instance-state-name"] == ["running"]
    assert doc["hostnames"] == ["private-ip-address"]  # nodes have no public address
    assert doc["groups"] == {
        "gpu_nodes": "true",
        "ib_nodes": "false",  # EFA is not InfiniBand/RoCE
        "lustre_clients": "true",
        "beegfs_clients": "false",
        "nvmeof_clients": "false",
    }
    assert doc["compose"]["gpu_facts_expected_nvidia_gpus"] == "8"
    assert doc["compose"]["gpu_facts_expected_nvswitch_fabric"] == "'nvswitch'"
    assert doc["compose"]["nccl_fabric"] == "'efa'"
    efa = "{'FI_PROVIDER': 'efa', 'FI_EFA_USE_DEVICE_RDMA': '1'}"
    assert doc["compose"]["burnin_fabric_environment"] == efa and doc["compose"]["nccl_environment"] == efa
    assert doc["compose"]["lustre_client_mgs_nids"] == "['fs-0abc.fsx.us-east-2.amazonaws.com@tcp']"
    assert doc["compose"]["lustre_client_fsname"] == "'x7yz'"
    # No interface: the node's default route names it (roles/lustre_client), the DLAMI has no eth0.
    assert doc["compose"]["lustre_client_lnet_networks"] == "'tcp0'"
    # Every key we write is an option the installed plugin documents.
    docs = subprocess.run(
        [str(BIN / "ansible-doc"), "-t", "inventory", "amazon.aws.aws_ec2", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    options = json.loads(docs.stdout)["amazon.aws.aws_ec2"]["doc"]["options"]
    assert set(doc) - {"plugin"} <= set(options)


@pytest.mark.parametrize(
    ("argv", "code", "needle"),
    [
        ([], exitcodes.USAGE, "exactly one"),
        (["SPEC", "--stack-outputs", "OUT"], exitcodes.USAGE, "exactly one"),
        (["MISSING"], exitcodes.NO_INPUT, "no such file"),
        (["--stack-outputs", "MISSING"], exitcodes.NO_INPUT, "no such file"),
        (["--stack-outputs", "NOTJSON"], exitcodes.DATA, "not JSON"),
        (["--stack-outputs", "LIST"], exitcodes.DATA, "JSON object"),
        (["--stack-outputs", "NOFLEET"], exitcodes.DATA, "fleet: missing"),
        (["--stack-outputs", "BADSKU"], exitcodes.DATA, "fleet.sku: unknown SKU"),
        (["--stack-outputs", "GKE"], exitcodes.DATA, "group.kind"),
        (["--stack-outputs", "BADLUSTRE"], exitcodes.DATA, "storage.mount_source"),
        (["--stack-outputs", "OUT", "-o", "plain.yml"], exitcodes.USAGE, "aws_ec2.yml"),
        ([str(EXAMPLES / "aws-p5-fleet.yaml")], exitcodes.DATA, "--stack-outputs"),
    ],
)
def test_bad_input_exits_with_a_named_reason(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str], code: int, needle: str
) -> None:
    files = {
        "SPEC": EXAMPLES / "onprem-hgx-h100.yaml",
        "OUT": tmp_path / "out.json",
        "MISSING": tmp_path / "missing.json",
        "NOTJSON": tmp_path / "bad.json",
        "LIST": tmp_path / "list.json",
        "NOFLEET": tmp_path / "nofleet.json",
        "BADSKU": tmp_path / "badsku.json",
        "GKE": tmp_path / "gke.json",
        "BADLUSTRE": tmp_path / "badlustre.json",
    }
    files["OUT"].write_text(json.dumps(aws_outputs()))
    files["NOTJSON"].write_text("{nope")
    files["LIST"].write_text("[]")
    files["NOFLEET"].write_text(json.dumps({k: v for k, v in aws_outputs().items() if k != "fleet"}))
    bad_sku = aws_outputs()
    bad_sku["fleet"]["sku"] = "p9.huge"
    files["BADSKU"].write_text(json.dumps(bad_sku))
    gke = aws_outputs()
    gke["group"]["kind"] = "gke-node-pool"
    files["GKE"].write_text(json.dumps(gke))
    files["BADLUSTRE"].write_text(json.dumps(aws_outputs(kind="fsx-lustre", mount_source="nonsense")))
    args = [str(files.get(a, a)) for a in argv]
    got, stdout, err = run(capsys, "inventory", *args)
    assert got == code
    assert needle in err
    assert "Traceback" not in err and stdout == ""
    assert not (tmp_path / "plain.yml").exists()


def test_inventory_error_names_the_field() -> None:
    with pytest.raises(InventoryConfigError) as info:
        from_stack_outputs({"fleet": {"sku": "p5.48xlarge"}, "group": {"kind": "aws-autoscaling-group"}})
    assert info.value.field == "group.node_filter"


# --------------------------------------------------------------------------- data, never code


@pytest.fixture
def canary(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Canary]:
    c = Canary(tmp_path_factory.mktemp("canary") / "pwned")
    yield c
    c.assert_untouched()


def hostile_spec(payload: str) -> FleetSpec:
    """The example spec with a Jinja payload in every string field the inventory carries,
    put past the spec's own grammar (defence in depth: the writer must not rely on it)."""
    spec = load_spec(EXAMPLES / "onprem-hgx-h100.yaml")
    hosts = tuple(
        h.model_copy(update={"address": payload, "user": payload}) if h.name == "gpu02" else h
        for h in spec.hosts or ()
    )
    fs = spec.storage.filesystem
    assert fs is not None
    storage = spec.storage.model_copy(
        update={"filesystem": fs.model_copy(update={"mount_point": payload, "mgs_nids": (payload,)})}
    )
    pinned = {"driver": payload + ".1"}
    validation = spec.validation.model_copy(update={"pinned_versions": pinned})
    return spec.model_copy(
        update={"name": payload, "hosts": hosts, "storage": storage, "validation": validation}
    )


def test_spec_values_reach_ansible_verbatim_and_are_never_templated(tmp_path: Path, canary: Canary) -> None:
    payload = canary.pipe
    out = tmp_path / "inventory.yml"
    out.write_text(render(from_spec(hostile_spec(payload)), "spec.yaml"))
    listed = ansible_inventory(out)["_meta"]["hostvars"]["gpu02"]
    assert (listed["ansible_host"], listed["ansible_user"]) == (payload, payload)
    rendered = ansible_hostvars(out)["gpu02"]
    assert rendered["ansible_host"] == payload and rendered["ansible_user"] == payload
    assert rendered["fleetforge_fleet"] == payload
    assert rendered["lustre_client_mount_point"] == payload
    assert rendered["lustre_client_mgs_nids"] == [payload]
    assert rendered["nvidia_driver_branch"] == payload.split(".")[0]
    canary.assert_untouched()


def test_a_host_name_that_could_template_or_expand_is_refused() -> None:
    spec = load_spec(EXAMPLES / "onprem-hgx-h100.yaml")
    for name in ("gpu[01:99]", "{{ x }}", "gpu01:2222"):
        bad = spec.model_copy(
            update={
                "hosts": (*(spec.hosts or ())[1:], (spec.hosts or ())[0].model_copy(update={"name": name}))
            }
        )
        with pytest.raises(InventoryConfigError) as info:
            from_spec(bad)
        assert info.value.field == "hosts[].name"


@pytest.mark.parametrize(
    ("where", "field"),
    [(("fleet", "name"), "fleet.name"), (("storage", "mount_point"), "storage.mount_point")],
)
def test_a_stack_output_that_could_template_in_compose_exits_65(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, canary: Canary, where: tuple[str, str], field: str
) -> None:
    outputs = aws_outputs(kind="fsx-lustre", mount_source="fs-0abc.fsx@tcp:/x7yz", mount_point="/fsx")
    outputs[where[0]][where[1]] = canary.pipe
    src = tmp_path / "outputs.json"
    src.write_text(json.dumps(outputs))
    target = tmp_path / "x.aws_ec2.yml"
    code, stdout, err = run(capsys, "inventory", "--stack-outputs", str(src), "-o", str(target))
    assert code == exitcodes.DATA and f"{field}:" in err
    assert not target.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["outputs.json"]
    assert stdout == ""


@pytest.mark.parametrize(
    ("mount_point", "fragment"),
    [
        ("/etc", "under /etc"),
        ("/", "would hide"),
        ("relative/dir", "not absolute"),
        ("/lustre/../etc", "never . or .."),
        ("/data/x y", "letters, digits"),
        ("/usr/local", "under /usr"),
        ("/var", "would hide"),
        (7, "not a path"),
    ],
)
def test_a_stack_output_mount_point_outside_the_spec_grammar_exits_65(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, mount_point: Any, fragment: str
) -> None:
    """The node mounts Lustre there as root: the outputs obey the spec's mount-point rule."""
    outputs = aws_outputs(kind="fsx-lustre", mount_source="fs-1.fsx@tcp:/x7yz", mount_point=mount_point)
    src = tmp_path / "outputs.json"
    src.write_text(json.dumps(outputs))
    target = tmp_path / "x.aws_ec2.yml"
    code, stdout, err = run(capsys, "inventory", "--stack-outputs", str(src), "-o", str(target))
    assert code == exitcodes.DATA, err
    assert "storage.mount_point:" in err and fragment in err, err
    assert not target.exists() and stdout == ""


@pytest.mark.parametrize("mount_point", ["/fsx", "/mnt/scratch", "/data/fsx-01", None])
def test_a_stack_output_mount_point_in_the_spec_grammar_is_written(mount_point: str | None) -> None:
    values = lustre_from_outputs(
        {"kind": "fsx-lustre", "mount_source": "fs-1.fsx@tcp:/x7yz", "mount_point": mount_point}
    )
    assert values is not None and values["lustre_client_mount_point"] == (mount_point or "/lustre")


def test_plugin_options_from_the_outputs_are_unsafe(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    outputs = aws_outputs()
    outputs["group"]["node_filter"] = {"tag:Name": "{{ lookup('env', 'HOME') }}"}
    src = tmp_path / "outputs.json"
    src.write_text(json.dumps(outputs))
    code, stdout, err = run(capsys, "inventory", "--stack-outputs", str(src))
    assert code == exitcodes.OK, err
    doc = ansible_yaml.load(stdout.split("\n", 1)[1])
    assert isinstance(doc["filters"]["tag:Name"], ansible_yaml.Unsafe)
    assert "!unsafe" in stdout and yaml.safe_load(json.dumps(doc["regions"])) == ["us-east-2"]


def test_output_is_readable_per_umask(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out = tmp_path / "inv.yml"
    old = os.umask(0o022)
    try:
        code, _, err = run(capsys, "inventory", str(EXAMPLES / "onprem-hgx-h100.yaml"), "-o", str(out))
    finally:
        os.umask(old)
    assert code == exitcodes.OK, err
    assert out.stat().st_mode & 0o777 == 0o644  # mkstemp's 0600 would hide it from other users


def test_a_failed_write_is_one_line_and_leaves_the_old_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "inv.yml"
    out.write_text("old\n")
    spec = str(EXAMPLES / "onprem-hgx-h100.yaml")
    code, _, err = run(capsys, "inventory", spec, "-o", str(tmp_path / "missing" / "inv.yml"))
    assert code == exitcodes.CANT_CREATE and "does not exist" in err and len(err.strip().splitlines()) == 1

    def full_disk(*_: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    code, _, err = run(capsys, "inventory", spec, "-o", str(out))
    assert code == exitcodes.IO_ERROR and "No space left on device" in err and "Traceback" not in err
    assert out.read_text() == "old\n" and sorted(p.name for p in tmp_path.iterdir()) == ["inv.yml"]


# --------------------------------------------------------------------------- GCP


def gcp_outputs(*, zone: str | None = "us-central1-a", **storage: Any) -> dict[str, Any]:
    """GCP stack outputs as the GCP component exports them (the group carries project and zone)."""
    return {
        "fleet": {
            "name": "a3mega",
            "cloud": "gcp",
            "sku": "a3-megagpu-8g",
            "region": "us-central1",
            "nodes": 8,
        },
        "group": {
            "kind": "gcp-managed-instance-group",
            "name": "a3mega-nodes",
            "project": "ml-research-1",
            "region": "us-central1",
            "zone": zone,
            "node_filter": {"labels.fleetforge-group": "a3mega-nodes"},
        },
        "fabric": {"kind": "gpudirect-tcpxo", "nics": 8},
        "storage": storage or None,
        "checkpoints": None,
        "tags": {"owner": "ml"},
    }


def gce_instance(name: str, zone: str = "us-central1-a", project: str = "ml-research-1") -> dict[str, Any]:
    """One instance as the Compute Engine instances.aggregatedList API returns it (the id, a
    uint64, travels as a JSON string)."""
    api = "https://www.googleapis.com/compute/v1"
    return {
        "id": str(int.from_bytes(name.encode()[:8].ljust(8, b"0"), "big")),
        "name": name,
        "zone": f"https://www.googleapis.com/compute/v1/projects/{project}/zones/{zone}",
        "selfLink": f"https://www.googleapis.com/compute/v1/projects/{project}/zones/{zone}/instances/{name}",
        "status": "RUNNING",
        "labels": {"fleetforge-group": "a3mega-nodes"},
        "networkInterfaces": [
            {
                "networkIP": "10.0.0.7",
                "network": f"{api}/projects/{project}/global/networks/host-vpc",
                "subnetwork": f"{api}/projects/{project}/regions/{zone[:-2]}/subnetworks/host-subnet",
            }
        ],
        "machineType": f"https://www.googleapis.com/compute/v1/projects/{project}/zones/{zone}/machineTypes/x",
    }


# Runs the installed google.cloud.gcp_compute plugin over an inventory file with its one API call
# (instances.aggregatedList) answered from a file; prints hosts, their groups and vars, and what
# the plugin asked. In a child process: the collection loader Ansible's CLI installs stays there.
_GCP_PLUGIN_RUN = """
import json, sys
from ansible.plugins.loader import init_plugin_loader
init_plugin_loader()
from ansible_collections.google.cloud.plugins.inventory import gcp_compute
from ansible.inventory.manager import InventoryManager
from ansible.parsing.dataloader import DataLoader
asked = []
def fetch_list(self, params, link, query):
    asked.append([link, query])
    return json.load(open(sys.argv[2]))
gcp_compute.InventoryModule.fetch_list = fetch_list
manager = InventoryManager(loader=DataLoader(), sources=[sys.argv[1]])
hosts = {
    h.name: {"groups": sorted(g.name for g in h.get_groups()), "vars": h.get_vars()}
    for h in manager.get_hosts()
}
print(json.dumps({"asked": asked, "hosts": hosts}, default=str))
"""


def gcp_plugin_inventory(
    path: Path, instances: dict[str, list[dict[str, Any]]]
) -> tuple[dict[str, Any], list[list[str]]]:
    """The real google.cloud.gcp_compute plugin parsing `path`, its API call answered with
    `instances` (zone key -> instances); returns hosts (groups, vars) and the (link, filter) asked."""
    answer = path.with_name("instances.json")
    answer.write_text(json.dumps(instances))
    done = subprocess.run(
        [sys.executable, "-c", _GCP_PLUGIN_RUN, str(path), str(answer)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    return data["hosts"], data["asked"]


def test_gcp_outputs_become_a_gcp_compute_config_whose_hosts_carry_the_recreate_ids(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    src = tmp_path / "outputs.json"
    src.write_text(
        json.dumps(
            gcp_outputs(kind="managed-lustre", mount_source="10.9.0.2@tcp:/lfs", mount_point="/lustre")
        )
    )
    target = tmp_path / "a3mega.gcp_compute.yml"
    code, _, err = run(capsys, "inventory", "--stack-outputs", str(src), "-o", str(target))
    assert code == exitcodes.OK, err
    doc = ansible_yaml.load(target.read_text())
    assert doc["plugin"] == "google.cloud.gcp_compute"
    assert doc["projects"] == ["ml-research-1"] and doc["zones"] == ["us-central1-a"]
    assert doc["filters"] == ['labels.fleetforge-group = "a3mega-nodes"', "status = RUNNING"]
    assert doc["groups"]["gpu_nodes"] == "true" and doc["groups"]["lustre_clients"] == "true"
    assert doc["groups"]["ib_nodes"] == "false"  # TCPXO is not RDMA

    hosts, asked = gcp_plugin_inventory(
        target,
        {"zones/us-central1-a": [gce_instance("a3mega-x1b2"), gce_instance("a3mega-q9z8")]},
    )
    assert asked == [
        [
            "https://www.googleapis.com/compute/v1/projects/ml-research-1/aggregated/instances",
            '(labels.fleetforge-group = "a3mega-nodes") (status = RUNNING)',
        ]
    ]
    assert set(hosts) == {"a3mega-x1b2", "a3mega-q9z8"}
    assert {"gpu_nodes", "lustre_clients"} <= set(hosts["a3mega-x1b2"]["groups"])
    assert "ib_nodes" not in hosts["a3mega-x1b2"]["groups"]
    hostvars = hosts["a3mega-x1b2"]["vars"]
    ids = ids_from_hostvars(hostvars, host="a3mega-x1b2")
    assert (ids.gce_project, ids.gce_zone, ids.gce_instance, ids.gce_mig, ids.gce_mig_region) == (
        "ml-research-1",
        "us-central1-a",
        "a3mega-x1b2",
        "a3mega-nodes",
        None,
    )
    # The instance's own id, which a recreated instance of the same name does not keep.
    assert ids.gce_instance_id == gce_instance("a3mega-x1b2")["id"]
    assert ids.gce_instance_id != ids_from_hostvars(hosts["a3mega-q9z8"]["vars"]).gce_instance_id
    assert hostvars["ansible_host"] == "10.0.0.7"
    assert hostvars["lustre_client_mgs_nids"] == ["10.9.0.2@tcp"]
    assert hostvars["lustre_client_lnet_networks"] == "tcp0"  # the role takes the default route's NIC
    # GPUDirect-TCPXO through the real plugin: its plugin's library first on the loader's path, the
    # fabric-wide variable, and the vendor's profile script for what is the node's own.
    assert hostvars["nccl_fabric"] == "gpudirect-tcpxo"
    assert hostvars["burnin_fabric_environment"] == {
        "NCCL_FASTRAK_LLCM_DEVICE_DIRECTORY": "/dev/aperture_devices",
        "LD_LIBRARY_PATH": "/var/lib/tcpxo/lib64",
    }
    assert hostvars["nccl_profile"] == "/var/lib/tcpxo/lib64/nccl-env-profile.sh"
    assert hostvars["nccl_profile_environment"] == {"NCCL_LIB_DIR": "/var/lib/tcpxo/lib64"}
    node = RejectedNode(name="a3mega-x1b2", reasons=("slow",), ids=ids)
    action = GcpRecreate()
    assert action.node_problems(node) == []
    (step,) = action.plan([node])
    get, recreate = step.calls  # the live instance's id first: only the machine judged is recreated
    assert get.params["instance"] == "a3mega-x1b2" and get.scope["judged_id"] == str(ids.gce_instance_id)
    assert recreate.params["instance_group_manager"] == "a3mega-nodes"
    assert recreate.params["zone"] == "us-central1-a"
    # Every key written is an option the installed plugin documents.
    docs = subprocess.run(
        [str(BIN / "ansible-doc"), "-t", "inventory", "google.cloud.gcp_compute", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    options = json.loads(docs.stdout)["google.cloud.gcp_compute"]["doc"]["options"]
    assert set(doc) - {"plugin"} <= set(options)


def test_a_regional_group_lists_every_zone_and_recreates_through_the_region(tmp_path: Path) -> None:
    doc = from_stack_outputs(gcp_outputs(zone=None))
    assert doc["zones"] == ["us-central1-a", "us-central1-b", "us-central1-c", "us-central1-f"]
    target = tmp_path / "a3mega.gcp_compute.yml"
    target.write_text(render(doc, "test"))
    hosts, _ = gcp_plugin_inventory(
        target, {"zones/us-central1-b": [gce_instance("a3mega-b1", zone="us-central1-b")]}
    )
    ids = ids_from_hostvars(hosts["a3mega-b1"]["vars"], host="a3mega-b1")
    assert (ids.gce_zone, ids.gce_mig_region) == ("us-central1-b", "us-central1")
    node = RejectedNode(name="a3mega-b1", reasons=("slow",), ids=ids)
    assert GcpRecreate().node_problems(node) == []
    (step,) = GcpRecreate().plan([node])
    assert step.calls[-1].target == "RegionInstanceGroupManagersClient"


def test_tpu_slices_get_no_compute_engine_plugin() -> None:
    # TPU VMs are not Compute Engine instances: a gcp_compute inventory would list none of them.
    outputs = gcp_outputs()
    outputs["group"]["kind"] = "gcp-tpu-queued-resource"
    with pytest.raises(InventoryConfigError) as info:
        from_stack_outputs(outputs)
    assert info.value.field == "group.kind" and "TPU API" in str(info.value)


@pytest.mark.parametrize(
    ("section", "key", "value", "field"),
    [
        ("group", "project", None, "group.project"),
        ("group", "project", "ML_Research", "group.project"),
        ("group", "project", "{{ lookup('pipe', 'id') }}", "group.project"),
        ("group", "name", "a3mega nodes", "group.name"),
        ("group", "zone", "us-east1-b", "group.zone"),
        ("group", "region", "moon-central1", "group.region"),
        ("group", "node_filter", {}, "group.node_filter"),
        ("group", "node_filter", {"fleet": "a3mega"}, "group.node_filter"),
        ("group", "node_filter", {"labels.fleet": 'x" OR name = "y'}, "group.node_filter.labels.fleet"),
        ("group", "node_filter", {"labels.Fleet": "a3mega"}, "group.node_filter"),
    ],
)
def test_gcp_outputs_that_cannot_list_the_group_name_the_field(
    section: str, key: str, value: Any, field: str
) -> None:
    outputs = gcp_outputs()
    outputs[section][key] = value
    with pytest.raises(InventoryConfigError) as info:
        from_stack_outputs(outputs)
    assert info.value.field == field


def test_gcp_inventory_must_be_named_for_its_plugin(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    src = tmp_path / "outputs.json"
    src.write_text(json.dumps(gcp_outputs()))
    code, stdout, err = run(capsys, "inventory", "--stack-outputs", str(src), "-o", str(tmp_path / "a3.yml"))
    assert code == exitcodes.USAGE and "gcp_compute.yml" in err and stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["outputs.json"]


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("gcp-*.yaml")))
def test_the_gcp_stacks_planned_outputs_make_an_inventory(example: str) -> None:
    """What the GCP component exports (planned under Pulumi's mocks) is what the reader takes."""
    from fleetforge.plan import plan_file

    outputs = json.loads(json.dumps(plan_file(EXAMPLES / example).outputs))
    group = outputs["group"]
    if group["kind"] == "gcp-tpu-queued-resource":  # listed through the TPU API: test_tpu_inventory.py
        with pytest.raises(InventoryConfigError, match="TPU API"):
            from_stack_outputs(outputs)
        return
    doc = from_stack_outputs(outputs)
    assert doc["plugin"] == "google.cloud.gcp_compute"
    assert doc["projects"] == [group["project"]] and doc["zones"] == [group["zone"]]
    assert doc["compose"]["gce_project"] == f"'{group['project']}'"
    assert doc["compose"]["gce_mig"] == f"'{group['name']}'"


# --------------------------------------------------------------------------- Azure

SUBSCRIPTION = "0b1f6471-1bf0-4dda-aec3-111122223333"


def azure_outputs(domains: tuple[int, ...] = (50, 50), **storage: Any) -> dict[str, Any]:
    """Azure stack outputs as /tmp contract v1 describes them: one scale set per InfiniBand domain."""
    sets = [{"name": f"ndh100-ib{i}", "ib_domain": i, "capacity": c} for i, c in enumerate(domains)]
    return {
        "fleet": {
            "name": "ndh100",
            "cloud": "azure",
            "sku": "Standard_ND96isr_H100_v5",
            "region": "eastus",
            "zone": "1",
            "nodes": sum(domains) - 2,
            "spares": 2,
            "size": sum(domains),
        },
        "group": {
            "kind": "azure-vm-scale-set",
            "name": sets[0]["name"],
            "subscription_id": SUBSCRIPTION,
            "resource_group": "ML-Fleet_rg",
            "region": "eastus",
            "zone": "1",
            "scale_sets": sets,
            "node_filter": {"tags.fleet": "ndh100"},
        },
        "fabric": {"kind": "infiniband", "nics": 8},
        "storage": storage or None,
        "checkpoints": None,
        "tags": {"owner": "ml", "fleet": "ndh100"},
    }


def azure_host(vmss: str, instance: int, *, ip: str, fleet: str | None = "ndh100") -> dict[str, Any]:
    """One scale set instance as azure_rm's AzureHost.hostvars shows it (resource_group lowercased)."""
    rg = "ML-Fleet_rg"
    set_id = f"/subscriptions/{SUBSCRIPTION}/resourceGroups/{rg}/providers/Microsoft.Compute/virtualMachineScaleSets/{vmss}"
    return {
        "default_inventory_hostname": f"{vmss}_{instance}_abcd",
        "hostvars": {
            "name": f"{vmss}_{instance}",
            "id": f"{set_id}/virtualMachines/{instance}",
            "vmss": {"id": set_id, "name": vmss},
            "resource_group": rg.lower(),
            "location": "eastus",
            "powerstate": "running",
            "provisioning_state": "succeeded",
            "private_ipv4_addresses": [ip],
            "public_ipv4_address": [],
            "tags": {"fleet": fleet} if fleet else {},
        },
    }


# Runs the installed azure.azcollection.azure_rm plugin over an inventory file: parse() reads and
# checks the configuration, then filtering, compose, conditional and keyed groups are the plugin's
# own (_populate); only the Azure API calls (_credential_setup, _get_hosts) are replaced by hosts
# read from a file in the shape AzureHost produces. Prints hosts, groups, vars and what was asked.
_AZURE_PLUGIN_RUN = """
import json, sys, types
from ansible.plugins.loader import init_plugin_loader
init_plugin_loader()
from ansible_collections.azure.azcollection.plugins.inventory import azure_rm
from ansible.inventory.manager import InventoryManager
from ansible.parsing.dataloader import DataLoader
asked = {}
def credential_setup(self):
    asked["subscription_id"] = self.get_option("subscription_id")
    asked["auth_source"] = self.get_option("auth_source")
def get_hosts(self):
    asked["vmss_resource_groups"] = list(self.get_option("include_vmss_resource_groups"))
    asked["vm_resource_groups"] = list(self.get_option("include_vm_resource_groups"))
    self._hosts = [types.SimpleNamespace(**h) for h in json.load(open(sys.argv[2]))]
azure_rm.InventoryModule._credential_setup = credential_setup
azure_rm.InventoryModule._get_hosts = get_hosts
manager = InventoryManager(loader=DataLoader(), sources=[sys.argv[1]])
hosts = {
    h.name: {"groups": sorted(g.name for g in h.get_groups()), "vars": h.get_vars()}
    for h in manager.get_hosts()
}
print(json.dumps({"asked": asked, "hosts": hosts}, default=str))
"""


def azure_plugin_inventory(path: Path, hosts: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    answer = path.with_name("hosts.json")
    answer.write_text(json.dumps(hosts))
    done = subprocess.run(
        [sys.executable, "-c", _AZURE_PLUGIN_RUN, str(path), str(answer)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    return data["hosts"], data["asked"]


def test_azure_outputs_become_an_azure_rm_config_whose_hosts_carry_the_replace_ids(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from validation.actions.azure import AzureReplace

    src = tmp_path / "outputs.json"
    src.write_text(
        json.dumps(azure_outputs(kind="amlfs", mount_source="10.9.0.4@tcp:/lustrefs", mount_point="/lustre"))
    )
    target = tmp_path / "ndh100.azure_rm.yml"
    code, _, err = run(capsys, "inventory", "--stack-outputs", str(src), "-o", str(target))
    assert code == exitcodes.OK, err
    doc = ansible_yaml.load(target.read_text())
    assert doc["plugin"] == "azure.azcollection.azure_rm"
    assert doc["include_vmss_resource_groups"] == ["ML-Fleet_rg"] and doc["include_vm_resource_groups"] == []

    hosts, asked = azure_plugin_inventory(
        target,
        [
            azure_host("ndh100-ib0", 0, ip="10.0.0.4"),
            azure_host("ndh100-ib1", 17, ip="10.0.1.9", fleet=None),  # no tags shown: still the fleet's
            azure_host("other-ib0", 3, ip="10.0.2.2"),  # another scale set in the resource group
            azure_host("ndh100-ib0", 5, ip="10.0.0.8", fleet="someone-else"),
            {
                **azure_host("ndh100-ib1", 2, ip="10.0.1.2"),
                "hostvars": {
                    **azure_host("ndh100-ib1", 2, ip="10.0.1.2")["hostvars"],
                    "powerstate": "deallocated",
                },
            },
        ],
    )
    assert asked == {
        "subscription_id": SUBSCRIPTION,
        "auth_source": "auto",
        "vmss_resource_groups": ["ML-Fleet_rg"],
        "vm_resource_groups": [],
    }
    assert set(hosts) == {"ndh100-ib0_0", "ndh100-ib1_17"}
    assert (
        "ib_domain_0" in hosts["ndh100-ib0_0"]["groups"] and "ib_domain_1" in hosts["ndh100-ib1_17"]["groups"]
    )
    assert {"gpu_nodes", "ib_nodes", "lustre_clients"} <= set(hosts["ndh100-ib1_17"]["groups"])
    hostvars = hosts["ndh100-ib1_17"]["vars"]
    assert hostvars["ansible_host"] == "10.0.1.9" and hostvars["fleetforge_ib_domain"] == 1
    assert (
        hostvars["lustre_client_mgs_nids"] == ["10.9.0.4@tcp"]
        and hostvars["lustre_client_fsname"] == "lustrefs"
        and hostvars["lustre_client_lnet_networks"] == "tcp0"
    )
    ids = ids_from_hostvars(hostvars, host="ndh100-ib1_17")
    assert (
        ids.azure_subscription_id,
        ids.azure_resource_group,
        ids.azure_vmss_name,
        ids.azure_vmss_instance_id,
    ) == (
        SUBSCRIPTION,
        "ML-Fleet_rg",  # the outputs' spelling, not the plugin's lowercased resource_group
        "ndh100-ib1",
        "17",
    )
    node = RejectedNode(name="ndh100-ib1_17", reasons=("slow",), ids=ids)
    action = AzureReplace()
    assert action.node_problems(node) == []
    (step,) = action.plan([node])
    assert step.calls[1].params["vm_scale_set_name"] == "ndh100-ib1"
    assert step.calls[1].params["vm_instance_i_ds"] == {"instanceIds": ["17"]}
    # Every key written is an option the installed plugin documents.
    docs = subprocess.run(
        [str(BIN / "ansible-doc"), "-t", "inventory", "azure.azcollection.azure_rm", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    options = json.loads(docs.stdout)["azure.azcollection.azure_rm"]["doc"]["options"]
    assert set(doc) - {"plugin"} <= set(options)


@pytest.mark.parametrize(
    ("section", "key", "value", "field"),
    [
        ("group", "subscription_id", None, "group.subscription_id"),
        ("group", "subscription_id", "not-a-guid", "group.subscription_id"),
        ("group", "resource_group", "rg.", "group.resource_group"),
        ("group", "resource_group", "rg'] or True or ['", "group.resource_group"),
        ("group", "scale_sets", [], "group.scale_sets"),
        (
            "group",
            "scale_sets",
            [{"name": "ib0'}", "ib_domain": 0, "capacity": 100}],
            "group.scale_sets[0].name",
        ),
        (
            "group",
            "scale_sets",
            [{"name": "ib0", "ib_domain": 1, "capacity": 100}],
            "group.scale_sets[0].ib_domain",
        ),
        (
            "group",
            "scale_sets",
            [{"name": "ib0", "ib_domain": 0, "capacity": "100"}],
            "group.scale_sets[0].capacity",
        ),
        ("group", "scale_sets", [{"name": "ib0", "ib_domain": 0, "capacity": 99}], "group.scale_sets"),
        ("tags", "fleet", "{{ lookup('pipe', 'id') }}", "tags.fleet"),
    ],
)
def test_azure_outputs_that_cannot_list_the_scale_sets_name_the_field(
    section: str, key: str, value: Any, field: str
) -> None:
    outputs = azure_outputs()
    outputs[section][key] = value
    with pytest.raises(InventoryConfigError) as info:
        from_stack_outputs(outputs)
    assert info.value.field == field


def test_azure_inventory_must_be_named_for_its_plugin(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    src = tmp_path / "outputs.json"
    src.write_text(json.dumps(azure_outputs()))
    code, stdout, err = run(capsys, "inventory", "--stack-outputs", str(src), "-o", str(tmp_path / "nd.yml"))
    assert code == exitcodes.USAGE and "azure_rm.yml" in err and stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["outputs.json"]


def test_one_domain_fleet_is_one_scale_set_and_one_ib_group() -> None:
    doc = from_stack_outputs(azure_outputs(domains=(34,)))
    assert doc["include_host_filters"] == ["vmss.name is defined and vmss.name in ['ndh100-ib0']"]
    assert doc["keyed_groups"] == [{"prefix": "ib_domain", "key": "{'ndh100-ib0': 0}[vmss.name] | string"}]


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("azure-*.yaml")))
def test_the_azure_stacks_planned_outputs_make_an_inventory(example: str) -> None:
    """What the Azure component exports (planned under Pulumi's mocks) is what the reader takes."""
    from fleetforge.plan import plan_file

    outputs = json.loads(json.dumps(plan_file(EXAMPLES / example).outputs))
    doc = from_stack_outputs(outputs)
    group = outputs["group"]
    assert doc["plugin"] == "azure.azcollection.azure_rm"
    assert doc["subscription_id"] == group["subscription_id"]
    assert doc["include_vmss_resource_groups"] == [group["resource_group"]]
    for scale_set in group["scale_sets"]:
        assert f"'{scale_set['name']}': {scale_set['ib_domain']}" in doc["compose"]["fleetforge_ib_domain"]
    if outputs["storage"] is not None:
        assert doc["compose"]["lustre_client_fsname"] == "'lustrefs'"
        assert doc["conditional_groups"]["lustre_clients"] == "true"


@pytest.mark.parametrize(
    ("pinned", "expected"),
    [
        ({"driver": "570"}, {"nvidia_driver_branch": "570"}),
        ({"driver": "580.65.06"}, {"nvidia_driver_branch": "580", "nvidia_driver_version": "580.65.06"}),
        ({"cuda": "12.8"}, {"cuda_toolkit_version": "12.8"}),
        ({"cuda": "12.8.1"}, {"cuda_toolkit_version": "12.8", "cuda_toolkit_release": "12.8.1"}),
        ({"nccl": "2.26.2"}, {"nccl_version": "2.26.2-1"}),
        ({"nccl": "2.25.1-1"}, {"nccl_version": "2.25.1-1"}),
        ({"vbios": "96.00.89.00.01"}, {}),  # the gate checks it; no role installs a VBIOS
    ],
)
def test_exact_pins_reach_the_roles_exactly(pinned: dict[str, str], expected: dict[str, str]) -> None:
    from fleet.catalog import get_sku
    from stacks.ansible_inventory import fleet_vars

    got = fleet_vars("train-a", get_sku("p5.48xlarge"), pinned)
    assert {k: v for k, v in got.items() if not k.startswith("fleetforge_")} == expected


# ------------------------------------------------------------------ the fabric's NCCL environment

# Per SKU: (nccl_fabric, variables burnin_fabric_environment must hold, the profile script or None).
FABRIC_EXPECTED: dict[str, tuple[str, dict[str, str], str | None]] = {
    "p4d.24xlarge": ("efa", {"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1"}, None),
    "p5.48xlarge": ("efa", {"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1"}, None),
    "p5e.48xlarge": ("efa", {"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1"}, None),
    "p5en.48xlarge": ("efa", {"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1"}, None),
    "p6-b200.48xlarge": ("efa", {"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1"}, None),
    "a3-highgpu-8g": (
        "gpudirect-tcpx",
        {"NCCL_NET": "GPUDirectTCPX_v7", "LD_LIBRARY_PATH": "/var/lib/tcpx/lib64", "NCCL_CROSS_NIC": "0"},
        None,
    ),
    "a3-megagpu-8g": (
        "gpudirect-tcpxo",
        {"LD_LIBRARY_PATH": "/var/lib/tcpxo/lib64"},
        "/var/lib/tcpxo/lib64/nccl-env-profile.sh",
    ),
    "a3-ultragpu-8g": (
        "gib",
        {"NCCL_NET": "gIB", "LD_LIBRARY_PATH": "/usr/local/gib/lib64"},
        "/usr/local/gib/scripts/set_nccl_env.sh",
    ),
    "a4-highgpu-8g": (
        "gib",
        {"NCCL_NET": "gIB", "LD_LIBRARY_PATH": "/usr/local/gib/lib64"},
        "/usr/local/gib/scripts/set_nccl_env.sh",
    ),
    "Standard_ND96isr_H100_v5": ("infiniband", {}, None),
    "Standard_ND96isr_H200_v5": ("infiniband", {}, None),
    "hgx-h100-8": ("infiniband", {}, None),
    "hgx-h200-8": ("infiniband", {}, None),
    "hgx-b200-8": ("infiniband", {}, None),
}
# Names whose values depend on the node: never written from the catalog (the profile or the operator sets them).
NODE_SPECIFIC = re.compile(r"(IFNAME|CTRL_DEV|_HCA|BINDINGS|UNIX_CLIENT_PREFIX|TOPO_FILE)$")


def test_every_gpu_sku_has_its_expected_fabric_environment() -> None:
    from fleet.catalog import all_skus

    gpu = {s.sku for s in all_skus() if s.accelerator.kind == "gpu"}
    assert gpu == set(FABRIC_EXPECTED)


@pytest.mark.parametrize("name", sorted(FABRIC_EXPECTED))
def test_the_skus_fabric_environment_reaches_nccl_and_the_burn_in(name: str) -> None:
    from fleet.catalog import get_sku
    from stacks.ansible_inventory import group_vars_for

    fabric, expected_env, profile = FABRIC_EXPECTED[name]
    gpu = group_vars_for(get_sku(name), None)["gpu_nodes"]
    assert gpu["nccl_fabric"] == fabric
    assert expected_env.items() <= gpu["burnin_fabric_environment"].items()
    assert gpu.get("nccl_profile") == profile
    # /etc/nccl.conf gets the NCCL_*/FI_* part; the loader's path only the process environment.
    assert "LD_LIBRARY_PATH" not in gpu["nccl_environment"]
    assert gpu["nccl_environment"].items() <= gpu["burnin_fabric_environment"].items()
    assert not [k for k in gpu["burnin_fabric_environment"] if NODE_SPECIFIC.search(k)]


def test_gpu_nodes_expect_the_nvswitch_fabric_of_their_sku() -> None:
    """Fabric Manager follows what gpu_facts finds; the SKU says what it must find, so a B200 whose
    switch-management ports do not show fails rather than running without Fabric Manager."""
    from fleet.catalog import get_sku
    from stacks.ansible_inventory import group_vars_for

    def expected(name: str) -> object:
        return group_vars_for(get_sku(name), None)["gpu_nodes"].get("gpu_facts_expected_nvswitch_fabric")

    assert expected("p6-b200.48xlarge") == expected("a4-highgpu-8g") == expected("hgx-b200-8") == "nvlink5"
    assert expected("p5en.48xlarge") == expected("a3-megagpu-8g") == expected("hgx-h200-8") == "nvswitch"
    assert expected("tpu-v5p") is None and expected("cpu") is None  # no NVIDIA GPU: nothing to expect


def test_tcpx_and_tcpxo_no_longer_fall_back_to_plain_tcp() -> None:
    from fleet.catalog import get_sku
    from stacks.ansible_inventory import group_vars_for

    for name in ("a3-highgpu-8g", "a3-megagpu-8g"):
        assert group_vars_for(get_sku(name), None)["gpu_nodes"]["nccl_fabric"] != "tcp"


def test_skus_without_nccl_get_no_nccl_variables() -> None:
    from fleet.catalog import get_sku
    from stacks.ansible_inventory import nccl_vars

    assert nccl_vars(get_sku("tpu-v5p")) == {}
    assert nccl_vars(get_sku("cpu")) == {
        "nccl_fabric": "tcp",
        "nccl_environment": {},
        "burnin_fabric_environment": {},
    }


_ROLE = ROOT / "roles" / "nccl"


def _role_task(name: str) -> dict[str, Any]:
    def walk(tasks: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for task in tasks:
            yield task
            yield from walk(task.get("block", []))

    tasks = yaml.safe_load((_ROLE / "tasks" / "main.yml").read_text())
    (task,) = [t for t in walk(tasks) if t.get("name") == name]
    return {k: v for k, v in task.items() if k != "tags"}


def test_the_nccl_roles_template_writes_each_skus_environment(tmp_path: Path) -> None:
    """The role's own profile-reading task and template, run by Ansible on this machine for every
    GPU SKU with the variables the inventory gives it: /etc/nccl.conf carries the catalog's
    variables, and what the vendor's profile script exported (a stand-in script here), never the
    variables the script was given or anything that is not NCCL_*/FI_*."""
    from fleet.catalog import get_sku
    from stacks.ansible_inventory import group_vars_for

    profile = tmp_path / "profile.sh"
    profile.write_text(
        'export NCCL_FASTRAK_IFNAME="eth1,eth2"\nexport NCCL_PROFILE_SAW="lib=${NCCL_LIB_DIR:-none}"\n'
        "export PATH=/usr/bin:/bin\n"
    )
    defaults = yaml.safe_load((_ROLE / "defaults" / "main.yml").read_text())
    hosts: dict[str, dict[str, Any]] = {}
    names = sorted(FABRIC_EXPECTED)
    for i, name in enumerate(names):
        gpu = group_vars_for(get_sku(name), None)["gpu_nodes"]
        if gpu.get("nccl_profile"):
            gpu["nccl_profile"] = str(profile)  # the vendor's script is on the image, not here
        hosts[f"h{i}"] = gpu
    read = _role_task("Read what the fabric's profile script exports")
    write = _role_task("Write the NCCL environment for the fabric")
    write["ansible.builtin.template"] = {
        "src": str(_ROLE / "templates" / "nccl.conf.j2"),
        "dest": "{{ out_dir }}/{{ inventory_hostname }}.conf",
        "mode": "0644",
    }
    inventory = {"all": {"vars": {**defaults, "out_dir": str(tmp_path)}, "hosts": local_hosts(hosts)}}
    done = run_play(tmp_path, inventory, [read, write])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    for i, name in enumerate(names):
        lines = (tmp_path / f"h{i}.conf").read_text().splitlines()
        conf = dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))
        gpu = group_vars_for(get_sku(name), None)["gpu_nodes"]
        assert gpu["nccl_environment"].items() <= conf.items(), name
        assert "LD_LIBRARY_PATH" not in conf and "PATH" not in conf
        if gpu.get("nccl_profile"):
            assert conf["NCCL_FASTRAK_IFNAME"] == "eth1,eth2", name
            expected_lib = gpu["nccl_profile_environment"].get("NCCL_LIB_DIR", "none")
            assert conf["NCCL_PROFILE_SAW"] == f"lib={expected_lib}", name
            assert "NCCL_LIB_DIR" not in conf  # the script's input, not the fabric's setting
        else:
            assert "NCCL_FASTRAK_IFNAME" not in conf and "NCCL_PROFILE_SAW" not in conf
        if gpu["nccl_fabric"] == "efa":
            assert (conf["FI_PROVIDER"], conf["FI_EFA_USE_DEVICE_RDMA"]) == ("efa", "1")
