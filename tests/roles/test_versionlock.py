"""The versionlock role and the roles' RHEL locks, run for real: this machine's dnf (Debian's dnf
4.14 and its versionlock plugin from dnf-plugins-core), community.general.dnf_versionlock, and the
vendor package mirror's rpm repositories (tests/roles/vendor_mirror.py) served on loopback.

dnf keeps its configuration and lock list under /etc/dnf, so every dnf and Ansible run here happens
in a private mount namespace where a throwaway directory stands over /etc/dnf: this machine's own
configuration and lock list never change. The repositories are configured without signature checks,
which test_vendor_mirror.py judges; here only the locks are the subject.

The plays run each role's own RHEL tasks around its install, as the role's task file has them: the
import of the versionlock role and the role's lock (doca_ofed: also the read of the release its
repository carries), over the role's vars/RedHat.yml rendered for RHEL 9.6. nccl's install runs too,
into a throwaway install root (the dnf module's installroot, with dnf's own Python): a pin moved
forward and back. Left out: the other installs, which would need an rpm system or more than one
version per package in the mirror, and the versionlock role's first task (the plugin's install).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import BIN, ROOT
from tests.roles import role_readme, vendor_mirror
from tests.roles.test_vendor_pins import render

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None or not Path("/etc/dnf").is_dir(),
    reason="needs root and unshare (a private mount namespace over /etc/dnf) and dnf",
)

CUDA_RHEL9 = "compute/cuda/repos/rhel9/x86_64"
CTK_RPM = "libnvidia-container/stable/rpm/x86_64"
DOCA_RHEL9 = "public/repo/doca/3.2.0/rhel9/x86_64"
# nccl moves for real (an install root): up from the older NCCL the mirror carries, then back to it.
NCCL, OLD_NCCL = "2.26.2-1", "2.25.1-1"
# One role per form a pin takes, at the pin the mirror carries (rhel96 facts), as an inventory sets
# it: name-epoch:version (also beegfs_client's), name-epoch:version-release, name-version-release,
# name-version (also lustre_client's and cuda_toolkit's).
PINNED: dict[str, dict[str, Any]] = {
    "nvidia_driver": {"nvidia_driver_branch": "575", "nvidia_driver_version": "575.51"},
    "dcgm": {},
    "nccl": {"nccl_version": NCCL},
    "nvidia_container_toolkit": {},
}
# doca_ofed pins by repository path: its specs are what the repository carries (its read task).
DOCA = {"doca_ofed_use_doca": True, "doca_ofed_doca_packages": ["doca-ofed"]}
# Entries an earlier pin of each role left: dnf's own form at an older release.
OLD = [
    "nvidia-driver-3:570.172.08-1.el9.*",
    "kmod-nvidia-open-dkms-3:570.172.08-1.el9.*",
    "datacenter-gpu-manager-4-core-1:4.4.1-1.*",
    f"libnccl-0:{OLD_NCCL}+cuda12.8.*",
    "nvidia-container-toolkit-0:1.17.4-1.*",
    "doca-ofed-0:2.9.1-1.*",
]
# Entries that are not the roles' to touch: another package, an exclusion, a pattern by hand.
OTHERS = ["bash-0:5.1.8-9.el9.*", "!kernel-0:5.14.0-1.el9.*", "nvidia-driver-cuda-3:5*"]
PLUGIN = "python3-dnf-plugin-versionlock"


def _plain(value: Any) -> Any:
    """The templar's values as plain YAML data (they come back tagged, which yaml.safe_dump refuses)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, bool | int | float) or value is None:
        return value
    return str(value)


def _role_tasks(role: str, file: str, wanted: set[str]) -> list[dict[str, Any]]:
    """The role's own tasks of the given modules or names, in the order of its task file."""
    found = [
        task
        for task, _ in role_readme.walk_tasks(
            yaml.safe_load((ROOT / "roles" / role / "tasks" / file).read_text())
        )
        if "block" not in task and (role_readme.module_of(task) in wanted or task.get("name") in wanted)
    ]
    assert found, (role, file, wanted)
    return found


