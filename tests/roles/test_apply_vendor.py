"""The vendor roles applied for real to a local test host against the local package mirror.

tests/roles/vendor_mirror.py serves the vendors' repositories (their URL paths, layouts, signatures,
package names, versions and epochs, as placeholders) on the test hosts' bridge address, port 80,
and nowhere else; the roles get the mirror's base and key URLs through Mirror.role_vars(). One
Debian 12 host (the pool's h0) declares 8 GPUs and the 4 NVLink 5 switch-management ports of an
HGX B200 through gpu_facts_override (so Fabric Manager comes with the NVLink subnet manager) and is
in gpu_nodes and beegfs_clients, so playbooks/site.yml runs with their real apt tasks:
nvidia_driver, nvidia_fabricmanager, cuda_toolkit, nvidia_container_toolkit, nccl, dcgm and
beegfs_client. node_tuning is skipped (--skip-tags; test_apply.py applies it). A wrong name, pin,
epoch, layout or signature setting fails here as it would on a real node.

Order: --check --diff on the fresh host, apply, apply again (changed=0), then apply with a driver
version the mirror does not carry, which must fail on the driver's install task naming the package;
then nccl alone with its pin moved back to the older build the mirror carries, and forward again.

Stand-ins: every role runs with <role>_apply_runtime false (RUNTIME_OFF of test_apply.py: the
hosts share this machine's kernel), which skips module loads, service starts and the runtime
verifications. The placeholders ship the systemd units the roles enable (so enabling them at boot
is real) but no programs or libraries, so cuda_toolkit_verify, nccl_verify and
nvidia_container_toolkit_verify are false (nvcc, libnccl.so.2 and nvidia-ctk are absent).
nvidia_container_toolkit_cdi keeps its default: with the driver not loaded in the run, the role
itself writes no CDI specification and says why (nvidia-ctk cdi generate reads the GPUs through it).

Check mode only, in test_apply.py (h2), because the mirror carries no Debian 12 packages for them:
lustre_client (the only Whamcloud apt repository the table could source is ubuntu2204's; none for
Debian 12 was found, and the prebuilt lustre-client-modules-<kernel release> exist only for the
kernel they were built against, never this machine's shared kernel) and doca_ofed (the role knows
no DOCA repository for Debian, roles/doca_ofed/vars/Debian.yml, and installs the distribution's
rdma-core there instead, which test_apply.py applies for real; whether DOCA publishes Debian 12
directories is UNVERIFIED here).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest

from tests.hosts.fixtures import HostPool
from tests.hosts.harness import TestHosts
from tests.roles import vendor_mirror
from tests.roles.test_apply import RUNTIME_OFF, Run, playbook

pytestmark = [
    pytest.mark.hosts,
    pytest.mark.skipif(
        bool(vendor_mirror.missing_tools()),
        reason=f"mirror build tools missing: {', '.join(vendor_mirror.missing_tools())}",
    ),
]

# Package -> the exact version (epoch included) a real run of the roles' defaults installs from
# the debian12 repositories of vendor_packages.yaml; Depends pulled in at their exact versions too.
EXPECTED = {
    "nvidia-driver-570-open": "570.133.20-0ubuntu1",
    "nvidia-dkms-570-open": "570.133.20-0ubuntu1",
    "nvidia-kernel-common-570": "570.133.20-0ubuntu1",
    "nvidia-kernel-source-570-open": "570.133.20-0ubuntu1",
    "libnvidia-compute-570": "570.133.20-0ubuntu1",
    "nvidia-utils-570": "570.133.20-0ubuntu1",
    "nvidia-compute-utils-570": "570.133.20-0ubuntu1",
    "nvidia-fabricmanager-570": "570.133.20-1",
    "libnvidia-nscq-570": "570.133.20-1",
    "nvlsm": "2025.10.11-1",
    "cuda-toolkit-12-8": "12.8.1-1",
    "nvidia-container-toolkit": "1.17.5-1",
    "nvidia-container-toolkit-base": "1.17.5-1",
    "libnvidia-container-tools": "1.17.5-1",
    "libnvidia-container1": "1.17.5-1",
    "libnccl2": "2.26.2-1+cuda12.8",
    "datacenter-gpu-manager-4-core": "1:4.5.2-1",
    "datacenter-gpu-manager-4-cuda12": "1:4.5.2-1",
    "datacenter-gpu-manager-exporter": "4.8.1-1",
    "beegfs-client": "20:7.4.5",
    "beegfs-helperd": "20:7.4.5",
    "beegfs-utils": "20:7.4.5",
}
# What the roles hold (the packages they name; Depends follow through their exact-version links).
HELD = {
    "nvidia-driver-570-open",
    "nvidia-fabricmanager-570",
    "libnvidia-nscq-570",
    "cuda-toolkit-12-8",
    "nvidia-container-toolkit",
    "nvidia-container-toolkit-base",
    "libnvidia-container-tools",
    "libnvidia-container1",
    "libnccl2",
    "datacenter-gpu-manager-4-core",
    "datacenter-gpu-manager-4-cuda12",
    "datacenter-gpu-manager-exporter",
    "beegfs-client",
    "beegfs-helperd",
    "beegfs-utils",
}
# The older NCCL build the mirror carries beside the default's (vendor_packages.yaml).
NCCL_BACK = "2.25.1-1"
# Mirror packages a run of the defaults must leave alone (other branches, builds, releases).
NOT_INSTALLED = (
    "nvidia-fabricmanager",
    "libnccl-dev",
    "datacenter-gpu-manager",
    "cuda-12-3",
    "cuda-drivers-570",
)
UNITS = (
    "nvidia-persistenced.service",
    "nvidia-fabricmanager.service",
    "nvidia-dcgm.service",
    "nvidia-dcgm-exporter.service",
    "beegfs-helperd.service",
    "beegfs-client.service",
)
SOURCES = {
    # file -> (URIs, Suites, Components, key file the Signed-By names, mirror signing key name)
    "nvidia-cuda": ("compute/cuda/repos/debian12/x86_64/", "/", None, "nvidia-cuda.asc", "nvidia-cuda"),
    "nvidia-container-toolkit": (
        "libnvidia-container/stable/deb/$(ARCH)",
        "/",
        None,
        "nvidia-container-toolkit.asc",
        "nvidia-container-toolkit",
    ),
    "beegfs": ("release/beegfs_7.4.5", "deb12", "non-free", "beegfs.asc", "beegfs"),
}
WRONG_DRIVER = "570.133.07"
KERNEL = "6.1.0-99-amd64"
INITRAMFS_TOOL = "/usr/local/sbin/update-initramfs"
INITRAMFS_LOG = "/var/log/fleetforge-test-update-initramfs.log"
AUTOBUILD = "/etc/beegfs/beegfs-client-autobuild.conf"
HELPERD = "/etc/beegfs/beegfs-helperd.conf"
STAND_INS = {
    "cuda_toolkit_verify": False,
    "nccl_verify": False,
    "nvidia_container_toolkit_verify": False,
}


@dataclass
class Applied:
    hosts: TestHosts
    mirror: vendor_mirror.Mirror
    written_by_check: list[str]
    requests_during_check: int
    check: Run
    partial: Run
    apply: Run
    reapply: Run
    wrong_pin: Run
    doca: Run
    nccl_moves: list[tuple[Run, str]]

    def sh(self, command: str) -> str:
        return self.hosts.ssh(self.hosts[0], command).stdout


def _gateway(hosts: TestHosts) -> str:
    # The bridge's own address (harness _make_network): the one address the hosts reach besides
    # each other's.
    assert hosts.subnet is not None
    return str(next(hosts.subnet.hosts()))


@pytest.fixture(scope="module")
def applied(host_pool: HostPool, tmp_path_factory: pytest.TempPathFactory) -> Applied:
    root = vendor_mirror.build_mirror()
    hosts = host_pool.fresh(1)
    # The hosts cannot reach deb.debian.org, and an apt update with an unreachable source fails
    # (the roles refresh apt after adding a repository); a real node reaches its distribution.
    # What the roles take from the distribution comes from the root's cached packages first, while
    # its package lists still name them: infiniband-diags, beside nvlsm on an NVLink 5 host.
    hosts.ssh(
        hosts[0],
        "DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-download infiniband-diags >/dev/null && "
        "mv /etc/apt/sources.list /etc/apt/sources.list.unreachable",
    )
    # The host boots from an initramfs (a kernel's image in /boot), and update-initramfs, which
    # would build one from the shared kernel's modules, is a stand-in that records how it was run.
    hosts.ssh(
        hosts[0],
        f"mkdir -p /boot && touch /boot/initrd.img-{KERNEL} && printf '%s\\n' '#!/bin/sh' "
        f"'echo \"$*\" >> {INITRAMFS_LOG}' > {INITRAMFS_TOOL} && chmod 0755 {INITRAMFS_TOOL}",
    )
    # What the real beegfs-client and beegfs-helperd packages ship and their installation creates
    # (the placeholders carry none of it): the autobuild configuration, the folder of its rebuild
    # flag, and the helper daemon's configuration with its packaged authentication lines
    # (ThinkParQ/beegfs 7.4.5 helperd/build/dist/etc/beegfs-helperd.conf).
    hosts.ssh(
        hosts[0],
        "mkdir -p /var/lib/beegfs/client /etc/beegfs && "
        f"printf '%s\\n' 'buildEnabled=true' 'buildArgs=-j8' > {AUTOBUILD} && "
        f"printf '%s\\n' 'logLevel           = 2' 'connAuthFile       =' 'connDisableAuthentication = false' > {HELPERD}",
    )
    tmp = tmp_path_factory.mktemp("vendor")
    with vendor_mirror.serve(root, _gateway(hosts), 80) as mirror:
        host_vars = {
            **RUNTIME_OFF,
            **STAND_INS,
            **mirror.role_vars(),
            # An HGX B200: NVLink 5 switch-management ports, not PCI NVSwitches, as the SKU expects.
            "gpu_facts_override": {"nvidia_gpus": 8, "nvlink5_switch_ports": 4},
            # The host runs this machine's kernel, whose linux-headers no source it reaches carries.
            "nvidia_driver_kernel_headers": False,
            "gpu_facts_expected_nvswitch_fabric": "nvlink5",
            "dcgm_exporter": True,
            "dcgm_exporter_port": 9500,
            "beegfs_client_mgmtd_host": "mgmt.example",
            "beegfs_client_conn_auth_secret": "test-only-secret-42",
        }
        groups = {"gpu_nodes": ["h0"], "beegfs_clients": ["h0"]}
        inventory = hosts.write_inventory(tmp / "inventory.yml", groups=groups, hostvars={"h0": host_vars})
        skip = ("--skip-tags", "node_tuning")
        check = playbook(inventory, "--check", "--diff", *skip)
        written = [
            path
            for path in (
                "/etc/apt/sources.list.d/nvidia-cuda.sources",
                "/etc/apt/sources.list.d/beegfs.sources",
                "/etc/apt/sources.list.d/nvidia-container-toolkit.sources",
                "/etc/apt/keyrings/nvidia-cuda.asc",
                "/etc/apt/preferences.d/nvidia-cuda.pref",
            )
            if hosts.ssh(hosts[0], f"test -e {path}", check=False).returncode == 0
        ]
        requests_during_check = len(mirror.requests)
        # A host whose earlier run stopped after the BeeGFS repository: the packages, and what they
        # ship, not there yet. Check mode must not fail on the files and units they would bring.
        repo_only = playbook(inventory, "--tags", "beegfs_client:repo", *skip)
        assert repo_only.rc == 0, repo_only.doc.get("stats")
        hosts.ssh(hosts[0], f"mv {HELPERD} {HELPERD}.away && mv {AUTOBUILD} {AUTOBUILD}.away")
        partial = playbook(
            inventory, "--check", "--tags", "beegfs_client", "-e", "doca_ofed_use_doca=true", *skip
        )
        hosts.ssh(hosts[0], f"mv {HELPERD}.away {HELPERD} && mv {AUTOBUILD}.away {AUTOBUILD}")
        apply = playbook(inventory, *skip)
        reapply = playbook(inventory, *skip)
        wrong = hosts.write_inventory(
            tmp / "wrong.yml",
            groups=groups,
            hostvars={"h0": {**host_vars, "nvidia_driver_version": WRONG_DRIVER}},
        )
        wrong_pin = playbook(wrong, *skip)
        # As where doca_ofed installed DOCA-OFED (its fact, given here: Debian has no DOCA repository).
        doca = playbook(inventory, "--tags", "beegfs_client", "-e", "doca_ofed_use_doca=true")
        # nccl's pin moved back to the older build beside it, then forward again: each over the
        # role's own hold, and the host ends as the defaults put it for the tests that read it.
        nccl_moves: list[tuple[Run, str]] = []
        for version in (NCCL_BACK, None):
            moved = playbook(
                inventory, "--tags", "nccl", *(("-e", f"nccl_version={version}") if version else ())
            )
            nccl_moves.append((moved, applied_nccl(hosts)))
    runs = {
        "check": check,
        "partial": partial,
        "apply": apply,
        "reapply": reapply,
        "wrong_pin": wrong_pin,
        "doca": doca,
    }
    for label, run in runs.items():
        (tmp / f"{label}.json").write_text(json.dumps(run.doc))
    print(f"\nansible-playbook results: {tmp}/*.json")
    print(
        f"ansible-playbook wall time: check {check.seconds:.0f}s, apply {apply.seconds:.0f}s, "
        f"reapply {reapply.seconds:.0f}s, wrong pin {wrong_pin.seconds:.0f}s"
    )
    return Applied(
        hosts,
        mirror,
        written,
        requests_during_check,
        check,
        partial,
        apply,
        reapply,
        wrong_pin,
        doca,
        nccl_moves,
    )


def applied_nccl(hosts: TestHosts) -> str:
    """libnccl2's version and dpkg status (hi: held) on the host."""
    return hosts.ssh(hosts[0], "dpkg-query -W -f '${Version} ${db:Status-Abbrev}' libnccl2").stdout.strip()


