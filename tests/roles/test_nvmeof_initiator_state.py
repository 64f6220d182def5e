"""nvmeof_initiator connects from the node's state, and keeps the host ID the host NQN's UUID.

The role's own tasks run under ansible-playbook on this machine, one inventory host per case. The
runtime tasks run nvme-cli through __nvmeof_initiator_nvme, which each case points at a stand-in:
it records its arguments and prints nvme-cli's own JSON, copied from public sources (below), for
`list-subsys -o json` and `discover -o json`; `connect-all` connects what the case says it would.
Nothing here touches this machine's kernel or /etc/nvme.
"""

from __future__ import annotations

import base64
import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import BIN, ROOT
from tests.local_play import local_hosts, play_results

ROLE = ROOT / "roles" / "nvmeof_initiator"

# `nvme list-subsys -o json` of nvme-cli 2.11 as a netdata maintainer posted it in
# https://github.com/netdata/netdata/issues/19500 (its first subsystem, a local PCIe drive). Its
# HostID is not the HostNQN's UUID: the mismatch this role now repairs.
LOCAL_DRIVE = {
    "Name": "nvme-subsys2",
    "NQN": "nqn.2014.08.org.nvmexpress:1bb11bb17VS00KNX            Seagate FireCuda 530 ZP4000GM30023",
    "Paths": [{"Name": "nvme2", "Transport": "pcie", "Address": "0000:61:00.0", "State": "live"}],
}
HOST_NQN = "nqn.2014-08.org.nvmexpress:uuid:ca5d7304-9502-4787-bca1-44fe5be80db2"
HOST_UUID = HOST_NQN.rsplit(":", 1)[1]
OLD_HOST_ID = "b2a48093-e904-4a08-9f09-75fb2ac784be"
# A fabrics subsystem in the same shape (nvme-cli's json_print_nvme_subsystem_list: Name, NQN,
# IOPolicy, Paths of Name, Transport, Address, State), with the NQN and path of the `nvme
# list-subsys` output in https://github.com/linux-nvme/nvme-cli/pull/1540.
POWERSTORE_NQN = "nqn.1988-11.com.dell:powerstore:00:f03028e73ef7D032D81E"
POWERSTORE = {
    "Name": "nvme-subsys1",
    "NQN": POWERSTORE_NQN,
    "IOPolicy": "numa",
    "Paths": [
        {"Name": "nvme1", "Transport": "tcp", "Address": "traddr=10.162.198.42,trsvcid=4420", "State": "live"}
    ],
}
SCRATCH_NQN = "nqn.2014-08.org.example:scratch"
SCRATCH = {
    "Name": "nvme-subsys3",
    "NQN": SCRATCH_NQN,
    "IOPolicy": "numa",
    "Paths": [
        {"Name": "nvme3", "Transport": "tcp", "Address": "traddr=192.0.2.10,trsvcid=4420", "State": "live"}
    ],
}
# nvme-cli 1.x (Ubuntu 22.04): the example in nvme-cli's Documentation/nvme-list-subsys.txt.
LIST_1X = {
    "Subsystems": [
        {"Name": "nvme-subsys0", "NQN": "nvmf-test"},
        {
            "Paths": [
                {
                    "Name": "nvme0",
                    "Transport": "rdma",
                    "Address": "traddr=1.1.1.3,trsvcid=4420,host_traddr=1.1.1.1",
                    "AddressDetails": {"traddr": "1.1.1.3", "host_traddr": "1.1.1.1", "trsvcid": "4420"},
                }
            ]
        },
    ]
}
# `nvme discover -o json` as posted in https://github.com/linux-nvme/nvme-cli/pull/1018.
DISCOVERED = {
    "device": "nvme1",
    "genctr": 4,
    "records": [
        {
            "trtype": "tcp",
            "adrfam": "ipv4",
            "subtype": "nvme subsystem",
            "treq": "not specified, sq flow control disable supported",
            "portid": 1,
            "trsvcid": "8009",
            "subnqn": name,
            "traddr": "127.0.0.1",
            "sectype": "none",
        }
        for name in ("storage1", "storage2")
    ],
}


def _listed(*subsystems: dict[str, Any], host_id: str = HOST_UUID) -> list[dict[str, Any]]:
    return [{"HostNQN": HOST_NQN, "HostID": host_id, "Subsystems": list(subsystems)}]