def _site_tasks(root: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Each role's RHEL tasks around its install, and the vars they read: its rendered vars/RedHat.yml,
    the facts of a RHEL host and the results of its earlier tasks (repositories already in place).
    nccl's install runs too, into root."""
    wanted = {"ansible.builtin.import_role", "community.general.dnf_versionlock"}
    tasks: list[dict[str, Any]] = []
    variables: dict[str, Any] = {
        "ansible_os_family": "RedHat",
        "nvidia_driver_repo": {"changed": False},
        "versionlock_plugin": {"changed": False},
    }
    for role in PINNED:
        if role == "nccl":
            tasks += _nccl_at(NCCL, root)[0]
        else:
            file = "RedHat.yml" if (ROOT / "roles" / role / "tasks" / "RedHat.yml").exists() else "main.yml"
            tasks += _role_tasks(role, file, wanted)
        variables |= _plain(render(role, "rhel96", **PINNED[role]))
    tasks += _role_tasks("doca_ofed", "RedHat.yml", wanted | {"Read the DOCA release the repository carries"})
    variables |= DOCA | {"doca_ofed_repo": {"changed": False}}
    return tasks, variables


def _nccl_at(version: str, root: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """nccl's own RHEL tasks at a pin: release the other versions' locks, install, lock. The install
    goes into root (the dnf module's installroot), through dnf's own Python, which the module finds."""
    names = {
        "Release versionlock entries that hold libnccl at another version",
        "Install the pinned libnccl on RHEL",
        "Lock libnccl at the pinned release",
    }
    tasks = _role_tasks("nccl", "main.yml", names)
    modules = [role_readme.module_of(task) for task in tasks]
    assert modules == [
        "ansible.builtin.import_role",
        "ansible.builtin.dnf",
        "community.general.dnf_versionlock",
    ]
    tasks[1]["ansible.builtin.dnf"] |= {"installroot": str(root), "releasever": "9", "use_backend": "dnf4"}
    variables = {"ansible_os_family": "RedHat", "versionlock_plugin": {"changed": False}}
    variables |= _plain(render("nccl", "rhel96", nccl_version=version))
    return tasks, variables


def _entry(pkg: vendor_mirror.RpmPackage) -> str:
    """The lock entry dnf writes for a package: name-epoch:version-release.*, epoch 0 when it has none."""
    return f"{pkg.name}-{pkg.epoch or 0}:{pkg.version}-{pkg.release}.*"


class Etc:
    """A directory that stands over /etc/dnf in a private mount namespace, with its lock list."""

    def __init__(self, base: Path, repos: Mapping[str, str]) -> None:
        self.base = base
        self.dnf = base / "etc-dnf"
        (self.dnf / "plugins").mkdir(parents=True)
        (self.dnf / "vars").mkdir()
        (self.dnf / "vars" / "releasever").write_text("9\n")
        (base / "repos").mkdir()
        for sub in ("cache", "persist", "log"):
            (base / sub).mkdir()
        (self.dnf / "dnf.conf").write_text(
            "[main]\n"
            f"reposdir={base / 'repos'}\ncachedir={base / 'cache'}\npersistdir={base / 'persist'}\n"
            f"logdir={base / 'log'}\ninstall_weak_deps=False\n"
        )
        # The versionlock plugin alone: dnf-plugins-core's other plugins stay off.
        (self.dnf / "plugins" / "versionlock.conf").write_text(
            "[main]\nenabled = 1\nlocklist = /etc/dnf/plugins/versionlock.list\n"
        )
        self.locklist = self.dnf / "plugins" / "versionlock.list"
        self.locklist.write_text("")
        for name, url in repos.items():
            (base / "repos" / f"{name}.repo").write_text(
                f"[{name}]\nname={name}\nbaseurl={url}\nenabled=1\ngpgcheck=0\nrepo_gpgcheck=0\n"
            )

    def run(self, *argv: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """argv in a private mount namespace where this directory is /etc/dnf."""
        cmd = ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
               'mount --bind "$0" /etc/dnf && exec "$@"', str(self.dnf), *argv]  # fmt: skip
        env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")} | {
            "LC_ALL": "C.UTF-8",
            "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
            "ANSIBLE_ROLES_PATH": str(self.base / "roles"),
        }
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)

    def entries(self) -> list[str]:
        lines = self.locklist.read_text().splitlines()
        return [line for line in lines if line.strip() and not line.startswith("#")]


@pytest.fixture(scope="module")
def mirror() -> Iterator[vendor_mirror.Mirror]:
    table = vendor_mirror.load_table()
    if vendor_mirror.missing_tools() or not vendor_mirror.rpm_tools_present():
        pytest.skip("the rpm mirror needs dpkg-dev, gnupg, rpm and createrepo-c")
    with vendor_mirror.serve(vendor_mirror.build_mirror(table), "127.0.0.1", 0, table) as served:
        yield served


@pytest.fixture
def etc(tmp_path: Path, mirror: vendor_mirror.Mirror) -> Etc:
    # "doca" is the id doca_ofed's repository has, which its read of the release names.
    paths = {"cuda": CUDA_RHEL9, "ctk": CTK_RPM, "doca": DOCA_RHEL9}
    etc = Etc(tmp_path, {name: mirror.repo_url(path) for name, path in paths.items()})
    done = etc.run("dnf", "-q", "versionlock", "list")
    if done.returncode != 0:
        pytest.skip(
            f"dnf has no versionlock plugin here (apt-get install dnf-plugins-core): {done.stderr[-300:]}"
        )
    _copy_role_without_plugin_install(tmp_path / "roles")
    return etc


def _copy_role_without_plugin_install(roles: Path) -> None:
    shutil.copytree(ROOT / "roles" / "versionlock", roles / "versionlock")
    main = roles / "versionlock" / "tasks" / "main.yml"
    tasks = yaml.safe_load(main.read_text())
    first = tasks[0]
    assert first.get("ansible.builtin.dnf", {}).get("name") == PLUGIN, first
    main.write_text(yaml.safe_dump(tasks[1:], sort_keys=False))