def _on_h0(run: Run) -> Iterator[tuple[str, dict[str, Any]]]:
    """(task name, h0's result) of every task of the run, in order; {} where h0 has none."""
    for play in run.doc["plays"]:
        for task in play["tasks"]:
            yield task["task"]["name"], task["hosts"].get("h0", {})


def _why(run: Run) -> dict[str, str]:
    """role -> what its 'Say why packages are not resolved in check mode' task said on h0."""
    out: dict[str, str] = {}
    for task_name, res in _on_h0(run):
        role, _, name = task_name.rpartition(" : ")
        if name == "Say why packages are not resolved in check mode" and "msg" in res:
            out[role] = res["msg"]
    return out


def _failures(run: Run) -> list[tuple[str, dict[str, Any]]]:
    """(task name, result) of every task that failed on h0."""
    return [(name, res) for name, res in _on_h0(run) if res.get("failed")]


def _changed(run: Run) -> list[str]:
    """The names of the tasks that changed h0."""
    return [name for name, res in _on_h0(run) if res.get("changed")]


def _ok(run: Run) -> str:
    failed = [(name, {k: res.get(k) for k in ("msg", "stderr", "stdout")}) for name, res in _failures(run)]
    return run.stderr[-3000:] + json.dumps(run.doc.get("raw", "")) + json.dumps(failed)[-4000:]