def _storage(name: str, ctrl: str) -> dict[str, Any]:
    path = {"Name": ctrl, "Transport": "tcp", "Address": "traddr=127.0.0.1,trsvcid=4420", "State": "live"}
    return {"Name": f"nvme-subsys-{name}", "NQN": name, "IOPolicy": "numa", "Paths": [path]}


TCP_SCRATCH = {"transport": "tcp", "address": "192.0.2.10", "nqn": SCRATCH_NQN}
DISCOVERY_ONLY = {"transport": "tcp", "address": "127.0.0.1", "port": 8009}
# case: (host vars, list-subsys before, list-subsys after connect-all or None (it connects nothing),
#        discover output or None (no answer), connect-all expected to run, expected changed)
CASES: dict[str, tuple[dict[str, Any], Any, Any, Any, bool, bool]] = {
    "connected": (
        {
            "nvmeof_initiator_targets": [
                {"transport": "tcp", "address": "10.162.198.42", "nqn": POWERSTORE_NQN}
            ]
        },
        _listed(LOCAL_DRIVE, POWERSTORE),
        None,
        None,
        False,
        False,
    ),
    "missing": (
        {"nvmeof_initiator_targets": [TCP_SCRATCH]},
        _listed(LOCAL_DRIVE, POWERSTORE),
        _listed(LOCAL_DRIVE, POWERSTORE, SCRATCH),
        None,
        True,
        True,
    ),
    "target_down": (
        {"nvmeof_initiator_targets": [TCP_SCRATCH]},
        _listed(LOCAL_DRIVE),
        None,
        None,
        True,
        False,
    ),
    "nothing_connected": (
        {"nvmeof_initiator_targets": [TCP_SCRATCH]},
        "",
        _listed(SCRATCH),
        None,
        True,
        True,
    ),
    "discovery_only_missing": (
        {"nvmeof_initiator_targets": [DISCOVERY_ONLY]},
        _listed(LOCAL_DRIVE, _storage("storage1", "nvme4")),
        _listed(LOCAL_DRIVE, _storage("storage1", "nvme4"), _storage("storage2", "nvme5")),
        DISCOVERED,
        True,
        True,
    ),
    "discovery_only_connected": (
        {"nvmeof_initiator_targets": [DISCOVERY_ONLY]},
        _listed(LOCAL_DRIVE, _storage("storage1", "nvme4"), _storage("storage2", "nvme5")),
        None,
        DISCOVERED,
        False,
        False,
    ),
    "discovery_unanswered": (
        {"nvmeof_initiator_targets": [DISCOVERY_ONLY]},
        _listed(LOCAL_DRIVE),
        None,
        None,
        True,
        False,
    ),
    "nvme_cli_1x": (
        {"nvmeof_initiator_targets": [{"transport": "rdma", "address": "1.1.1.3", "nqn": "nvmf-test"}]},
        LIST_1X,
        None,
        None,
        False,
        False,
    ),
    "runtime_off": (
        {"nvmeof_initiator_targets": [TCP_SCRATCH], "nvmeof_initiator_apply_runtime": False},
        _listed(LOCAL_DRIVE),
        _listed(LOCAL_DRIVE, SCRATCH),
        None,
        False,
        False,
    ),
}
RUNTIME_TASKS = [
    "List the connected NVMe subsystems",
    "Note the connected subsystems",
    "Ask the discovery-only targets which subsystems they offer",
    "Connect the subsystems not connected (nvme connect-all over discovery.conf)",
    "Read back what connect-all connected",
]
STAND_IN = """\
import json, pathlib, sys
here = pathlib.Path(__file__).parent
with open(here / "argv.log", "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\\n")
command = sys.argv[1]
if command == "list-subsys":
    print((here / "list-subsys.json").read_text())
elif command == "discover":
    if not (here / "discover.json").exists():
        sys.exit("failed to add controller, error connecting to 127.0.0.1")
    print((here / "discover.json").read_text())
elif command == "connect-all" and (here / "after.json").exists():
    (here / "list-subsys.json").write_text((here / "after.json").read_text())
"""


def _tasks(file: str, names: list[str]) -> list[dict[str, Any]]:
    tasks = yaml.safe_load((ROLE / "tasks" / file).read_text())
    by_name = {t.get("name"): t for t in tasks}
    missing = [n for n in names if n not in by_name]
    assert not missing, f"roles/nvmeof_initiator/tasks/{file} has no task named {missing}"
    return [by_name[n] for n in names]


