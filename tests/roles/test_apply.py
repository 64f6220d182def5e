"""site.yml applied for real, over SSH, to local test hosts (tests/hosts).

Three Debian 12 hosts: h0 and h1 get the real run (node_tuning, gpu_facts, doca_ofed's rdma-core
path and nvmeof_initiator install and configure for real from the hosts' offline package cache);
h2 declares 8 GPUs and 4 NVSwitches through gpu_facts_override and joins the Lustre and BeeGFS
groups, and only ever sees check mode, because those packages live in vendor repositories the test
hosts cannot reach. Every role runs with <role>_apply_runtime false: the hosts share this machine's
kernel, which the tests must not retune (and /proc/sys is read-only inside them).

Order: --check --diff on fresh hosts (all three), apply (h0, h1), apply again (h0, h1: changed=0).
The hosts come from the session's pool (tests/hosts/fixtures.py), reset to fresh before this module.
The GPU and BeeGFS roles' real apt installs, against the local vendor package mirror: test_apply_vendor.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import BIN, ROOT
from tests.hosts.fixtures import HostPool
from tests.hosts.harness import TestHosts

pytestmark = pytest.mark.hosts

RUNTIME_OFF = {
    f"{role}_apply_runtime": False
    for role in (
        "node_tuning",
        "doca_ofed",
        "nvmeof_initiator",
        "nvidia_driver",
        "nvidia_fabricmanager",
        "dcgm",
        "lustre_client",
        "beegfs_client",
    )
}
NVMEOF_TARGETS = [
    {"transport": "tcp", "address": "192.0.2.10", "port": 4420},
    {"transport": "rdma", "address": "192.0.2.11", "nqn": "nqn.2014-08.org.example:scratch"},
]
# Files a real run writes; a check-mode run must leave every one of them absent.
WRITTEN_BY_A_RUN = (
    "/etc/sysctl.d/90-fleetforge.conf",
    "/etc/nvme/discovery.conf",
    "/etc/ansible/facts.d/gpu.fact",
    "/etc/tuned/active_profile",
    "/usr/sbin/tuned",
    "/etc/apt/sources.list.d/nvidia-cuda.sources",
    "/etc/nccl.conf",
    "/etc/beegfs/connauthfile",
    "/etc/modprobe.d/fleetforge-lustre.conf",
    "/etc/modules-load.d/fleetforge-nvidia-peermem.conf",
)
GPU_ONLY = ("nvidia_driver", "cuda_toolkit", "nvidia_container_toolkit", "nccl", "dcgm")


@dataclass
class Run:
    rc: int
    doc: dict[str, Any]
    stderr: str
    seconds: float = 0.0

    @property
    def stats(self) -> dict[str, dict[str, int]]:
        stats: dict[str, dict[str, int]] = self.doc["stats"]
        return stats

    def results(self, task_name: str, role: str | None = None) -> dict[str, dict[str, Any]]:
        """Per host result of the task called task_name (in role, when given)."""
        found: dict[str, dict[str, Any]] = {}
        for play in self.doc["plays"]:
            for task in play["tasks"]:
                parts = task["task"]["name"].split(" : ")
                if parts[-1] == task_name and (role is None or parts[0] == role):
                    found.update(task["hosts"])
        return found

    def diff_after(self, host: str, dest: str) -> str:
        """The content a check-mode --diff run says a file/template task would write to dest."""
        for play in self.doc["plays"]:
            for task in play["tasks"]:
                res = task["hosts"].get(host, {})
                args = (res.get("invocation") or {}).get("module_args") or {}
                if args.get("dest") == dest and res.get("diff"):
                    diffs = res["diff"] if isinstance(res["diff"], list) else [res["diff"]]
                    return "".join(str(d.get("after", "")) for d in diffs)
        raise KeyError(f"no diff for {dest} on {host}")


def playbook(inventory: Path, *args: str, playbook: Path | None = None) -> Run:
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json",
        "ANSIBLE_FORCE_COLOR": "0",
        "PATH": f"{BIN}:{os.environ['PATH']}",
    }
    start = time.monotonic()
    done = subprocess.run(
        [
            str(BIN / "ansible-playbook"),
            "-i",
            str(inventory),
            str(playbook or ROOT / "playbooks/site.yml"),
            *args,
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    try:
        doc = json.loads(done.stdout[done.stdout.index("{") :])
    except ValueError:
        doc = {"plays": [], "stats": {}, "raw": done.stdout[-3000:]}
    return Run(done.returncode, doc, done.stderr, time.monotonic() - start)


@dataclass
class Fleet:
    hosts: TestHosts
    inventory: Path
    check_fresh: Run
    exists_after_check: dict[tuple[str, str], bool]
    apply: Run
    reapply: Run


@pytest.fixture(scope="module")
def fleet(host_pool: HostPool, tmp_path_factory: pytest.TempPathFactory) -> Fleet:
    tmp = tmp_path_factory.mktemp("roles")
    hosts = host_pool.fresh(3)
    inventory = hosts.write_inventory(
        tmp / "inventory.yml",
        groups={
            "gpu_nodes": ["h0", "h1", "h2"],
            "ib_nodes": ["h0", "h1"],
            "nvmeof_clients": ["h0", "h1"],
            "lustre_clients": ["h2"],
            "beegfs_clients": ["h2"],
        },
        hostvars={
            "h2": {
                "gpu_facts_override": {"nvidia_gpus": 8, "nvswitches": 4},
                # The hosts run this machine's kernel, whose linux-headers no source they reach carries.
                "nvidia_driver_kernel_headers": False,
                "nvidia_driver_peermem": "always",
                "nccl_ib_hca": "mlx5_0,mlx5_1",
                "lustre_client_mgs_nids": ["10.1.0.2@o2ib"],
                "lustre_client_fsname": "scratch",
                "lustre_client_repo_key_url": "https://mirror.example/lustre/GPG-KEY",
                "beegfs_client_mgmtd_host": "mgmt.example",
                "beegfs_client_conn_auth_secret": "test-only-secret-42",
            }
        },
        group_vars={"all": {**RUNTIME_OFF, "nvmeof_initiator_targets": NVMEOF_TARGETS}},
    )
    check_fresh = playbook(inventory, "--check", "--diff")
    exists = {
        (h.name, path): hosts.ssh(h, f"test -e {path}", check=False).returncode == 0
        for h in hosts
        for path in WRITTEN_BY_A_RUN
    }
    apply = playbook(inventory, "--limit", "h0,h1")
    reapply = playbook(inventory, "--limit", "h0,h1")
    print(
        f"\nansible-playbook wall time: check {check_fresh.seconds:.0f}s, apply {apply.seconds:.0f}s, "
        f"reapply {reapply.seconds:.0f}s"
    )
    return Fleet(hosts, inventory, check_fresh, exists, apply, reapply)


def _skip_reasons(run: Run, host: str) -> dict[str, str]:
    """role -> the message its 'skip' debug task printed on host."""
    out: dict[str, str] = {}
    for play in run.doc["plays"]:
        for task in play["tasks"]:
            name = task["task"]["name"]
            res = task["hosts"].get(host, {})
            if name.split(" : ")[-1].startswith("Skip on hosts without") and "msg" in res:
                out[name.split(" : ")[0]] = res["msg"]
    return out


def test_check_mode_on_fresh_hosts_fails_nowhere_and_writes_nothing(fleet: Fleet) -> None:
    run = fleet.check_fresh
    assert run.rc == 0, run.stderr[-3000:] + json.dumps(run.doc.get("raw", ""))
    assert set(run.stats) == {"h0", "h1", "h2"}
    for host, s in run.stats.items():
        assert s["failures"] == 0 and s["unreachable"] == 0, (host, s)
        assert s["changed"] > 0, host  # fresh hosts: check mode reports what a run would change
    written = sorted(key for key, exists in fleet.exists_after_check.items() if exists)
    assert written == [], f"check mode wrote {written}"


def test_gpu_tasks_skip_with_gpu_facts_reason_on_gpu_less_hosts(fleet: Fleet) -> None:
    for run in (fleet.check_fresh, fleet.apply):
        facts = run.results("Report the accelerators found")
        for host in ("h0", "h1"):
            assert "0 NVIDIA GPU(s)" in facts[host]["msg"] and "no NVIDIA GPU here" in facts[host]["msg"]
            reasons = _skip_reasons(run, host)
            assert set(GPU_ONLY) <= set(reasons), sorted(reasons)
            for role in GPU_ONLY:
                assert "no NVIDIA GPU here" in reasons[role], (role, reasons[role])
            assert run.results("Install on Debian and Ubuntu", "nvidia_driver")[host].get("skipped") is True
    fm = fleet.check_fresh.results("Skip on hosts without NVSwitch")
    assert "no NVIDIA GPU here" in fm["h0"]["msg"]


def test_with_gpus_declared_the_driver_and_gpu_roles_run_in_check_mode(fleet: Fleet) -> None:
    run = fleet.check_fresh
    assert (
        "8 NVIDIA GPU(s), 4 NVSwitch(es) and 0 NVLink 5 switch-management port(s) per gpu_facts_override"
        in run.results("Report the accelerators found")["h2"]["msg"]
    )
    assert _skip_reasons(run, "h2") == {}  # no GPU role skipped where GPUs exist
    repo = run.results("Add the CUDA repository, signed-by its key")["h2"]
    assert repo.get("changed") is True and not repo.get("skipped")
    assert run.results("Blacklist nouveau")["h2"].get("changed") is True
    # Packages from a repository that would first be added cannot be resolved in check mode; the
    # roles say so instead of failing or pretending.
    why = "Say why packages are not resolved in check mode"
    assert "CUDA repository is not configured yet" in run.results(why, "nvidia_driver")["h2"]["msg"]
    assert "nvidia-driver-570-open" in run.results(why, "nvidia_driver")["h2"]["msg"]
    # NVSwitch host: fabric manager runs, locked to the driver's branch.
    assert run.results("Skip on hosts without NVSwitch")["h2"].get("skipped") is True
    # ...at exactly the driver's version (Fabric Manager must match the driver it serves).
    assert "nvidia-fabricmanager-570=570.133.20" in run.results(why, "nvidia_fabricmanager")["h2"]["msg"]
    # NVSwitches on the PCI bus (HGX H100): no NVLink subnet manager, no InfiniBand modules for it.
    assert "nvlsm" not in run.results(why, "nvidia_fabricmanager")["h2"]["msg"]
    assert run.results("Prepare the kernel for the NVLink subnet manager")["h2"].get("skipped") is True
    assert "libnccl2 2.26.2-1+cuda12.8" in run.results(why, "nccl")["h2"]["msg"]
    # GPUDirect RDMA: nvidia-peermem loads at boot (and now, outside check mode).
    assert run.diff_after("h2", "/etc/modules-load.d/fleetforge-nvidia-peermem.conf") == "nvidia-peermem\n"
    nccl_conf = run.diff_after("h2", "/etc/nccl.conf")
    assert "NCCL_IB_HCA=mlx5_0,mlx5_1" in nccl_conf and "NCCL_IB_DISABLE" not in nccl_conf
    beegfs = run.diff_after("h2", "/etc/beegfs/beegfs-client.conf")
    assert re.search(r"^sysMgmtdHost\s+= mgmt\.example$", beegfs, re.MULTILINE), beegfs
    assert 'options lnet networks="o2ib0(ib0)"' in run.diff_after(
        "h2", "/etc/modprobe.d/fleetforge-lustre.conf"
    )
    mount = run.results("Mount the file system, persistent across reboots")["h2"]
    assert mount.get("changed") is True
    # The BeeGFS secret never appears in output.
    assert "test-only-secret-42" not in json.dumps(run.doc)


def test_apply_installs_and_configures_for_real(fleet: Fleet) -> None:
    run = fleet.apply
    assert run.rc == 0, run.stderr[-3000:] + json.dumps(run.doc.get("raw", ""))
    assert set(run.stats) == {"h0", "h1"}
    for host, s in run.stats.items():
        assert s["failures"] == 0 and s["changed"] > 0, (host, s)
    for h in fleet.hosts[:2]:
        ssh = fleet.hosts.ssh
        pkgs = "tuned numactl rdma-core ibverbs-utils infiniband-diags perftest nvme-cli"
        status = ssh(h, f"dpkg-query -W -f '${{Package}} ${{Status}}\\n' {pkgs}").stdout
        assert status.count("install ok installed") == 7, status
        sysctl = ssh(h, "cat /etc/sysctl.d/90-fleetforge.conf").stdout
        assert "kernel.numa_balancing = 0" in sysctl and "net.core.rmem_max = 268435456" in sysctl
        assert "nr_hugepages" not in sysctl  # 0 (the default) leaves what the system reserves alone
        limits = " ".join(ssh(h, "cat /etc/security/limits.d/90-fleetforge.conf").stdout.split())
        # limits.conf(5): a `*` line does not apply to root, which needs lines of its own.
        assert "* hard memlock unlimited" in limits and "root hard nofile 1048576" in limits, limits
        assert ssh(h, "cat /etc/tuned/active_profile").stdout.strip() == "fleetforge-accelerator"
        assert "governor=performance" in ssh(h, "cat /etc/tuned/fleetforge-accelerator/tuned.conf").stdout
        assert "iommu=pt" in ssh(h, "cat /etc/default/grub.d/90-fleetforge.cfg").stdout
        assert (
            "DefaultLimitMEMLOCK=infinity"
            in ssh(h, "cat /etc/systemd/system.conf.d/90-fleetforge.conf").stdout
        )
        # Units enabled offline (the hosts are not booted with systemd): the links exist on disk.
        assert ssh(h, "ls /etc/systemd/system/*.wants/tuned.service").returncode == 0
        assert ssh(h, "ls /etc/systemd/system/*.wants/nvmf-autoconnect.service").returncode == 0
        discovery = ssh(h, "cat /etc/nvme/discovery.conf").stdout
        assert "--transport=tcp --traddr=192.0.2.10 --trsvcid=4420" in discovery
        assert "--transport=rdma --traddr=192.0.2.11 --trsvcid=4420 --ctrl-loss-tmo=600" in discovery
        # On a discovery.conf line --nqn names the discovery controller: a subsystem's is refused.
        assert "--nqn" not in discovery
        assert ssh(h, "cat /etc/modules-load.d/fleetforge-nvmeof.conf").stdout.split()[-3:] == [
            "nvme_fabrics",
            "nvme_rdma",
            "nvme_tcp",
        ]
        assert ssh(h, "grep -c . /etc/nvme/hostnqn").stdout.strip() == "1"
        assert "ib_uverbs" in ssh(h, "cat /etc/modules-load.d/fleetforge-rdma.conf").stdout
        fact = json.loads(ssh(h, "/etc/ansible/facts.d/gpu.fact").stdout)
        assert fact["error"] is None and fact["nvidia_gpus"] == 0 and isinstance(fact["devices"], list)
    # The host NQN is per host (targets grant access by it).
    nqns = {fleet.hosts.ssh(h, "cat /etc/nvme/hostnqn").stdout for h in fleet.hosts[:2]}
    assert len(nqns) == 2


def test_second_apply_changes_nothing(fleet: Fleet) -> None:
    run = fleet.reapply
    assert run.rc == 0, run.stderr[-3000:]
    for host, s in run.stats.items():
        assert s["changed"] == 0 and s["failures"] == 0, (host, s)
    assert set(run.stats) == {"h0", "h1"}


def test_hosts_cloned_with_one_host_nqn_fail_verification_naming_both(fleet: Fleet) -> None:
    h0, h1 = fleet.hosts[0], fleet.hosts[1]
    own = fleet.hosts.ssh(h1, "cat /etc/nvme/hostnqn").stdout
    shared = fleet.hosts.ssh(h0, "cat /etc/nvme/hostnqn").stdout.strip()
    assert own.strip() != shared  # each applied host made its own
    # As a node cloned from another's image would have it.
    fleet.hosts.ssh(h1, f"echo '{shared}' > /etc/nvme/hostnqn")
    try:
        run = playbook(fleet.inventory, "--limit", "h0,h1", "--tags", "nvmeof_initiator:verify")
    finally:
        fleet.hosts.ssh(h1, f"echo '{own.strip()}' > /etc/nvme/hostnqn")
    assert run.rc != 0
    failed = run.results("Verify | no two hosts of the play share a host NQN")
    [(_, result)] = [(h, r) for h, r in failed.items() if r.get("failed")]
    assert f"{shared} on h0, h1" in " ".join(result["msg"].split()), result["msg"]


def test_prebuilt_lustre_modules_beside_doca_ofed_are_refused_before_anything_changes(fleet: Fleet) -> None:
    # As where doca_ofed chose DOCA-OFED (its fact, given here: Debian has no DOCA repository).
    run = playbook(
        fleet.inventory,
        "--check",
        "--limit",
        "h2",
        "--tags",
        "lustre_client",
        "-e",
        "doca_ofed_use_doca=true",
    )
    assert run.rc != 0
    failed = run.results("Check the Lustre modules can load beside DOCA-OFED")
    assert failed["h2"].get("failed"), failed
    assert "Set lustre_client_kernel_modules to dkms" in failed["h2"]["msg"], failed
    assert run.stats["h2"]["changed"] == 0


def test_argument_specs_reject_a_wrong_type_naming_the_variable(fleet: Fleet, tmp_path: Path) -> None:
    wrong = {
        "h0": ({"node_tuning_hugepages": "lots"}, "node_tuning_hugepages"),
        "h1": ({"nvmeof_initiator_targets": [{"transport": "fc", "address": "x"}]}, "transport"),
        "h2": ({"gpu_facts_override": ["eight"]}, "gpu_facts_override"),
    }
    inventory = fleet.hosts.write_inventory(
        tmp_path / "wrong.yml",
        groups={"nvmeof_clients": ["h0", "h1", "h2"]},
        hostvars={host: bad for host, (bad, _) in wrong.items()},
        group_vars={"all": RUNTIME_OFF},
    )
    run = playbook(inventory, "--check")
    assert run.rc != 0
    for host, (_, variable) in wrong.items():
        failed = [
            (t["task"]["name"], t["hosts"][host])
            for p in run.doc["plays"]
            for t in p["tasks"]
            if t["hosts"].get(host, {}).get("failed")
        ]
        assert len(failed) == 1, (host, failed)
        name, result = failed[0]
        assert "Validating arguments against arg spec" in name, (host, name)
        assert variable in result["msg"], (host, result["msg"])
