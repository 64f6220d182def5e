"""Roles and playbooks without hosts: lint (production profile), syntax, contracts, READMEs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT
from tests.roles import role_readme

BIN = Path(sys.executable).parent
ROLES = ROOT / "roles"
# The roles issue 6 delivers; burnin (the gate's role) is checked by lint like every role.
OWN_ROLES = (
    "gpu_facts",
    "nvidia_driver",
    "cuda_toolkit",
    "nvidia_fabricmanager",
    "nvidia_container_toolkit",
    "doca_ofed",
    "nccl",
    "dcgm",
    "lustre_client",
    "beegfs_client",
    "nvmeof_initiator",
    "node_tuning",
)
GPU_ONLY = (
    "nvidia_driver",
    "cuda_toolkit",
    "nvidia_fabricmanager",
    "nvidia_container_toolkit",
    "nccl",
    "dcgm",
)


def _env() -> dict[str, str]:
    return {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "PATH": f"{BIN}:{os.environ['PATH']}"}


def _yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def _tasks(role: str) -> list[dict[str, Any]]:
    """Every task and handler of a role, blocks flattened."""
    found: list[dict[str, Any]] = []

    def walk(items: list[dict[str, Any]] | None) -> None:
        for item in items or []:
            found.append(item)
            for key in ("block", "rescue", "always"):
                walk(item.get(key))

    for sub in ("tasks", "handlers"):
        for f in sorted((ROLES / role / sub).glob("*.yml")):
            walk(_yaml(f))
    return found


def test_ansible_lint_production_profile_passes() -> None:
    done = subprocess.run(
        [
            str(BIN / "ansible-lint"),
            "--offline",
            "--profile",
            "production",
            "--nocolor",
            "roles/",
            "playbooks/",
        ],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "Profile 'production' was required, and it passed" in done.stderr + done.stdout


def test_site_playbook_syntax() -> None:
    done = subprocess.run(
        [str(BIN / "ansible-playbook"), "--syntax-check", "-i", "localhost,", "playbooks/site.yml"],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]


def test_site_applies_roles_by_group() -> None:
    plays = {p["hosts"]: [r["role"] for r in p["roles"]] for p in _yaml(ROOT / "playbooks/site.yml")}
    assert plays["all"] == ["gpu_facts", "node_tuning"]
    assert plays["ib_nodes"] == ["doca_ofed"]
    assert set(plays["gpu_nodes"]) == set(GPU_ONLY)
    assert plays["lustre_clients"] == ["lustre_client"]
    assert plays["beegfs_clients"] == ["beegfs_client"]
    assert plays["nvmeof_clients"] == ["nvmeof_initiator"]


@pytest.mark.parametrize("role", OWN_ROLES)
def test_role_contract(role: str) -> None:
    base = ROLES / role
    spec = _yaml(base / "meta/argument_specs.yml")["argument_specs"]["main"]
    defaults = _yaml(base / "defaults/main.yml") or {}
    meta = _yaml(base / "meta/main.yml")
    options = spec["options"]
    # Role-prefixed variables, each documented in defaults/ and in the contract with the same default.
    assert all(name.startswith(f"{role}_") for name in options), sorted(options)
    assert set(defaults) == {n for n, o in options.items() if "default" in o}
    for name, value in defaults.items():
        assert options[name]["default"] == value, name
        assert options[name]["description"], name
    platforms = {p["name"]: p["versions"] for p in meta["galaxy_info"]["platforms"]}
    assert platforms == {"Ubuntu": ["jammy", "noble"], "EL": ["9"], "Debian": ["bookworm"]}
    tasks = _tasks(role)
    assert tasks
    for task in tasks:
        assert "ignore_errors" not in task, task.get("name")
        modules = [k for k in task if "." in k]
        for module in modules:  # fully qualified collection names
            assert module.count(".") >= 2, (role, task.get("name"), module)
        if "ansible.builtin.assert" in task:
            that = task["ansible.builtin.assert"]["that"]
            that = that if isinstance(that, list) else [that]
            assert all(str(t).strip().lower() not in {"true", "1", "yes"} for t in that), task["name"]
    # Every role that installs packages does so per OS family (Debian/Ubuntu apt, RHEL dnf).
    text = "\n".join(f.read_text() for f in (base / "tasks").glob("*.yml"))
    if "ansible.builtin.apt:" in text:
        assert "ansible.builtin.dnf:" in text and "ansible_os_family" in text, role
    else:
        assert role == "gpu_facts", f"{role} installs nothing?"  # reads /sys only: no OS split needed


@pytest.mark.parametrize("role", GPU_ONLY)
def test_gpu_roles_are_guarded_by_gpu_facts_and_say_why_they_skip(role: str) -> None:
    deps = [d["role"] for d in _yaml(ROLES / role / "meta/main.yml")["dependencies"]]
    assert deps == ["gpu_facts"] if role == "nvidia_driver" else deps == ["nvidia_driver"]
    main = _yaml(ROLES / role / "tasks/main.yml")
    skips = [t for t in main if "ansible.builtin.debug" in t and "gpu_facts_reason" in str(t)]
    assert skips, f"{role}: no visible skip reason from gpu_facts"
    guarded = [t for t in main if "block" in t]
    assert guarded and all("gpu_facts_nvidia_present" in str(t["when"]) for t in guarded)


def test_every_role_readme_matches_its_argument_specs() -> None:
    assert role_readme.main(["--check"]) == 0
    for role in OWN_ROLES:
        readme = (ROLES / role / "README.md").read_text()
        for name in _yaml(ROLES / role / "meta/argument_specs.yml")["argument_specs"]["main"]["options"]:
            assert f"`{name}`" in readme, (role, name)


def test_requirements_name_the_collections_the_roles_use() -> None:
    used = set()
    for role in OWN_ROLES:
        for task in _tasks(role):
            used |= {".".join(k.split(".")[:2]) for k in task if k.count(".") >= 2}
    declared = {c["name"] for c in _yaml(ROOT / "playbooks/requirements.yml")["collections"]}
    assert used - {"ansible.builtin"} <= declared