def _role_vars() -> dict[str, Any]:
    path = ROLE / "vars" / "main.yml"
    return yaml.safe_load(path.read_text()) if path.exists() else {}


def _stand_in(folder: Path, before: Any, after: Any, discovered: Any) -> Path:
    folder.mkdir()
    nvme = folder / "nvme"
    nvme.write_text(f"#!{sys.executable}\n{STAND_IN}")
    nvme.chmod(nvme.stat().st_mode | stat.S_IXUSR)
    (folder / "list-subsys.json").write_text(
        before if isinstance(before, str) else json.dumps(before, indent=2)
    )
    if after is not None:
        (folder / "after.json").write_text(json.dumps(after, indent=2))
    if discovered is not None:
        (folder / "discover.json").write_text(json.dumps(discovered, indent=2))
    return nvme


def _calls(folder: Path) -> list[list[str]]:
    log = folder / "argv.log"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def _host(name: str, given: dict[str, Any], nvme: Path) -> dict[str, Any]:
    return {
        **_role_vars(),
        "nvmeof_initiator_apply_runtime": True,
        "nvmeof_initiator_host_nqn": HOST_NQN,
        "nvmeof_initiator_host_uuid": HOST_UUID,
        **given,
        "__nvmeof_initiator_nvme": str(nvme),
    }


def _results(doc: dict[str, Any], name: str) -> dict[str, dict[str, Any]]:
    (task,) = [t for t in doc["plays"][0]["tasks"] if t["task"]["name"] == name]
    hosts: dict[str, dict[str, Any]] = task["hosts"]
    return hosts


def test_connect_all_runs_only_where_a_target_is_not_connected(tmp_path: Path) -> None:
    folders = {name: tmp_path / name for name in CASES}
    hosts = local_hosts(
        {
            name: _host(name, given, _stand_in(folders[name], before, after, discovered))
            for name, (given, before, after, discovered, _, _) in CASES.items()
        }
    )
    doc = play_results(tmp_path, {"all": {"hosts": hosts}}, _tasks("main.yml", RUNTIME_TASKS))
    stats = doc["stats"]
    assert all(s["failures"] == 0 and s["unreachable"] == 0 for s in stats.values()), json.dumps(doc)[-3000:]
    connect = _results(doc, RUNTIME_TASKS[3])
    read_back = _results(doc, RUNTIME_TASKS[4])
    for name, (given, _, _, _, runs, changed) in CASES.items():
        calls = _calls(folders[name])
        ran = [c[0] for c in calls]
        assert (["connect-all"] in calls) is runs, (name, calls)
        assert connect[name].get("skipped", False) is not runs, (name, connect[name])
        # Changed only when connect-all connected something: the read-back says so, nothing else.
        assert stats[name]["changed"] == int(changed), (name, stats[name], read_back[name])
        if given.get("nvmeof_initiator_apply_runtime") is False:
            assert calls == [], (name, calls)  # the kernel is not touched at all
            continue
        assert calls[0] == ["list-subsys", "-o", "json"], (name, calls)
        asked = [c for c in calls if c[0] == "discover"]
        if given["nvmeof_initiator_targets"][0].get("nqn"):
            assert asked == [], (name, calls)
        else:
            assert asked == [
                ["discover", "--transport=tcp", "--traddr=127.0.0.1", "--trsvcid=8009", "-o", "json"]
            ]
        assert ran.count("list-subsys") == (2 if runs else 1), (name, calls)