def test_check_mode_on_the_fresh_host_names_every_pin_and_writes_nothing(applied: Applied) -> None:
    run = applied.check
    assert run.rc == 0, _ok(run)
    s = run.stats["h0"]
    assert s["failures"] == 0 and s["unreachable"] == 0 and s["changed"] > 0, s
    why = _why(run)
    assert "nvidia-driver-570-open=570.133.20-*" in why["nvidia_driver"]
    assert (
        "nvidia-fabricmanager-570=570.133.20-*, libnvidia-nscq-570=570.133.20-*, nvlsm, infiniband-diags"
        in why["nvidia_fabricmanager"]
    )
    assert "cuda-toolkit-12-8=12.8.1-*" in why["cuda_toolkit"]
    assert "libnccl2 2.26.2-1+cuda12.8" in why["nccl"]
    assert (
        "datacenter-gpu-manager-4-core=1:4.5.2-1, datacenter-gpu-manager-4-cuda12=1:4.5.2-1, "
        "datacenter-gpu-manager-exporter=4.8.1-1" in why["dcgm"]
    )
    assert "nvidia-container-toolkit 1.17.5" in why["nvidia_container_toolkit"]
    assert "beegfs-client 20:7.4.5" in why["beegfs_client"]
    assert applied.written_by_check == []
    # Check mode makes no request to the vendor (keys and packages are fetched on a real run only).
    assert applied.requests_during_check == 0


