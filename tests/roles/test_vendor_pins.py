"""Vendor repositories, package names and pins as the roles render them per OS, architecture and branch.

Each case renders a role's vars/<os>.yml with Ansible's own templar over the role's defaults and
overridden facts, so a wrong directory, name, epoch or missing hold shows here without a host.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.errors import AnsibleUndefinedVariable
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from tests.roles import role_readme

ROLES = Path(__file__).resolve().parents[2] / "roles"
OS = {
    "ubuntu2204": ("Ubuntu", "22.04", "Debian", "jammy"),
    "ubuntu2404": ("Ubuntu", "24.04", "Debian", "noble"),
    "debian12": ("Debian", "12.7", "Debian", "bookworm"),
    "rhel96": ("RedHat", "9.6", "RedHat", "plow"),
    "rocky94": ("Rocky", "9.4", "RedHat", "Blue Onyx"),
}
VENDOR_ROLES = (
    "nvidia_driver",
    "nvidia_fabricmanager",
    "cuda_toolkit",
    "nccl",
    "dcgm",
    "nvidia_container_toolkit",
    "doca_ofed",
    "lustre_client",
    "beegfs_client",
)


def _trust(value: Any) -> Any:
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, list):
        return [_trust(v) for v in value]
    if isinstance(value, dict):
        return {k: _trust(v) for k, v in value.items()}
    return value


def _vars_file(role: str, distribution: str, family: str) -> Path:
    # The roles' first_found order, down to the values every platform shares.
    for name in (f"{distribution}.yml", f"{family}.yml", "main.yml"):
        if (ROLES / role / "vars" / name).exists():
            return ROLES / role / "vars" / name
    raise AssertionError(f"{role}: no vars file for {distribution}")


def render(role: str, os_id: str, arch: str = "x86_64", **options: Any) -> dict[str, Any]:
    """Every __<role>_* value for the platform, rendered over the role's defaults (and nvidia_driver's)."""
    distribution, version, family, release = OS[os_id]
    values: dict[str, Any] = {}
    for r in ("nvidia_driver", role):
        values |= yaml.safe_load((ROLES / r / "defaults" / "main.yml").read_text()) or {}
    values |= {
        "ansible_distribution": distribution,
        "ansible_distribution_version": version,
        "ansible_distribution_major_version": version.split(".")[0],
        "ansible_distribution_release": release,
        "ansible_os_family": family,
        "ansible_architecture": arch,
        "ansible_kernel": "5.15.0-88-generic" if family == "Debian" else "5.14.0-570.12.1.el9_6.x86_64",
        # As gpu_facts (nvidia_driver's dependency) sets it on an HGX H100.
        "gpu_facts_nvswitch_fabric": "nvswitch",
        **options,
    }
    internal = yaml.safe_load(_vars_file(role, distribution, family).read_text())
    templar = Templar(loader=DataLoader(), variables=_trust(values | internal))
    rendered: dict[str, Any] = {}
    for name, value in internal.items():
        try:
            rendered[name] = templar.template(_trust(value))
        except AnsibleUndefinedVariable:
            continue  # it reads what a task registers at run time: not a platform value
    return rendered


# ------------------------------------------------------------------ branch-aware names
@pytest.mark.parametrize(
    ("os_id", "branch", "modules", "pre", "packages"),
    [
        ("ubuntu2204", "570", "open", [], ["nvidia-driver-570-open=570.133.20-*"]),
        ("ubuntu2404", "570", "proprietary", [], ["cuda-drivers-570=570.133.20-*"]),
        ("ubuntu2404", "580", "open", [], ["nvidia-driver-580-open=580.65.06-*"]),
        ("ubuntu2404", "590", "open", ["nvidia-driver-pinning-590"], ["nvidia-driver-open=590.44.01-*"]),
        ("ubuntu2204", "610", "proprietary", ["nvidia-driver-pinning-610"], ["cuda-drivers=610.43.02-*"]),
        ("debian12", "570", "open", [], ["nvidia-driver-570-open=570.133.20-*"]),
        (
            "rhel96",
            "575",
            "open",
            [],
            ["nvidia-driver-3:575.51", "nvidia-driver-cuda-3:575.51", "kmod-nvidia-open-dkms-3:575.51"],
        ),
    ],
)
def test_driver_packages_follow_the_branch(
    os_id: str, branch: str, modules: str, pre: list[str], packages: list[str]
) -> None:
    version = {
        "570": "570.133.20",
        "575": "575.51",
        "580": "580.65.06",
        "590": "590.44.01",
        "610": "610.43.02",
    }
    got = render(
        "nvidia_driver",
        os_id,
        nvidia_driver_branch=branch,
        nvidia_driver_version=version[branch],
        nvidia_driver_kernel_modules=modules,
    )
    assert got["__nvidia_driver_pre_packages"] == pre
    assert got["__nvidia_driver_packages"] == packages
    # Everything installed is held: the pinning package too.
    held = {h.split("-3:")[0] for h in got["__nvidia_driver_hold"]}
    assert {p.split("=")[0].split("-3:")[0] for p in pre + packages} <= held
    assert got["__nvidia_driver_unsupported"].strip() == ""


def test_rhel_driver_uses_the_branch_stream_and_the_running_kernels_headers() -> None:
    got = render("nvidia_driver", "rocky94", nvidia_driver_branch="580", nvidia_driver_version="580.65.06")
    assert got["__nvidia_driver_module_stream"] == "nvidia-driver:580-open"
    assert got["__nvidia_driver_crb_repo"].strip() == "crb"
    assert got["__nvidia_driver_epel_package"] == "epel-release"
    assert got["__nvidia_driver_kernel_devel"] == [
        "kernel-devel-5.14.0-570.12.1.el9_6.x86_64",
        "kernel-headers",
    ]
    rhel = render("nvidia_driver", "rhel96", arch="aarch64", nvidia_driver_kernel_modules="proprietary")
    assert rhel["__nvidia_driver_module_stream"] == "nvidia-driver:570-dkms"
    assert rhel["__nvidia_driver_crb_repo"].strip() == "codeready-builder-for-rhel-9-aarch64-rpms"
    assert rhel["__nvidia_driver_epel_package"].startswith("https://dl.fedoraproject.org/pub/epel/")
    # RHEL proper enables CRB through subscription-manager, the rebuilds through dnf.
    assert rhel["__nvidia_driver_crb_enable_cmd"] == (
        "subscription-manager repos --enable codeready-builder-for-rhel-9-aarch64-rpms"
    )
    assert got["__nvidia_driver_crb_enable_cmd"] == "dnf config-manager --set-enabled crb"
    k64 = render(
        "nvidia_driver", "rhel96", arch="aarch64", ansible_kernel="5.14.0-570.12.1.el9_6.aarch64+64k"
    )
    assert k64["__nvidia_driver_kernel_devel"] == [
        "kernel-64k-devel-5.14.0-570.12.1.el9_6.aarch64",
        "kernel-headers",
    ]


@pytest.mark.parametrize(
    ("os_id", "arch", "branch"),
    [("debian12", "x86_64", "590"), ("debian12", "aarch64", "570"), ("ubuntu2404", "ppc64le", "570")],
)
def test_a_branch_or_platform_without_packages_is_refused_with_a_reason(
    os_id: str, arch: str, branch: str
) -> None:
    got = render(
        "nvidia_driver", os_id, arch=arch, nvidia_driver_branch=branch, nvidia_driver_version=f"{branch}.1.2"
    )
    assert got["__nvidia_driver_unsupported"].strip()


@pytest.mark.parametrize(
    ("os_id", "branch", "packages"),
    [
        ("ubuntu2404", "570", ["nvidia-fabricmanager-570=570.133.20-*", "libnvidia-nscq-570=570.133.20-*"]),
        ("ubuntu2404", "575", ["nvidia-fabricmanager-575=575.51-*", "libnvidia-nscq-575=575.51-*"]),
        ("ubuntu2204", "580", ["nvidia-fabricmanager=580.65.06-*", "libnvidia-nscq=580.65.06-*"]),
        ("ubuntu2404", "590", ["nvidia-fabricmanager=590.44.01-*", "libnvidia-nscq=590.44.01-*"]),
        ("rhel96", "570", ["nvidia-fabric-manager-570.133.20", "libnvidia-nscq-570-570.133.20"]),
        ("rhel96", "580", ["nvidia-fabricmanager-580.65.06", "libnvidia-nscq-580.65.06"]),
    ],
)
def test_fabric_manager_names_follow_the_branch_at_the_drivers_version(
    os_id: str, branch: str, packages: list[str]
) -> None:
    version = {"570": "570.133.20", "575": "575.51", "580": "580.65.06", "590": "590.44.01"}[branch]
    pins = {"nvidia_driver_branch": branch, "nvidia_driver_version": version}
    got = render("nvidia_fabricmanager", os_id, **pins)
    assert got["__nvidia_fabricmanager_packages"] == packages
    assert got["__nvidia_fabricmanager_companions"] == []
    # An NVLink 5 host (HGX B200) adds the subnet manager, unversioned: its versions are dates.
    nvlink5 = render("nvidia_fabricmanager", os_id, gpu_facts_nvswitch_fabric="nvlink5", **pins)
    assert nvlink5["__nvidia_fabricmanager_packages"] == packages
    assert nvlink5["__nvidia_fabricmanager_companions"] == ["nvlsm", "infiniband-diags"]
    assert nvlink5["__nvidia_fabricmanager_nvlink5_modules"] == ["mlx5_ib", "ib_umad"]


# ------------------------------------------------------------------ epochs in pins
@pytest.mark.parametrize("os_id", ["ubuntu2404", "rhel96"])
def test_pins_carry_the_vendors_epoch(os_id: str) -> None:
    sep = "=" if os_id.startswith("ubuntu") else "-"
    dcgm = render("dcgm", os_id)["__dcgm_packages"]
    assert dcgm == [
        f"datacenter-gpu-manager-4-core{sep}1:4.5.2-1",
        f"datacenter-gpu-manager-4-cuda12{sep}1:4.5.2-1",
    ]
    dcgm3 = render("dcgm", os_id, dcgm_major=3, dcgm_version="1:3.3.6")["__dcgm_packages"]
    assert dcgm3 == [f"datacenter-gpu-manager{sep}1:3.3.6"]
    beegfs = render("beegfs_client", os_id)["__beegfs_client_packages"]
    assert beegfs == [f"{p}{sep}20:7.4.5" for p in ("beegfs-client", "beegfs-helperd", "beegfs-utils")]
    if sep == "-":
        assert all("-3:575.51" in p for p in render("nvidia_driver", os_id, nvidia_driver_branch="575",
                                                      nvidia_driver_version="575.51")["__nvidia_driver_packages"])  # fmt: skip


@pytest.mark.parametrize("os_id", ["ubuntu2404", "debian12", "rhel96"])
def test_the_dcgm_exporter_is_pinned_and_held_at_its_own_version(os_id: str) -> None:
    sep = "-" if os_id == "rhel96" else "="
    got = render("dcgm", os_id, dcgm_exporter=True)
    # Its own version, without DCGM's epoch, after DCGM's own packages.
    assert got["__dcgm_packages"] == [
        *render("dcgm", os_id)["__dcgm_packages"],
        f"datacenter-gpu-manager-exporter{sep}4.8.1-1",
    ]
    held = "datacenter-gpu-manager-exporter" + (f"{sep}4.8.1-1" if os_id == "rhel96" else "")
    assert held in got["__dcgm_hold"] and "datacenter-gpu-manager-exporter" in got["__dcgm_held_names"]


def test_pins_without_epoch_where_the_vendor_has_none() -> None:
    assert render("nccl", "ubuntu2204", nccl_dev=True)["__nccl_packages"] == [
        "libnccl2=2.26.2-1+cuda12.8",
        "libnccl-dev=2.26.2-1+cuda12.8",
    ]
    assert render("nccl", "rhel96")["__nccl_packages"] == ["libnccl-2.26.2-1+cuda12.8"]
    assert render("cuda_toolkit", "ubuntu2404")["__cuda_toolkit_packages"] == ["cuda-toolkit-12-8=12.8.1-*"]
    assert render("nvidia_container_toolkit", "ubuntu2404")["__nvidia_container_toolkit_packages"][0] == (
        "nvidia-container-toolkit=1.17.5-1"
    )


# ------------------------------------------------------------------ repository layouts
CUDA = "https://developer.download.nvidia.com/compute/cuda/repos"


@pytest.mark.parametrize(
    ("role", "os_id", "arch", "options", "var", "url"),
    [
        ("nvidia_driver", "ubuntu2204", "x86_64", {}, "__nvidia_driver_repo_url", f"{CUDA}/ubuntu2204/x86_64"),
        ("nvidia_driver", "ubuntu2404", "aarch64", {}, "__nvidia_driver_repo_url", f"{CUDA}/ubuntu2404/sbsa"),
        ("nvidia_driver", "rhel96", "aarch64", {}, "__nvidia_driver_repo_key_url", f"{CUDA}/rhel9/sbsa/D42D0685.pub"),
        ("nvidia_driver", "ubuntu2404", "x86_64", {}, "__nvidia_driver_repo_key_url", f"{CUDA}/ubuntu2404/x86_64/3bf863cc.pub"),
        ("nvidia_driver", "debian12", "x86_64", {}, "__nvidia_driver_repo_url", f"{CUDA}/debian12/x86_64"),
        (
            "nvidia_container_toolkit", "ubuntu2204", "aarch64", {}, "__nvidia_container_toolkit_repo_url",
            "https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH)",
        ),
        (
            "nvidia_container_toolkit", "rhel96", "aarch64", {}, "__nvidia_container_toolkit_repo_url",
            "https://nvidia.github.io/libnvidia-container/stable/rpm/$basearch",
        ),
        (
            "doca_ofed", "ubuntu2404", "aarch64", {}, "__doca_ofed_repo_url",
            "https://linux.mellanox.com/public/repo/doca/2.9.1/ubuntu24.04/arm64-sbsa/",
        ),
        (
            "doca_ofed", "rhel96", "x86_64", {}, "__doca_ofed_repo_url",
            "https://linux.mellanox.com/public/repo/doca/2.9.1/rhel9.6/x86_64/",
        ),
        (
            "doca_ofed", "rocky94", "aarch64", {"doca_ofed_version": "3.2.0"}, "__doca_ofed_repo_url",
            "https://linux.mellanox.com/public/repo/doca/3.2.0/rhel9/arm64-sbsa/",
        ),
        (
            "lustre_client", "ubuntu2204", "x86_64", {"lustre_client_version": "2.15.4"}, "__lustre_client_repo_url",
            "https://downloads.whamcloud.com/public/lustre/lustre-2.15.4/ubuntu2204/client",
        ),
        (
            "lustre_client", "debian12", "x86_64", {"lustre_client_version": "2.15.4"}, "__lustre_client_repo_url",
            "https://downloads.whamcloud.com/public/lustre/lustre-2.15.4/debian12/client",
        ),
        (
            "lustre_client", "rhel96", "x86_64", {"lustre_client_version": "2.15.7"}, "__lustre_client_repo_url",
            "https://downloads.whamcloud.com/public/lustre/lustre-2.15.7/el9.6/client",
        ),
        (
            "lustre_client", "rocky94", "x86_64", {"lustre_client_version": "2.15.7", "lustre_client_el_release": "9.6"},
            "__lustre_client_repo_url", "https://downloads.whamcloud.com/public/lustre/lustre-2.15.7/el9.6/client",
        ),
        ("beegfs_client", "debian12", "x86_64", {}, "__beegfs_client_repo_dist", "deb12"),
        ("beegfs_client", "ubuntu2204", "x86_64", {}, "__beegfs_client_repo_dist", "jammy"),
        ("beegfs_client", "ubuntu2404", "aarch64", {}, "__beegfs_client_repo_dist", "noble"),
        ("beegfs_client", "rhel96", "x86_64", {}, "__beegfs_client_repo_dist", "rhel9"),
    ],
)  # fmt: skip
def test_repository_layout_per_os_and_architecture(
    role: str, os_id: str, arch: str, options: dict[str, Any], var: str, url: str
) -> None:
    assert render(role, os_id, arch=arch, **options)[var].strip() == url


def test_lustre_modules_are_the_running_kernels_or_dkms() -> None:
    prebuilt = render("lustre_client", "ubuntu2204", lustre_client_version="2.15.4")
    assert prebuilt["__lustre_client_packages"] == [
        "lustre-client-utils=2.15.4-*",
        "lustre-client-modules-5.15.0-88-generic=2.15.4-*",
    ]
    dkms = render("lustre_client", "ubuntu2404", lustre_client_kernel_modules="dkms")
    assert dkms["__lustre_client_package_names"] == ["lustre-client-utils", "lustre-client-modules-dkms"]
    el = render(
        "lustre_client", "rhel96", lustre_client_kernel_modules="dkms", lustre_client_version="2.15.7"
    )
    assert el["__lustre_client_packages"] == ["lustre-client-2.15.7", "lustre-client-dkms-2.15.7"]


# ------------------------------------------------------------------ holds and signature settings
def _tasks(role: str) -> list[dict[str, Any]]:
    return [t for tasks in role_readme.task_files(ROLES / role).values() for t, _ in tasks]


@pytest.mark.parametrize("role", VENDOR_ROLES)
def test_every_pinned_install_is_held_on_both_families(role: str) -> None:
    tasks = _tasks(role)
    text = yaml.safe_dump(tasks, width=10_000)
    installs = {
        role_readme.module_of(t)
        for t in tasks
        if role_readme.module_of(t) in ("ansible.builtin.apt", "ansible.builtin.dnf")
    }
    assert installs == {"ansible.builtin.apt", "ansible.builtin.dnf"}, role
    holds = [t for t in tasks if role_readme.module_of(t) == "ansible.builtin.dpkg_selections"]
    locks = [t for t in tasks if role_readme.module_of(t) == "community.general.dnf_versionlock"]
    assert holds and all(t["ansible.builtin.dpkg_selections"]["selection"] == "hold" for t in holds), role
    assert locks and all(t["community.general.dnf_versionlock"]["state"] == "present" for t in locks), role
    if role not in ("doca_ofed", "nvidia_driver"):
        assert f"__{role}_hold" in text


@pytest.mark.parametrize("role", [r for r in VENDOR_ROLES if r != "doca_ofed"])
def test_a_pin_moved_back_installs_the_older_version(role: str) -> None:
    """Without allow_downgrade the dnf module keeps a newer installed version and says ok, and apt-get
    refuses: every pinned install of both families allows it (tests/roles/test_versionlock.py runs it)."""
    installs = [
        t
        for t in _tasks(role)
        if role_readme.module_of(t) in ("ansible.builtin.apt", "ansible.builtin.dnf")
        and f"__{role}_packages" in str(t)
    ]
    assert {role_readme.module_of(t) for t in installs} == {"ansible.builtin.apt", "ansible.builtin.dnf"}
    assert all(t[role_readme.module_of(t) or ""].get("allow_downgrade") is True for t in installs), role


@pytest.mark.parametrize("role", [r for r in VENDOR_ROLES if r != "doca_ofed"])
def test_the_rhel_install_is_preceded_by_releasing_the_old_locks(role: str) -> None:
    """A moved pin installs on RHEL only once the entries of the old one are gone (roles/versionlock):
    the role imports it before its install, over every package it locks."""
    tasks = _tasks(role)
    releases = [i for i, t in enumerate(tasks) if role_readme.module_of(t) == "ansible.builtin.import_role"]
    installs = [
        i
        for i, t in enumerate(tasks)
        if role_readme.module_of(t) == "ansible.builtin.dnf" and f"__{role}_packages" in str(t)
    ]
    assert len(releases) == 1 and installs and releases[0] == installs[0] - 1, (role, releases, installs)
    release = tasks[releases[0]]
    assert release["ansible.builtin.import_role"] == {"name": "versionlock"}
    assert release["vars"]["versionlock_specs"] == f"{{{{ __{role}_hold }}}}"
    assert release["when"] == tasks[installs[0]]["when"]
    # dcgm with its exporter: a package pinned at a version of its own.
    rhel = render(role, "rhel96", **({"dcgm_exporter": True} if role == "dcgm" else {}))
    names = Templar(loader=DataLoader(), variables=_trust(rhel)).template(
        trust_as_template(release["vars"]["versionlock_names"])
    )
    for spec in rhel[f"__{role}_hold"]:
        assert any(spec.startswith(f"{name}-") for name in names), (role, spec, names)


@pytest.mark.parametrize("os_id", ["ubuntu2404", "debian12", "rhel96"])
@pytest.mark.parametrize("role", [r for r in VENDOR_ROLES if r not in ("doca_ofed",)])
def test_the_hold_covers_every_pinned_package(role: str, os_id: str) -> None:
    got = render(role, os_id)
    pinned = [p for p in got[f"__{role}_packages"] if "=" in p or p[-1].isdigit()]
    held = " ".join(got[f"__{role}_hold"])
    for spec in pinned:
        name = spec.split("=")[0]
        assert name.split("-1:")[0].split("-3:")[0].split("-20:")[0] in held, (role, os_id, spec, held)


def test_unsigned_and_metadata_only_signatures_are_scoped_to_their_repository() -> None:
    lustre = {t["name"]: t for t in _tasks("lustre_client")}
    apt = lustre["Add the repository, trusted when unsigned"]["ansible.builtin.deb822_repository"]
    assert apt["trusted"] == "{{ omit if lustre_client_repo_key_url else true }}"
    dnf = lustre["Add the Lustre client repository"]["ansible.builtin.yum_repository"]
    assert dnf["gpgcheck"] == "{{ lustre_client_repo_key_url | length > 0 }}"
    ctk = next(t for t in _tasks("nvidia_container_toolkit") if "ansible.builtin.yum_repository" in t)
    assert ctk["ansible.builtin.yum_repository"]["repo_gpgcheck"] is True
    assert ctk["ansible.builtin.yum_repository"]["gpgcheck"] is False


def _assert_passes(role: str, task_name: str, os_id: str, **options: Any) -> bool:
    task = next(t for t in _tasks(role) if t.get("name") == task_name)
    distribution, version, family, _release = OS[os_id]
    values = yaml.safe_load((ROLES / role / "defaults" / "main.yml").read_text()) | {
        "ansible_distribution": distribution,
        "ansible_distribution_version": version,
        "ansible_distribution_major_version": version.split(".")[0],
        "ansible_os_family": family,
        "ansible_architecture": "x86_64",
        **options,
    }
    # The task's own vars over everything, as Ansible ranks them.
    rendered = render(role, os_id, **options) if (ROLES / role / "vars").is_dir() else {}
    variables = values | rendered | task.get("vars", {})
    templar = Templar(loader=DataLoader(), variables=_trust(variables))
    return all(
        templar.template(trust_as_template("{{ (" + str(c) + ") | bool }}"))
        for c in task["ansible.builtin.assert"]["that"]
    )


@pytest.mark.parametrize(
    ("target", "ok"),
    [
        ({"transport": "tcp", "address": "192.0.2.10"}, True),
        (
            {
                "transport": "rdma",
                "address": "fd00::a",
                "port": 4420,
                "nqn": "nqn.2014-08.org.example:scratch",
            },
            True,
        ),
        ({"transport": "tcp", "address": "nvme-target.example", "host_traddr": "192.0.2.1"}, True),
        ({"transport": "tcp", "address": "192.0.2.10 --hostnqn=nqn.2014-08.org.evil:x"}, False),
        ({"transport": "tcp", "address": "192.0.2.10", "host_traddr": "a=b"}, False),
        ({"transport": "tcp", "address": "192.0.2.10", "port": 0}, False),
        ({"transport": "tcp", "address": "192.0.2.10", "nqn": "scratch"}, False),
        ({"transport": "tcp", "address": "192.0.2.10", "nqn": "nqn.2014-08.org.example:a b"}, False),
    ],
)
def test_an_nvmeof_target_is_held_to_each_fields_grammar(target: dict[str, Any], ok: bool) -> None:
    """Each field becomes an argument on a discovery.conf line, split at spaces and '='."""
    task = "Check the targets are well formed"
    assert _assert_passes("nvmeof_initiator", task, "debian12", item=target) is ok


@pytest.mark.parametrize(
    ("networks", "nids", "ok"),
    [
        ("o2ib0(ib0)", ["10.0.0.5@o2ib"], True),  # lctl names network 0 without its number
        ("o2ib(ib0,ib1),tcp1(eth1)", ["10.0.0.5@o2ib", "10.0.0.6@o2ib", "192.168.1.5@tcp1"], True),
        ("tcp10(eth0)[0,1]", ["192.168.1.5@tcp10"], True),
        ("o2ib0(ib1)", ["192.168.1.5@tcp"], False),  # changed, not reloaded: lnet runs the old network
        ("o2ib0(ib0),tcp0(eth0)", ["10.0.0.5@o2ib"], False),
        ("tcp10(eth0)", ["192.168.1.5@tcp1"], False),
        ("o2ib0(ib0)", [], False),
    ],
)
def test_the_lustre_verify_fails_while_lnet_runs_other_networks_than_configured(
    networks: str, nids: list[str], ok: bool
) -> None:
    registered = {"lustre_client_lnet_nids": {"stdout_lines": nids}}
    task = "Verify | LNet runs the networks the role configured"
    assert (
        _assert_passes("lustre_client", task, "debian12", lustre_client_lnet_networks=networks, **registered)
        is ok
    )


@pytest.mark.parametrize(
    ("role", "task", "os_id", "options", "ok"),
    [
        ("dcgm", "Check the version carries the vendor's epoch and matches the major release", "ubuntu2404", {}, True),
        ("dcgm", "Check the version carries the vendor's epoch and matches the major release", "ubuntu2404", {"dcgm_version": "4.5.2-1"}, False),
        ("dcgm", "Check the version carries the vendor's epoch and matches the major release", "ubuntu2404", {"dcgm_major": 3, "dcgm_version": "1:3.3.6"}, True),
        ("dcgm", "Check the version carries the vendor's epoch and matches the major release", "ubuntu2404", {"dcgm_exporter_version": "1:4.8.1-1"}, False),
        ("dcgm", "Check the version carries the vendor's epoch and matches the major release", "rhel96", {"dcgm_exporter_version": "4.8.1"}, False),
        ("dcgm", "Check the version carries the vendor's epoch and matches the major release", "ubuntu2404", {"dcgm_exporter_port": 0}, False),
        ("dcgm", "Check the version carries the vendor's epoch and matches the major release", "ubuntu2404", {"dcgm_major": 3, "dcgm_version": "1:3.3.6", "dcgm_exporter": True}, False),
        ("dcgm", "Check the version carries the vendor's epoch and matches the major release", "ubuntu2404", {"dcgm_exporter": True, "dcgm_exporter_port": 9500}, True),
        ("dcgm", "Check the version carries the vendor's epoch and matches the major release", "ubuntu2404", {"dcgm_exporter_port": 65536}, False),
        ("nvidia_driver", "Check the branch, the version and the platform have packages", "ubuntu2404", {}, True),
        ("nvidia_driver", "Check the branch, the version and the platform have packages", "ubuntu2404", {"nvidia_driver_branch": 570}, True),
        ("nvidia_driver", "Check the branch, the version and the platform have packages", "ubuntu2404", {"nvidia_driver_branch": "450", "nvidia_driver_version": "450.80.02"}, False),
        ("beegfs_client", "Check the platform, the management host and the secret", "debian12", {"beegfs_client_mgmtd_host": "mgmt", "beegfs_client_conn_auth_secret": "s3cr3t-s3cr3t"}, True),
        ("beegfs_client", "Check the platform, the management host and the secret", "debian12", {"beegfs_client_mgmtd_host": "mgmt", "beegfs_client_conn_auth_secret": "s3cr3t-s3cr3t", "beegfs_client_version": "7.4.5"}, False),
        ("beegfs_client", "Check the platform, the management host and the secret", "ubuntu2404", {"beegfs_client_mgmtd_host": "mgmt", "beegfs_client_conn_auth_secret": "s3cr3t-s3cr3t", "beegfs_client_version": "20:7.4.4"}, False),
        ("beegfs_client", "Check the platform, the management host and the secret", "rhel96", {"beegfs_client_mgmtd_host": "mgmt", "beegfs_client_conn_auth_secret": "s3cr3t-s3cr3t", "beegfs_client_version": "20:8.1.0"}, False),
        ("lustre_client", "Check the platform and the file system coordinates", "rhel96", {"lustre_client_mgs_nids": ["10.0.0.1@o2ib"], "lustre_client_fsname": "fs1"}, True),
        ("lustre_client", "Check the platform and the file system coordinates", "rhel96", {"lustre_client_mgs_nids": ["10.0.0.1@o2ib"], "lustre_client_fsname": "fs1", "lustre_client_el_release": "9.4"}, False),
        ("lustre_client", "Check the platform and the file system coordinates", "rhel96", {"lustre_client_mgs_nids": ["10.0.0.1@o2ib"], "lustre_client_fsname": "fs1", "lustre_client_el_release": "9.4", "lustre_client_kernel_modules": "dkms"}, True),
        ("lustre_client", "Check the platform and the file system coordinates", "debian12", {"lustre_client_mgs_nids": ["10.0.0.1@o2ib", "10.0.0.2@o2ib1,mgs2.example@tcp"], "lustre_client_fsname": "fs1", "lustre_client_lnet_networks": "o2ib0(ib0,ib1),tcp0(eth0.100)[0,1]"}, True),
        ("lustre_client", "Check the platform and the file system coordinates", "debian12", {"lustre_client_mgs_nids": ["10.0.0.1@o2ib /mnt/x lustre"], "lustre_client_fsname": "fs1"}, False),
        ("lustre_client", "Check the platform and the file system coordinates", "debian12", {"lustre_client_mgs_nids": ["10.0.0.1"], "lustre_client_fsname": "fs1"}, False),
        ("lustre_client", "Check the platform and the file system coordinates", "debian12", {"lustre_client_mgs_nids": ["10.0.0.1@o2ib"], "lustre_client_fsname": "fs1", "lustre_client_lnet_networks": 'o2ib0(ib0)"\ninstall lnet /bin/sh -c "touch /PWNED"'}, False),
        ("lustre_client", "Check the platform and the file system coordinates", "debian12", {"lustre_client_mgs_nids": ["10.0.0.1@o2ib"], "lustre_client_fsname": "fs1", "lustre_client_lnet_networks": "tcp0(eth0"}, False),
        ("doca_ofed", "Check DOCA has a repository for this host", "debian12", {"doca_ofed_source": "doca"}, False),
        ("doca_ofed", "Check DOCA has a repository for this host", "debian12", {"doca_ofed_source": "auto", "doca_ofed_use_doca": False}, True),
        ("nccl", "Check the release is pinned exactly", "ubuntu2404", {"nccl_version": "2.26.2-1+cuda12.8"}, False),
        ("nvidia_driver", "Check the branch, the version and the platform have packages", "rhel96", {"nvidia_driver_version": "3:570.133.20"}, False),
        ("nvidia_driver", "Check the branch, the version and the platform have packages", "ubuntu2404", {"nvidia_driver_branch": "580"}, False),
        ("nvidia_driver", "Check the branch, the version and the platform have packages", "debian12", {"nvidia_driver_branch": "590", "nvidia_driver_version": "590.44.01"}, False),
        ("cuda_toolkit", "Check the release is pinned exactly", "ubuntu2404", {"cuda_toolkit_release": "12.9.0"}, False),
    ],
)  # fmt: skip
def test_the_argument_check_refuses_what_has_no_package(
    role: str, task: str, os_id: str, options: dict[str, Any], ok: bool
) -> None:
    assert _assert_passes(role, task, os_id, **options) is ok


# ------------------------------------------------------------------ runtime checks' logic
# /sys/class/infiniband/<dev>/device resolved (readlink) on an HGX B200 with DOCA: eight HCAs and
# the four NVLink 5 switch-management ports (a DGX B200 registers four, mlx5_0 to mlx5_3:
# siderolabs/extensions#895), which gpu_facts found by the SW_MNG mark in their VPD.
B200_PORTS = [f"0000:{0x60 + i:02x}:00.0" for i in range(4)]
B200_HCAS = [f"0000:{0x18 + i:02x}:00.0" for i in range(8)]


def _functions(addresses: list[str]) -> dict[str, Any]:
    return {"stdout_lines": [f"/sys/devices/pci0000:00/0000:00:01.0/{a}" for a in addresses]}


@pytest.mark.parametrize(
    ("hcas", "ports_known", "ok"),
    [
        (B200_HCAS, True, True),
        (B200_HCAS[:7], True, False),  # an HCA missing is still found with the ports beside it
        (B200_HCAS, False, False),  # without gpu_facts' ports the count is 12, not the SKU's 8
    ],
)
def test_an_nvlink5_boards_switch_ports_are_not_counted_as_its_hcas(
    hcas: list[str], ports_known: bool, ok: bool
) -> None:
    ports = [{"address": a, "kind": "nvlink5_switch_port", "vendor_id": "0x15b3"} for a in B200_PORTS]
    registered = {
        "doca_ofed_sysfs_devices": {"matched": len(hcas) + len(B200_PORTS)},
        "doca_ofed_device_functions": _functions(hcas + B200_PORTS),
        "gpu_facts_devices": ports if ports_known else [],
    }
    task = "Verify | the node shows the RDMA devices its SKU has"
    assert _assert_passes("doca_ofed", task, "ubuntu2204", doca_ofed_expected_hcas=8, **registered) is ok


# nvidia-smi -q's Fabric section, in the form public troubleshooting notes quote it (a GPU whose
# registration is still running: "In Progress", Status N/A; registered: "Completed", "Success").
def _fabric(state: str, status: str) -> list[str]:
    return [
        "GPU 00000000:18:00.0",
        "    Fabric",
        f"        State                             : {state}",
        f"        Status                            : {status}",
    ]


@pytest.mark.parametrize(
    ("state", "status", "attempt", "read_again", "ok"),
    [
        ("In Progress", "N/A", 1, True, False),
        ("In Progress", "N/A", 12, True, False),
        ("In Progress", "N/A", 13, False, False),  # the last read is judged, and fails
        ("Completed", "Success", 1, False, True),
        ("Completed", "Success", 5, False, True),
        # Registered, and failed: NVML's status says so once the state is complete.
        ("Completed", "Failure", 1, False, False),
    ],
)
def test_the_fabric_state_is_read_again_while_gpus_register_then_judged(
    state: str, status: str, attempt: int, read_again: bool, ok: bool
) -> None:
    read = next(
        t
        for t in _tasks("nvidia_fabricmanager")
        if t.get("name") == "Verify | GPUs report a completed fabric"
    )
    result = {"attempts": attempt, "stdout_lines": _fabric(state, status)}
    templar = Templar(loader=DataLoader(), variables=_trust({"nvidia_fabricmanager_fabric": result}))
    assert read["retries"] == 12  # Ansible reads retries + 1 times
    done = templar.template(trust_as_template("{{ (" + read["until"] + ") | bool }}"))
    assert done is not read_again
    task = "Verify | no GPU reports an incomplete or failed fabric registration"
    assert (
        _assert_passes("nvidia_fabricmanager", task, "ubuntu2204", nvidia_fabricmanager_fabric=result) is ok
    )