def _play(
    etc: Etc, tasks: list[dict[str, Any]], variables: dict[str, Any]
) -> subprocess.CompletedProcess[str]:
    play = {"hosts": "all", "gather_facts": False, "vars": variables, "tasks": tasks}
    (etc.base / "play.yml").write_text(yaml.safe_dump([play], sort_keys=False))
    host = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    (etc.base / "inventory.yml").write_text(yaml.safe_dump({"all": {"hosts": {"node": host}}}))
    return etc.run(
        str(BIN / "ansible-playbook"), "-i", str(etc.base / "inventory.yml"), str(etc.base / "play.yml")
    )


def _release(names: list[str], specs: list[str]) -> dict[str, Any]:
    return {
        "name": "Release every role's other versions",
        "ansible.builtin.import_role": {"name": "versionlock"},
        "vars": {"versionlock_names": names, "versionlock_specs": specs},
    }


def _changed(done: subprocess.CompletedProcess[str]) -> int:
    """How many tasks the play changed (its recap), after it succeeded."""
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    recap = re.search(r"^node\s+:.*\bchanged=(\d+)", done.stdout, re.M)
    assert recap, done.stdout[-2000:]
    return int(recap.group(1))


def test_pins_move_forward_and_back_past_the_old_locks(
    etc: Etc, mirror: vendor_mirror.Mirror, tmp_path: Path
) -> None:
    root = tmp_path / "root"
    etc.locklist.write_text("".join(f"{e}\n" for e in OLD + OTHERS))
    # The older NCCL is installed, at the lock an earlier pin left.
    done = etc.run(
        "dnf",
        "-y",
        "-q",
        f"--installroot={root}",
        "--releasever=9",
        "install",
        f"libnccl-{OLD_NCCL}+cuda12.8",
    )
    assert done.returncode == 0, done.stderr
    assert _installed(root) == f"libnccl-{OLD_NCCL}+cuda12.8.x86_64"
    install = ("dnf", "--assumeno", "install", "nvidia-driver-3:575.51")
    before = etc.run(*install)
    # The bug the role fixes, on the real plugin: the old lock hides the new pin.
    assert "All matches were filtered out by exclude filtering for argument: nvidia-driver-3:575.51" in (
        before.stdout + before.stderr
    ), before.stdout + before.stderr

    # Role by role, as a site play runs them: each release and each lock changed, the old entries went
    # and the new came, no role's release touched what the roles before it had locked, and NCCL moved up.
    tasks, variables = _site_tasks(root)
    assert _changed(_play(etc, tasks, variables)) == 2 * (len(PINNED) + 1) + 1
    assert _installed(root) == f"libnccl-{NCCL}+cuda12.8.x86_64"
    # What each role passed to the versionlock role and to its lock, from the vars the play ran with.
    locks = [(variables[f"__{role}_package_names"], variables[f"__{role}_hold"]) for role in PINNED]
    locks.append((DOCA["doca_ofed_doca_packages"], []))
    names = {name for role_names, _ in locks for name in role_names}
    pinned = [
        _entry(pkg)
        for repo in mirror.table.rpm_repositories
        if repo.path in (CUDA_RHEL9, CTK_RPM, DOCA_RHEL9)
        for pkg in repo.packages
        if pkg.name in names and f"{pkg.name}-{pkg.version}-{pkg.release}" != f"libnccl-{OLD_NCCL}+cuda12.8"
    ]
    # The mirror carries 2 driver, 2 DCGM, 1 NCCL (beside the older), 4 container toolkit, 1 DOCA packages.
    assert len(pinned) == 10, pinned
    assert sorted(etc.entries()) == sorted(OTHERS + pinned)

    # Every role reads its own new entries as its pin, whichever form the pin takes (name-epoch:version,
    # name-epoch:version-release, name-version-release, name-version, DOCA's name-epoch:version-release
    # from its repository): one release over all of them deletes nothing.
    specs = [spec for _, role_specs in locks for spec in role_specs] + [
        e.removesuffix(".*") for e in pinned if e.startswith("doca-")
    ]
    assert (
        _changed(_play(etc, [_release(sorted(names), specs)], {"versionlock_plugin": {"changed": False}}))
        == 0
    )
    assert sorted(etc.entries()) == sorted(OTHERS + pinned)
    after = etc.run(*install)
    assert "filtered out" not in after.stdout + after.stderr, after.stdout + after.stderr
    assert "nvidia-driver" in after.stdout and "Operation aborted" in after.stdout + after.stderr, (
        after.stdout
    )

    # The pin moved back: the dnf module keeps a newer installed version and reports ok unless
    # allow_downgrade is set (ansible.builtin.dnf, _mark_package_install); the roles set it.
    assert _changed(_play(etc, *_nccl_at(OLD_NCCL, root))) == 3  # released, installed, locked
    assert _installed(root) == f"libnccl-{OLD_NCCL}+cuda12.8.x86_64"
    assert [e for e in etc.entries() if e.startswith("libnccl-")] == [f"libnccl-0:{OLD_NCCL}+cuda12.8.*"]


def _installed(root: Path) -> str:
    done = subprocess.run(["rpm", "--root", str(root), "-q", "libnccl"], capture_output=True, text=True)
    return done.stdout.strip()