def test_check_mode_where_the_repository_is_there_but_not_the_packages_fails_nothing(
    applied: Applied,
) -> None:
    run = applied.partial
    s = run.stats["h0"]
    assert run.rc == 0 and s["failures"] == 0, [(n, r.get("msg")) for n, r in _on_h0(run) if r.get("failed")]
    facts = [
        r for n, r in _on_h0(run) if n.endswith("Note whether check mode runs without the client's packages")
    ]
    assert facts and facts[0]["ansible_facts"]["beegfs_client_unpackaged_check"] is True


def test_apply_installs_the_exact_pins_from_the_mirror(applied: Applied) -> None:
    run = applied.apply
    assert run.rc == 0, _ok(run)
    s = run.stats["h0"]
    assert s["failures"] == 0 and s["changed"] > 0, s
    query = applied.sh(
        "dpkg-query -W -f '${Package} ${Version} ${db:Status-Abbrev}\\n' " + " ".join(sorted(EXPECTED))
    )
    installed = {line.split()[0]: (line.split()[1], line.split()[2]) for line in query.splitlines()}
    assert installed == {name: (v, "hi" if name in HELD else "ii") for name, v in EXPECTED.items()}
    # Nothing else of the mirror's (another branch, NCCL build or DCGM release) came along.
    others = applied.hosts.ssh(
        applied.hosts[0],
        "dpkg-query -W -f '${Package} ${db:Status-Abbrev}\\n' " + " ".join(NOT_INSTALLED),
        check=False,
    ).stdout
    assert " ii" not in others and " hi" not in others, others
    # Every package was fetched from the mirror (dpkg's file names drop the epoch), by the host.
    fetched = {
        tuple(unquote(Path(path).name).split("_")[:2])
        for _, path, status in applied.mirror.requests
        if path.endswith(".deb") and status == 200
    }
    assert {(n, v.split(":")[-1]) for n, v in EXPECTED.items()} <= fetched
    assert {client for client, _, _ in applied.mirror.requests} == {applied.hosts[0].address}


