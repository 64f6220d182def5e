"""roles/nccl: what /etc/nccl.conf carries per fabric, what the verify step demands of it, and the
check that the libnccl build is for the CUDA toolkit's major release.

NCCL applies /etc/nccl.conf to every job that does not override it. Its environment-variable page
(https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html) keeps "System configuration"
variables (interfaces, HCAs, the RoCE GID and traffic class), which belong there, apart from
"Debugging" ones (NCCL_IB_DISABLE, NCCL_NET_GDR_LEVEL, NCCL_IB_QPS_PER_CONNECTION, ...), which
"should not be used in production nor retained in scripts". The role's own template and tasks run
under ansible-playbook on this machine, one inventory host per case.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import ROOT
from tests.local_play import local_hosts, play_results, run_play

ROLE = ROOT / "roles" / "nccl"
DEFAULTS: dict[str, Any] = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
# The user guide's Debugging variables the role used to write on InfiniBand and RoCE.
DEBUGGING = ("NCCL_IB_DISABLE", "NCCL_NET_GDR_LEVEL", "NCCL_IB_QPS_PER_CONNECTION")


def _task(file: str, name: str) -> dict[str, Any]:
    def walk(tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        for task in tasks:
            found += [task, *walk(task.get("block", []))]
        return found

    matches = [t for t in walk(yaml.safe_load((ROLE / "tasks" / file).read_text())) if t.get("name") == name]
    assert len(matches) == 1, f"roles/nccl/tasks/{file}: no single task {name!r}"
    return {k: v for k, v in matches[0].items() if k != "tags"}


def _conf(path: Path) -> dict[str, str]:
    lines = path.read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


def test_nccl_conf_carries_the_nodes_settings_and_no_debugging_variables(tmp_path: Path) -> None:
    """Rendered by the role's template with the variables `fleetforge inventory` gives each fabric."""
    from fleet.catalog import get_sku
    from stacks.ansible_inventory import group_vars_for

    def fabric(sku: str) -> dict[str, Any]:
        return group_vars_for(get_sku(sku), None)["gpu_nodes"]

    hosts = {
        # An HGX H100 (InfiniBand) with its compute HCAs named, as an operator would.
        "infiniband": {**fabric("hgx-h100-8"), "nccl_ib_hca": "=mlx5_0:1,mlx5_1:1"},
        "roce": {"nccl_fabric": "roce", "nccl_ib_hca": "=mlx5_0", "nccl_ib_gid_index": 3},
        "efa": fabric("p5.48xlarge"),
        # A Debugging variable set on purpose (a workaround) still reaches the file.
        "infiniband_workaround": {
            **fabric("hgx-h100-8"),
            "nccl_env_extra": {"NCCL_IB_QPS_PER_CONNECTION": "2"},
        },
    }
    write = {
        "name": "render",
        "ansible.builtin.template": {
            "src": str(ROLE / "templates" / "nccl.conf.j2"),
            "dest": "{{ out_dir }}/{{ inventory_hostname }}.conf",
            "mode": "0644",
        },
    }
    inventory = {"all": {"vars": {**DEFAULTS, "out_dir": str(tmp_path)}, "hosts": local_hosts(hosts)}}
    done = run_play(tmp_path, inventory, [write])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    conf = {name: _conf(tmp_path / f"{name}.conf") for name in hosts}

    assert conf["infiniband"] == {"NCCL_SOCKET_IFNAME": "^lo,docker", "NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1"}
    assert conf["roce"] == {
        "NCCL_SOCKET_IFNAME": "^lo,docker",
        "NCCL_IB_HCA": "=mlx5_0",
        "NCCL_IB_GID_INDEX": "3",
        "NCCL_IB_TC": "106",
    }
    for name in ("infiniband", "roce"):
        assert not set(DEBUGGING) & set(conf[name]), (name, conf[name])
    # EFA: the catalog's libfabric variables; its NCCL_NET_GDR_LEVEL (a Debugging one) is gone.
    assert conf["efa"]["NCCL_SOCKET_IFNAME"] == "^lo,docker"
    assert (conf["efa"]["FI_PROVIDER"], conf["efa"]["FI_EFA_USE_DEVICE_RDMA"]) == ("efa", "1")
    assert "NCCL_NET_GDR_LEVEL" not in conf["efa"]
    assert "NCCL_IB_QPS_PER_CONNECTION" not in conf["efa"]
    assert conf["infiniband_workaround"]["NCCL_IB_QPS_PER_CONNECTION"] == "2"
    assert "NCCL_IB_DISABLE" not in conf["infiniband_workaround"]