def _check_mode_results(
    folder: Path, inventory: dict[str, Any], tasks: list[dict[str, Any]]
) -> dict[str, Any]:
    """play_results under `ansible-playbook --check`."""
    (folder / "inventory.yml").write_text(yaml.safe_dump(inventory))
    (folder / "play.yml").write_text(
        yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": tasks}])
    )
    done = subprocess.run(
        [
            str(BIN / "ansible-playbook"),
            "--check",
            "-i",
            str(folder / "inventory.yml"),
            str(folder / "play.yml"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json"},
    )
    assert "{" in done.stdout, done.stdout[-2000:] + done.stderr[-2000:]
    doc: dict[str, Any] = json.loads(done.stdout[done.stdout.index("{") :])
    return doc


def test_check_mode_lists_but_neither_asks_nor_connects(tmp_path: Path) -> None:
    cases = {name: CASES[name] for name in ("missing", "discovery_only_missing")}
    folders = {name: tmp_path / name for name in cases}
    hosts = local_hosts(
        {
            name: _host(name, given, _stand_in(folders[name], before, after, discovered))
            for name, (given, before, after, discovered, _, _) in cases.items()
        }
    )
    doc = _check_mode_results(tmp_path, {"all": {"hosts": hosts}}, _tasks("main.yml", RUNTIME_TASKS))
    assert all(s["failures"] == 0 for s in doc["stats"].values()), json.dumps(doc)[-3000:]
    for name in cases:
        # Listing reads sysfs only; asking a discovery controller connects to it: not in check mode.
        assert _calls(folders[name]) == [["list-subsys", "-o", "json"]], name
        assert doc["stats"][name]["changed"] == 0, doc["stats"][name]
    # The prediction: connect-all would run where an NQN target is not connected.
    connect = _results(doc, RUNTIME_TASKS[3])
    assert connect["missing"]["msg"] == "Command would have run if not in check mode", connect["missing"]


def test_connect_all_keeps_the_host_id_of_live_connections_made_before_it_changed(tmp_path: Path) -> None:
    # As the netdata sample has it: connections under a host ID that is not the host NQN's UUID.
    before = _listed(LOCAL_DRIVE, POWERSTORE, host_id=OLD_HOST_ID)
    nvme = _stand_in(
        tmp_path / "h", before, _listed(LOCAL_DRIVE, POWERSTORE, SCRATCH, host_id=OLD_HOST_ID), None
    )
    hosts = local_hosts({"h": _host("h", {"nvmeof_initiator_targets": [TCP_SCRATCH]}, nvme)})
    doc = play_results(tmp_path, {"all": {"hosts": hosts}}, _tasks("main.yml", RUNTIME_TASKS))
    assert doc["stats"]["h"]["failures"] == 0, json.dumps(doc)[-3000:]
    assert ["connect-all", f"--hostid={OLD_HOST_ID}"] in _calls(tmp_path / "h")


# ------------------------------------------------------------------ the host ID

UUID = "0c4d8a6e-1b7f-4f7e-9a51-3c2d1e0f9b8a"
HOST_ID_CASES = {
    # host NQN from /etc/nvme/hostnqn (as nvme gen-hostnqn writes it), from the inventory, or of another form
    "from_file": (
        {"nvmeof_initiator_hostnqn": "", "__file": f"nqn.2014-08.org.nvmexpress:uuid:{UUID}\n"},
        UUID,
    ),
    "from_inventory": ({"nvmeof_initiator_hostnqn": f"nqn.2014-08.org.nvmexpress:uuid:{UUID.upper()}"}, UUID),
    "no_uuid": ({"nvmeof_initiator_hostnqn": "", "__file": "nqn.2024-01.org.example:node-7\n"}, None),
}


def test_the_host_id_is_the_uuid_in_the_host_nqn(tmp_path: Path) -> None:
    note, take, generate = _tasks(
        "main.yml",
        [
            "Note the host NQN and the UUID in it",
            "Take the host ID from the host NQN's UUID",
            "Generate a host ID when there is none (host NQN without a UUID)",
        ],
    )
    names = {}
    for name, (given, _) in HOST_ID_CASES.items():
        host_vars = {**_role_vars(), **{k: v for k, v in given.items() if k != "__file"}}
        if "__file" in given:
            host_vars["nvmeof_initiator_hostnqn_file"] = {
                "content": base64.b64encode(given["__file"].encode()).decode()
            }
        else:
            host_vars["nvmeof_initiator_hostnqn_file"] = {"skipped": True}
        names[name] = host_vars
    take = {
        **take,
        "ansible.builtin.copy": {
            **take["ansible.builtin.copy"],
            "dest": str(tmp_path) + "/{{ inventory_hostname }}.hostid",
        },
    }
    # Generating writes /etc/nvme/hostid: here only whether it would run is asked.
    would_generate = {
        "name": "would generate",
        "ansible.builtin.debug": {"msg": "generate"},
        "when": generate["when"],
    }
    doc = play_results(tmp_path, {"all": {"hosts": local_hosts(names)}}, [note, take, would_generate])
    assert all(s["failures"] == 0 for s in doc["stats"].values()), json.dumps(doc)[-3000:]
    generated = _results(doc, "would generate")
    for name, (_, uuid) in HOST_ID_CASES.items():
        written = tmp_path / f"{name}.hostid"
        if uuid is None:
            assert not written.exists() and not generated[name].get("skipped"), name
        else:
            assert written.read_text() == f"{uuid}\n", name
            assert generated[name].get("skipped"), name


def _verify_files(nqn: str, host_id: str) -> dict[str, Any]:
    return {
        "results": [
            {"content": base64.b64encode(text.encode()).decode()} for text in (f"{nqn}\n", f"{host_id}\n", "")
        ]
    }


def test_hosts_sharing_a_host_id_fail_verification_naming_both(tmp_path: Path) -> None:
    # Host NQNs without a UUID (each its own), host IDs made at random once and cloned with an image.
    shared, own = "5e0b3f1a-9c1d-4b6e-8f2a-7d3c9e1b0a4f", "a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d"
    hosts = {
        "gpu01": _verify_files("nqn.2024-01.org.example:gpu01", shared),
        "gpu02": _verify_files("nqn.2024-01.org.example:gpu02", own),
        "gpu03": _verify_files("nqn.2024-01.org.example:gpu03", shared),
    }
    tasks = _tasks(
        "verify.yml",
        [
            "Verify | note this host's NQN and host ID for the comparison across hosts",
            "Verify | no two hosts of the play share a host NQN",
            "Verify | no two hosts of the play share a host ID",
        ],
    )
    doc = play_results(
        tmp_path,
        {
            "all": {
                "hosts": local_hosts(
                    {h: {**_role_vars(), "nvmeof_initiator_verify_files": f} for h, f in hosts.items()}
                )
            }
        },
        tasks,
    )
    failed = [r for r in _results(doc, tasks[2]["name"]).values() if r.get("failed")]
    assert failed, json.dumps(doc)[-3000:]
    assert f"{shared} on gpu01, gpu03;" in " ".join(failed[0]["msg"].split()), failed[0]["msg"]
    assert own not in failed[0]["msg"]


@pytest.mark.parametrize(("host_id", "ok"), [(UUID, True), (UUID.upper(), True), (OLD_HOST_ID, False)])
def test_verification_wants_the_host_id_of_a_uuid_host_nqn(tmp_path: Path, host_id: str, ok: bool) -> None:
    tasks = _tasks(
        "verify.yml",
        [
            "Verify | note this host's NQN and host ID for the comparison across hosts",
            "Verify | the host ID is the UUID of a host NQN of the UUID form",
        ],
    )
    files = _verify_files(f"nqn.2014-08.org.nvmexpress:uuid:{UUID}", host_id)
    hosts = local_hosts({"h": {**_role_vars(), "nvmeof_initiator_verify_files": files}})
    doc = play_results(tmp_path, {"all": {"hosts": hosts}}, tasks)
    assert (doc["stats"]["h"]["failures"] == 0) is ok, json.dumps(doc)[-3000:]


@pytest.mark.parametrize(
    ("listed", "ok"),
    [
        (_listed(LOCAL_DRIVE, SCRATCH), True),
        (_listed(LOCAL_DRIVE), False),
        # Another subsystem whose NQN begins with the target's is not the target's.
        (_listed(LOCAL_DRIVE, {**SCRATCH, "NQN": SCRATCH_NQN + "2"}), False),
    ],
    ids=["connected", "missing", "prefix_only"],
)
def test_verification_reads_the_connected_nqns_from_the_json(tmp_path: Path, listed: Any, ok: bool) -> None:
    nvme = _stand_in(tmp_path / "h", listed, None, None)
    hosts = local_hosts({"h": _host("h", {"nvmeof_initiator_targets": [TCP_SCRATCH]}, nvme)})
    tasks = _tasks(
        "verify.yml",
        ["Verify | list connected subsystems", "Verify | every target with a subsystem NQN is connected"],
    )
    doc = play_results(tmp_path, {"all": {"hosts": hosts}}, tasks)
    assert (doc["stats"]["h"]["failures"] == 0) is ok, json.dumps(doc)[-3000:]
    assert _calls(tmp_path / "h") == [["list-subsys", "-o", "json"]]