def test_apply_holds_what_the_roles_pin(applied: Applied) -> None:
    assert set(applied.sh("apt-mark showhold").split()) == HELD


def test_repositories_point_at_the_mirror_signed_by_the_vendor_key(applied: Applied) -> None:
    for name, (path, suites, components, key, signing_key) in SOURCES.items():
        text = applied.sh(f"cat /etc/apt/sources.list.d/{name}.sources")
        fields = dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)
        assert fields["URIs"] == applied.mirror.repo_url(path), text
        assert fields["Suites"] == suites and fields.get("Components") == components, text
        assert fields["Signed-By"] == f"/etc/apt/keyrings/{key}", text
        assert applied.sh(f"cat /etc/apt/keyrings/{key}") == applied.mirror.key(signing_key), name
    # The CUDA repository outranks the distribution for the driver's names: its origin pin matches
    # the mirror's host, as it matches developer.download.nvidia.com on a real node.
    policy = applied.sh("apt-cache policy nvidia-fabricmanager-570")
    url = applied.mirror.repo_url("compute/cuda/repos/debian12/x86_64")
    assert re.search(rf"^\s+600 {re.escape(url)}/? +Packages$", policy, re.MULTILINE), policy


def test_apply_enables_the_units_the_packages_ship(applied: Applied) -> None:
    wants = applied.sh("ls /etc/systemd/system/multi-user.target.wants/").split()
    assert set(UNITS) <= set(wants), wants


def _drop_in_starts(applied: Applied, unit: str) -> list[str]:
    """The ExecStart lines of the roles' drop-in for unit, a [Service] section."""
    text = applied.sh(f"cat /etc/systemd/system/{unit}.d/fleetforge.conf")
    assert "[Service]" in text.splitlines(), text
    return [line for line in text.splitlines() if line.startswith("ExecStart=")]


def test_the_persistence_daemon_starts_with_persistence_mode_on(applied: Applied) -> None:
    # The packaged unit (nvidia-compute-utils-<branch>) runs `nvidia-persistenced --user
    # nvidia-persistenced --no-persistence-mode --verbose`: the drop-in clears ExecStart, then
    # starts the daemon without that flag.
    assert _drop_in_starts(applied, "nvidia-persistenced.service") == [
        "ExecStart=",
        "ExecStart=/usr/bin/nvidia-persistenced --user nvidia-persistenced --persistence-mode --verbose",
    ]


def test_the_exporter_listens_on_the_port_it_was_given(applied: Applied) -> None:
    assert _drop_in_starts(applied, "nvidia-dcgm-exporter.service") == [
        "ExecStart=",
        "ExecStart=/usr/bin/dcgm-exporter -f /etc/dcgm-exporter/default-counters.csv --address :9500",
    ]