VERIFY = "Verify | libnccl is loadable and the fabric environment is set"
LDCONFIG = "\tlibnccl.so.2 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libnccl.so.2\n"
# (fabric, nccl_ib_hca, /etc/nccl.conf as read back, verify passes)
VERIFY_CASES: dict[str, tuple[str, str, str, bool]] = {
    "ib_node_settings_only": (
        "infiniband",
        "=mlx5_0",
        "NCCL_IB_HCA==mlx5_0\nNCCL_SOCKET_IFNAME=^lo,docker\n",
        True,
    ),
    "ib_nccl_chooses_hcas": ("infiniband", "", "NCCL_SOCKET_IFNAME=^lo,docker\n", True),
    "ib_hca_not_written": ("infiniband", "=mlx5_0", "NCCL_SOCKET_IFNAME=^lo,docker\n", False),
    "roce_with_gid": (
        "roce",
        "",
        "NCCL_IB_GID_INDEX=3\nNCCL_IB_TC=106\nNCCL_SOCKET_IFNAME=^lo,docker\n",
        True,
    ),
    "roce_without_gid": ("roce", "", "NCCL_IB_TC=106\nNCCL_SOCKET_IFNAME=^lo,docker\n", False),
    "no_socket_ifname": ("infiniband", "", "NCCL_IB_DISABLE=0\n", False),
}


def test_the_verify_step_wants_the_nodes_settings_not_nccl_ib_disable(tmp_path: Path) -> None:
    hosts = {
        name: {
            **DEFAULTS,
            "nccl_fabric": fabric,
            "nccl_ib_hca": hca,
            "nccl_ldconfig": {"stdout": LDCONFIG},
            "nccl_conf_file": {"content": base64.b64encode(conf.encode()).decode()},
        }
        for name, (fabric, hca, conf, _) in VERIFY_CASES.items()
    }
    doc = play_results(tmp_path, {"all": {"hosts": local_hosts(hosts)}}, [_task("verify.yml", VERIFY)])
    results = doc["plays"][0]["tasks"][0]["hosts"]
    passed = {name: not results[name].get("failed", False) for name in VERIFY_CASES}
    assert passed == {name: ok for name, (*_, ok) in VERIFY_CASES.items()}, results


BUILD_CHECK = "Check the NCCL build is for the CUDA toolkit's major release"
# (host variables over the role's defaults, passes). The defaults: libnccl2 2.26.2-1+cuda12.8.
BUILD_CASES: dict[str, tuple[dict[str, Any], bool]] = {
    "no_toolkit_in_the_play": ({}, True),
    "toolkit_default": ({"cuda_toolkit_version": "12.8"}, True),
    # NVIDIA's CUDA 12 build of 2.30.7 is +cuda12.9; it runs with a 12.8 toolkit (same major).
    "newer_minor_build": (
        {"nccl_version": "2.30.7-1", "nccl_cuda_version": "12.9", "cuda_toolkit_version": "12.8"},
        True,
    ),
    "cuda13_build_for_13_0": (
        {"nccl_version": "2.30.7-1", "nccl_cuda_version": "13.3", "cuda_toolkit_version": "13.0"},
        True,
    ),
    "toolkit_as_yaml_float": ({"nccl_cuda_version": "13.3", "cuda_toolkit_version": 13.0}, True),
    # A cuda: 13.0 pin with the role's CUDA 12.8 build of NCCL.
    "cuda12_build_on_13": ({"cuda_toolkit_version": "13.0"}, False),
    "cuda13_build_on_12": ({"nccl_cuda_version": "13.3", "cuda_toolkit_version": "12.8"}, False),
}


def test_the_nccl_build_must_be_for_the_toolkits_cuda_major(tmp_path: Path) -> None:
    hosts = {name: {**DEFAULTS, **given} for name, (given, _) in BUILD_CASES.items()}
    doc = play_results(tmp_path, {"all": {"hosts": local_hosts(hosts)}}, [_task("main.yml", BUILD_CHECK)])
    results = doc["plays"][0]["tasks"][0]["hosts"]
    passed = {name: not results[name].get("failed", False) for name in BUILD_CASES}
    assert passed == {name: ok for name, (_, ok) in BUILD_CASES.items()}, results
    msg = results["cuda12_build_on_13"]["msg"]
    assert "nccl_cuda_version 12.8" in msg and "cuda_toolkit_version 13.0" in msg, msg