def test_an_nvlink5_host_loads_the_subnet_managers_modules_at_boot(applied: Applied) -> None:
    assert applied.sh("cat /etc/modules-load.d/fleetforge-nvlink5.conf").split() == ["mlx5_ib", "ib_umad"]
    # The kernel checks and loads are runtime work: with apply_runtime false (this host shares this
    # machine's kernel, as an image build runs on another) they skip.
    tasks = dict(_on_h0(applied.apply))
    for name in (
        "Check the kernel has the NVLink 5 management modules",
        "Load the NVLink 5 management modules",
    ):
        assert tasks[f"nvidia_fabricmanager : {name}"].get("skipped") is True, name


def test_the_nouveau_blacklist_reaches_every_initramfs_once(applied: Applied) -> None:
    # Rebuilt although the roles ran with nvidia_driver_apply_runtime false: the image is what the
    # next boot reads, before the root file system's modprobe.d. Once: the blacklist changed once.
    assert applied.sh(f"cat {INITRAMFS_LOG}").splitlines() == ["-u -k all"]


def test_without_a_loaded_driver_no_cdi_specification_is_generated_and_the_run_says_why(
    applied: Applied,
) -> None:
    said = [
        res.get("msg", "")
        for name, res in _on_h0(applied.apply)
        if name == "nvidia_container_toolkit : Say why the CDI specification is not generated"
    ]
    assert len(said) == 1 and "nvidia_driver_apply_runtime is false" in said[0], said
    applied.hosts.ssh(
        applied.hosts[0], "test ! -e /etc/cdi/nvidia.yaml && test ! -e /etc/cdi/.nvidia.yaml.generated"
    )


def test_the_beegfs_helper_daemon_reads_the_secret_the_client_does(applied: Applied) -> None:
    # Without it the daemon refuses to start ("No connAuthFile configured"), and the client with it.
    assert applied.sh(f"cat {HELPERD}").splitlines() == [
        "logLevel           = 2",
        "connAuthFile = /etc/beegfs/connauthfile",
        "connDisableAuthentication = false",
    ]
    assert "connAuthFile                 = /etc/beegfs/connauthfile" in applied.sh(
        "cat /etc/beegfs/beegfs-client.conf"
    )


def test_beside_doca_ofed_the_beegfs_module_is_rebuilt_against_its_headers(applied: Applied) -> None:
    # The earlier runs (the distribution's rdma-core) left the packaged line alone.
    assert applied.doca.rc == 0, _ok(applied.doca)
    lines = applied.sh(f"cat {AUTOBUILD}").splitlines()
    assert lines == [
        "buildEnabled=true",
        "buildArgs=-j8 OFED_INCLUDE_PATH=/usr/src/ofa_kernel/default/include",
    ]
    applied.sh("test -f /var/lib/beegfs/client/force-auto-build")  # the next start rebuilds


def test_second_apply_changes_nothing(applied: Applied) -> None:
    run = applied.reapply
    assert run.rc == 0, _ok(run)
    s = run.stats["h0"]
    assert s["changed"] == 0 and s["failures"] == 0, s


def test_a_pin_moved_back_installs_the_older_build_over_the_hold_and_moves_forward_again(
    applied: Applied,
) -> None:
    (back, back_state), (forward, forward_state) = applied.nccl_moves
    assert back.rc == 0, _ok(back)
    assert back_state == f"{NCCL_BACK}+cuda12.8 hi"
    assert forward.rc == 0, _ok(forward)
    assert forward_state == f"{EXPECTED['libnccl2']} hi"
    # apt-get's install of a held package at another version leaves it selected for install:
    # the role's hold task holds it again.
    for run in (back, forward):
        assert _changed(run) == [
            "nccl : Install the pinned libnccl on Debian and Ubuntu",
            "nccl : Hold libnccl at the pinned release",
        ]


def test_a_driver_version_the_repository_does_not_carry_fails_the_install_naming_it(applied: Applied) -> None:
    run = applied.wrong_pin
    assert run.rc != 0
    failed = _failures(run)
    assert len(failed) == 1, failed
    name, result = failed[0]
    assert name == "nvidia_driver : Install the driver packages at the pinned version", name
    assert f"nvidia-driver-570-open={WRONG_DRIVER}" in str(result["msg"]), result["msg"]
    # The failed run left the host as the good pin put it.
    assert (
        applied.sh("dpkg-query -W -f '${Version}' nvidia-driver-570-open")
        == EXPECTED["nvidia-driver-570-open"]
    )
